"""Real tf2onnx exports (tests/fixtures/keras_*.tf2onnx.onnx, written by
scripts/export_keras_fixtures.py with TensorFlow 2.15.1 / tf2onnx 1.16.1, opset 13): Keras models
with channels-last inputs. tf2onnx writes a Transpose to NCHW after the input (done on the host:
frontend/nhwc_input), a Transpose back before Flatten (the Dense reads the map in (h, w, c)
order: one Conv), a channels-last Split between Transposes (a Split on the NCHW channels, the
Transposes cancel), a global pool's Squeeze (an alias), Dense as Gemm, ReLU6 as Clip and every
BatchNormalization folded into its Conv. Each compiles, golden = SimPy, close to FP32 on a real
photograph; two on the RTL."""
from __future__ import annotations

from pathlib import Path

import pytest

from tpusim.arch.binary import TpuBinary
from tpusim.flow.cosim import run

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("stem, ops", [("keras_cnn_16", {"QConv": 2, "QConvPool": 1, "QMaxPool": 0}),
                                       ("keras_mbv2_block_32", {"QConv": 3, "QDwConv": 1, "QConvAdd": 1}),
                                       ("keras_concat_32", {"QSlice": 2, "QConcat": 2, "QLut": 1})])
def test_compiles_bit_exact_and_close_to_fp32(stem, ops, tmp_path):
    v = run(str(FIXTURES / f"{stem}.tf2onnx.onnx"), "small", tmp_path, rtl=False, calib=4)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.layer_mismatches)
    assert v.accuracy["cosine"] > 0.999 and v.accuracy["top1_agree"], v.accuracy
    layers = TpuBinary.read(tmp_path / f"{stem}.tf2onnx.tpubin").meta["layers"]
    assert {k: sum(L["op"] == k for L in layers) for k in ops} == ops


@pytest.mark.rtl
@pytest.mark.parametrize("stem", ["keras_mbv2_block_32", "keras_concat_32"])
def test_three_way(stem, tmp_path):
    v = run(str(FIXTURES / f"{stem}.tf2onnx.onnx"), "small", tmp_path, rtl=True, calib=2)
    assert v.passed and v.cycles_simpy == v.cycles_rtl and not v.counter_diffs, (v.notes, v.counter_diffs)
    assert all(m["simpy_vs_rtl"] == 0 for m in v.mismatches.values()), v.mismatches
