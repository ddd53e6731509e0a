"""tpusim.arch.dma_timing (the estimator's DMA instruction time) against the SimPy model: an
isolated DMA_LOAD / DMA_STORE of n whole bursts takes exactly the time the recurrences give,
to the picosecond, for every burst depth."""
from __future__ import annotations

import dataclasses

import pytest

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
    # seed: 4 bursts of 256 B in flight against the ~52 ns round trip: 19.5 B/ns, under the
    # bus's 25.6 B/ns (32 B per 1.25 ns beat)
    assert 256 / dt.load_burst_ps * 1000 == pytest.approx(19.5, abs=0.1)
    assert 256 / dt.bus_burst_ps * 1000 == pytest.approx(25.6)
