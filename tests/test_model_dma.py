"""DMA channels: functional round trip with 3-D strides, burst splitting, exact burst timing
(spec v2: K = dma.outstanding bursts in flight, pipelined DDR bus), errors.

All programs are hand-assembled and run on the 'small' config: 8x8 array (W = 8-byte words),
DDR beat 16 bytes, DDR latency L = 8, burst BB = 64 bytes, dma.outstanding K = 2, clocks core
1000 ps / phase 0, DDR 1250 ps / phase 100, DMA 2500 ps / phase 50. DDR grants are logged as
(DDR edge, requester: 0 fetch, 1 DMA read, 2 DMA write).
"""
import numpy as np
import pytest

from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import assemble, make
from tpusim.models.common import QueueEntry
from tpusim.models.dma import plan_bursts
from tpusim.sim import run_program

CFG = load_config("small")


def _runs(base, inner, c1, s1, c2, s2):
    """Byte offsets (relative to base) of a count2 x count1 x inner_bytes pattern, in order."""
    return [base + o2 * s2 + o1 * s1 + i for o2 in range(c2) for o1 in range(c1) for i in range(inner)]


def test_round_trip_3d_strides_and_burst_split():
    rng = np.random.default_rng(0)
    src = rng.integers(0, 256, 1024, dtype=np.uint8).tobytes()
    # LOAD: 3 rows x 2 runs x 48 bytes; DDR strides 96 / 256 (multiples of 32), SRAM dense.
    # Run (0, 1) covers DDR 0x1060..0x108f and is split at the 64-byte boundary 0x1080.
    ld = dict(ddr_addr=0x1000, sram_addr=0x100, inner_bytes=48, count1=2, ddr_stride1=96,
              sram_stride1=48, count2=3, ddr_stride2=256, sram_stride2=96)
    # STORE: the 288 SRAM bytes back as 2 rows x 3 runs x 48 bytes, DDR strides 64 / 320
    st = dict(ddr_addr=0x8020, sram_addr=0x100, inner_bytes=48, count1=3, ddr_stride1=64,
              sram_stride1=48, count2=2, ddr_stride2=320, sram_stride2=144)
    prog = [make("DMA_LOAD", signal=0b10, **ld), make("DMA_STORE", wait=0b01, **st), make("HALT")]
    run, tpu = run_program(prog, CFG, [(0x1000, src)])

    moved = bytes(src[o - 0x1000] for o in _runs(0x1000, 48, 2, 96, 3, 256))
    assert tpu.sram.read_bytes(0x100, 288) == moved
    out = {a: tpu.ddr_mem.read(a, 1)[0] for a in _runs(0x8020, 48, 3, 64, 2, 320)}
    assert bytes(out[a] for a in sorted(out, key=_runs(0x8020, 48, 3, 64, 2, 320).index)) == moved
    assert tpu.ddr_mem.read(0x8000, 0x20) == bytes(0x20)          # untouched before the tensor
    assert run.counters["ddr_read_bytes"] == 288 and run.counters["ddr_write_bytes"] == 288

    entry = QueueEntry(0, 0, prog[0], 0)
    bursts = plan_bursts(entry, CFG)
    assert all(d // 64 == (d + n - 1) // 64 for d, _, n in bursts)   # never crosses BB
    assert sum(n for _, _, n in bursts) == 288
    # per row: run 0 at +0 (48 B, one burst); run 1 at +96 = 0x60 -> 32 B to 0x80, then 16 B
    assert bursts[:3] == [(0x1000, 0x100, 48), (0x1060, 0x130, 32), (0x1080, 0x150, 16)]
    assert len(bursts) == 9


def test_single_burst_timing_by_hand():
    """DMA_LOAD of one 64-byte burst, then HALT; every edge computed from the spec (v2).

    Edges: core k at 1000k ps; DDR k at 100 + 1250k; DMA k at 50 + 2500k.
    cdc(t -> d) = 3rd edge of d strictly after t.
    fetch line 0 (instructions 0, 1): launched at core 0 (0 ps);
        visible to DDR at cdc(0) = DDR edges 100, 1350, 2600 -> 2600 (DDR 2); granted at DDR 2;
        B = 64/16 = 4 beats; done = 2 + L + B - 1 = 2 + 8 + 3 = DDR 13 = 16350 ps;
        valid to the decoder at cdc(16350 -> core) = 17000, 18000, 19000 -> core 19.
    fetch line 1: launched at core 19 (a buffer is free, line 0 just completed);
        visible at DDR 18 (18850 is DDR 15, then 20100, 21350, 22600); granted at DDR 18;
        done = 18 + 11 = DDR 29; the bus is free for the next grant at 18 + B = DDR 22 (v2).
    DMA_LOAD dispatched at core 19; visible to the DMA at cdc(19000) = DMA 8, 9, 10 -> s = DMA 10
        = 25050 ps; DDR read launched at r_0 = 25050, visible at DDR 22 = 27600 (25100, 26350,
        27600); bus free at 22 -> granted g = DDR 22 (no arbiter wait; v1 waited to 30);
        done = 22 + 8 + 4 - 1 = DDR 33 = 41350 ps;
        d = cdc(41350 -> dma) = DMA 17, 18, 19 -> 47550 ps: SRAM write request at e_0 = d_0;
        visible at core 48, 49, 50 -> v = core 50; granted w = 50 (banks free), D = 64/8 = 8;
        completion w + D = core 58; f = cdc(58000 -> dma) = DMA 24, 25, 26 -> c = DMA 26 = 65050.
    HALT dispatched at h0 = core 20; LOAD retire visible at cdc(65050 -> core) = core 68;
        h = max(h0 + 1, 68) = 68 cycles.
    """
    prog = assemble("DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=64 count1=1 count2=1\nHALT")
    run, tpu = run_program(prog, CFG, [(0x1000, bytes(range(64)))])
    assert run.retire == [(0, "LOAD", 65050), (32, "HALT", 68000)]
    assert run.cycles == 68
    c = run.counters
    assert c["load_busy_cycles"] == 26 - 10
    assert c["ddr_arb_wait_cycles"] == 0
    assert c["ddr_busy_cycles"] == 3 * 4                 # v2: sum of B (line 0, line 1, burst)
    assert c["fetch_bytes"] == 128 and c["ddr_read_bytes"] == 64
    assert tpu.sram.read_bytes(0, 64) == bytes(range(64))


def _run_logged(prog, cfg, segments=(), **kw):
    """run_program with the DDR grants (edge, requester) recorded (hook on the arbiter's grant,
    so without DMA burst trains); the run with trains (the default) must give the same retire
    trace, counters, SRAM grant log and SRAM contents."""
    from tpusim.models import ddr_arbiter
    log = []
    orig = ddr_arbiter.DdrArbiter._grant

    def _grant(self, req, g_ps):
        log.append((self.dom.cycle_of(g_ps), req.requester))
        return orig(self, req, g_ps)

    ddr_arbiter.DdrArbiter._grant = _grant
    try:
        run, tpu = run_program(prog, cfg, segments, dma_trains=False, **kw)
    finally:
        ddr_arbiter.DdrArbiter._grant = orig
    run_t, tpu_t = run_program(prog, cfg, segments, **kw)
    assert (run_t.retire, run_t.counters, run_t.sram_grants, run_t.timeline) == \
        (run.retire, run.counters, run.sram_grants, run.timeline)
    assert bytes(tpu_t.sram.data) == bytes(tpu.sram.data)
    return run, tpu, log


LOAD4 = "DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=256 count1=1 count2=1\nHALT"


def test_load_k_limited_more_bursts_than_buffers():
    """DMA_LOAD of 4 bursts of 64 bytes (B = 4, D = 8) with K = dma.outstanding = 2 ('small').

    Fetch as in test_single_burst_timing_by_hand: line 1 granted at DDR 18, bus free at 22; HALT
    is dispatched at core 20, so no more fetches. s = DMA 10 = 25050.
    burst 0: r_0 = s = DMA 10 -> visible DDR 22; g_0 = 22; done_0 = 22 + 11 = DDR 33 = 41350;
             d_0 = cdc(41350) = DMA 17, 18, 19 -> DMA 19 = 47550; e_0 = d_0 -> SRAM visible core
             48, 49, 50 -> w_0 = 50, +D = 58; f_0 = cdc(58000) = DMA 24, 25, 26 -> DMA 26 = 65050.
    burst 1: r_1 = max(r_0 + 1, s) = DMA 11 = 27550 -> visible DDR 22 = 27600, 23, 24 -> 24; the bus
             carries burst 0's commands until g_0 + B_0 = 26 -> g_1 = 26 (wait 2; burst 0 still in
             flight: the two overlap); done_1 = 26 + 11 = DDR 37 = 46350; d_1 = cdc(46350) = DMA
             19, 20, 21 -> DMA 21 = 52550; e_1 = max(d_1, e_0 + 1) = DMA 21 (SRAM writes queue in
             the core domain) -> cdc: core 53, 54, 55, but the port is busy with burst 0 until
             w_0 + D + 1 = 59: visible at 59, w_1 = 59, +D = 67; f_1 = cdc(67000) = DMA 27, 28,
             29 -> DMA 29 = 72550.
    burst 2: r_2 = max(r_1 + 1, f_0) = f_0 = DMA 26 = 65050 (buffer 0 free) -> visible DDR 52
             (65100), 53, 54 -> g_2 = 54; done_2 = DDR 65 = 81350; d_2 = cdc(81350) = DMA 33, 34,
             35 -> DMA 35 = 87550; e_2 = max(d_2, e_1 + 1) = DMA 35 -> core 88, 89, 90: w_2 = 90,
             +D = 98; f_2 = cdc(98000) = DMA 40, 41, 42 -> DMA 42 = 105050.
    burst 3: r_3 = max(r_2 + 1, f_1) = f_1 = DMA 29 = 72550 -> visible DDR 58 (72600), 59, 60 ->
             g_3 = 60; done_3 = DDR 71 = 88850; d_3 = cdc(88850) = DMA 36, 37, 38 -> DMA 38 =
             95050; e_3 = DMA 38 -> core 96, 97, 98, port free at w_2 + D + 1 = 99: w_3 = 99,
             +D = 107; f_3 = cdc(107000) = DMA 43, 44, 45 -> c = DMA 45 = 112550.
    HALT: LOAD retire visible at cdc(112550 -> core) = core 115 -> 115 cycles (one SRAM write
    at a time through the DMA domain, e_j = max(d_j, f_{j-1}), gave 125).
    """
    data = bytes(range(256))
    run, tpu, log = _run_logged(assemble(LOAD4), CFG, [(0x1000, data)])
    assert CFG.dma_outstanding == 2
    assert log == [(2, 0), (18, 0), (22, 1), (26, 1), (54, 1), (60, 1)]
    assert run.retire == [(0, "LOAD", 112550), (32, "HALT", 115000)]
    assert run.counters["ddr_arb_wait_cycles"] == 2
    assert run.counters["load_busy_cycles"] == 45 - 10
    assert run.counters["sram_conflicts"] == 0       # a write queued behind the port is no conflict
    assert run.counters["ddr_busy_cycles"] == 6 * 4
    assert tpu.sram.read_bytes(0, 256) == data


def test_load_k1_gives_v1_timing():
    """The same 4-burst LOAD with dma.outstanding = 1: r_j = max(r_{j-1} + 1, f_{j-1}) = f_{j-1} and
    e_j = max(d_j, f_{j-1}) = d_j, i.e. v1's one burst at a time (r_{j+1} = f_j). Burst 0 is as in
    the K = 2 test (g_0 = 22, f_0 = DMA 26); each later burst takes the same 16 DMA cycles:
    burst 1: r_1 = f_0 = DMA 26 = 65050 -> DDR 54: g = 54, done = 65 = 81350 -> d = DMA 35 = 87550
             -> SRAM core 90: w = 90, 98 -> f_1 = DMA 42 = 105050;
    burst 2: r_2 = DMA 42 -> DDR 84 (105100), 85, 86: g = 86, done = 97 = 121350 -> d = DMA 49, 50,
             51 -> DMA 51 = 127550 -> core 128, 129, 130: w = 130, 138 -> f_2 = DMA 56, 57, 58 =
             145050;
    burst 3: r_3 = DMA 58 -> DDR 116 (145100), 117, 118: g = 118, done = 129 = 161350 -> d = DMA
             65, 66, 67 = 167550 -> core 170: w = 170, 178 -> f_3 = DMA 72, 73, 74 = 185050.
    HALT: cdc(185050 -> core) = core 188. (On this program v1 differs only in burst 0's grant,
    which v1's busy-until-done channel delayed to DDR 30.)
    """
    from dataclasses import replace
    cfg1 = replace(CFG, dma_outstanding=1)
    run, tpu, log = _run_logged(assemble(LOAD4), cfg1, [(0x1000, bytes(range(256)))])
    assert log == [(2, 0), (18, 0), (22, 1), (54, 1), (86, 1), (118, 1)]
    assert run.retire == [(0, "LOAD", 185050), (32, "HALT", 188000)]
    assert tpu.sram.read_bytes(0, 256) == bytes(range(256))


def test_store_recurrence_k2():
    """DMA_STORE of 4 bursts of 64 bytes (SRAM 0..255 -> DDR 0x2000), K = 2. s = DMA 10 = 25050.
    burst 0: r_0 = s -> SRAM visible core 26, 27, 28: w_0 = 28, +D = 36; d_0 = cdc(36000) = DMA
             15, 16, 17 -> 42550: DDR write launched -> visible DDR 34 (42600), 35, 36: g_0 = 36;
             done_0 = 47 = 58850; f_0 = cdc(58850) = DMA 24, 25, 26 -> 65050.
    burst 1: r_1 = max(d_0, f_{-1} = s) = DMA 17 = 42550 -> core 43, 44, 45: w_1 = 45, 53;
             d_1 = cdc(53000) = DMA 22, 23, 24 -> 60050 -> DDR 48 (60100), 49, 50: g_1 = 50;
             done_1 = 61 = 76350; f_1 = cdc(76350) = DMA 31, 32, 33 -> 82550.
    burst 2: r_2 = max(d_1 = DMA 24, f_0 = DMA 26) = 65050 (buffer 0 still held by burst 0's
             write until f_0) -> core 66, 67, 68: w_2 = 68, 76; d_2 = cdc(76000) = DMA 33 =
             82550 -> DDR 66 (82600), 67, 68: g_2 = 68; done_2 = 79 = 98850; f_2 = DMA 42.
    burst 3: r_3 = max(d_2, f_1) = DMA 33 = 82550 -> core 83, 84, 85: w_3 = 85, 93; d_3 =
             cdc(93000) = DMA 38, 39, 40 -> 100050 -> DDR 80 (100100), 81, 82: g_3 = 82;
             done_3 = 93 = 116350; f_3 = cdc(116350) = DMA 47, 48, 49 -> c = 122550.
    HALT: cdc(122550 -> core) = 125.
    """
    data = bytes(range(255, -1, -1))
    prog = assemble("DMA_STORE ddr_addr=0x2000 sram_addr=0 inner_bytes=256 count1=1 count2=1\nHALT")
    run, tpu, log = _run_logged(prog, CFG, sram_segments=[(0, data)])
    assert log == [(2, 0), (18, 0), (36, 2), (50, 2), (68, 2), (82, 2)]
    assert run.retire == [(0, "STORE", 122550), (32, "HALT", 125000)]
    assert run.counters["ddr_arb_wait_cycles"] == 0
    assert run.counters["store_busy_cycles"] == 49 - 10
    assert tpu.ddr_mem.read(0x2000, 256) == data


@pytest.mark.parametrize("fields, bad, value", [
    (dict(inner_bytes=0), "inner_bytes", 0),
    (dict(count1=0), "count1", 0),
    (dict(sram_addr=4), "sram_addr", 4),
    (dict(ddr_addr=0x1010), "ddr_addr", 0x1010),
    (dict(ddr_stride1=40, count1=2), "ddr_stride1", 40),
    (dict(sram_addr=16384 - 32), "sram_addr", 16384 - 32),
    (dict(ddr_addr=(1 << 40) - 32), "ddr_addr", (1 << 40) - 32),
])
def test_dma_device_errors_name_pc_field_value(fields, bad, value):
    args = dict(ddr_addr=0x1000, sram_addr=0, inner_bytes=64, count1=1, count2=1)
    args.update(fields)
    prog = [make("NOP", engine=0), make("DMA_LOAD", **args), make("HALT")]
    with pytest.raises(SimulationError) as ei:
        run_program(prog, CFG)
    msg = str(ei.value)
    assert "instruction #1 at pc 0x20 (DMA_LOAD)" in msg
    assert f"{bad}={value:#x}" in msg


def test_store_timing_is_mirror_of_load():
    """STORE of one burst right after reset: SRAM read first, then the DDR write.

    Dispatched at core 19 -> s = DMA 10 (25050 ps); SRAM request visible at core 26, 27, 28
    (25050 < 26000) -> granted w = 28, D = 8 -> 36; d = cdc(36000 -> dma) = DMA 15, 16, 17
    = 42550; DDR write visible at cdc(42550 -> ddr) = DDR 34, 35, 36 (42600, 43850, 45100);
    line 1 was granted at DDR 18 (bus free from 22), so the bus is free: g = DDR 36;
    done = 36 + 8 + 4 - 1 = DDR 47 = 58850; f = cdc(58850 -> dma) = DMA 24, 25, 26 (60050,
    62550, 65050) = 65050. Retire visible at core 66, 67, 68 -> 68 cycles.
    """
    prog = assemble("DMA_STORE ddr_addr=0x2000 sram_addr=0 inner_bytes=64 count1=1 count2=1\nHALT")
    run, tpu = run_program(prog, CFG)
    assert run.retire == [(0, "STORE", 65050), (32, "HALT", 68000)]
    assert run.counters["ddr_arb_wait_cycles"] == 0


def test_two_instructions_in_flight_share_the_burst_ring():
    """v4 (docs/architecture.md "DMA"): a LOAD starts 2 DMA edges after the previous one's last
    DDR read launch (its free edge + 1) if the next burst's buffer is free, else when it frees
    (K = 2: the ring continues across instructions); at most DMA_MAX_INFLIGHT = 2 in flight;
    completions in order; an erroneous DMA_LOAD starts only with none in flight."""
    one = dict(ddr_addr=0x1000, inner_bytes=64, count1=1, count2=1)       # one burst
    prog = [make("DMA_LOAD", sram_addr=0x000, **one), make("DMA_LOAD", sram_addr=0x040, **one),
            make("DMA_LOAD", sram_addr=0x080, **one), make("HALT")]
    run, _ = run_program(prog, CFG, [(0x1000, bytes(range(64)))])
    (r0, s0, c0), (r1, s1, c1), (r2, s2, c2) = [(r, s, c) for _e, _pc, r, s, c in run.timeline]
    dma = 2500
    assert s1 == s0 + 2 * dma and s1 < c0                # burst 1 in buffer 1: free, no wait
    assert s2 >= c0 + dma and c0 < c1 < c2               # burst 2 in buffer 0 (or 2 in flight)
    assert run.counters["load_busy_cycles"] == ((c0 - s0) + (c1 - s1) + (c2 - s2)) // dma
    bad = dict(one, sram_addr=0x001)                     # misaligned: a device error
    prog = [make("DMA_LOAD", sram_addr=0x000, **one), make("DMA_LOAD", **bad), make("HALT")]
    with pytest.raises(SimulationError) as ei:
        run_program(prog, CFG, [(0x1000, bytes(range(64)))])
    (_, _, _, s0, c0), (_, pc, _, s1, c1) = ei.value.run.timeline
    assert pc == 0x20 and s1 == c0 + dma and c1 == s1 + dma
