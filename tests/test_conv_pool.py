"""The MaxPool fused into the Conv producing its input (ops/conv_pool.py,
backend/fuse_residual.py): bit-exact on the SimPy model and the executor against the unfused
golden model (tiles with overlapping windows, pads, ceil_mode's extra pads, stride-1 pools, odd
sizes), the conv's output never in DDR, the tiler's slots, the estimator's work, refusals."""
from __future__ import annotations

import numpy as np
import pytest

from tests import qnets
from tests.test_backend_ops import B, check
from tpucompile.backend.estimate import estimate
from tpucompile.backend.layout import ceil_div
from tpucompile.backend.tiling import tile_conv
from tpucompile.golden import run_golden
from tpucompile.ir import Node
from tpucompile.ops import OP_TABLE, QMaxPool
from tpucompile.ops import pool as pool_ops
from tpucompile.ops.conv_pool import QConvPool, fused_conv_pool, pool_runs, pool_tiles
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

CFG = load_config("small")


@pytest.fixture
def always_fuse(monkeypatch):
    """Every conv -> max pool pair the rule allows fuses, whatever the tilers' estimates (the
    fused path on every shape of the bit-exact tests)."""
    real = pool_ops._tile

    class Apart:
        est_cycles = float("inf")
    monkeypatch.setattr(pool_ops, "_tile", lambda op, lays, cfg: Apart() if lays is not None else real(op, lays, cfg))


def _fused(b) -> list:
    return [L for L in b.meta["layers"] if L["op"] == "QConvPool"]


def _maxpool(g, x, k, s, pads):
    """A max pool with any (top, left, bottom, right) pads (ceil_mode=1: extra bottom / right)."""
    X = g.tensors[x]
    _, c, h, w = X.shape
    (kh, kw), (sh, sw) = k, s
    oh, ow = (h + pads[0] + pads[2] - kh) // sh + 1, (w + pads[1] + pads[3] - kw) // sw + 1
    y = g.t((1, c, oh, ow), zp=X.zero_point, scale=X.scale)
    g.ops.append(QMaxPool(f"pool{len(g.ops)}", x, y, tuple(k), tuple(s), tuple(pads)))
    return y


@pytest.mark.parametrize("shape,cout,ck,cs,cp,k,s,pads", [
    ((1, 12, 15, 13), 16, 3, 1, 1, (3, 3), (2, 2), (1, 1, 1, 1)),          # resnet stem-like, one tile
    ((1, 8, 40, 37), 20, 3, 1, 1, (3, 3), (2, 2), (1, 1, 1, 1)),           # many tiles, odd width
    ((1, 6, 31, 29), 24, 3, 2, 1, (3, 3), (2, 2), (0, 0, 1, 1)),           # ceil_mode=1 extra pads
    ((1, 10, 23, 21), 12, 1, 1, 0, (3, 3), (1, 1), (1, 1, 1, 1)),          # stride-1 pool, pads
    ((1, 9, 26, 26), 40, 3, 1, 0, (2, 2), (2, 2), (0, 0, 0, 0)),           # vgg-like 2x2/2
    ((1, 5, 19, 33), 7, 5, 2, 2, (3, 2), (2, 1), (2, 0, 1, 1)),            # asymmetric everything
])
def test_conv_maxpool_fuses_bit_exact(shape, cout, ck, cs, cp, k, s, pads, always_fuse):
    g = B(shape, seed=sum(shape) + cout)
    c = g.conv(g.x, cout, ck, s=cs, p=cp, relu=True)
    y = _maxpool(g, c, k, s, pads)
    b = check(g.graph([y]), g.input(), im2col=False, interleavings=(0,))
    (L,) = _fused(b)
    assert L["fused"] == ["conv0", "pool1"] and L["out"] == y and L["pool"]["pads"] == list(pads)


def test_stem_with_host_im2col_fuses_over_many_tiles(always_fuse):
    """Cin 3 (host im2col: the conv reads K = 147 channels), 7x7/2 then 3x3/2 pad 1, on tiles
    that overlap: the recomputed conv rows and columns give the same pooled outputs."""
    g = B((1, 3, 64, 58), seed=4)
    c = g.conv(g.x, 20, 7, s=2, p=3, relu=True)
    y = g.maxpool(c, 3, 2, 1)
    b = check(g.graph([y]), g.input(), interleavings=(0,))
    (L,) = _fused(b)
    t = L["tiling"]
    assert t["pool_th"] * t["pool_tw"] < 16 * 15            # several tiles
    assert b.meta["input_transforms"]


