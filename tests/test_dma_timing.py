"""tpusim.arch.dma_timing (the estimator's DMA instruction time) against the SimPy model: an
isolated DMA_LOAD / DMA_STORE of n whole bursts takes exactly the time the recurrences give,
to the picosecond, for every burst depth."""
from __future__ import annotations

import dataclasses

import pytest

from tpusim.arch import dma_timing as dt
from tpusim.arch import isa
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.dma_timing import EXACT_BURSTS, DmaTiming
from tpusim.arch.isa import Engine
from tpusim.sim import run_binary

CODE, DATA = 0x100000, 0x400000


def _instruction_ps(cfg, op: str, nbytes: int) -> int:
    """Start to completion (ps) of one DMA instruction of ``nbytes`` run alone on SimPy (after a
    warm-up DMA on the other channel, so that instruction fetch has finished)."""
    other = "DMA_STORE" if op == "DMA_LOAD" else "DMA_LOAD"
    to = "LOAD" if op == "DMA_LOAD" else "STORE"
    prog = (f"{other} ddr_addr={DATA + 0x10000:#x} sram_addr=0 inner_bytes={nbytes} count1=1 count2=1 signal={to}\n"
            f"{op} ddr_addr={DATA:#x} sram_addr=0 inner_bytes={nbytes} count1=1 count2=1 wait={'STORE' if to == 'LOAD' else 'LOAD'}\n"
            "HALT")
    code = isa.encode_program(isa.assemble(prog))
    b = TpuBinary(cfg.hash_bytes(), CODE, code, consts=[(DATA, bytes(range(256)) * (nbytes // 256 + 1))])
    res = run_binary(b, cfg, {})
    eng = Engine.LOAD if op == "DMA_LOAD" else Engine.STORE
    (_, _, _, s, c), = [t for t in res.timeline if t[0] == eng]
    return c - s


@pytest.mark.parametrize("hw", ["small", "seed"])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("op", ["DMA_LOAD", "DMA_STORE"])
def test_isolated_dma_matches_simpy(hw, k, op):
    cfg = dataclasses.replace(load_config(hw), dma_outstanding=k)
    dt = DmaTiming(cfg)
    for n in (1, 3, 17):
        got = _instruction_ps(cfg, op, n * cfg.dma_burst_bytes)
        want = dt.load_ps(n) if op == "DMA_LOAD" else dt.store_ps(n)
        assert got == want, (hw, k, op, n, got, want)


def test_long_instructions_extrapolate_at_the_steady_rate():
    dt = DmaTiming(load_config("seed"))
    n = EXACT_BURSTS
    assert dt.load_ps(n + 100) == pytest.approx(dt.load_ps(n) + 100 * dt.load_burst_ps)
    assert dt.load_ps(0) == 0.0
    # seed: 8 bursts of 256 B in flight cover the ~52 ns round trip: the bus's 25.6 B/ns (32 B
    # per 1.25 ns beat); with 4 in flight (seed before issue 12) 19.5 B/ns
    assert 256 / dt.load_burst_ps * 1000 == pytest.approx(25.6)
    assert 256 / dt.bus_burst_ps * 1000 == pytest.approx(25.6)
    dt4 = DmaTiming(dataclasses.replace(load_config("seed"), dma_outstanding=4))
    assert 256 / dt4.load_burst_ps * 1000 == pytest.approx(19.5, abs=0.1)


@pytest.mark.parametrize("hw", ["small", "seed"])
def test_periodic_tail_equals_the_full_recurrence(hw, monkeypatch):
    """Bursts past the point where the recurrences repeat themselves (filled in by the period)
    are those the recurrences compute burst by burst, over clock ratios (core / DDR / DMA MHz),
    DDR latencies and DMA depths (a repeat by a shift that is not a whole number of every clock's
    periods would be wrong for some of these)."""
    base = load_config(hw)

    def clocks(core, ddr, dma):
        return {"clk_core": dataclasses.replace(base.clk_core, freq_mhz=core),
                "clk_ddr": dataclasses.replace(base.clk_ddr, freq_mhz=ddr),
                "clk_dma": dataclasses.replace(base.clk_dma, freq_mhz=dma)}
    cfgs = [dataclasses.replace(base, ddr_latency_cycles=lat, dma_outstanding=k, **clocks(*mhz))
            for lat in (3, 7, 41) for k in (1, 2, 8) for mhz in ((1000, 800, 400), (250, 400, 400), (800, 1000, 200))]
    fast = [dt.DmaTiming(c) for c in cfgs]
    monkeypatch.setattr(dt, "MAX_PERIOD_BURSTS", 0)
    for c, f in zip(cfgs, fast):
        full = dt.DmaTiming(c)
        assert (f._load[:2], f._store[:2]) == (full._load[:2], full._store[:2]), c
