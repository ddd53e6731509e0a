"""Transformer token inputs (tpucompile.frontend.token_input): a (1, T, C) encoder block as Hugging
Face exports it (LayerNorm, Linears as MatMul + Add, Erf GELU, residual Add, Softmax over the
features) compiled as its (1, C, T) network on 'small': golden == SimPy on every layer, close to
onnxruntime on the original model; the attention's Reshape is refused naming the node."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tpucompile.frontend.nhwc_input import input_layout, to_model_layout
from tpucompile.frontend.token_input import channels_first_tokens_model
from tpucompile.quantize.quantize import compile_model
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

T, C, F = 12, 16, 32


def _ffn_block(attention_reshape: bool = False, seed: int = 0, bias_node: bool = False):
    """x (1, T, C) -> LayerNorm -> Linear C->F -> Erf GELU -> Linear F->C -> + residual ->
    LayerNorm -> Softmax over the features -> y (1, T, C)."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits = {"g0": 1 + rng.normal(0, .05, C), "b0": rng.normal(0, .02, C), "w1": rng.normal(0, C ** -.5, (C, F)),
             "c1": rng.normal(0, .02, F), "w2": rng.normal(0, F ** -.5, (F, C)), "c2": rng.normal(0, .02, C),
             "g1": 1 + rng.normal(0, .05, C), "b1": rng.normal(0, .02, C), "r2": np.float32(np.sqrt(2)),
             "one": np.float32(1), "half": np.float32(.5)}
    nodes = [n("LayerNormalization", ["x", "g0", "b0"], ["h0"], name="ln0", axis=-1, epsilon=1e-12),
             n("MatMul", ["h0", "w1"], ["m1"], name="fc1"), n("Add", ["c1", "m1"], ["a1"], name="fc1_bias"),
             n("Div", ["a1", "r2"], ["d"], name="gelu_div"), n("Erf", ["d"], ["e"], name="gelu_erf"),
             n("Add", ["e", "one"], ["e1"], name="gelu_add"), n("Mul", ["a1", "e1"], ["p"], name="gelu_mul"),
             n("Mul", ["p", "half"], ["gl"], name="gelu_half"),
             n("MatMul", ["gl", "w2"], ["m2"], name="fc2"), n("Add", ["m2", "c2"], ["a2"], name="fc2_bias"),
             n("Add", ["a2", "h0"], ["r"], name="residual"),
             n("LayerNormalization", ["r", "g1", "b1"], ["h1"], name="ln1", axis=-1, epsilon=1e-12),
             n("Softmax", ["h1"], ["y"], name="sm", axis=-1)]
    if bias_node:                    # fc2's bias from a Constant node, as some exporters write it
        nodes.insert(0, n("Constant", [], ["c2"], name="c2_const",
                          value=numpy_helper.from_array(np.asarray(inits.pop("c2"), np.float32))))
    if attention_reshape:
        inits["shape"] = np.array([1, T, 2, C // 2], np.int64)
        nodes.append(n("Reshape", ["y", "shape"], ["heads"], name="to_heads"))
    out = ("heads", [1, T, 2, C // 2]) if attention_reshape else ("y", [1, T, C])
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, C])],
                          [helper.make_tensor_value_info(out[0], TensorProto.FLOAT, out[1])],
                          [numpy_helper.from_array(np.asarray(v, np.int64 if k == "shape" else np.float32), k)
                           for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def token_ffn():
    """The FFN block as the compiler takes it ((1, C, T); tests/test_cosim_rtl.py)."""
    return channels_first_tokens_model(_ffn_block())


@pytest.mark.parametrize("bias_node", [False, True])
def test_the_rewrite_equals_the_original_model(bias_node):
    """Per-feature constants become (C, 1) on the (1, C, T) model whether they are initializers or
    come from Constant nodes (one left (C,) would broadcast along the tokens)."""
    m = _ffn_block(bias_node=bias_node)
    m2 = channels_first_tokens_model(m)
    x = np.random.default_rng(1).normal(0, 1, (1, T, C)).astype(np.float32)
    lay = input_layout(m2)
    assert lay["layout"] == "NTC" and lay["shape"] == [1, T, C]
    y = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    y2 = ort.InferenceSession(m2.SerializeToString()).run(None, {"x": to_model_layout(x, lay)})[0]
    np.testing.assert_allclose(y2, y.transpose(0, 2, 1), atol=1e-5)
    assert Counter(nd.op_type for nd in m2.graph.node)["Conv"] == 2
    used = {i for nd in m2.graph.node for i in nd.input}       # no stale Linear weight (onnxruntime's
    assert all(t.name in used for t in m2.graph.initializer)    # optimizer failed on one at BERT-base size)


def test_an_encoder_ffn_block_compiles_to_the_row_ops_bit_exact(tmp_path):
    m2 = channels_first_tokens_model(_ffn_block())
    rng = np.random.default_rng(2)
    xs = [to_model_layout(rng.normal(0, 1, (1, T, C)).astype(np.float32), input_layout(m2)) for _ in range(9)]
    v = run(m2, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="ffn")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.98, v.accuracy
    qg, _ = compile_model(m2, xs[1:])
    assert [type(op).__name__ for op in qg.ops] == ["QLayerNorm", "QConv", "QLut", "QConv", "QAdd", "QLayerNorm"]
    assert [h["op"] for h in qg.host_ops] == ["Softmax"]           # the graph's final Softmax: the host


def test_the_attention_reshape_is_refused_naming_the_node():
    with pytest.raises(CompileError, match=r"node 'to_heads' \(Reshape\) reads the token tensor 'y'"):
        channels_first_tokens_model(_ffn_block(attention_reshape=True))


def test_a_conv1d_sequence_model_is_left_alone():
    from tests import qnets
    m = qnets.make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[1])],
                         {"w": np.ones((4, 3, 1), np.float32)}, (1, 3, 10), "y", (1, 4, 10), opset=13)
    assert channels_first_tokens_model(m) is m
