"""The vectorised conv tiling search (tpucompile.backend.tiling.tile_conv) chooses what a plain
search of every candidate in order chooses, and the estimator's config-read memo
(tpucompile.backend.cfgmemo) reuses a result only for configs that agree on what was read."""
from __future__ import annotations

import dataclasses
import itertools

import pytest

from tpucompile.backend import tiling
from tpucompile.backend.cfgmemo import ConfigReads, ReadMemo
from tpucompile.backend.layout import align_px, ceil_div, out_tiles, round_up
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError


def _plain_search(kernel, strides, cin, cout, oh, ow, cfg):
    """(th, tw, nbg, kbg, ni, est) of the first cheapest candidate, candidate by candidate, by the
    module docstring's cost model: the busiest of LOAD (bytes / load_bw + 40 per DMA), MXU, VPU;
    + 0.3 x min(LOAD, MXU) off the banks; + the exposed window loads with one input slot."""
    R, C, W, ap = cfg.array_rows, cfg.array_cols, cfg.word_bytes, align_px(cfg)
    (kh, kw), (sh, sw) = kernel, strides
    KB, NB, T = ceil_div(cin, R), out_tiles(cout, cfg), kh * kw
    pw, mp, tsw, bwd, bw = cfg.param_words, cfg.requant_planes, tiling.table_slot_words(cfg), cfg.bank_words, tiling.load_bw(cfg)
    wgrp = round_up(2 * (round_up(C, bwd) if 2 * C > bwd else C), bwd)
    best = None
    for tw, th, nbg, kbg, ni in itertools.product(tiling._cands(ow, ap), tiling._cands(oh), tiling._pow_cands(NB),
                                                  tiling._pow_cands(KB), (2, 1)):
        M, ih, iw = th * tw, (th - 1) * sh + kh, (tw - 1) * sw + kw + ap - 1
        s_out = tiling.out_slot_words(cfg, M)
        if (M * nbg > cfg.acc_depth_rows or nbg > tiling.max_cout_blocks_per_group(cfg) or nbg % cfg.lane_groups
                or 2 * C + 2 * tsw + 2 * mp * s_out + ni * kbg * ih * iw > cfg.sram_words):
            continue
        nt, windows = ceil_div(oh, th) * ceil_div(ow, tw), 1 if ceil_div(KB, kbg) == 1 else ceil_div(NB, nbg)
        load = (nt * windows * KB * ih * ((tw - 1) * sw + kw) * W + nt * NB * KB * T * C * W + nt * NB * pw * W) / bw \
            + 40 * nt * (windows * ceil_div(KB, kbg) + NB * KB * T + NB)
        mxu = nt * NB * KB * T * (C + M + R + C + 6)
        est = max(load, mxu, nt * NB * (mp * M + pw * ceil_div(M, s_out)))
        if wgrp + round_up(2 * tsw + 2 * mp * s_out, bwd) + ni * round_up(kbg * ih * iw, bwd) > cfg.sram_words:
            est += 0.3 * min(load, mxu)
        if ni == 1:
            est += nt * windows * KB * ih * iw * W / bw
        if best is None or est < best[-1]:
            best = (th, tw, nbg, kbg, ni, est)
    return best


SHAPES = [((7, 7), (2, 2), 3, 64, 112, 112), ((3, 3), (1, 1), 64, 64, 56, 56), ((1, 1), (1, 1), 256, 64, 56, 56),
          ((3, 3), (2, 2), 128, 128, 28, 28), ((1, 1), (1, 1), 2048, 1000, 1, 1), ((3, 3), (1, 1), 512, 512, 7, 7),
          ((5, 1), (1, 1), 100, 255, 13, 17)]
CONFIGS = ["small", "medium", "small_wide", "small_tall", "seed", "wide", "narrow"]


@pytest.mark.parametrize("hw", CONFIGS)
def test_tile_conv_chooses_what_a_plain_search_chooses(hw):
    """On every shape, at the config's DDR timing and at a slower one, the same tile and cost."""
    base = load_config(hw)
    for cfg in (base, dataclasses.replace(base, ddr_latency_cycles=4 * base.ddr_latency_cycles)):
        for shape in SHAPES:
            want = _plain_search(*shape, cfg)
            if want is None:
                with pytest.raises(CompileError, match="cannot be tiled"):
                    tiling.tile_conv("c", *shape, cfg)
                continue
            tl = tiling.tile_conv("c", *shape, cfg)
            assert (tl.th, tl.tw, tl.nbg, tl.kbg, tl.ni, tl.est_cycles) == want, (hw, shape)


def test_read_memo_reuses_only_what_read_the_same():
    """A result is reused for a config differing in a field it did not read, recomputed for one
    differing in a field (or a derived property) it read; the view records and is unhashable."""
    calls = []

    def banks_words(c):
        calls.append(c)
        return c.bank_words

    memo, small = ReadMemo(), load_config("small")
    assert memo.get("k", small, banks_words) == small.bank_words
    assert memo.get("k", dataclasses.replace(small, ddr_latency_cycles=99, name="x"), banks_words) == small.bank_words
    assert len(calls) == 1 and calls[0].names == {"bank_words"}
    bigger = dataclasses.replace(small, sram_size_bytes=2 * small.sram_size_bytes)
    assert memo.get("k", bigger, banks_words) == 2 * small.bank_words and len(calls) == 2
    assert memo.get("other", small, banks_words) == small.bank_words and len(calls) == 3
    with pytest.raises(TypeError):
        hash(ConfigReads(small))


def test_read_memo_recomputation_starts_from_the_first_reads_and_stays_exact():
    """A recomputation under a known key starts from the attributes the key's first call read
    (recorded as read: a stricter key), so a function whose reads depend on the values still
    gets, for every config, exactly what it returns on that config."""
    def path(c):        # reads SRAM words on one path, array rows on the other
        return ("sram", c.sram_words) if c.sram_banks == 8 else ("rows", c.array_rows)

    memo, small = ReadMemo(), load_config("small")
    cfgs = [dataclasses.replace(small, sram_banks=b, sram_size_bytes=s, array_rows=r, array_cols=r)
            for b in (8, 4) for s in (small.sram_size_bytes, 2 * small.sram_size_bytes) for r in (8, 16)]
    views = []
    for cfg in cfgs + cfgs[::-1]:
        assert memo.get("k", cfg, lambda v: views.append(v) or path(v)) == path(cfg)
    assert views[0].names == {"sram_banks", "sram_words"}
    other_path = next(v for v in views if v.sram_banks == 4)     # started from the first call's reads
    assert other_path.names == {"sram_banks", "sram_words", "array_rows"}
    assert len(views) < 2 * len(cfgs)                             # and reused where the reads agree
