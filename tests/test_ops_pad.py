"""Pad (tpucompile.ops.pad): a zero Pad of H and W before a Conv is absorbed into its padding
(opset 13 pads as an input, opset 9 as attributes), bit-exact and close to onnxruntime; other
constant Pads of H and W are a device copy (QPad); the rest is refused naming the node; Pads of
constants fold."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ops.pad import pad_code
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def _pad_conv(opset=13, value=0.0, mode="constant", pads=(0, 0, 1, 2, 0, 0, 2, 1), group=1):
    rng = np.random.default_rng(0)
    c = 6
    inits = {"w": qnets.conv_w(rng, c if group > 1 else 8, c // group, 3)}
    n = helper.make_node
    if opset >= 11:
        inits["p"] = np.array(pads, np.int64)
        ins = ["x", "p"] + (["v"] if value else [])
        if value:
            inits["v"] = np.float32(value)
        pad = n("Pad", ins, ["xp"], name="pad", mode=mode)
    else:
        pad = n("Pad", ["x"], ["xp"], name="pad", mode=mode, pads=list(pads), value=value)
    nodes = [pad, n("Conv", ["xp", "w"], ["y"], name="conv", pads=[1, 0, 0, 1], group=group),
             n("Relu", ["y"], ["yr"], name="relu")]
    h = 9 + pads[2] + pads[6] + 1 - 2
    w = 10 + pads[3] + pads[7] + 1 - 2
    return qnets.make_model(nodes, inits, (1, c, 9, 10), "yr", (1, c if group > 1 else 8, h, w), opset=opset)


@pytest.mark.parametrize("opset, group", [(13, 1), (9, 1), (13, 6)])
def test_zero_pad_before_a_conv_is_its_padding(opset, group, tmp_path):
    model = _pad_conv(opset=opset, group=group)
    g = run_passes(import_onnx(model))
    conv = next(nd for nd in g.nodes if nd.name == "conv")
    assert "Pad" not in {nd.op for nd in g.nodes} and conv.inputs[0] == "x"
    assert conv.attrs["pads"] == (1 + 1, 0 + 2, 0 + 2, 1 + 1)       # (top, left, bottom, right)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=4)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="pc")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("value, pads, opset", [
    (1.0, (0, 0, 1, 2, 0, 0, 2, 1), 13),      # the Conv's own padding (zeros) around a Pad of 1
    (-0.5, (0, 0, 0, 5, 0, 0, 3, 0), 11),     # left offset 5: not a DDR granule on 'small'
    (2.0, (0, 0, 2, 0, 0, 0, 0, 0), 9),       # rows only: tiles without padding are plain copies
])
def test_a_pad_with_a_value_is_a_device_copy(value, pads, opset, tmp_path):
    """Not absorbed into the Conv (its padding is 0): a QPad (LUT of the pad value, LOAD at the
    offset, STORE), against onnxruntime, golden = SimPy on every layer."""
    model = _pad_conv(value=value, pads=pads, opset=opset)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=4)
    kinds = [L["op"] for L in compile_onnx(model, load_config("small"), xs).binary.meta["layers"]]
    assert kinds == ["QPad", "QConv"], kinds
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="pv")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


def test_pad_value_is_rounded_to_the_input_grid_and_infinity_saturates():
    assert pad_code(1.0, 0.1, -3) == 7 and pad_code(0.049, 0.1, 0) == 0 and pad_code(0.05, 0.1, 0) == 1
    assert pad_code(-np.inf, 0.1, 5) == -128 and pad_code(1e9, 0.1, 5) == 127


def test_lowest_float_pad_before_a_max_pool(tmp_path):
    """A SAME max pool written as Pad(lowest float32) + MaxPool VALID: the pad is -128, the pool's identity."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Pad", ["c", "p", "v"], ["cp"], name="pad"),
             n("MaxPool", ["cp"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2])]
    inits = {"w": qnets.conv_w(rng, 5, 3, 1), "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
             "v": np.float32(np.finfo(np.float32).min)}
    model = qnets.make_model(nodes, inits, (1, 3, 9, 9), "y", None)
    xs = qnets.inputs((1, 3, 9, 9), 3, seed=4)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="mp")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("pads, msg", [
    ((0, 1, 0, 0, 0, 0, 0, 0), r"pads \[0, 1, 0, 0, 0, 0, 0, 0\] are not non-negative pads of H and W"),
    ((0, 0, -1, 0, 0, 0, 0, 0), r"pads \[0, 0, -1, 0, 0, 0, 0, 0\] are not non-negative pads of H and W"),
])
def test_a_pad_of_channels_or_a_crop_is_refused_naming_node_and_pads(pads, msg):
    model = _conv_pad(pads)
    with pytest.raises(CompileError, match=r"node 'pad' \(Pad\): " + msg):
        compile_onnx(model, load_config("small"), qnets.inputs(qnets.in_shape(model), 2, seed=4))


