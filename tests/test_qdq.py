"""Pre-quantized QDQ models (onnxruntime.quantization.quantize_static, QDQ format, per-channel
int8 weights, int8 or uint8 activations): the model's own scales and zero points are kept (not
calibrated), golden = SimPy, and the device output is within a few LSB of onnxruntime running
the QDQ model; malformed pairs are refused naming the node."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.passes.pipeline import run_passes
from tpucompile.quantize import compile_model
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


class _Reader(CalibrationDataReader):
    def __init__(self, xs):
        self.it = iter([{"x": x} for x in xs])

    def get_next(self):
        return next(self.it, None)


def _qdq(tmp_path, build, act=QuantType.QInt8):
    model = build()
    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    xs = qnets.inputs(qnets.in_shape(model), 6, seed=4)
    quantize_static(str(src), str(dst), _Reader(xs), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=act, weight_type=QuantType.QInt8)
    return onnx.load(dst), xs


def _scales(m: onnx.ModelProto) -> dict:
    """activation tensor -> (scale, int8 zero point) of every QuantizeLinear of the QDQ model."""
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits:
            z = inits[n.input[2]]
            out[n.input[0]] = (float(inits[n.input[1]]), int(z) - (128 if z.dtype == np.uint8 else 0))
    return out


#: (graph, largest |device - onnxruntime QDQ| in output LSB measured): residual Add, Conv + BN +
#: Relu, the Concat of a fire module, and a YOLO-style neck (SiLU tables, Resize, a Concat whose
#: parts the QDQ model quantizes apart: requantized by an identity LUT)
QDQ_CASES = [(qnets.residual_add, 2), (qnets.conv_bn_relu, 1), (qnets.fire, 1), (qnets.yolo_neck, 3)]


@pytest.mark.parametrize("build, lsb", QDQ_CASES, ids=[b.__name__ for b, _ in QDQ_CASES])
@pytest.mark.parametrize("act", [QuantType.QInt8, QuantType.QUInt8], ids=["int8", "uint8"])
def test_qdq_model_keeps_its_quantization(build, lsb, act, tmp_path):
    m, xs = _qdq(tmp_path, build, act)
    pinned = _scales(m)
    qg, _ = compile_model(m, xs[1:2])              # one calibration image: the pins must win
    kept = {t: (qg.tensors[t].scale, qg.tensors[t].zero_point) for t in pinned if t in qg.tensors}
    assert kept and all(np.isclose(kept[t][0], pinned[t][0], rtol=1e-7) and kept[t][1] == pinned[t][1]
                        for t in kept), (kept, pinned)
    v = run(m, "small", tmp_path / "run", rtl=False, data=(xs[0], xs[1:]), name="q")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["max_lsb"] <= lsb + 0.01, v.accuracy    # integer requantization vs float QDQ


def test_pairs_are_removed_and_pin_their_tensor(tmp_path):
    m, _ = _qdq(tmp_path, qnets.conv_bn_relu)
    g = run_passes(import_onnx(m))
    assert not {"QuantizeLinear", "DequantizeLinear"} & {n.op for n in g.nodes}, [n.op for n in g.nodes]
    assert g.tensors[g.inputs[0]].qparams is not None


def test_mismatched_pair_is_refused_naming_the_node(tmp_path):
    m, xs = _qdq(tmp_path, qnets.conv_bn_relu)
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.input[0].endswith("_QuantizeLinear_Output"))
    other = next(i for i in m.graph.initializer if i.name == dq.input[1])
    bad = numpy_helper.from_array(numpy_helper.to_array(other) * 2, other.name + "_x2")
    m.graph.initializer.append(bad)
    dq.input[1] = bad.name
    with pytest.raises(CompileError, match=rf"node '{dq.name}' \(DequantizeLinear\): scale / zero point differ"):
        compile_model(m, xs[1:2])


def test_pin_on_a_gemm_output_follows_its_alias(tmp_path):
    """The last layer a Gemm: canonicalize makes it a Conv writing ``logits__nchw`` plus an Alias
    to ``logits``, which the model's last pair pinned; the device output keeps the model's
    scale / zero point (it was calibrated before), golden = SimPy."""
    m, xs = _qdq(tmp_path, qnets.gemm_head)
    last = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0].startswith("logits"))
    want = _scales(m)[last.input[0]]
    qg, _ = compile_model(m, xs[1:2])
    out = qg.tensors[qg.resolve("logits")]
    assert np.isclose(out.scale, want[0], rtol=1e-7) and out.zero_point == want[1], (out, want)
    v = run(m, "small", tmp_path / "run", rtl=False, data=(xs[0], xs[1:]), name="q")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["max_lsb"] <= 1.01, v.accuracy


@pytest.mark.slow
def test_builtin_resnet50_qdq_keeps_onnxruntime_quantization(tmp_path):
    """`make cosim MODEL=resnet50-qdq` without the RTL: ResNet-50 quantized by onnxruntime
    (~10 s), compiled with its own parameters: golden = SimPy on every layer, logits within
    3 LSB of onnxruntime running the QDQ model, top-1 agree (measured 2.12 LSB)."""
    v = run("resnet50-qdq", "seed", tmp_path, rtl=False)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.layer_mismatches)
    assert v.accuracy["max_lsb"] <= 3 and v.accuracy["top1_agree"], v.accuracy


def _conv_qdq(pairs, w_scale=None, opset=13):
    """Conv (int8 weights, DequantizeLinear of per-tensor scale ``w_scale`` or max|q| = 127
    per channel) then the (scale, zero point) activation pairs of ``pairs`` back to back."""
    rng = np.random.default_rng(3)
    n = helper.make_node
    q = rng.integers(-60, 61, (4, 3, 3, 3)).astype(np.int8) if w_scale else \
        rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = {"wq": q, "ws": np.float32(w_scale or 0.01), "wz": np.int8(0)}
    nodes = [n("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w"),
             n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    t = "c"
    for k, (s, z) in enumerate(pairs):
        inits[f"s{k}"], inits[f"z{k}"] = np.float32(s), np.int8(z)
        nodes += [n("QuantizeLinear", [t, f"s{k}", f"z{k}"], [f"q{k}"], name=f"q{k}"),
                  n("DequantizeLinear", [f"q{k}", f"s{k}", f"z{k}"], [f"d{k}"], name=f"dq{k}")]
        t = f"d{k}"
    nodes.append(n("Identity", [t], ["y"], name="out"))
    return qnets.make_model(nodes, inits, (1, 3, 6, 6), "y", None, opset=opset)


def _ort(m, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL      # ONNX semantics
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_two_pairs_back_to_back_keep_both_clamps(tmp_path):
    """Q/DQ(0.05, 0) then Q/DQ(0.13, 3): the first clamps to [-6.4, 6.35], the second requantizes
    (an identity table): within 1 LSB of onnxruntime, not the 80 of keeping the second alone."""
    m = _conv_qdq([(0.05, 0), (0.13, 3)])
    x = qnets.inputs((1, 3, 6, 6), 1, seed=7)[0] * 4
    v = run(m, "small", tmp_path, rtl=False, data=(x, [x]), name="dd")
    assert v.passed, v.notes
    got = (np.load(tmp_path / "out_d1_simpy.npy").astype(np.float32).reshape(1, 4, 6, 6) - 3) * np.float32(0.13)
    ref = _ort(m, x)
    assert ref.min() >= -6.5 and np.abs(got - ref).max() <= 0.13 * 1.01, (got.min(), ref.min())


def test_weights_with_max_below_127_keep_their_integers():
    """The model's int8 weights come back exactly even when no channel reaches 127 (its scale, not
    max|w| / 127)."""
    m = _conv_qdq([(0.05, 0)], w_scale=1e-3)
    qg, _ = compile_model(m, qnets.inputs((1, 3, 6, 6), 1, seed=1))
    conv = next(op for op in qg.ops if type(op).__name__ == "QConv")
    wq = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "wq"))
    assert np.array_equal(conv.weight, wq)


def test_int16_activations_are_refused_naming_the_node():
    m = _conv_qdq([(0.05, 0)], opset=21)          # int16 Q/DQ: opset 21
    m.ir_version = 10
    z = next(i for i in m.graph.initializer if i.name == "z0")
    z.CopyFrom(numpy_helper.from_array(np.int16(0), "z0"))
    with pytest.raises(CompileError, match=r"node 'dq0' \(DequantizeLinear\): int16 activations unsupported"):
        compile_model(m, qnets.inputs((1, 3, 6, 6), 1))


def test_quantize_static_advice_is_dropped_and_nothing_else(tmp_path, caplog):
    """realdata._quiet_quantize_advice (around the built-in resnet50-qdq's quantize_static):
    onnxruntime.quantization's advice to pre-process (logged as root WARNINGs, printed in every
    compile of resnet50-qdq with its 53 per-channel axis notes) is dropped; the same messages at
    ERROR level, and other warnings, pass."""
    import logging

    from tpucompile.realdata import _QuantizeAdvice, _quiet_quantize_advice
    advice = "Please consider"
    with caplog.at_level(logging.WARNING):
        _qdq(tmp_path, qnets.conv_bn_relu)
    assert any(advice in r.getMessage() for r in caplog.records)            # what the filter is for
    caplog.clear()
    with caplog.at_level(logging.WARNING), _quiet_quantize_advice():
        _qdq(tmp_path, qnets.conv_bn_relu)
        logging.warning("another warning")
    assert [r.getMessage() for r in caplog.records] == ["another warning"]
    where = quantize_static.__code__.co_filename
    rec = lambda level, msg: logging.LogRecord("root", level, where, 1, msg, None, None)  # noqa: E731
    f = _QuantizeAdvice()
    assert not f.filter(rec(logging.WARNING, "Axis 1 is out-of-range for weight 'w' with rank 1"))
    assert f.filter(rec(logging.ERROR, "Axis 1 is out-of-range for weight 'w' with rank 1"))
    assert f.filter(rec(logging.WARNING, "Calibration failed"))
