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
