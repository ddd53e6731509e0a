"""LRN (tpucompile.ops.lrn): the float definition against onnxruntime, the device decomposition
(LUT x^2, band 1x1 Conv, LUT power, MUL) golden = SimPy and close to FP32, and its refusals."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ops.lrn import band_weights, lrn_float
from tpusim.arch.binary import TpuBinary
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


@pytest.mark.parametrize("size", [1, 3, 5, 7])     # onnxruntime accepts odd sizes only
def test_float_lrn_matches_onnxruntime(size):
    attrs = {"size": size, "alpha": 0.3, "beta": 0.6, "bias": 1.5}
    m = qnets.make_model([helper.make_node("LRN", ["x"], ["y"], name="n", **attrs)], {}, (1, 7, 3, 4), "y", None)
    x = np.random.default_rng(size).normal(0, 2, (1, 7, 3, 4)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(lrn_float(x, attrs), ref, rtol=2e-5, atol=1e-6)


def test_band_weights_follow_the_onnx_window():
    w = band_weights(5, 4, 1.0)[:, :, 0, 0]      # c - 1 <= i <= c + 2
    assert w.astype(int).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [0, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]


def test_lrn_net_is_four_device_ops_per_lrn_bit_exact(tmp_path):
    model = qnets.lrn_net()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=5)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="lrn")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    ops = [L["op"] for L in TpuBinary.read(tmp_path / "lrn.tpubin").meta["layers"]]
    assert ops == ["QConv", "QLut", "QConv", "QLut", "QMul", "QMaxPool", "QConv", "QLut", "QConv", "QLut", "QMul"]


@pytest.mark.parametrize("attrs, msg", [
    ({"size": 3, "bias": 0.0}, "node 'n' (LRN): attribute bias=0.0 must be > 0"),
    ({"size": 0}, "node 'n' (LRN): attribute size=0 must be >= 1"),
])
def test_bad_attributes_are_refused_naming_node_and_value(attrs, msg):
    m = qnets.make_model([helper.make_node("LRN", ["x"], ["y"], name="n", **attrs)], {}, (1, 4, 3, 3), "y", None)
    with pytest.raises(CompileError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        import_onnx(m)


def _torch_lrn_chain(size: int, pads=None, c=6):
    """torch's F.local_response_norm as its dynamo exporter writes it (torch 2.13; the fixture
    lrn_12.dynamo.onnx is the real export): Conv, Mul(x, x), Reshape to 5-D, Pad of axis 2,
    AveragePool (size, 1, 1), Squeeze, Mul alpha, Add k, Pow beta, Div."""
    rng = np.random.default_rng(4)
    n = helper.make_node
    lo = size // 2
    inits = {"w": qnets.conv_w(rng, c, 3, 3), "shape5": np.array([1, 1, c, 5, -1], np.int64),
             "pads": np.array(pads or [0, 0, lo, 0, 0, 0, 0, (size - 1) // 2, 0, 0], np.int64),
             "axis1": np.array([1], np.int64), "alpha": np.float32(0.02), "k": np.float32(1.5), "beta": np.float32(0.7)}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), n("Mul", ["c", "c"], ["sq"], name="sq"),
             n("Reshape", ["sq", "shape5"], ["v5"], name="view"), n("Pad", ["v5", "pads"], ["p5"], name="pad"),
             n("AveragePool", ["p5"], ["a5"], name="avg", kernel_shape=[size, 1, 1], strides=[1, 1, 1]),
             n("Squeeze", ["a5", "axis1"], ["a4"], name="squeeze"), n("Mul", ["a4", "alpha"], ["m"], name="scale"),
             n("Add", ["m", "k"], ["d"], name="bias"), n("Pow", ["d", "beta"], ["pw"], name="pow"),
             n("Div", ["c", "pw"], ["y"], name="div")]
    return qnets.make_model(nodes, inits, (1, 3, 5, 5), "y", None, opset=18)


def test_torch_lrn_chain_becomes_one_lrn(tmp_path):
    g = import_onnx(_torch_lrn_chain(5))
    assert [nd.op for nd in g.nodes] == ["Conv", "LRN"]
    lrn = g.nodes[1]
    assert lrn.name == "div" and lrn.inputs == ["c"] and lrn.outputs == ["y"]
    assert lrn.attrs["size"] == 5 and np.isclose(lrn.attrs["alpha"], 0.02) and np.isclose(lrn.attrs["bias"], 1.5)
    xs = qnets.inputs((1, 3, 5, 5), 3, seed=2)
    v = run(_torch_lrn_chain(5), "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="tl")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("size, pads", [(4, None), (5, [0, 0, 1, 0, 0, 0, 0, 3, 0, 0])])
def test_torch_lrn_chain_with_another_window_is_left_alone(size, pads):
    """An even size (torch's window is one channel off ONNX's) or pads that are not the
    centred window: not an LRN; the 3-D AveragePool is refused by name as before."""
    with pytest.raises(CompileError, match=rf"node 'avg' \(AveragePool\): attribute kernel_shape=\[{size}, 1, 1\] "
                                           r"unsupported \(only 2-D\)"):
        import_onnx(_torch_lrn_chain(size, pads))
