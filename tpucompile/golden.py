"""Golden int8 model: runs a QGraph layer by layer in numpy with exactly ``tpusim.arch.arith``.

Independent of tiling and of the binary format: convolution is im2col (input padded with its
zero point) + ``arith.matmul_acc`` (int32) + ``arith.requant_conv``. All tensors are int8 NCHW.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tpusim.arch import arith
from tpucompile.qgraph import QAdd, QAvgPool, QConv, QGraph, QMaxPool

__all__ = ["run_golden", "run_host_ops", "quantize_input", "dequantize", "conv_int8"]


def quantize_input(qg: QGraph, x: np.ndarray, name: str | None = None) -> np.ndarray:
    """float32 NCHW -> int8 with the input tensor's params (ONNX QuantizeLinear:
    round half to even, add zp, saturate to [-128, 127])."""
    t = qg.tensor(name or qg.inputs[0])
    q = np.round(np.asarray(x, np.float64) / t.scale) + t.zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize(qg: QGraph, name: str, q: np.ndarray) -> np.ndarray:
    """int8 -> float32 real values: (q - zero_point) * scale."""
    t = qg.tensor(name)
    return ((np.asarray(q, np.float64) - t.zero_point) * t.scale).astype(np.float32)


def _windows(x: np.ndarray, kernel, strides, pads, pad_value: int) -> np.ndarray:
    """int8 [C, H, W] -> view [C, OH, OW, kh, kw] of the padded input."""
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (l, r)), constant_values=pad_value)
    kh, kw = kernel
    sh, sw = strides
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    return sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]


def conv_int8(op: QConv, x: np.ndarray) -> np.ndarray:
    """QConv on int8 [N, Cin, H, W] -> int8 [N, Cout, OH, OW]."""
    cout = op.weight.shape[0]
    wmat = op.weight.reshape(cout, -1).T                    # [Cin*kh*kw, Cout]
    outs = []
    for xn in x:
        win = _windows(xn, op.kernel, op.strides, op.pads, op.x_zp)
        c, oh, ow, kh, kw = win.shape
        cols = win.transpose(1, 2, 0, 3, 4).reshape(oh * ow, c * kh * kw)
        acc = arith.matmul_acc(cols, wmat)                   # int32 [OH*OW, Cout]
        y = arith.requant_conv(acc, op.bias, op.mult, op.shift, op.y_zp, op.relu)
        outs.append(y.T.reshape(cout, oh, ow))
    return np.stack(outs)


def _maxpool(op: QMaxPool, x):
    return np.stack([_windows(xn, op.kernel, op.strides, op.pads, -128).max(axis=(3, 4)) for xn in x])


def _avgpool(op: QAvgPool, x):
    sums = np.stack([_windows(xn, op.kernel, op.strides, op.pads, 0).astype(np.int64).sum(axis=(3, 4))
                     for xn in x])
    return arith.pool_avg(sums, op.n, op.x_zp, op.mult, op.shift, op.y_zp)


def _add(op: QAdd, a, b):
    return arith.add_int8(a, b, op.zp_a, op.mult_a, op.shift_a, op.zp_b, op.mult_b, op.shift_b,
                          op.zp_out, op.mult_out, op.shift_out, op.relu)


def run_golden(qg: QGraph, x: np.ndarray) -> dict:
    """Run every device op. x: int8 NCHW input of qg.inputs[0]'s shape.
    Returns {tensor name: int8 NCHW array} for the input and every op output (device names;
    use qg.resolve() for aliases). Raises ValueError for a wrong input dtype/shape."""
    x = np.asarray(x)
    t = qg.tensors[qg.inputs[0]]
    if x.dtype != np.int8 or tuple(x.shape) != tuple(t.shape):
        raise ValueError(f"golden input must be int8 {t.shape}, got {x.dtype} {x.shape}")
    env = {t.name: x}
    for op in qg.ops:
        if isinstance(op, QConv):
            y = conv_int8(op, env[op.inp])
        elif isinstance(op, QMaxPool):
            y = _maxpool(op, env[op.inp])
        elif isinstance(op, QAvgPool):
            y = _avgpool(op, env[op.inp])
        elif isinstance(op, QAdd):
            y = _add(op, env[op.a], env[op.b])
        else:
            raise TypeError(f"unknown op {op!r}")
        if tuple(y.shape) != tuple(qg.tensors[op.out].shape):
            raise AssertionError(f"{op.name}: golden shape {y.shape} != {qg.tensors[op.out].shape}")
        env[op.out] = y
    return env


def run_host_ops(qg: QGraph, env: dict) -> dict:
    """Dequantize the device outputs and run the host ops in float32.
    Returns {name: float32 array} for every fp32_output (device outputs are dequantized and
    reshaped to their ONNX shape when they are aliases)."""
    vals = {}
    for h in qg.host_ops:
        x = dequantize(qg, h["inp"], env[qg.resolve(h["inp"])]).reshape(h["shape"])
        if h["op"] != "Softmax":
            raise ValueError(f"unknown host op {h['op']!r}")
        e = np.exp(x - x.max(axis=h["axis"], keepdims=True))
        vals[h["out"]] = (e / e.sum(axis=h["axis"], keepdims=True)).astype(np.float32)
    for name in qg.fp32_outputs:
        if name not in vals:
            vals[name] = dequantize(qg, name, env[qg.resolve(name)])
    return vals
