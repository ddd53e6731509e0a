"""Pad (tpucompile.ops.pad): a zero Pad of H and W before a Conv is absorbed into its padding
(opset 13 pads as an input, opset 9 as attributes), bit-exact and close to onnxruntime; other
Pads are refused naming the node; Pads of constants fold."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.frontend.onnx_import import import_onnx
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


def test_a_pad_not_absorbed_is_refused_naming_the_node():
    """Value 1 (not the Conv's 0): the Pad stays and has no int8 mapping."""
    model = _pad_conv(value=1.0)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=4)
    with pytest.raises(CompileError, match=r"node 'pad' \(Pad\): not absorbed into a Conv's padding \(it pads "
                                           r"with 1, not 0\)"):
        compile_onnx(model, load_config("small"), xs)


def test_reflect_mode_is_refused_at_import():
    with pytest.raises(CompileError, match=r"node 'pad' \(Pad\): attribute mode='reflect' unsupported \(only constant\)"):
        import_onnx(_pad_conv(mode="reflect"))
