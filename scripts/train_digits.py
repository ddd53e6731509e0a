"""Train the built-in ``digits`` CNN on scikit-learn's 8x8 digits (no download) and write it as ONNX.

    python scripts/train_digits.py [--out tpucompile/data/digits_cnn.onnx] [--epochs 30]

Network (float32, NCHW, input 1x1x8x8 = pixel / 16): Conv 3x3 (1 -> 16, pad 1) + Relu, MaxPool
2x2, Conv 3x3 (16 -> 32, pad 1) + Relu, Flatten, Gemm (512 -> 10). Trained with numpy: plain
mini-batch SGD with momentum on softmax cross-entropy, hand-written backward pass, seeded, on
the first 80 % of a seeded shuffle of the 1,797 images (``tpucompile.digits.split``); the rest is
the held-out split the cosim reports top-1 on. Prints train and held-out accuracy.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tpucompile.digits import split


def _im2col(x: np.ndarray) -> np.ndarray:
    """x (N, C, H, W) -> (N, H, W, C*9) patches of a 3x3 window, pad 1, stride 1."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)], axis=2)  # N C 9 H W
    return cols.transpose(0, 3, 4, 1, 2).reshape(n, h, w, c * 9)


def _col2im(d: np.ndarray, c: int) -> np.ndarray:
    """Adjoint of _im2col: d (N, H, W, C*9) -> (N, C, H, W)."""
    n, h, w, _ = d.shape
    d = d.reshape(n, h, w, c, 9).transpose(0, 3, 4, 1, 2)
    out = np.zeros((n, c, h + 2, w + 2))
    for k in range(9):
        i, j = divmod(k, 3)
        out[:, :, i:i + h, j:j + w] += d[:, :, k]
    return out[:, :, 1:-1, 1:-1]


class Net:
    def __init__(self, rng) -> None:
        self.w1 = rng.normal(0, np.sqrt(2 / 9), (16, 1, 3, 3))
        self.b1 = np.zeros(16)
        self.w2 = rng.normal(0, np.sqrt(2 / 144), (32, 16, 3, 3))
        self.b2 = np.zeros(32)
        self.w3 = rng.normal(0, np.sqrt(1 / 512), (10, 512))
        self.b3 = np.zeros(10)

    def params(self):
        return [self.w1, self.b1, self.w2, self.b2, self.w3, self.b3]

    def forward(self, x):
        c1 = _im2col(x)
        z1 = c1 @ self.w1.reshape(16, -1).T + self.b1                # N 8 8 16
        a1 = np.maximum(z1, 0)
        n = x.shape[0]
        blocks = a1.reshape(n, 4, 2, 4, 2, 16)
        p1 = blocks.max(axis=(2, 4))                                 # N 4 4 16
        mask = blocks == p1[:, :, None, :, None, :]
        p1n = p1.transpose(0, 3, 1, 2)                               # N 16 4 4
        c2 = _im2col(p1n)
        z2 = c2 @ self.w2.reshape(32, -1).T + self.b2                # N 4 4 32
        a2 = np.maximum(z2, 0)
        f = a2.transpose(0, 3, 1, 2).reshape(n, -1)                  # NCHW flatten
        logits = f @ self.w3.T + self.b3
        return logits, (c1, z1, mask, c2, z2, f)

    def backward(self, cache, dlogits):
        c1, z1, mask, c2, z2, f = cache
        n = dlogits.shape[0]
        g3, gb3 = dlogits.T @ f, dlogits.sum(0)
        df = dlogits @ self.w3
        da2 = df.reshape(n, 32, 4, 4).transpose(0, 2, 3, 1)
        dz2 = da2 * (z2 > 0)
        g2 = (dz2.reshape(-1, 32).T @ c2.reshape(-1, 144)).reshape(self.w2.shape)
        gb2 = dz2.sum((0, 1, 2))
        dp1 = _col2im(dz2 @ self.w2.reshape(32, -1), 16).transpose(0, 2, 3, 1)   # N 4 4 16
        da1 = (mask * dp1[:, :, None, :, None, :]).reshape(n, 8, 8, 16)
        dz1 = da1 * (z1 > 0)
        g1 = (dz1.reshape(-1, 16).T @ c1.reshape(-1, 9)).reshape(self.w1.shape)
        gb1 = dz1.sum((0, 1, 2))
        return [g1, gb1, g2, gb2, g3, gb3]


def train(epochs: int = 30, seed: int = 0) -> tuple:
    (xtr, ytr), (xte, yte) = split()
    rng = np.random.default_rng(seed)
    net = Net(rng)
    vel = [np.zeros_like(p) for p in net.params()]
    lr, mom, batch = 0.05, 0.9, 32
    for _ in range(epochs):
        order = rng.permutation(len(xtr))
        for s in range(0, len(order), batch):
            idx = order[s:s + batch]
            logits, cache = net.forward(xtr[idx].astype(np.float64))
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), ytr[idx]] -= 1
            grads = net.backward(cache, p / len(idx))
            for v, g, w in zip(vel, grads, net.params()):
                v *= mom
                v -= lr * g
                w += v
    acc = lambda x, y: float((net.forward(x.astype(np.float64))[0].argmax(1) == y).mean())  # noqa: E731
    return net, acc(xtr, ytr), acc(xte, yte)


def to_onnx(net: Net) -> onnx.ModelProto:
    f32 = lambda a: np.asarray(a, np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(f32(v), k) for k, v in
             (("w1", net.w1), ("b1", net.b1), ("w2", net.w2), ("b2", net.b2), ("w3", net.w3), ("b3", net.b3))]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "digits_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tpusim scripts/train_digits.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "tpucompile" / "data" / "digits_cnn.onnx")
    ap.add_argument("--epochs", type=int, default=30)
    a = ap.parse_args()
    net, tr, te = train(a.epochs)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(to_onnx(net), str(a.out))
    print(f"digits CNN: train top-1 {tr:.4f}, held-out top-1 {te:.4f}; wrote {a.out}")


if __name__ == "__main__":
    main()