def test_fused_conv_output_never_reaches_ddr(always_fuse):
    g = B((1, 16, 20, 20), seed=3)
    c = g.conv(g.x, 16, 3, p=1)
    y = g.maxpool(c, 3, 2, 1)
    b = check(g.graph([y]), g.input(), im2col=False, interleavings=(0,))
    (L,) = _fused(b)
    px = 10 * 10 * CFG.word_bytes * ceil_div(16, CFG.word_bytes)
    assert L["ddr_bytes_out"] == px == b.meta["stats"]["ddr_store_bytes"]
    assert L["macs"] == 20 * 20 * 16 * 16 * 9                       # the conv's full output
    tc = b.meta["stats"]["true_compulsory"]            # still the unfused graph's traffic
    assert tc["writes"] == 16 * 400 + 16 * 100 and tc["reads"] == 16 * 400 + 16 * 400


def test_not_fused_when_the_conv_output_has_another_reader_or_is_an_output(always_fuse):
    g = B((1, 8, 10, 10), seed=7)
    c = g.conv(g.x, 8, 1)
    y = g.maxpool(c, 3, 2, 1)
    z = g.conv(c, 8, 1)
    assert not _fused(check(g.graph([y, z]), g.input(), interleavings=()))
    g = B((1, 8, 10, 10), seed=7)
    c = g.conv(g.x, 8, 1)
    y = g.maxpool(c, 3, 2, 1)
    assert not _fused(check(g.graph([y, c]), g.input(), interleavings=()))


def test_pool_with_a_pad_as_large_as_its_window_does_not_fuse(always_fuse):
    g = B((1, 8, 6, 6), seed=2)
    c = g.conv(g.x, 8, 1)
    conv = g.ops[-1]
    y = _maxpool(g, c, (2, 2), (1, 1), (2, 0, 0, 0))
    assert fused_conv_pool(conv, g.ops[-1]) is None
    assert not _fused(check(g.graph([y]), g.input(), interleavings=()))


def test_golden_of_the_fused_op_equals_the_pair():
    g = B((1, 8, 9, 7), seed=9)
    c = g.conv(g.x, 8, 3, p=1)
    y = g.maxpool(c, 3, 2, 1)
    qg = g.graph([y])
    op = fused_conv_pool(*qg.ops)
    assert isinstance(op, QConvPool) and op.inputs == (g.x,) and op.out == y
    x = g.input()
    assert np.array_equal(OP_TABLE.device(op).golden(op, x), run_golden(qg, x)[y])


def test_pool_runs_clip_the_windows_to_the_conv_output():
    """3x3/2 pad 1 over 9x9 conv outputs: the first and last pooled row and column read 2 taps,
    the others 3; a tile with several column runs pools row by row (POOL writes its outputs
    densely); tiles overlap by the window's extra row."""
    g = B((1, 8, 9, 9), seed=1)
    c = g.conv(g.x, 8, 1)
    op = fused_conv_pool(g.ops[-1], QMaxPool("p", c, "y", (3, 3), (2, 2), (1, 1, 1, 1)))

    class T:
        pool_th, pool_tw = 2, 5
    tiles = pool_tiles(op, (9, 9), (5, 5), T)
    assert tiles == [(0, 4, 0, 9, 0, 2, 0, 5), (3, 5, 0, 9, 2, 2, 0, 5), (7, 2, 0, 9, 4, 1, 0, 5)]
    assert pool_runs(op, (9, 9), tiles[0]) == [(0, 2, 2, 1, 1, 0), (1, 2, 3, 1, 3, 1), (7, 2, 2, 1, 1, 4),
                                               (9, 3, 2, 1, 1, 5), (10, 3, 3, 1, 3, 6), (16, 3, 2, 1, 1, 9)]
    assert pool_runs(op, (9, 9), tiles[2])[0] == (0, 2, 2, 1, 1, 0)        # the last row: 2 taps

    class U:
        pool_th, pool_tw = 5, 5
    inner = fused_conv_pool(g.ops[-1], QMaxPool("p", c, "y", (3, 3), (2, 2), (0, 0, 0, 0)))
    (t,) = pool_tiles(inner, (9, 9), (4, 4), U)
    assert pool_runs(inner, (9, 9), t) == [(0, 3, 3, 4, 4, 0)]            # one POOL: no clipping


