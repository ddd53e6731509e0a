"""stressgen.golden (the ISA executor behind stressgen's programs): agreement with the SimPy
model, independence from the schedule, errors, and the power of the generated programs against
faults injected into the executor (36-bit DDR address path, quant register index aliasing, a
flipped rounding mode)."""
import numpy as np
import pytest

from stressgen import generate, run_golden
from stressgen.program import OutputRegion, StressError, StressProgram, config, region_bytes
from tpusim.arch import arith
from tpusim.arch.executor import machine as machine_mod
from tpusim.arch.isa import make
from tpusim.sim import run_binary

SMALL = config("small")


@pytest.mark.parametrize("seed", range(30))
def test_golden_matches_simpy_small(seed):
    p = generate(seed, SMALL)
    g = run_golden(p, SMALL)
    res = run_binary(p.to_binary(SMALL), SMALL, {})
    assert region_bytes(p, SMALL, res.outputs) == g


def test_golden_matches_simpy_medium():
    med = config("medium")
    for seed in (0, 1):
        p = generate(seed, med)
        res = run_binary(p.to_binary(med), med, {})
        assert region_bytes(p, med, res.outputs) == run_golden(p, med)


def test_golden_independent_of_schedule():
    for seed in range(8):
        p = generate(seed, SMALL)
        ref = run_golden(p, SMALL)
        for k in range(3):
            assert run_golden(p, SMALL, sched_seed=k) == ref


def test_golden_hand_program_top_of_ddr_and_requant_tie():
    """Load 8 x int8 from the last 32 bytes below 2^40, MATMUL by an identity-like weight tile,
    REQUANT with multiplier 2^30 (x / 2, ties toward +inf) and store above 2^36."""
    top = (1 << 40) - 32
    x = np.array([3, -3, 5, -5, 0, 1, -1, 127], np.int8)
    w = np.eye(8, dtype=np.int8)                          # word n = column n
    table = (np.zeros(8, "<i4").tobytes() + np.full(8, 1 << 30, "<i4").tobytes() + bytes(8))
    dma = dict(count1=1, count2=1)
    instrs = [
        make("DMA_LOAD", ddr_addr=top, sram_addr=0, inner_bytes=8, **dma),
        make("DMA_LOAD", ddr_addr=0x200000, sram_addr=64, inner_bytes=64, **dma),
        make("DMA_LOAD", ddr_addr=0x300000, sram_addr=128, inner_bytes=72, signal=4 | 8, **dma),
        make("LOAD_QREG", qreg=63, zero_point=0, wait=1),
        make("LOAD_WEIGHTS", sram_addr=8, wait=1),
        make("MATMUL", act_addr=0, count_x=1, count_y=1, acc_addr=5, signal=8),
        make("REQUANT", acc_addr=5, count=1, param_addr=16, dst_addr=40, qreg=63, wait=4, signal=2),
        make("DMA_STORE", ddr_addr=(1 << 36) + 64, sram_addr=320, inner_bytes=8, wait=8, **dma),
        make("HALT")]
    p = StressProgram(0, "small", instrs, [(top, x.tobytes() + bytes(24)), (0x200000, w.tobytes()),
                                           (0x300000, table)], [OutputRegion("y", (1 << 36) + 64, 8)])
    got = np.frombuffer(run_golden(p, SMALL)["y"], np.int8)
    assert got.tolist() == [2, -1, 3, -2, 0, 1, 0, 64]
    res = run_binary(p.to_binary(SMALL), SMALL, {})
    assert region_bytes(p, SMALL, res.outputs)["y"] == got.tobytes()


def test_golden_errors():
    dead = StressProgram(0, "small", [make("NOP", engine=3, wait=1), make("HALT")], [], [])
    with pytest.raises(StressError, match="waits forever for a token from LOAD") as ei:
        run_golden(dead, SMALL)
    assert ei.value.index == 0
    q = StressProgram(0, "small", [make("ADD", count=1, qreg_a=7), make("HALT")], [], [])
    with pytest.raises(StressError, match="qreg_a=0x7") as ei:
        run_golden(q, SMALL)
    assert ei.value.kind == "qreg_unloaded"


def _detections(n_progs, monkeypatch_fn, monkeypatch):
    progs = [generate(s, SMALL) for s in range(n_progs)]
    ref = [run_golden(p, SMALL) for p in progs]
    with monkeypatch.context() as m:
        monkeypatch_fn(m)
        bad = []
        for p in progs:
            try:
                bad.append(run_golden(p, SMALL))
            except StressError:
                bad.append(None)
    return sum(r != b for r, b in zip(ref, bad))


def test_programs_catch_36bit_ddr_addresses(monkeypatch):
    runs = machine_mod.dma_runs
    hit = _detections(50, lambda m: m.setattr(machine_mod, "dma_runs", lambda a: [
        (d & ((1 << 36) - 1), s, n) for d, s, n in runs(a)]), monkeypatch)
    assert hit >= 25, hit


def test_programs_catch_qreg_index_aliasing(monkeypatch):
    def patch(m):
        load, get = machine_mod.Machine._load_qreg, machine_mod.Machine._qreg
        m.setattr(machine_mod.Machine, "_load_qreg",
                  lambda self, i, a: load(self, i, {**a, "qreg": a["qreg"] % 32}))
        m.setattr(machine_mod.Machine, "_qreg", lambda self, i, f, idx: get(self, i, f, idx % 32))
    assert _detections(50, patch, monkeypatch) >= 3


def test_programs_catch_rounding_flip(monkeypatch):
    def half_toward_zero(x, e):
        x, e = np.asarray(x, np.int64), np.asarray(e, np.int64)
        mask = (np.int64(1) << e) - 1
        return (x >> e) + ((x & mask) > (mask >> 1) + (x >= 0))
    hit = _detections(50, lambda m: m.setattr(arith, "rdbpot", half_toward_zero), monkeypatch)
    assert hit >= 5, hit
