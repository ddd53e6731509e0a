"""Channels-last inputs (tpucompile.frontend.nhwc_input): a tf2onnx-style model whose (1, H, W, C)
input is read only by a Transpose to NCHW becomes the NCHW model after it (the same FP32 results on
the transposed data), compiles with its channels-last flatten before the Dense as one Conv, and
runs golden = SimPy from the built-in photographs or a user's NHWC --input file."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx, load_model
from tpucompile.frontend.nhwc_input import input_layout, nchw_input_model, to_model_layout
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def _fp32(model, x):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def test_the_nchw_model_computes_the_same_on_the_transposed_input():
    model = qnets.nhwc_classifier()
    m = nchw_input_model(model)
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 16, 16]
    assert "to_nchw" not in {n.name for n in m.graph.node} and m.graph.node[0].input[0] == "x"
    assert input_layout(m) == {"name": "x", "layout": "NHWC", "shape": [1, 16, 16, 3]}
    x = np.random.default_rng(0).normal(0, 1, (1, 16, 16, 3)).astype(np.float32)
    assert np.allclose(_fp32(model, x), _fp32(m, to_model_layout(x, input_layout(m))), atol=1e-6)
    assert to_model_layout(x[0], input_layout(m)).shape == (1, 3, 16, 16)


def test_other_inputs_are_left_alone():
    plain = qnets.conv_bn_relu()
    assert nchw_input_model(plain) is plain
    model = qnets.nhwc_classifier()
    next(n for n in model.graph.node if n.name == "to_nchw").attribute[0].ints[:] = [0, 3, 2, 1]
    assert nchw_input_model(model) is model


def test_nhwc_model_file_runs_bit_exact_with_photos_and_a_user_file(tmp_path):
    path = tmp_path / "nhwc.onnx"
    onnx.save(qnets.nhwc_classifier(), path)
    assert input_layout(load_model(path)) is not None
    v = run(str(path), "small", tmp_path / "photo", rtl=False, calib=4)
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
    layers = TpuBinary.read(tmp_path / "photo" / "nhwc.tpubin").meta["layers"]
    dense = next(L for L in layers if L["name"] == "dense")
    assert dense["op"] == "QConv" and dense["macs"] == 8 * 8 * 12 * 10      # an 8x8 kernel on the map itself
    x = np.random.default_rng(3).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    v = run(str(path), "small", tmp_path / "file", rtl=False, calib=4, input_path=str(tmp_path / "x.npy"))
    assert v.passed and v.accuracy["cosine"] > 0.99, v.accuracy
    ref = _fp32(qnets.nhwc_classifier(), x)               # the original model on the NHWC array
    assert int(np.argmax(ref)) == v.accuracy["top1_fp32"]


def test_an_input_transpose_left_on_the_device_is_refused_saying_why(tmp_path):
    """The input also read by another node: not converted; the Transpose's refusal says when the
    host does it."""
    model = qnets.nhwc_classifier()
    model.graph.node.append(helper.make_node("Relu", ["x"], ["xr"], name="other_reader"))
    model.graph.output.append(helper.make_tensor_value_info("xr", 1, None))
    m = load_model_from(model, tmp_path)
    with pytest.raises(CompileError, match=r"node 'to_nchw' \(Transpose perm \[0, 3, 1, 2\]\): the channels-last "
                                           r"input's Transpose to NCHW runs on the host only when every reader"):
        compile_onnx(m, load_config("small"), [np.zeros((1, 16, 16, 3), np.float32)])


def load_model_from(model, tmp_path):
    onnx.save(model, tmp_path / "m.onnx")
    return load_model(tmp_path / "m.onnx")
