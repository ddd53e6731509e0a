"""A real Hugging Face ViTModel export (tests/fixtures/vit_tiny_32.ts.onnx, written by
scripts/export_hf_fixtures.py with transformers 5.25 and torch 2.13's TorchScript exporter:
32x32 image, 8x8 patches, hidden 32, 2 layers, 2 heads): the patch Reshape's shape computed from
the Conv output's Shape, the [CLS] Expand to a computed shape, float-to-float Casts between the
Softmax and P·V, a -1 in the Reshape into heads. `cosim --model vit_tiny_32.ts.onnx` on small:
golden == SimPy on every layer (and == RTL, rtl marker), the last hidden state close to FP32.
(The BertModel export with a run-time mask: tests/test_attention_mask.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import qnets
from tpusim.flow.cosim import run

VIT = Path(__file__).resolve().parent / "fixtures" / "vit_tiny_32.ts.onnx"


def test_a_real_hf_vit_export_golden_equals_simpy_close_to_fp32(tmp_path):
    v = run(str(VIT), "small", tmp_path / "run", rtl=False, calib=2)
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.layers_compared > 40, (v.notes, v.mismatches)
    assert all(m["golden_vs_simpy"] == 0 for m in v.mismatches.values()), v.mismatches
    assert v.accuracy["cosine"] >= 0.99, v.accuracy
    assert any("patch extraction on the host" in n for n in v.notes), v.notes


@pytest.mark.rtl
def test_a_real_hf_vit_export_three_way_on_the_small_rtl(tmp_path):
    v = run(str(VIT), "small", tmp_path / "run", rtl=True, calib=2)
    qnets.assert_three_way(v)


def test_input_size_of_a_vit_export_is_its_image_size():
    """--input-size on a vision transformer is checked like an image model's (it was ignored): the
    model's own 32 is taken, another size refused naming the option."""
    from tpucompile import driver
    from tpusim.arch.errors import CompileError
    _, x, cal = driver.load_model_and_data(str(VIT), calib=1, size=32)
    assert len(cal) == 1
    with pytest.raises(CompileError, match=r"--input-size 64: the model's input 'pixel_values' has the static shape"):
        driver.load_model_and_data(str(VIT), calib=1, size=64)
