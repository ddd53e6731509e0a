"""LayerNormalization over the channels on the vector unit (tpucompile.ops.layernorm, LAYERNORM)
on 'small': the channels-last Transpose sandwich and the (1, C, 1, 1) form, golden == SimPy on
every layer, against onnxruntime FP32; gamma/beta/eps quantization; golden against float within
the documented bound; refusals naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.golden import run_golden
from tpucompile.ops.layernorm import QLayerNorm, ln_quantize_params
from tpucompile.qgraph import QGraph, QTensor
from tpucompile.quantize.quantize import compile_model
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

CFG = load_config("small")


def _sandwich(c: int, hw=(5, 6)):
    """Conv 3 -> c, Transpose to channels last, LayerNormalization(axis -1), Transpose back, Conv -> 4."""
    rng = np.random.default_rng(1)
    inits = {"w": qnets.conv_w(rng, c, 3, 1) * 4, "w2": qnets.conv_w(rng, 4, c, 1),
             "g": rng.normal(1, 0.3, c).astype(np.float32), "b": rng.normal(0, 0.2, c).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Transpose", ["c"], ["ct"], name="to_nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["ct", "g", "b"], ["n"], name="ln", axis=-1, epsilon=1e-5),
             helper.make_node("Transpose", ["n"], ["nt"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["nt", "w2"], ["y"], name="conv2")]
    return qnets.make_model(nodes, inits, (1, 3) + hw, "y", (1, 4) + hw, opset=17)


@pytest.mark.parametrize("c", [5, 8, 24, 96])
def test_channels_last_layernorm_is_one_layernorm_bit_exact_and_close_to_onnxruntime(c, tmp_path):
    model = _sandwich(c)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=f"ln{c}")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    r = compile_onnx(model, CFG, xs[1:])
    assert [type(op).__name__ for op in r.qgraph.ops] == ["QConv", "QLayerNorm", "QConv"]
    ln = r.qgraph.ops[1]
    assert ln.name == "ln" and ln.inp == "c" and ln.out == "nt"
    assert r.binary.meta["stats"]["by_opcode"]["LAYERNORM"] >= 1


def test_layernorm_of_a_pooled_vector(tmp_path):
    """GlobalAveragePool -> LayerNormalization(axis 1) on (1, C, 1, 1) -> Conv."""
    rng = np.random.default_rng(2)
    c = 12
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
             helper.make_node("LayerNormalization", ["p", "g", "b"], ["n"], name="ln", axis=1),
             helper.make_node("Conv", ["n", "w2"], ["y"], name="head")]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, c, 3, 3), "w2": qnets.conv_w(rng, 5, c, 1),
                                     "g": rng.normal(1, 0.2, (c, 1, 1)).astype(np.float32),
                                     "b": rng.normal(0, 0.1, (c, 1, 1)).astype(np.float32)},
                             (1, 3, 6, 6), "y", (1, 5, 1, 1), opset=17)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="lngap")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


def test_gamma_beta_and_eps_quantization():
    g, b, eps, mult, shift = ln_quantize_params(np.array([0.5, -2.0, 1.0]), np.array([0.1, 0.0, -0.3]), 1e-5, 3,
                                                0.05, 0.02)
    s_g = 2.0 / 32767
    assert g.dtype == np.int16 and list(g) == [round(0.5 / s_g), -32767, round(1.0 / s_g)]
    assert b.dtype == np.int32 and list(b) == [round(0.1 / (s_g / 4096)), 0, round(-0.3 / (s_g / 4096))]
    assert eps == round(1e-5 * 9 / 0.05 ** 2 * 2 ** 16)
    with pytest.raises(ValueError, match="outside its 48-bit field"):
        ln_quantize_params(np.ones(4), None, 10.0, 768, 1e-4, 0.02)


def test_golden_is_within_the_documented_bound_of_float_layernorm():
    """QLayerNorm's golden per pixel over C against float LayerNorm of the same int8 input with the
    quantized gamma/beta: <= 0.55 output LSB (docs/integer_nonlinear.md)."""
    rng = np.random.default_rng(5)
    for c, s_in, s_out in ((7, 0.1, 0.02), (24, 0.05, 0.03), (96, 0.01, 0.05)):
        x = rng.integers(-128, 128, (1, c, 2, 3)).astype(np.int8)
        gamma, beta = rng.normal(1, 0.3, c), rng.normal(0, 0.3, c)
        g, b, eps, m, s = ln_quantize_params(gamma, beta, 1e-5, c, s_in, s_out)
        op = QLayerNorm("ln", "x", "y", g, b, eps, m, s, 3)
        qg = QGraph({"x": QTensor("x", x.shape, s_in, -4), "y": QTensor("y", x.shape, s_out, 3)}, [op], ["x"], ["y"])
        y = run_golden(qg, x)["y"].astype(np.float64)
        s_g = np.abs(gamma).max() / 32767
        xf = s_in * (x.astype(np.float64) + 4)
        mu, var = xf.mean(axis=1, keepdims=True), xf.var(axis=1, keepdims=True)
        gq = g.astype(np.float64)[None, :, None, None] * s_g
        bq = b.astype(np.float64)[None, :, None, None] * s_g / 4096
        want = np.clip(((xf - mu) / np.sqrt(var + 1e-5) * gq + bq) / s_out + 3, -128, 127)
        assert np.abs(y - want).max() <= 0.55, (c, np.abs(y - want).max())


def test_layernorm_over_the_last_axis_of_nchw_is_refused_naming_the_node():
    """LayerNormalization(axis -1) straight on an NCHW tensor normalises W, not the channels."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("LayerNormalization", ["c", "g"], ["y"], name="ln", axis=-1)]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 8, 3, 1), "g": np.ones(6, np.float32)}, (1, 3, 5, 6),
                             "y", (1, 8, 5, 6), opset=17)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=1)
    with pytest.raises(CompileError, match=r"node 'ln' \(LayerNormalization\): axis -1 of \(1, 8, 5, 6\) does not "
                                           r"normalise the channels"):
        compile_model(model, xs)


