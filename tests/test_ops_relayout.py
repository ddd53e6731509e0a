"""Reshapes and Transposes done as copies into a new layout (tpucompile.ops.relayout): a Reshape
that keeps C and regroups the pixels (QRegroup: DMA only) and a Transpose swapping H and W
(QSpatialTranspose: a transposed POOL read), against onnxruntime, golden = SimPy; the forms that
move values across channels refused naming the node and the shapes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.ops.relayout import is_regroup
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def test_regroup_keeps_c_and_the_pixel_count():
    assert is_regroup((1, 6, 4, 6), (1, 6, 3, 8)) and is_regroup((1, 6, 4, 6), (1, 6, 1, 24))
    assert not is_regroup((1, 6, 4, 6), (1, 12, 2, 6)) and not is_regroup((1, 6, 4, 6), (1, 6, 4, 6))
    assert not is_regroup((1, 6, 4, 6), (1, 6, 24))


@pytest.mark.parametrize("hw", ["small", "medium"])
def test_reshape_and_transpose_copies_mid_graph(hw, tmp_path):
    """qnets.relayout_net: rows of 6 regrouped into rows of 8, H and W swapped, a token sequence;
    on 'small' the transpose's tiles start off the DDR granule."""
    model = qnets.relayout_net()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=1)
    v = run(model, hw, tmp_path, rtl=False, data=(xs[0], xs[1:]), name="rl")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
    ops = [(L["name"], L["op"]) for L in TpuBinary.read(tmp_path / "rl.tpubin").meta["layers"]]
    assert [o for o in ops if o[1] in ("QRegroup", "QSpatialTranspose")] == [
        ("rows8", "QRegroup"), ("swap_hw", "QSpatialTranspose"), ("tokens", "QRegroup")]


def test_a_large_transpose_tiles(tmp_path):
    """A 1x1 Conv (3 -> 20) on 20 x 36 and its H-W transpose: several tiles and blocks on 'small'."""
    rng = np.random.default_rng(2)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Transpose", ["c"], ["y"], name="t", perm=[0, 1, 3, 2])]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 20, 3, 1)}, (1, 3, 20, 36), "y", None)
    xs = qnets.inputs((1, 3, 20, 36), 3, seed=1)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="t")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


def _after_conv(node, shape_const=None):
    rng = np.random.default_rng(3)
    inits = {"w": qnets.conv_w(rng, 6, 3, 1)}
    if shape_const is not None:
        inits["s"] = np.array(shape_const, np.int64)
    return qnets.make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), node], inits,
                            (1, 3, 4, 6), "y", None)


@pytest.mark.parametrize("model, msg", [
    (_after_conv(helper.make_node("Reshape", ["c", "s"], ["y"], name="fold"), [1, 12, 2, 6]),
     r"node 'fold' \(Reshape\): a Reshape of the activation 'c' from \(1, 6, 4, 6\) to \(1, 12, 2, 6\) moves "
     r"values across channels"),
    (_after_conv(helper.make_node("Transpose", ["c"], ["y"], name="nhwc", perm=[0, 2, 3, 1])),
     r"node 'nhwc' \(Transpose perm \[0, 2, 3, 1\]\): a Transpose of an activation maps only as .* or a copy "
     r"swapping H and W \(perm \[0, 1, 3, 2\]\); any other moves values across channels"),
])
def test_layouts_across_channels_are_refused_naming_node_and_shapes(model, msg):
    with pytest.raises(CompileError, match=msg):
        compile_onnx(model, load_config("small"), qnets.inputs((1, 3, 4, 6), 2, seed=1))


def test_a_regroup_whose_rows_share_no_short_period(tmp_path):
    """(1, 20, 30, 41) -> (1, 20, 41, 30): lcm(41, 30) = 1230 pixels would not fit two slots of
    'small' (2048 words); tiles of output rows load the input rows holding them."""
    rng = np.random.default_rng(2)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Reshape", ["c", "s"], ["y"], name="rs")]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 20, 3, 1), "s": np.array([1, 20, 41, 30], np.int64)},
                             (1, 3, 30, 41), "y", None)
    xs = qnets.inputs((1, 3, 30, 41), 3, seed=1)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="rs")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
