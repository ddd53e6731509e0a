"""Passes: constant folding, BN folding, Relu fusion, canonicalisation, dumps."""
import collections
import re

import numpy as np
import pytest
import qnets

from tpucompile import realdata
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.passes import canonicalize, constant_fold, fold_affine, fuse_relu
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.errors import CompileError


def test_light_resnet50_pipeline(tmp_path):
    g = run_passes(import_onnx(realdata.LIGHT_RESNET50), dump_dir=tmp_path)
    ops = collections.Counter(n.op for n in g.nodes)
    assert ops == {"Conv": 54, "Add": 16, "MaxPool": 1, "GlobalAveragePool": 1, "Alias": 1, "Softmax": 1}
    convs = [n for n in g.nodes if n.op == "Conv"]
    assert sum(n.attrs["relu"] for n in convs) == 33          # stem + 2 per block (16 blocks)
    assert all(n.attrs["relu"] for n in g.nodes if n.op == "Add")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00_import.mlir", "01_fold_qdq.mlir", "02_constant_fold.mlir", "03_fuse_elementwise.mlir",
                     "04_fold_affine.mlir", "05_canonicalize.mlir", "06_fuse_relu.mlir"]
    assert "tpu.constantofshape" in (tmp_path / "00_import.mlir").read_text()
    assert "constantofshape" not in (tmp_path / "02_constant_fold.mlir").read_text()
    # the FC: 1x1 conv on the pooled (1, 2048, 1, 1) tensor, aliased back to (1, 1000)
    fc = next(n for n in g.nodes if n.name == "n174")
    assert fc.inputs[0] == "r172" and g.tensors[fc.outputs[0]].shape == (1, 1000, 1, 1)
    assert g.tensors[fc.outputs[0]].onnx_name == "r174"


def test_constant_fold_values():
    g = constant_fold.run(import_onnx(realdata.LIGHT_RESNET50))
    w = g.const("gpu_0/conv1_w_0")
    assert w.shape == (64, 3, 7, 7) and np.all(w == np.float32(0.02))


def test_fold_affine_math():
    model = qnets.conv_bn_relu(seed=3)
    g = fold_affine.run(import_onnx(model))
    conv = next(n for n in g.nodes if n.op == "Conv")
    assert [n.op for n in g.nodes] == ["Conv", "Relu"] and conv.outputs == ["b"]
    init = {i.name: onnx_arr(i) for i in model.graph.initializer}
    s = init["bn_g"] / np.sqrt(init["bn_v"] + 1e-5)
    np.testing.assert_allclose(g.const(conv.inputs[1]), init["w"] * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(g.const(conv.inputs[2]), init["bn_b"] - init["bn_m"] * s, rtol=1e-5, atol=1e-7)


def onnx_arr(init):
    from onnx import numpy_helper
    return numpy_helper.to_array(init).astype(np.float64)


def test_fuse_relu_and_canonicalize_gemm():
    g = run_passes(import_onnx(qnets.gemm_head()))
    assert [n.op for n in g.nodes] == ["Conv", "GlobalAveragePool", "Conv", "Alias"]
    assert g.nodes[0].attrs["relu"] and g.nodes[0].outputs == ["r"]
    fc = g.nodes[2]
    assert g.const(fc.inputs[1]).shape == (10, 16, 1, 1) and fc.inputs[0] == "p"


def test_gemm_transb0_weight_transposed():
    m = qnets.gemm_head(trans_b=0)
    g = canonicalize.run(import_onnx(m))
    fc = next(n for n in g.nodes if n.name == "fc")
    fw = next(onnx_arr(i) for i in m.graph.initializer if i.name == "fw")
    np.testing.assert_array_equal(g.const(fc.inputs[1])[:, :, 0, 0], fw.T.astype(np.float32))


def test_sum_to_add_and_avgpool_to_global():
    g = run_passes(import_onnx(realdata.resnet50_model(0)))
    assert not any(n.op in ("Sum", "AveragePool", "Reshape", "Relu", "BatchNormalization") for n in g.nodes)


def test_add_relu_fused():
    g = fuse_relu.run(import_onnx(qnets.residual_add()))
    add = next(n for n in g.nodes if n.op == "Add")
    assert add.attrs["relu"] and add.outputs == ["y"]


def test_fold_affine_chain_into_one_conv():
    """Conv -> BN -> Mul -> Add -> Relu and Conv -> Sub -> Div each become one Conv."""
    model = qnets.caffe2_bn(seed=2)
    g = run_passes(import_onnx(model))
    assert [n.op for n in g.nodes] == ["Conv", "Conv"] and g.nodes[0].attrs["relu"]
    init = {i.name: onnx_arr(i) for i in model.graph.initializer}
    s_bn = init["bn_g"] / np.sqrt(init["bn_v"] + 1e-5)
    s = s_bn * init["sc"]
    np.testing.assert_allclose(g.const(g.nodes[0].inputs[1]), init["w"] * s[:, None, None, None], rtol=1e-6)
    b = (init["bn_b"] - init["bn_m"] * s_bn) * init["sc"] + init["sh"]
    np.testing.assert_allclose(g.const(g.nodes[0].inputs[2]), b, rtol=1e-5, atol=1e-6)
    d = init["d"].reshape(-1)
    np.testing.assert_allclose(g.const(g.nodes[1].inputs[1]), init["w2"] / d[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(g.const(g.nodes[1].inputs[2]), -0.25 / d, rtol=1e-6)


def test_standalone_bn_is_a_diagonal_conv_that_mul_and_relu_fold_into():
    g = run_passes(import_onnx(qnets.preact_bn()))
    assert [n.op for n in g.nodes] == ["Conv", "MaxPool", "Conv", "Conv"]
    diag = g.nodes[2]
    w = g.const(diag.inputs[1])[:, :, 0, 0]
    assert diag.attrs["relu"] and diag.inputs[0] == "p" and np.count_nonzero(w - np.diag(np.diag(w))) == 0


@pytest.mark.parametrize("const_shape, first", [((1, 1, 1, 8), True), ((8,), True)])
def test_mul_not_per_channel_is_refused_by_name(const_shape, first):
    """A Mul by a constant that varies along W (of two activations: tests/test_ops_mul.py)."""
    from onnx import helper

    from tpucompile.quantize import compile_model
    rng = np.random.default_rng(0)
    inits = {"w": qnets.conv_w(rng, 8, 3, 1), "c": np.full(const_shape, 0.5, np.float32)}
    a, b = ("c2", "c") if first else ("c2", "x2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c2"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Conv", ["x", "w"], ["x2"], name="conv_b", kernel_shape=[1, 1]),
             helper.make_node("Mul", [a, b], ["y"], name="scale7")]
    if first:
        del nodes[1]
    m = qnets.make_model(nodes, inits, (1, 3, 8, 8), "y", None)
    with pytest.raises(CompileError, match=r"node 'scale7' \(Mul\): constant 'c' of shape "
                                           + re.escape(str(const_shape)) + " neither a scalar nor per channel"):
        compile_model(m, qnets.inputs((1, 3, 8, 8), 1))
