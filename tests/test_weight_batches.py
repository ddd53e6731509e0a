"""Merged weight DMAs (docs/backend.md, "Merged weight DMAs"): ``emit.strided_runs`` covers a list
of (DDR, SRAM, bytes) items with as few DMA field tuples as their spacing allows, each moving
exactly its items in order; ``tiling.weight_batch_tiles`` and the conv tiler give 'medium' batches
of 8 weight tiles in two bank-separated ring halves and leave seed at one tile per DMA."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tpucompile.backend import tiling
from tpucompile.backend.emit import Program, strided_runs
from tpucompile.backend.work import LayerWork
from tpucompile.ops import conv
from tpusim.arch.config import load_config

W = 32          # 'medium' word bytes


def _expand(runs, word_bytes: int) -> list:
    """The (DDR, SRAM word, bytes) items the DMA tuples move, in DMA run order."""
    out = []
    for d, s, n, c1, d1, s1, c2, d2, s2 in runs:
        for o2 in range(c2):
            for o1 in range(c1):
                out.append((d + o2 * d2 + o1 * d1, s + (o2 * s2 + o1 * s1) // word_bytes, n))
    return out


def test_evenly_spaced_tiles_are_one_dma():
    items = [(4096 + i * 1024, 64 + i * 32, 1024) for i in range(8)]
    runs = strided_runs(items, W)
    assert runs == [(4096, 64, 1024, 8, 1024, 1024, 1, 0, 0)]
    assert _expand(runs, W) == items


def test_rows_of_taps_of_two_n_tiles_are_one_two_dimensional_dma():
    # 9 taps of N tile 0 then 9 of N tile 1 (KB = 4 cin blocks: the next N tile 36 tiles on)
    items = [(nb * 36 * 1024 + k * 1024, 512 + (nb * 9 + k) * 32, 1024) for nb in range(2) for k in range(9)]
    runs = strided_runs(items, W)
    assert runs == [(0, 512, 1024, 9, 1024, 1024, 2, 36 * 1024, 9 * 1024)]
    assert _expand(runs, W) == items


def test_a_tile_of_another_size_or_spacing_starts_a_new_dma():
    items = [(0, 0, 1024), (1024, 32, 1024), (2048, 64, 512), (8192, 96, 1024), (9216, 128, 1024),
             (20000, 160, 1024)]
    runs = strided_runs(items, W)
    assert len(runs) == 4
    assert _expand(runs, W) == items
    assert strided_runs([], W) == []


def test_gather_emits_one_load_per_run_with_its_sram_range():
    cfg = load_config("medium")
    P = Program(cfg)
    items = [(i * 1024, 32 * i, 1024) for i in range(8)]
    assert P.dma_gather("DMA_LOAD", items) == 1
    op, args = P.ops[-1]
    assert op == "DMA_LOAD" and args["count1"] == 8 and args["sram_stride1"] == 1024 and args["inner_bytes"] == 1024


@pytest.mark.parametrize("hw, batch", [("seed", 1), ("medium", 8), ("small", 32), ("narrow", 2), ("wide", 1)])
def test_weight_batch_tiles(hw, batch):
    assert tiling.weight_batch_tiles(load_config(hw)) == batch


def test_medium_conv_streams_batches_in_bank_separated_halves():
    cfg = load_config("medium")
    assert tiling.tile_dma_cycles(cfg) == 120.0      # 1 KiB: (3 + 20 + 32 - 1) x 1.25 + 7 x 2.5 + 35
    # ResNet-50's 7x7 1x1 convs: M = 49, a pair (49 + 32 + 32 + 6 = 119 cycles) is shorter
    tl = tiling.tile_conv("n", (1, 1), (1, 1), 512, 2048, 7, 7, cfg)
    assert tl.wbatch == 8 and tl.nw == 16 and tl.nres == 0
    ring = tl.regions["w"]
    halves = ring[:8], ring[8:]
    for h in halves:
        assert h == [h[0] + 32 * i for i in range(8)]
        assert h[0] % cfg.bank_words == 0
    assert halves[0][0] // cfg.bank_words != halves[1][0] // cfg.bank_words
    # the fully connected layer (M = 1) too
    assert tiling.tile_conv("n", (1, 1), (1, 1), 2048, 1000, 1, 1, cfg).wbatch == 8


def test_medium_conv_of_long_pairs_keeps_one_tile_per_dma():
    """14x14 tiles (M = 196): the MXU's pairs outlast a one-tile DMA, batches would only delay
    the first MATMUL of each (measured: the reduced ResNet-50's M = 64 tiles lost 5 %)."""
    cfg = load_config("medium")
    tl = tiling.tile_conv("n", (3, 3), (1, 1), 256, 256, 14, 14, cfg)
    assert tl.th * tl.tw == 196 and tl.wbatch == 1 and tl.nw <= 4


def test_seed_conv_keeps_one_tile_per_dma():
    tl = tiling.tile_conv("n", (3, 3), (1, 1), 512, 512, 7, 7, load_config("seed"))
    assert tl.wbatch == 1 and tl.nw <= 4


def test_batch_loads_count_what_one_dma_per_batch_and_run_counts():
    """``conv._batch_loads`` (DMAs counted per (bytes, run length)) gives the loads map, in its
    order, the bytes and the first DMA's bursts that one DMA per run of equal sizes within
    each batch, taken one by one, gives."""
    rng = np.random.default_rng(7)
    for n, batch, repeat in itertools.product((0, 1, 5, 37, 200), (2, 3, 8, 32), (1, 2, 7)):
        one = rng.choice((64, 64, 64, 96, 1024), n)
        sizes = np.tile(one, repeat)          # ``repeat`` output tiles of the same streaming tiles
        n = len(sizes)
        got, want = LayerWork(), LayerWork()
        first = conv._batch_loads(got, one.astype(np.int64), batch, 64, repeat)
        want_first = None
        for j0 in range(0, n, batch):
            seg = sizes[j0:j0 + batch].tolist()
            i = 0
            while i < len(seg):
                k = i
                while k < len(seg) and seg[k] == seg[i]:
                    k += 1
                b = want.load(1, seg[i], 64, runs=k - i)
                want_first = b if want_first is None else want_first
                i = k
        assert (list(got.loads.items()), got.load_bytes, first) == \
            (list(want.loads.items()), want.load_bytes, want_first or 0), (n, batch, repeat)
        if n:                                  # tiles all of one size: the shortcut counts the same
            even, same = LayerWork(), LayerWork()
            assert conv._even_batch_loads(even, 96, n, batch, 64) == \
                conv._batch_loads(same, np.full(n, 96, np.int64), batch, 64)
            assert (list(even.loads.items()), even.load_bytes) == (list(same.loads.items()), same.load_bytes)


def test_work_runs_expand_to_each_n_tiles_values():
    """``conv._work``'s runs of N tiles: ``tile_col_runs`` expands to ``tile_cols`` of each N tile
    (a remapped output's gap lanes of multiplier 0 trim a tile, a partial last tile is shorter),
    ``_resident_runs`` to each N tile's resident weight tiles, ``_alike`` pairs two run lists."""
    C, cout = 16, 70
    mult = np.full(cout, 1 << 30, np.int32)
    mult[20:32] = 0                           # N tile 1's lanes 4 .. 15: gap lanes
    z = np.zeros(cout, np.int32)
    op = conv.QConv("c", "x", "y", np.zeros((cout, 8, 3, 3), np.int8), z, mult, z, (1, 1), (1, 1, 1, 1),
                    False, 0, 0)
    NB = 5
    runs = conv.tile_col_runs(op, NB, C)
    assert [c for c, k in runs for _ in range(k)] == [conv.tile_cols(op, nb, C) for nb in range(NB)] == [16, 4, 16, 16, 6]
    assert conv.tile_col_runs(op, NB, C) is runs           # kept per multiplier array
    for nres, per in itertools.product((0, 1, 8, 9, 10, 27, 44, 45, 60), (1, 9)):
        got = [r for r, k in conv._resident_runs(nres, per, NB) for _ in range(k)]
        assert got == [min(max(0, nres - nb * per), per) for nb in range(NB)], (nres, per)
    a, b = [3, 3, 1, 0, 0], [16, 4, 16, 16, 6]
    ra, rb = ([(x, len(list(g))) for x, g in itertools.groupby(xs)] for xs in (a, b))
    assert [(x, y) for x, y, k in conv._alike(ra, rb) for _ in range(k)] == list(zip(a, b))