def _conv_pad(pads, value=1.5):
    """Conv 1x1 (3 -> 5) then a Pad that is the graph output."""
    n = helper.make_node
    inits = {"w": qnets.conv_w(np.random.default_rng(3), 5, 3, 1), "p": np.array(pads, np.int64),
             "v": np.float32(value)}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Pad", ["c", "p", "v"], ["y"], name="pad")]
    return qnets.make_model(nodes, inits, (1, 3, 6, 7), "y", None)


def test_a_pad_as_the_graph_output(tmp_path):
    model = _conv_pad((0, 0, 3, 1, 0, 0, 0, 6), value=-1.5)
    xs = qnets.inputs((1, 3, 6, 7), 3, seed=4)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="po")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


def test_wrap_mode_is_refused_at_import():
    with pytest.raises(CompileError, match=r"node 'pad' \(Pad\): attribute mode='wrap' unsupported \(only constant, "
                                           r"edge and reflect\)"):
        import_onnx(_pad_conv(mode="wrap"))


def _self_pad(pads, mode):
    rng = np.random.default_rng(3)
    n = helper.make_node
    inits = {"w": qnets.conv_w(rng, 5, 3, 1), "p": np.array(pads, np.int64), "w2": qnets.conv_w(rng, 4, 5, 3)}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Pad", ["c", "p"], ["cp"], name="pad", mode=mode),
             n("Conv", ["cp", "w2"], ["y"], name="conv2")]
    return qnets.make_model(nodes, inits, (1, 3, 6, 7), "y", None)


@pytest.mark.parametrize("mode", ["edge", "reflect"])
@pytest.mark.parametrize("hw, pads", [("small", (0, 0, 1, 2, 0, 0, 2, 1)), ("small", (0, 0, 0, 0, 0, 0, 3, 5)),
                                      ("medium", (0, 0, 3, 1, 0, 0, 0, 2))])
def test_edge_and_reflect_modes_copy_border_pixels(hw, pads, mode, tmp_path):
    """Pad mode edge / reflect before a Conv: QSpatialSlice copies of the source columns, a
    QEdgePad (DMAs of the input rows and of each pad column, repeated rows by a zero DDR stride)."""
    model = _self_pad(pads, mode)
    xs = qnets.inputs((1, 3, 6, 7), 3, seed=1)
    v = run(model, hw, tmp_path, rtl=False, data=(xs[0], xs[1:]), name="e")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


def test_a_reflect_pad_as_wide_as_its_axis_is_refused_naming_node_and_pads():
    model = _self_pad((0, 0, 0, 7, 0, 0, 0, 0), "reflect")
    with pytest.raises(CompileError, match=r"node 'pad' \(Pad, reflect\): pads \[0, 7, 0, 0\] \(top, left, bottom, "
                                           r"right\) of a 6 x 7 map; a reflect pad must be smaller than its axis"):
        compile_onnx(model, load_config("small"), qnets.inputs((1, 3, 6, 7), 2, seed=4))
