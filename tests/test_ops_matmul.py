"""MatMul by a constant (tpucompile.ops.gemm): a (1, K) activation times a constant (K, N) is the
fully-connected layer (a Conv on the (1, K, 1, 1) view); a following bias Add, BatchNorm or Mul
folds into it (passes/fold_affine), also after a Gemm; golden = SimPy, close to onnxruntime;
MatMuls with no device mapping refused naming the node."""
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


def test_dense_layers_fold_into_one_conv_each():
    g = run_passes(import_onnx(qnets.dense_mlp()))
    convs = [nd for nd in g.nodes if nd.op == "Conv"]
    assert [c.name for c in convs] == ["dense1", "dense2"] and convs[0].attrs["relu"]
    assert not {"MatMul", "Add", "BatchNormalization", "Gemm"} & {nd.op for nd in g.nodes}


def test_dense_mlp_bit_exact_and_close_to_fp32(tmp_path):
    model = qnets.dense_mlp()
    xs = qnets.inputs((1, 64), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="mlp")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99 and v.accuracy["top1_agree"], v.accuracy


def test_gemm_then_bias_add_and_mul_fold(tmp_path):
    """A Gemm without bias, then Add of a (10,) constant and Mul by a scalar: one layer."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    inits = {"w": rng.normal(0, 0.2, (10, 16)).astype(np.float32), "b": rng.normal(0, 0.1, 10).astype(np.float32),
             "two": np.array(2.0, np.float32)}
    nodes = [n("Gemm", ["x", "w"], ["g"], name="fc", transB=1), n("Add", ["g", "b"], ["a"], name="bias"),
             n("Mul", ["two", "a"], ["y"], name="scale")]
    model = qnets.make_model(nodes, inits, (1, 16), "y", (1, 10))
    g = run_passes(import_onnx(model))
    assert [nd.op for nd in g.nodes if nd.op != "Alias"] == ["Conv"]
    xs = qnets.inputs((1, 16), 9, seed=4)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="fc")
    assert v.passed and v.accuracy["cosine"] > 0.99, v.accuracy


def _matmul(a_shape, b_const: bool, a_const=False):
    rng = np.random.default_rng(5)
    inits = {}
    ins = ["x", "w"]
    if b_const:
        inits["w"] = rng.normal(0, 0.2, (a_shape[-1], 6)).astype(np.float32)
    if a_const:
        inits["c"] = rng.normal(0, 0.2, (6, a_shape[0] if len(a_shape) == 2 else 4)).astype(np.float32)
        ins = ["c", "x"]
    nodes = [helper.make_node("Relu", ["x0"], ["x"], name="relu")]
    if not b_const and not a_const:
        ins = ["x", "xt"]
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[1, 0]))
    nodes.append(helper.make_node("MatMul", ins, ["y"], name="mm"))
    return qnets.make_model(nodes, inits, a_shape, "y", None, in_name="x0")


@pytest.mark.parametrize("shape, b_const, a_const, msg", [
    ((1, 8), False, False, r"a product of two activations has no device mapping"),
    ((8, 1), False, True, r"a product of a constant \(6, 8\) by an activation \(8, 1\) has no device mapping"),
    ((1, 3, 4, 8), True, False, r"a product of an activation \(1, 3, 4, 8\) by a constant of shape \(8, 6\)"),
])
def test_unmapped_matmuls_are_refused_naming_the_node(shape, b_const, a_const, msg):
    model = _matmul(shape, b_const, a_const)
    with pytest.raises(CompileError, match=r"node 'mm' \(MatMul\): " + msg):
        compile_onnx(model, load_config("small"), qnets.inputs(shape, 2, seed=1))


def test_gemm_alpha_and_beta_fold_into_weight_and_bias(tmp_path):
    rng = np.random.default_rng(8)
    inits = {"w": rng.normal(0, 0.2, (16, 10)).astype(np.float32), "b": rng.normal(0, 0.1, 10).astype(np.float32)}
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", alpha=0.5, beta=-2.0)]
    model = qnets.make_model(nodes, inits, (1, 16), "y", (1, 10))
    xs = qnets.inputs((1, 16), 9, seed=4)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="fc")
    assert v.passed and v.accuracy["cosine"] > 0.99, v.accuracy
