"""The built-in ``digits`` model: a small CNN trained on scikit-learn's 8x8 handwritten digits
(1,797 images, bundled with scikit-learn: no download) by ``scripts/train_digits.py``, and its data.

``split()`` gives the seeded 80 / 20 train / held-out split the model was trained and is evaluated
on: float32 (N, 1, 8, 8) images (pixel / 16, in [0, 1]) and int labels.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["MODEL_PATH", "split", "load"]

MODEL_PATH = Path(__file__).resolve().parent / "data" / "digits_cnn.onnx"
SPLIT_SEED = 2024
TRAIN_SHARE = 0.8


def split() -> tuple:
    """((x_train, y_train), (x_test, y_test)); x float32 (N, 1, 8, 8) in [0, 1], y int64."""
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    k = int(round(TRAIN_SHARE * len(y)))
    tr, te = order[:k], order[k:]
    return (x[tr], y[tr]), (x[te], y[te])


def load():
    """The trained ONNX model (onnx.ModelProto)."""
    import onnx
    return onnx.load(str(MODEL_PATH))
