"""Golden int8 model vs onnxruntime FP32 on small graphs and the whole ResNet-50."""
import time

import numpy as np
import pytest
import qnets

from tpucompile import realdata
from tpucompile.fp32 import compare, run_fp32
from tpucompile.golden import conv_int8, dequantize, quantize_input, run_golden, run_host_ops
from tpucompile.ops import QConv
from tpucompile.quantize import compile_model
from tpusim.arch import arith

SMALL = {
    "conv_bn_relu": qnets.conv_bn_relu,
    "conv_stride2": qnets.conv_stride2,
    "conv_maxpool": qnets.conv_maxpool,
    "conv_avgpool": qnets.conv_avgpool,
    "conv_gap": lambda: qnets.conv_avgpool(global_pool=True),
    "residual_add_relu": qnets.residual_add,
    "residual_add": lambda: qnets.residual_add(relu=False),
    "gemm_transB": qnets.gemm_head,
    "gemm_noTrans": lambda: qnets.gemm_head(trans_b=0),
    "same_upper_dropout": qnets.same_pad_dropout,
    "flatten_gemm": qnets.flatten_gemm,
    "caffe2_bn": qnets.caffe2_bn,
    "preact_bn": qnets.preact_bn,
    "avgpool_exclude_pad": qnets.avgpool_pads,
    "avgpool_include_pad": lambda: qnets.avgpool_pads(count_include_pad=1),
    "avgpool_exclude_pad_s2": lambda: qnets.avgpool_pads(k=3, s=2, pads=(1, 0, 1, 2)),
    "caffe2_bn_opset13": lambda: qnets.caffe2_bn(opset=13),
    "reshape_gemm": lambda: qnets.flatten_gemm(reshape=True),
    "same_lower_valid": lambda: qnets.same_pad_dropout(conv_pad="SAME_LOWER", pool_pad="VALID"),
    "fire": qnets.fire,
    "fire_odd_maxpool": lambda: qnets.fire(e1=5, e3=6, pool=True),
    "fire_concat_output": lambda: qnets.fire(e1=5, e3=6, head=False),
    "concat_input_nested": qnets.concat_mixed,
    "concat_fc": qnets.concat_fc,
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_graph_golden_vs_fp32(name):
    model = SMALL[name]()
    shape = qnets.in_shape(model)
    qg, _ = compile_model(model, qnets.inputs(shape, 8, seed=1))
    out = model.graph.output[0].name
    for x in qnets.inputs(shape, 3, seed=2):
        env = run_golden(qg, quantize_input(qg, x))
        got = dequantize(qg, out, env[qg.resolve(out)]).reshape(-1)
        ref = run_fp32(model, x)[out].reshape(-1)
        t = qg.tensor(out)
        lsb = t.scale
        # values beyond the calibrated range saturate by design: compare within the range
        ref = np.clip(ref, (-128 - t.zero_point) * lsb, (127 - t.zero_point) * lsb)
        err = np.abs(got - ref).max()
        # errors: input quantization + weight quantization + (for two-layer nets) the
        # intermediate rounding; a few output LSBs at most
        assert err <= 4 * lsb, (name, err / lsb)
        assert compare(got, ref)["cosine"] > 0.99


def test_softmax_host_op():
    model = qnets.gemm_head(softmax=True)
    qg, _ = compile_model(model, qnets.inputs((1, 3, 8, 8), 8))
    assert qg.host_ops[0]["op"] == "Softmax" and qg.fp32_outputs == ["prob"]
    x = qnets.inputs((1, 3, 8, 8), 1, seed=5)[0]
    prob = run_host_ops(qg, run_golden(qg, quantize_input(qg, x)))["prob"]
    ref = run_fp32(model, x)["prob"]
    assert prob.shape == (1, 10) and abs(prob.sum() - 1) < 1e-5
    assert np.abs(prob - ref).max() < 0.02


def _conv_naive(op: QConv, x):
    """Direct 6-loop-equivalent reference (independent of im2col)."""
    t, l, b, r = op.pads
    xp = np.pad(x[0].astype(np.int64), ((0, 0), (t, b), (l, r)), constant_values=op.x_zp)
    cout, cin, kh, kw = op.weight.shape
    sh, sw = op.strides
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    acc = np.zeros((cout, oh, ow), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, ky:ky + sh * (oh - 1) + 1:sh, kx:kx + sw * (ow - 1) + 1:sw]
            acc += np.einsum("oc,chw->ohw", op.weight[:, :, ky, kx].astype(np.int64), patch)
    y = arith.requant_conv(acc.transpose(1, 2, 0), op.bias, op.mult, op.shift, op.y_zp, op.relu)
    return y.transpose(2, 0, 1)[None]


@pytest.mark.parametrize("stride, pads, relu", [((1, 1), (1, 1, 1, 1), True), ((2, 3), (0, 2, 3, 1), False)])
def test_conv_int8_matches_naive(stride, pads, relu):
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (5, 3, 3, 4)).astype(np.int8)
    ms = [arith.quantize_multiplier(r) for r in rng.uniform(1e-3, 2e-2, 5)]
    op = QConv("c", "x", "y", w, rng.integers(-5000, 5000, 5).astype(np.int32),
               np.array([m for m, _ in ms], np.int32), np.array([s for _, s in ms], np.int32),
               stride, pads, relu, -7, 3)
    x = rng.integers(-128, 128, (1, 3, 11, 10)).astype(np.int8)
    assert np.array_equal(conv_int8(op, x), _conv_naive(op, x))


def test_golden_rejects_bad_input():
    qg, _ = compile_model(qnets.conv_stride2(), qnets.inputs((1, 4, 15, 13), 2))
    with pytest.raises(ValueError, match="int8"):
        run_golden(qg, np.zeros((1, 4, 15, 13), np.float32))


@pytest.mark.parametrize("build", [realdata.resnet50_model, realdata.resnet50_modern])
def test_resnet50_golden_vs_fp32(build, capsys):
    t0 = time.perf_counter()
    model = build(0)
    t1 = time.perf_counter()
    qg, g = compile_model(model, realdata.calibration_images(8))
    t2 = time.perf_counter()
    x = realdata.test_image()
    env = run_golden(qg, quantize_input(qg, x))
    t3 = time.perf_counter()
    assert len(qg.ops) == 54 + 16 + 2          # 53 convs + FC, 16 adds, max pool, avg pool
    ref = run_fp32(model, x, ["r174", "gpu_0/softmax_1"])
    got = dequantize(qg, "r174", env[qg.resolve("r174")]).reshape(1, -1)
    m = compare(got, ref["r174"])
    prob = run_host_ops(qg, env)["gpu_0/softmax_1"]
    with capsys.disabled():
        print(f"\n{build.__name__}: build {t1 - t0:.1f}s, import+passes+calib(8)+quantize "
              f"{t2 - t1:.1f}s, golden {t3 - t2:.1f}s, logits {m}")
    assert m["cosine"] > 0.99
    assert m["top1"] and m["top5_overlap"] >= 0.8
    assert compare(prob, ref["gpu_0/softmax_1"])["top1"]
