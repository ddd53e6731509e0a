"""The vectorised conv tiling search (tpucompile.backend.tiling.tile_conv) chooses what a plain
search of every candidate in order chooses, and the estimator's config-read memo
(tpucompile.backend.cfgmemo) reuses a result only for configs that agree on what was read."""
from __future__ import annotations

import bisect
import dataclasses
import itertools

import numpy as np
import pytest

from tpucompile.backend import tiling
from tpucompile.backend.cfgmemo import ConfigReads, ReadMemo
from tpucompile.backend.layout import align_px, ceil_div, out_tiles, round_up
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError


def _plain_search(kernel, strides, cin, cout, oh, ow, cfg):
    """(th, tw, nbg, kbg, ni, est, twin) of the first cheapest candidate that streams its weights,
    candidate by candidate, by the module docstring's cost model: the busiest of LOAD (bytes /
    ``conv_dma_price``: load_bw + 40 per DMA, or on arrays with weight batches the idle-chip DMA
    rate + its round trip per DMA, one per batch of weight tiles where the candidate gets batches),
    MXU, VPU; + the price's overlap share of min(LOAD, MXU); + 0.3 x min(LOAD, MXU) off the banks; + the
    exposed window loads with one input slot. Then, of the candidates of the chosen tile (th x tw)
    that load no more DDR bytes than the chosen one, the first cheapest with the VPU cycles the MXU waits for added to max(MXU, VPU): of min(MXU,
    VPU) over the layer's groups (tiles x cout groups), each but the last group's share whose
    accumulator rows the next group overwrites (0 where two groups fit, one-block groups the rows
    the bottom and the top share, else all). ``twin``: None, or (nres, est, on its own banks, the streaming one
    on its own banks) of the same tile with nres weight tiles resident (several output tiles
    only): each loaded once instead of once per output tile (a tile: its columns holding output
    channels, the N tiles' mean for the resident ones), all of them if their slots fit,
    else as many as fit next to two streaming slots."""
    R, C, W, ap = cfg.array_rows, cfg.array_cols, cfg.word_bytes, align_px(cfg)
    (kh, kw), (sh, sw) = kernel, strides
    KB, NB, T = ceil_div(cin, R), out_tiles(cout, cfg), kh * kw
    pw, mp, tsw, bwd, bw = cfg.param_words, cfg.requant_planes, tiling.table_slot_words(cfg), cfg.bank_words, tiling.conv_dma_price(cfg)[0]
    (_, per_dma, overlap), gb = tiling.conv_dma_price(cfg), tiling.weight_batch_tiles(cfg)
    total, wcols = NB * KB * T, min(cout, NB * C)
    wwords = [0]               # [n]: words of n weight slots from address 0, as conv_regions places them
    for _ in range(total + 2):
        wwords.append((round_up(wwords[-1], min(bwd, C)) if 2 * C > bwd else wwords[-1]) + C)

    def pair(M):
        """The MXU period of one LOAD_WEIGHTS + MATMUL pair with double-buffered weights."""
        return max(M + 2, C + 5, (M + R + C + 5) // 2)

    def batched(M, kbg, ih, iw, ni, s_out, aligned, load_bound, loads):
        """A streaming candidate gets weight batches: its pair is shorter than a one-tile DMA or
        its LOAD time (one DMA per tile) is at least its MXU time, and the ring of two
        bank-started halves fits (on its own banks if the candidate is)."""
        saves = (loads - ceil_div(loads, gb)) * per_dma > (gb - 1) * C * W / bw    # round trips vs the first batch
        if gb == 1 or (pair(M) + 6 >= tiling.tile_dma_cycles(cfg) and not (load_bound and saves)):
            return False
        half = 0
        for _ in range(gb):
            half = (round_up(half, min(bwd, C)) if 2 * C > bwd else half) + C
        ring = round_up(half, bwd) + half
        if aligned:
            return round_up(ring, bwd) + round_up(2 * tsw + 2 * mp * s_out, bwd) + ni * round_up(kbg * ih * iw, bwd) \
                <= cfg.sram_words
        return ring + 2 * tsw + 2 * mp * s_out + ni * kbg * ih * iw <= cfg.sram_words

    def serial(nt, M, nbg, mxu, vpu):
        """The VPU cycles on the MXU's path (accumulator rows shared by consecutive groups)."""
        rows, depth = M * nbg, cfg.acc_depth_rows
        share = 0.0 if 2 * rows <= depth else min(1.0, max(0.0, (2 * rows - depth) / rows)) \
            if nbg <= cfg.lane_groups else 1.0
        groups = nt * ceil_div(NB, nbg)
        return float(min(mxu, vpu)) * (share * (groups - 1)) / groups

    def cost(nt, windows, M, ih, iw, tw, kbg, ni, s_out, nres, wgrp, nbg=None):
        loads = nres + (total - nres) * nt          # weight tile DMAs
        wbytes = nt * KB * T * wcols * W - nres * (nt - 1) * wcols * W // NB     # columns past cout: not loaded
        load = (nt * windows * KB * ih * ((tw - 1) * sw + kw) * W + wbytes + nt * NB * pw * W) / bw
        aligned = wgrp + round_up(2 * tsw + 2 * mp * s_out, bwd) + ni * round_up(kbg * ih * iw, bwd) <= cfg.sram_words
        mxu = nt * NB * KB * T * (pair(M) + 6)        # double-buffered weights
        others = nt * windows * ceil_div(KB, kbg) + nt * NB         # window and table DMAs
        if nres == 0 and batched(M, kbg, ih, iw, ni, s_out, aligned, load + per_dma * (others + loads) >= mxu, loads):
            loads = ceil_div(loads, gb)
        load += per_dma * (others + loads)
        vpu = nt * NB * (mp * M + pw * ceil_div(M, s_out))
        est = max(load, max(mxu, vpu) + (0.0 if nbg is None else serial(nt, M, nbg, mxu, vpu)))
        if overlap:
            est += overlap * min(load, mxu)
        if not aligned:
            est += 0.3 * min(load, mxu)
        if ni == 1:
            est += nt * windows * KB * ih * iw * W / bw
        return est, aligned

    def candidates(tiles):
        for tw, th, nbg, kbg, ni in itertools.product(tiling._cands(ow, ap), tiling._cands(oh), tiling.nbg_cands(NB),
                                                      tiling._pow_cands(KB), (2, 1)):
            M, ih, iw = th * tw, th if kh == 1 else (th - 1) * sh + kh, (tw - 1) * sw + kw + ap - 1
            s_out = tiling.out_slot_words(cfg, M)
            rest = 2 * tsw + 2 * mp * s_out + ni * kbg * ih * iw
            nt, windows = ceil_div(oh, th) * ceil_div(ow, tw), 1 if ceil_div(KB, kbg) == 1 else ceil_div(NB, nbg)
            if (M * nbg > cfg.acc_depth_rows or nbg > tiling.max_cout_blocks_per_group(cfg) or nbg % cfg.lane_groups
                    or 2 * C + rest > cfg.sram_words or ((nt > 1 or oh > 1) and nbg not in tiling._pow_cands(NB))
                    or (tiles is not None and (th, tw) != tiles)):
                continue
            yield th, tw, nbg, kbg, ni, rest, (nt, windows, M, ih, iw, tw, kbg, ni, s_out)

    def nbytes(nt, windows, M, ih, iw, tw, *_):
        """DDR bytes a streaming candidate loads."""
        return nt * windows * KB * ih * ((tw - 1) * sw + kw) * W + nt * KB * T * wcols * W + nt * NB * pw * W

    wgrp = round_up(2 * (round_up(C, bwd) if 2 * C > bwd else C), bwd)
    tile = None
    for th, tw, nbg, kbg, ni, rest, args in candidates(None):
        est, _ = cost(*args, 0, wgrp)
        if tile is None or est < tile[2]:
            tile = (th, tw, est, nbytes(*args))
    if tile is None:
        return None
    best = None
    for th, tw, nbg, kbg, ni, rest, args in candidates(tile[:2]):
        if nbytes(*args) > tile[3]:
            continue
        est, aligned = cost(*args, 0, wgrp, nbg)
        if best is not None and est >= best[5]:
            continue
        twin = None
        nres = total if wwords[total] + rest <= cfg.sram_words else \
            max(0, bisect.bisect_right(wwords, cfg.sram_words - rest) - 1 - 2)
        if args[0] > 1 and nres > 0:
            est_r, aligned_r = cost(*args, nres, round_up(wwords[nres + (0 if nres == total else 2)], bwd), nbg)
            twin = (nres, est_r, aligned_r, aligned)
        best = (th, tw, nbg, kbg, ni, est, twin)
    return best


SHAPES = [((7, 7), (2, 2), 3, 64, 112, 112), ((3, 3), (1, 1), 64, 64, 56, 56), ((1, 1), (1, 1), 256, 64, 56, 56),
          ((3, 3), (2, 2), 128, 128, 28, 28), ((1, 1), (1, 1), 2048, 1000, 1, 1), ((3, 3), (1, 1), 512, 512, 7, 7),
          ((5, 1), (1, 1), 100, 255, 13, 17), ((1, 1), (1, 1), 768, 4608, 1, 128)]
CONFIGS = ["small", "medium", "small_wide", "small_tall", "seed", "wide", "narrow"]


@pytest.mark.parametrize("hw", CONFIGS)
def test_tile_conv_chooses_what_a_plain_search_chooses(hw):
    """On every shape, at the config's DDR timing and at a slower one, the same tile and cost."""
    base = load_config(hw)
    _check_plain_search(hw, (base, dataclasses.replace(base, ddr_latency_cycles=4 * base.ddr_latency_cycles)))


def test_tile_conv_at_many_ddr_timings_chooses_what_a_plain_search_chooses():
    """A sweep weighs each shape at many bandwidths in turn, the tiler's search dropping the
    candidates a chosen one beats in every cost term (``_SearchSet``) and keeping choices per
    candidate table: every pick is still the plain search's, latencies up and down, both ways."""
    base = load_config("medium")
    lats = [max(1, base.ddr_latency_cycles * f // 4) for f in (1, 2, 4, 8, 16, 32, 64, 3, 6)]
    cfgs = [dataclasses.replace(base, ddr_latency_cycles=n) for n in lats]
    _check_plain_search("medium", cfgs + cfgs[::-1])


def test_tile_conv_over_bank_sizes_sharing_tables_chooses_what_a_plain_search_chooses():
    """Bank sizes whose output slots' chunk is the same share the table part that reads the
    bank size only through the chunk (``_conv_out_table``); bank sizes that are no power of two
    round to banks by division, the others by mask: every pick is still the plain search's."""
    base = load_config("medium")
    hits = tiling._conv_out_table.cache_info().hits
    cfgs = [dataclasses.replace(base, sram_banks=n, sram_size_bytes=size)
            for size in (base.sram_size_bytes, base.sram_size_bytes * 3 // 4) for n in (2, 4, 8, 16)]
    assert {c.bank_words & (c.bank_words - 1) == 0 for c in cfgs} == {True, False}
    _check_plain_search("medium", cfgs)
    assert tiling._conv_out_table.cache_info().hits > hits


@pytest.mark.parametrize("hw", ["medium", "seed", "small"])
def test_tile_conv_weighing_the_prices_ahead_at_once_chooses_what_a_plain_search_chooses(hw):
    """Under ``prices_ahead`` (``Estimator.estimate_many``: DDR timings and clocks turned on one
    chip), a table's first search also weighs the other configs' prices in one evaluation and
    stores their picks; each config's tiling is still the plain search's (picks stored ahead
    for all but the first config of each table; weight batches where the array has them)."""
    tiling.conv_candidates.cache_clear()        # fresh search sets, no picks met before
    tiling._PICKS.clear()
    base = load_config(hw)
    cfgs = [dataclasses.replace(base, ddr_latency_cycles=max(2, base.ddr_latency_cycles * f // 4),
                                clk_core=dataclasses.replace(base.clk_core, freq_mhz=mhz))
            for f in (1, 4, 16) for mhz in (base.clk_core.freq_mhz, base.clk_core.freq_mhz // 2)]
    searched = []
    with tiling.prices_ahead(cfgs):
        for shape in SHAPES:
            for cfg in cfgs:
                key = tiling.conv_candidates_key(*shape, cfg)
                if tiling.conv_candidates(key).live.size:
                    searched.append((key, tiling.conv_dma_price(cfg), tiling._batch_key(cfg)) in tiling._PICKS)
                _check_plain_search(hw, [cfg], [shape])
    assert searched and sum(searched) == len(searched) - len(searched) // len(cfgs)    # all but the first ahead
    assert not tiling._AHEAD                     # (left as found)


def _check_plain_search(hw, cfgs, shapes=SHAPES):
    for cfg in cfgs:
        for shape in shapes:
            want = _plain_search(*shape, cfg)
            if want is None:
                with pytest.raises(CompileError, match="cannot be tiled"):
                    tiling.tile_conv("c", *shape, cfg)
                continue
            tl = tiling.tile_conv("c", *shape, cfg)
            assert (tl.th, tl.tw, tl.nbg, tl.kbg, tl.ni) == want[:5], (hw, shape)
            twin = want[6]
            ok = twin is not None and twin[1] <= want[5] and twin[2] >= twin[3]     # cheaper, banks kept
            if tl.nres:        # the same tile with weights resident, only when cheaper on its banks
                assert ok and (tl.nres, tl.est_cycles) == twin[:2], (hw, shape)
            else:              # (a partial twin may lose on streaming slots, which _conv_choice places)
                assert tl.est_cycles == want[5] and not (ok and twin[0] == ceil_div(shape[2], cfg.array_rows)
                                                        * out_tiles(shape[3], cfg) * shape[0][0] * shape[0][1]), (hw, shape)


def test_wide_projection_groups_fill_the_accumulator():
    """bert-base's fused Q/K/V projection on seed (768 -> 36 blocks of 128 lanes, 128 tokens, the
    window of 6 cin blocks too large for one slot, so it is reloaded once per group of cout
    blocks): the group holds 8 blocks (8 x 128 = the 1,024 accumulator rows), 5 groups, x read 5
    times; the halvings of 36 alone give 5 blocks (9 is 1,152 rows), 8 groups."""
    cfg = load_config("seed")
    tl = tiling.tile_conv("qkv", (1, 1), (1, 1), 768, 4608, 1, 128, cfg)
    assert (tl.th * tl.tw, tl.nbg) == (128, 8)
    assert tl.kbg < 6 and ceil_div(36, tl.nbg) == 5


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
    # ``reads_nothing``: only a key met, all of whose calls read no attribute
    assert memo.get("const", small, lambda c: 7) == 7
    assert memo.reads_nothing("const") and not memo.reads_nothing("k") and not memo.reads_nothing("unmet")


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


def test_read_memo_keys_of_the_same_reads_start_from_this_configs_values():
    """Keys whose first calls read the same attributes recompute on a new config from that
    config's values of them (one starting set per config, shared by the keys): each call gets
    what it returns on its config, and a call that reads more records only its own reads."""
    memo, small = ReadMemo(), load_config("small")
    bigger = dataclasses.replace(small, sram_size_bytes=2 * small.sram_size_bytes, name="bigger")
    views = []

    def words(v):
        views.append(v)
        return v.sram_words

    def words_and_rows(v):
        views.append(v)
        return v.sram_words, v.array_rows if v.sram_words > small.sram_words else None

    for cfg in (small, bigger):
        assert memo.get("a", cfg, words) == cfg.sram_words
        assert memo.get("b", cfg, words_and_rows) == (cfg.sram_words, cfg.array_rows if cfg is bigger else None)
        assert memo.get("c", cfg, words) == cfg.sram_words
    assert [v.names for v in views] == [{"sram_words"}] * 3 + [{"sram_words"}, {"sram_words", "array_rows"},
                                                               {"sram_words"}]
    assert all(v.sram_words == bigger.sram_words for v in views[3:])


def test_largest_output_slot_is_the_bisections():
    """``_largest_out_slot`` (worked out from the layout, then checked) gives what a bisection of
    ``conv_regions`` gives, packed and bank-aligned, for slots up to a whole accumulator."""
    cfg = load_config("small")
    seen = 0
    for nw, ni, slot, aligned, hi in itertools.product((2, 3, 4, 9), (1, 2), (1, 40, 200, 700), (True, False),
                                                       (1, 64, 256)):
        regs = tiling.conv_regions(cfg, nw, 1, ni, slot, aligned)
        if regs is None:
            continue
        lo, top = 1, hi
        while lo < top:
            mid = (lo + top + 1) // 2
            lo, top = (mid, top) if tiling.conv_regions(cfg, nw, mid, ni, slot, aligned) is not None else (lo, mid - 1)
        s, got = tiling._largest_out_slot(cfg, nw, 1, hi, ni, slot, aligned, 1, regs["o"][0])
        assert s == lo and {k: list(v) for k, v in got.items()} == tiling.conv_regions(cfg, nw, lo, ni, slot, aligned)
        seen += 1
    assert seen > 40


def test_largest_split_slot_is_the_bisections():
    """``_largest_split_slot`` (worked out from the layout for either place of the tables, then
    checked) gives what a bisection of ``conv_regions(split=True)`` gives, with the tables before
    the outputs and on a bank of their own, over bank sizes, weight rings and input slots."""
    seen, own = 0, 0
    for name, bank_words in (("small", None), ("medium", None), ("medium", 512), ("medium", 2048)):
        cfg = load_config(name)
        if bank_words:
            cfg = dataclasses.replace(cfg, sram_banks=cfg.sram_words // bank_words)
            assert cfg.bank_words == bank_words
        for nw, ni, slot, wb, hi in itertools.product((2, 4, 9, 40), (1, 2), (1, 40, 200, 700, 3000), (1, 2),
                                                      (2, 64, 255, 1024)):
            if wb > 1 and nw < 2 * wb:
                continue
            lo = max(1, hi // 2)
            regs = tiling.conv_regions(cfg, nw, lo, ni, slot, True, skip=True, wbatch=wb, split=True, lists=False)
            if regs is None:
                continue
            want, top = lo, hi
            while want < top:
                mid = (want + top + 1) // 2
                fits = tiling.conv_regions(cfg, nw, mid, ni, slot, True, skip=True, wbatch=wb, split=True) is not None
                want, top = (mid, top) if fits else (want, mid - 1)
            s, got = tiling._largest_split_slot(cfg, nw, lo, hi, ni, slot, wb, regs)
            assert s == want
            assert {k: list(v) for k, v in got.items()} == tiling.conv_regions(cfg, nw, s, ni, slot, True, skip=True,
                                                                                 wbatch=wb, split=True)
            seen += 1
            own += got["p"][0] > got["o"][0]
    assert seen > 200 and 0 < own < seen


def test_serial_cycles_in_floats_are_the_array_shares():
    """``_serial_cycles`` (Python floats, one candidate) gives, bit for bit, min(MXU, VPU) x
    share x (groups - 1) / groups with the share of ``acc_serial_share``'s float64 arrays, over
    groups that fit twice, one-block groups sharing part of the rows and several blocks sharing
    all of them."""
    M, nbg, mxu, vpu, groups = (np.array(a, np.int64) for a in zip(*itertools.product(
        (1, 7, 49, 196, 784), (1, 2, 3, 4, 8), (5, 1000, 123457), (3, 999, 77777), (1, 2, 16, 49))))
    kinds = np.zeros(3, np.int64)       # shares 0, between, 1
    for depth, mg in itertools.product((512, 2048, 1000), (1, 2)):
        share = tiling.acc_serial_share(M, nbg, depth, mg)
        want = np.minimum(mxu.astype(np.float64), vpu.astype(np.float64)) * (share * (groups - 1)) / groups
        got = [tiling._serial_cycles(*v, depth, mg, g)
               for *v, g in zip(mxu.tolist(), vpu.tolist(), M.tolist(), nbg.tolist(), groups.tolist())]
        assert got == want.tolist()
        kinds += [(share == 0).sum(), ((0 < share) & (share < 1)).sum(), (share == 1).sum()]
    assert kinds.min() > 100


def test_alloc_takes_slots_as_one_by_one():
    """``_Alloc.take`` places ``count`` slots where taking them one at a time (each rounded up to
    ``min(bank_words, words)`` when aligned) would, and ends at the same top."""
    cfg = load_config("small")
    for start, count, words, align in itertools.product((0, 5, 64, 100), (0, 1, 3), (1, 8, 64, 300), (True, False)):
        a = tiling._Alloc(cfg)
        a.top = start
        a.take("x", count, words, bank_align=align)
        top, bases = start, []
        for _ in range(count):
            if align:
                top = round_up(top, min(cfg.bank_words, words))
            bases.append(top)
            top += words
        assert (a.regions["x"], a.top) == (bases, top), (start, count, words, align)
