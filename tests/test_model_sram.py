"""SRAM bank arbiter: fixed priority, bank masks, no head-of-line blocking, conflict counters.

Config 'small': 4 banks of 512 words (8-byte words); core clock 1000 ps, phase 0.
"""
import simpy

from tpusim.arch.config import load_config
from tpusim.arch.isa import make
from tpusim.models.common import Clocks, ranges_to_banks
from tpusim.models.perf import PerfCounters
from tpusim.models.sram import LOAD, MXU, STORE, VPU, Sram
from tpusim.sim import run_program

CFG = load_config("small")
NS = 1000   # core period (ps)


def _arbiter():
    env = simpy.Environment()
    clocks = Clocks(CFG)
    perf = PerfCounters()
    return env, clocks, perf, Sram(env, clocks, CFG, perf)


def test_bank_mask_covers_first_to_last_word_of_each_range():
    assert ranges_to_banks([(0, 7)], 512) == (0,)
    assert ranges_to_banks([(500, 520)], 512) == (0, 1)
    assert ranges_to_banks([(0, 1), (1600, 1601)], 512) == (0, 3)
    assert ranges_to_banks([(100, 1800)], 512) == (0, 1, 2, 3)


def test_priority_and_no_head_of_line_blocking():
    """Requests launched from core edge 0 are visible at edge 1 (same domain: t + 1)."""
    env, clocks, perf, sram = _arbiter()
    grants = {}

    def req(name, rid, ranges, d):
        g = yield sram.request(rid, 0, clocks.core, ranges, d)
        grants[name] = g // NS

    env.process(req("vpu", VPU, [(0, 3)], 4))          # bank 0
    env.process(req("mxu", MXU, [(10, 19)], 10))       # bank 0: higher priority than the VPU
    env.process(req("store", STORE, [(600, 601)], 2))  # bank 1: free, granted at once
    env.run()
    # edge 1: walk LOAD, STORE (bank 1 -> granted), MXU (bank 0 -> granted), VPU (bank 0 taken)
    # MXU holds bank 0 for edges 2..11 and frees it for a grant at 1 + 10 = 11.
    assert grants == {"store": 1, "mxu": 1, "vpu": 11}
    assert perf["sram_conflicts"] == 1 and perf["sram_conflict_cycles"] == 11 - 1


def test_waiting_high_priority_does_not_block_lower_on_other_bank():
    env, clocks, perf, sram = _arbiter()
    grants = {}

    def req(name, rid, ranges, d, launch):
        yield env.timeout(launch * NS)
        g = yield sram.request(rid, launch * NS, clocks.core, ranges, d)
        grants[name] = g // NS

    env.process(req("mxu", MXU, [(0, 31)], 32, 0))     # bank 0 busy for edges 2..33
    env.process(req("load", LOAD, [(8, 15)], 8, 0))    # wait: LOAD has priority over MXU
    env.process(req("vpu", VPU, [(1024, 1027), (0, 0)], 5, 4))   # banks 0 and 2
    env.process(req("store", STORE, [(1100, 1101)], 2, 4))       # bank 2 only
    env.run()
    # edge 1: LOAD wins bank 0 (D = 8, free at 9); MXU waits until 9 (conflict of 8 cycles).
    # edge 5: STORE (bank 2) granted; VPU needs banks 0 (MXU until 9+32 = 41) and 2 (STORE
    # until 7): granted at 41 (conflict 36).
    assert grants == {"load": 1, "mxu": 9, "store": 5, "vpu": 41}
    assert perf["sram_conflicts"] == 2
    assert perf["sram_conflict_cycles"] == (9 - 1) + (41 - 5)


def test_two_engines_on_one_bank_stall_in_a_program():
    """MATMUL (MXU) and ADD (VPU) both on bank 0.

    Fetch: line 0 (LOAD_QREG, MATMUL) valid at core 19; line 1 (ADD, HALT) launched at 19,
    granted at DDR 18, done DDR 29 = 36350 ps, valid at core 39 (37000, 38000, 39000).
    LOAD_QREG dispatched 19 -> VPU start 20, c = 21. MATMUL dispatched 20 -> MXU start 21,
    request visible 22, granted 22, M = 64 words: bank 0 free again at 22 + 64 = 86,
    completion 86 + R + C = 102. ADD dispatched 39 -> VPU start 40, request visible 41, bank 0
    busy: granted 86 (stall 86 - 41 = 45 cycles), D = 3*4 = 12, completion 98.
    HALT dispatched 40: h = max(41, 98 + 1, 102 + 1) = 103.
    """
    prog = [make("LOAD_QREG", qreg=0, multiplier=1 << 30, shift=1, zero_point=0),
            make("MATMUL", act_addr=0, count_x=64, stride_x=1, count_y=1, acc_addr=0),
            make("ADD", src_a=100, src_b=200, dst_addr=300, count=4),
            make("HALT")]
    run, _ = run_program(prog, CFG)
    assert run.retire == [(0, "VPU", 21000), (64, "VPU", 98000), (32, "MXU", 102000),
                          (96, "HALT", 103000)]
    assert run.counters["sram_conflicts"] == 1
    assert run.counters["sram_conflict_cycles"] == 45
    assert run.counters["vpu_busy_cycles"] == 1 + (98 - 40)


def test_same_program_on_different_banks_has_no_stall():
    prog = [make("LOAD_QREG", qreg=0, multiplier=1 << 30, shift=1, zero_point=0),
            make("MATMUL", act_addr=0, count_x=64, stride_x=1, count_y=1, acc_addr=0),
            make("ADD", src_a=600, src_b=700, dst_addr=800, count=4),   # all in bank 1
            make("HALT")]
    run, _ = run_program(prog, CFG)
    assert (64, "VPU", (41 + 12) * NS) in run.retire
    assert run.counters["sram_conflicts"] == 0
