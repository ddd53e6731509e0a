"""The residual Add fused into the Conv producing its operand (ops/conv_add.py,
backend/fuse_residual.py): which pairs fuse, bit-exact on the SimPy model and the executor
against the unfused golden model, the conv's output never in DDR, the traffic saved, the
estimator's work for the fused schedule."""
from __future__ import annotations

import numpy as np
import pytest

from tests.test_backend_ops import B, check
from tpucompile.backend.estimate import estimate
from tpucompile.backend.layout import ceil_div
from tpucompile.backend.tiling import SKIP_SLOTS, conv_candidates, conv_candidates_key, tile_conv
from tpucompile.golden import run_golden
from tpucompile.ir import Node
from tpucompile.ops import OP_TABLE
from tpucompile.ops.conv_add import QConvAdd, fused_conv_add
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError

CFG = load_config("small")


def _fused(b) -> list:
    return [L for L in b.meta["layers"] if L["op"] == "QConvAdd"]


@pytest.mark.parametrize("skip_first,relu", [(False, True), (True, True), (False, False)])
def test_residual_block_fuses_bit_exact(skip_first, relu):
    g = B((1, 16, 9, 9), seed=10)
    a = g.conv(g.x, 16, 3, p=1, relu=True)
    c = g.conv(a, 16, 1)
    y = g.add(g.x, c, relu=relu) if skip_first else g.add(c, g.x, relu=relu)
    b = check(g.graph([y]), g.input())
    (L,) = _fused(b)
    assert L["fused"] == ["conv1", "add2"] and L["out"] == y and L["add_relu"] == relu
    assert [x["name"] for x in b.meta["layers"]] == ["conv0", "conv1+add2"]


def test_fused_conv_output_never_reaches_ddr():
    """The fused layer stores only the Add's output; the conv's output has no buffer; the DDR
    traffic drops by one load and one store of the residual tensor against the unfused pair."""
    g = B((1, 24, 10, 10), seed=3)
    c = g.conv(g.x, 24, 1)
    y = g.add(c, g.x)
    b = check(g.graph([y]), g.input())
    (L,) = _fused(b)
    px = 10 * 10 * CFG.word_bytes * ceil_div(24, CFG.word_bytes)      # one blocked tensor, no border
    assert L["ddr_bytes_out"] == px
    weights_and_tables = L["ddr_bytes_in"] - 2 * px                   # the input and the skip
    assert weights_and_tables > 0
    assert b.meta["stats"]["ddr_store_bytes"] == px
    tc = b.meta["stats"]["true_compulsory"]            # still the unfused graph's traffic
    assert tc["writes"] == 2 * 24 * 100 and tc["reads"] == 3 * 24 * 100


def test_projection_block_fuses_the_later_conv():
    """Both operands are convs read by the Add alone: the later one fuses, the other is the skip."""
    g = B((1, 16, 8, 8), seed=5)
    main = g.conv(g.conv(g.x, 16, 3, p=1, relu=True), 32, 1)
    short = g.conv(g.x, 32, 1, s=1)
    y = g.add(main, short)
    b = check(g.graph([y]), g.input())
    (L,) = _fused(b)
    assert L["fused"] == ["conv2", "add3"]


def test_not_fused_when_the_conv_output_has_another_reader_or_is_an_output():
    g = B((1, 16, 6, 6), seed=7)
    c = g.conv(g.x, 16, 1)
    y = g.add(c, g.x)
    z = g.conv(c, 16, 1)
    assert not _fused(check(g.graph([y, z]), g.input()))
    g = B((1, 16, 6, 6), seed=7)
    c = g.conv(g.x, 16, 1)
    y = g.add(c, g.x)
    assert not _fused(check(g.graph([y, c]), g.input()))


def test_fused_tiling_counts_the_skip_slots():
    """The tiler reserves SKIP_SLOTS skip slots of an output slot's size after the output slots,
    and counts the skip loads in its estimate."""
    plain = tile_conv("c", (1, 1), (1, 1), 128, 128, 28, 28, CFG)
    fused = tile_conv("c", (1, 1), (1, 1), 128, 128, 28, 28, CFG, skip=True)
    assert "s" not in plain.regions and len(fused.regions["s"]) == SKIP_SLOTS
    assert fused.slot_words["s"] == fused.slot_words["o"]
    o, s = fused.regions["o"], fused.regions["s"]
    ends = sorted((a, a + fused.slot_words[k]) for k, r in fused.regions.items() for a in r)
    assert all(e0 <= s1 for (_, e0), (s1, _) in zip(ends, ends[1:]))     # disjoint
    assert max(o) < min(s)
    # the skip loads are counted: the same tile shape without the Add loads the whole skip
    # tensor (28 x 28 x 128 int8) less (the two picks may differ in shape, so compare like with like)
    t = conv_candidates(conv_candidates_key((1, 1), (1, 1), 128, 128, 28, 28, CFG)).table
    same = np.flatnonzero((t.th == fused.th) & (t.tw == fused.tw) & (t.nbg == fused.nbg) & (t.kbg == fused.kbg)
                          & (t.ni == fused.ni) & (t.wres == 0))
    assert fused.nres == 0 and len(same) == 1
    assert fused.load_bytes - int(t.load_bytes[same[0]]) == 28 * 28 * 128


def test_golden_of_the_fused_op_equals_the_pair():
    g = B((1, 8, 5, 5), seed=9)
    c = g.conv(g.x, 8, 3, p=1)
    y = g.add(g.x, c, relu=True)
    qg = g.graph([y])
    conv, add = qg.ops
    op = fused_conv_add(conv, add)
    assert isinstance(op, QConvAdd) and op.skip == g.x and op.skip_is_a and op.inputs == (g.x, g.x)
    x = g.input()
    assert np.array_equal(OP_TABLE.device(op).golden(op, x, x), run_golden(qg, x)[y])


def test_estimate_tracks_the_fused_layer():
    g = B((1, 32, 14, 14), seed=2)
    c = g.conv(g.conv(g.x, 32, 3, p=1, relu=True), 32, 1)
    y = g.add(c, g.x)
    est = estimate(g.graph([y]), CFG)
    assert est.kinds == ("QConv", "QConvAdd")
    assert est.names[1] == "conv1+add2"


def test_convadd_is_never_quantized_itself():
    with pytest.raises(CompileError, match=r"node 'n7' \(ConvAdd\): made by the back end"):
        OP_TABLE.get("ConvAdd").quantize(None, Node("ConvAdd", "n7", ["x"], ["y"], {}))


def test_fused_with_a_channel_mapped_skip():
    """The skip is a Concat of 5 + 8 channels (gap lanes): the conv writes its output in that
    map (``remap_output``) before it fuses; the lanes graph and the logical one fuse alike."""
    g = B((1, 6, 7, 7), seed=13)
    a = g.conv(g.x, 5, 1, zp=3, scale=0.05)
    b = g.conv(g.x, 8, 3, p=1, relu=True, zp=3, scale=0.05)
    c = g.concat([a, b])
    r = g.conv(g.conv(c, 13, 3, p=1, relu=True), 13, 1)
    y = g.add(r, c)
    b_ = check(g.graph([y]), g.input())
    (L,) = _fused(b_)
    assert L["fused"] == ["conv4", "add5"] and L["macs"] == 13 * 13 * 49
