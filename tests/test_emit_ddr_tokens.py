"""Tokens from DDR byte ranges (tpucompile/backend/emit.py): a LOAD of an activation waits only
for the STOREs that wrote bytes it reads, and a STORE for the LOADs still reading its bytes."""
from __future__ import annotations

from tpucompile.backend.emit import Program, ddr_runs
from tpusim.arch.config import load_config
from tpusim.arch.isa import Engine

CFG = load_config("small")
W = CFG.word_bytes
ROW = 4 * W                      # a row of 4 pixels


def _producers(P: Program, idx: int) -> list:
    """(producer engine, producer index) of the tokens instruction ``idx`` waits for."""
    return [(x, a) for (x, y, a, b) in P.pairs if b == idx]


def test_ddr_runs_span_each_outer_run_and_merge_touching_ones():
    assert ddr_runs(1000, 64, 3, 128, 1, 0) == [(1000, 1000 + 2 * 128 + 64)]
    assert ddr_runs(0, 64, 2, 128, 2, 4096) == [(0, 192), (4096, 4096 + 192)]
    assert ddr_runs(0, 64, 2, 64, 3, 128) == [(0, 384)]          # rows back to back: one range


def test_load_waits_only_for_the_store_that_wrote_its_rows():
    P = Program(CFG)
    s0 = P.dma("DMA_STORE", 0, 0, ROW, 2, ROW, ROW, buf=1)          # rows 0-1
    s1 = P.dma("DMA_STORE", 2 * ROW, 8, ROW, 2, ROW, ROW, buf=1)    # rows 2-3
    ld = P.dma("DMA_LOAD", 0, 16, ROW, 2, ROW, ROW, buf=1)          # reads rows 0-1
    assert _producers(P, ld) == [(int(Engine.STORE), s0)]
    ld2 = P.dma("DMA_LOAD", ROW, 24, ROW, 2, ROW, ROW, buf=1)       # rows 1-2: needs s1 too
    assert _producers(P, ld2) == [(int(Engine.STORE), s1)]
    assert s1 > s0


def test_store_waits_for_the_loads_still_reading_its_bytes():
    P = Program(CFG)
    ld = P.dma("DMA_LOAD", 3 * ROW, 0, ROW, 1, 0, 0, buf=1)         # reads row 3
    st = P.dma("DMA_STORE", 0, 8, ROW, 2, ROW, ROW, buf=1)          # writes rows 0-1: no hazard
    assert _producers(P, st) == []
    st2 = P.dma("DMA_STORE", 2 * ROW, 8, ROW, 2, ROW, ROW, buf=1)   # rows 2-3: WAR on the load
    assert _producers(P, st2) == [(int(Engine.LOAD), ld)]


def test_constant_loads_are_not_tracked():
    P = Program(CFG)
    P.dma("DMA_STORE", 0, 0, ROW, buf=1)
    ld = P.dma("DMA_LOAD", 0, 8, ROW, buf=None)
    assert _producers(P, ld) == []


def test_tokens_outstanding_stay_within_the_counter():
    """Each STORE over the rows of its own earlier LOAD: one token per pair, all outstanding at
    once without the cap; past half the limit a STORE waits for the latest LOAD instead, which
    covers the rest."""
    P = Program(CFG)
    n = P.token_limit() + 20
    loads = [P.dma("DMA_LOAD", r * ROW, 0, ROW, buf=1) for r in range(n)]
    stores = [P.dma("DMA_STORE", r * ROW, 8, ROW, buf=1) for r in range(n)]
    out = P.max_outstanding()[(int(Engine.LOAD), int(Engine.STORE))]
    half = P.token_limit() // 2
    assert out == half + 1
    assert _producers(P, stores[0]) == [(int(Engine.LOAD), loads[0])]
    assert _producers(P, stores[half]) == [(int(Engine.LOAD), loads[-1])]
    assert _producers(P, stores[half + 1]) == []
