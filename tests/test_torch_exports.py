"""Real PyTorch exports (tests/fixtures, written by scripts/export_torch_fixtures.py with torch
2.14 / torchvision 0.29): each network by the TorchScript exporter and by the dynamo exporter.

MobileNetV2 (torchvision, width 0.25, 10 classes, 32x32: depthwise Conv, ReLU6 = Clip(0, 6),
residual Add), ConvMix (grouped, dilated and depthwise Conv, Hardtanh = Clip(-1, 1),
mean over H, W) and ActMix (SiLU, GELU, Hardswish, Hardsigmoid, LeakyReLU, ELU, Mish, Tanh: the
TorchScript exporter writes SiLU as Mul(x, Sigmoid(x)), GELU in its Erf form and Mish as
x * Tanh(Softplus(x)); the dynamo one (opset 20) has Gelu and Mish ops: each group one LUT), and
Neck (SiLU, nearest upsampling by a factor and to another map's size, which the TorchScript
exporter computes with Shape -> Slice -> Concat, a squeeze-and-excite gate, view(size(0), -1)),
and Seq1d (a 1-D CNN on a (1, 3, 64) sequence: Conv1d, BatchNorm1d, pools, a depthwise Conv1d;
the dynamo exporter writes its 1-D pools as Unsqueeze, a 2-D pool, Squeeze), and C2fSppf
(YOLOv8's C2f and SPPF blocks: ``chunk(2, 1)``, which TorchScript writes as two Slices with
bounds computed by Shape -> Gather -> Div -> Mul and dynamo as a Split with num_outputs, a
channel slice ``x[:, 4:12]``; its untrained 9-conv SiLU chain loses ~3 dB per conv, cosine 0.97),
and LrnNet (torch 2.13: two LocalResponseNorms, which both exporters decompose into Mul, a 5-D
Reshape, Pad, a 3-D AveragePool, Squeeze (TorchScript: behind an If), Mul, Add, Pow and Div;
``frontend/torch_lrn.py`` turns each back into one LRN). Both exporters' graphs must compile to the same layers and cycle count (their Constant /
ReduceMean / Reshape idioms differ, the network does not; the scales differ in the last bits, as
dynamo leaves BatchNorm to the compiler to fold), every layer
golden = SimPy, and the int8 result must track FP32 (onnxruntime) on a real photograph.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tpusim.arch.binary import TpuBinary
from tpusim.flow.cosim import run

FIXTURES = Path(__file__).resolve().parent / "fixtures"


#: floors of the int8-vs-FP32 cosine; top-1 only for ConvMix: the untrained MobileNetV2's 10
#: logits lie close together (its error grows ~1 dB per block through 17 per-tensor-quantized
#: inverted residuals, 41 dB after the stem, 8.6 dB at the pool), so its top-1 flips with the
#: calibration images
@pytest.mark.parametrize("stem, min_cosine, top1", [("convmix_16", 0.97, True),
                                                    ("mobilenetv2_w025_c10_32", 0.8, False),
                                                    ("actmix_16", 0.99, True),
                                                    ("neck_16", 0.99, True),
                                                    ("seq1d_64", 0.99, False),
                                                    ("c2f_sppf_16", 0.95, True),
                                                    ("lrn_12", 0.99, True)])
def test_both_exporters_compile_to_one_program_bit_exact(stem, min_cosine, top1, tmp_path):
    verdicts, programs = [], []
    for exporter in ("ts", "dynamo"):
        name = f"{stem}.{exporter}"
        v = run(str(FIXTURES / f"{name}.onnx"), "small", tmp_path / exporter, rtl=False, calib=2)
        assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.layer_mismatches)
        assert all(m["golden_vs_simpy"] == 0 for m in v.mismatches.values()), v.mismatches
        assert v.accuracy["cosine"] > min_cosine and (v.accuracy["top1_agree"] or not top1), v.accuracy
        verdicts.append(v)
        programs.append([(L["op"], L.get("shape")) for L in TpuBinary.read(tmp_path / exporter / f"{name}.tpubin").meta["layers"]])
    assert programs[0] == programs[1]           # the same layers (scales differ in the last bits:
    assert verdicts[0].cycles_simpy == verdicts[1].cycles_simpy   # dynamo keeps BN unfolded)


@pytest.mark.rtl
def test_convmix_three_way(tmp_path):
    """The grouped / dilated / depthwise ConvMix export on golden, SimPy and the RTL."""
    v = run(str(FIXTURES / "convmix_16.ts.onnx"), "small", tmp_path, rtl=True, calib=2)
    assert v.passed and v.cycles_simpy == v.cycles_rtl and not v.counter_diffs, (v.notes, v.counter_diffs)
    assert all(m["simpy_vs_rtl"] == 0 for m in v.mismatches.values()), v.mismatches


@pytest.mark.rtl
@pytest.mark.parametrize("stem, ops", [("actmix_16", {"QLut": 7}), ("neck_16", {"QLut": 6, "QResize": 2, "QMul": 1}),
                                       ("seq1d_64", {"QDwConv": 1, "QConv": 2, "QConvPool": 1}),
                                       ("c2f_sppf_16", {"QSlice": 3, "QMaxPool": 3, "QConcat": 2}),
                                       ("lrn_12", {"QLut": 4, "QMul": 2})])
def test_three_way(stem, ops, tmp_path):
    """The activation zoo (every function one LUT instruction) and the neck (LUT, Resize, MUL) on
    golden, SimPy and the RTL."""
    v = run(str(FIXTURES / f"{stem}.ts.onnx"), "small", tmp_path, rtl=True, calib=2)
    assert v.passed and v.cycles_simpy == v.cycles_rtl and not v.counter_diffs, (v.notes, v.counter_diffs)
    assert all(m["simpy_vs_rtl"] == 0 for m in v.mismatches.values()), v.mismatches
    layers = TpuBinary.read(tmp_path / f"{stem}.ts.tpubin").meta["layers"]
    assert {k: sum(L["op"] == k for L in layers) for k in ops} == ops