def test_fused_tiling_counts_the_pooled_slots():
    plain = tile_conv("c", (3, 3), (1, 1), 16, 16, 40, 40, CFG)
    fused = tile_conv("c", (3, 3), (1, 1), 16, 16, 40, 40, CFG, pool=((3, 3), (2, 2), (1, 1, 1, 1), (20, 20)))
    assert "q" not in plain.regions and len(fused.regions["q"]) == 2 and plain.pool_th == 0
    assert fused.slot_words["q"] == CFG.requant_planes * fused.pool_th * fused.pool_tw
    assert fused.th == min(40, 2 * fused.pool_th + 1) and fused.s_out == fused.th * fused.tw
    ends = sorted((a, a + fused.slot_words[k]) for k, r in fused.regions.items() for a in r)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(ends, ends[1:]))     # disjoint
    assert ends[-1][1] <= CFG.sram_words


def test_fused_tiling_refuses_cleanly():
    """A pool window whose conv outputs exceed the accumulator: no tile, a CompileError naming
    the conv and the pool's window."""
    with pytest.raises(CompileError, match=r"QConv 'big' .* cannot be tiled .* fused pool \(window 25x25\)"):
        tile_conv("big", (5, 5), (1, 1), 16, 16, 40, 40, CFG, pool=((25, 25), (1, 1), (0, 0, 0, 0), (16, 16)))


def test_estimate_tracks_the_fused_layer(always_fuse):
    g = B((1, 16, 30, 30), seed=2)
    c = g.conv(g.x, 32, 3, p=1, relu=True)
    y = g.maxpool(c, 3, 2, 1)
    qg = g.graph([y])
    est = estimate(qg, CFG)
    assert est.kinds == ("QConvPool",) and est.names == ("conv0+pool1",)


def test_fusion_follows_the_tilers_estimates():
    """Without forcing, the same stem-like pair: on seed it fuses; on small (16 KiB SRAM) the
    fused tiles are small and the pair stays (forced, it measured 121,138 SimPy cycles against
    108,540 apart); a pool whose window needs more conv outputs than a tile holds has no fused
    tiling and stays."""
    g = B((1, 3, 64, 58), seed=4)
    y = g.maxpool(g.conv(g.x, 20, 7, s=2, p=3, relu=True), 3, 2, 1)
    qg, x = g.graph([y]), g.input()
    assert [L["op"] for L in check(qg, x, cfg=load_config("seed"), interleavings=()).meta["layers"]] == ["QConvPool"]
    assert [L["op"] for L in check(qg, x, interleavings=()).meta["layers"]] == ["QConv", "QMaxPool"]
    g = B((1, 16, 40, 40), seed=3)
    y = _maxpool(g, g.conv(g.x, 16, 3, p=1), (25, 25), (1, 1), (0, 0, 0, 0))
    assert [L["op"] for L in check(g.graph([y]), g.input(), im2col=False, interleavings=()).meta["layers"]] \
        == ["QConv", "QMaxPool"]


def test_convpool_is_never_quantized_itself():
    with pytest.raises(CompileError, match=r"node 'n7' \(ConvPool\): made by the back end"):
        OP_TABLE.get("ConvPool").quantize(None, Node("ConvPool", "n7", ["x"], ["y"], {}))


@pytest.mark.rtl
@pytest.mark.parametrize("name", ["stem", "ceil"])
def test_fused_conv_maxpool_three_way_small_rtl(name, tmp_path, always_fuse):
    """The fused layer on the RTL: golden = SimPy = RTL, outputs and cycles (a stem-like 3x3/2
    pad 1 pool over several overlapping tiles; ceil_mode's extra bottom row and right column)."""
    from tests.test_cosim_rtl import _check
    m = qnets.conv_maxpool() if name == "stem" else qnets.ceil_pool("MaxPool", hw=(8, 8))
    xs = qnets.inputs(qnets.in_shape(m), 2, seed=3)
    v = run(m, "small", tmp_path, rtl=True, data=(xs[0], xs), name=name)
    _check(v)
    (binary,) = tmp_path.glob("*.tpubin")
    assert [L["op"] for L in TpuBinary.read(binary).meta["layers"]] == ["QConvPool"]