def test_unsupported_attributes_and_outputs_are_refused_naming_the_node():
    model = _sandwich(8)
    model.graph.node[2].attribute.append(helper.make_attribute("stash_type", 0))
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=1)
    with pytest.raises(CompileError, match=r"node 'ln'.*stash_type"):
        compile_model(model, xs)


def _sequence(c=24, length=10, sm_axis=1):
    """A (1, 4, L) sequence model: Conv1d 4 -> c, per-token LayerNorm written with rank-3
    Transposes (0, 2, 1), Softmax over the channels, Conv1d c -> 6 (frontend/lift_1d)."""
    from onnx import TensorProto, numpy_helper
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="proj", kernel_shape=[1]),
             n("Transpose", ["c"], ["t"], name="t1", perm=[0, 2, 1]),
             n("LayerNormalization", ["t", "g", "b"], ["l"], name="ln", axis=-1),
             n("Transpose", ["l"], ["u"], name="t2", perm=[0, 2, 1]),
             n("Softmax", ["u"], ["s"], name="sm", axis=sm_axis),
             n("Conv", ["s", "w2"], ["y"], name="out", kernel_shape=[1])]
    inits = {"w": rng.normal(0, 1, (c, 4, 1)), "g": rng.normal(1, .2, c), "b": rng.normal(0, .2, c),
             "w2": rng.normal(0, .3, (6, c, 1))}
    g = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, length])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, length])],
                          [numpy_helper.from_array(a.astype(np.float32), k) for k, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_per_token_layernorm_and_softmax_of_a_sequence_model(tmp_path):
    """Rank-3 (1, C, L): the Transpose(0, 2, 1) sandwich becomes one LAYERNORM, the Softmax over
    the channels a SOFTMAX; golden == SimPy, close to onnxruntime."""
    rng = np.random.default_rng(1)
    xs = [rng.normal(0, 1, (1, 4, 10)).astype(np.float32) for _ in range(17)]
    v = run(_sequence(), "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="seq")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    qg, _ = compile_model(_sequence(), xs[1:])
    assert [type(op).__name__ for op in qg.ops] == ["QConv", "QLayerNorm", "QSoftmax", "QConv"]


def test_a_sequence_softmax_over_the_length_is_refused_naming_the_node():
    rng = np.random.default_rng(1)
    xs = [rng.normal(0, 1, (1, 4, 10)).astype(np.float32) for _ in range(2)]
    with pytest.raises(CompileError, match=r"node 'sm' \(Softmax\) reads the 3-D tensor 'u'"):
        compile_model(_sequence(sm_axis=-1), xs)


def test_scale_or_bias_of_the_wrong_size_is_refused_naming_the_node():
    """Scale / B with neither 1 nor C values (onnxruntime refuses such a model first, but the
    quantizer's own check names the node and shape rather than raising numpy's ValueError)."""
    from tpucompile.ir import Node
    from tpucompile.ops.layernorm import _per_channel
    node = Node("LayerNormalization", "ln", ["x", "g", "b"], ["y"], {})
    assert list(_per_channel(node, "Scale", np.float32(2), 3)) == [2, 2, 2]
    with pytest.raises(CompileError, match=r"node 'ln' \(LayerNormalization\): B 'b' of shape \(2,\) has 2 values for "
                                           r"8 channels \(1 or 8 expected\)"):
        _per_channel(node, "B", np.zeros(2), 8)
