"""The built-in digits CNN (scripts/train_digits.py, scikit-learn's 8x8 digits): the first real
accuracy figure. int8 golden top-1 within 1 point of FP32 over the whole held-out split; SimPy
(and, marked rtl, the RTL) bit-exact with golden on a subset."""
from __future__ import annotations

import pytest

from tpucompile import digits, driver
from tpusim.flow.cosim import run


def test_split_is_seeded_and_disjoint():
    (xtr, ytr), (xte, yte) = digits.split()
    assert xtr.shape == (1438, 1, 8, 8) and xte.shape == (359, 1, 8, 8)
    assert 0 <= xtr.min() and xtr.max() <= 1 and set(ytr) == set(range(10))
    (xtr2, _), _ = digits.split()
    assert (xtr == xtr2).all()


def test_digits_top1_int8_within_one_point_of_fp32(tmp_path):
    v = run("digits", "small", tmp_path, rtl=False, dataset_simpy=25)
    d = v.dataset
    assert v.passed and d["images"] == 359 and d["simpy_images"] == 25
    assert d["fp32_top1"] > 0.95, d
    assert abs(d["golden_top1"] - d["fp32_top1"]) <= 0.01, d
    assert d["simpy_vs_golden_images"] == 0 and d["simpy_correct"] >= 23, d
    assert "digits" in driver.MODELS


@pytest.mark.rtl
def test_digits_on_the_rtl(tmp_path):
    v = run("digits", "small", tmp_path, rtl=True, dataset_simpy=3, dataset_rtl=3)
    assert v.passed and v.cycles_simpy == v.cycles_rtl and v.dataset["rtl_vs_golden_images"] == 0, v.dataset
