"""LRN (local response normalization across channels; AlexNet, ZFNet, GoogLeNet v1).

ONNX spec: ``square_sum[c] = sum of x[i]^2`` for ``max(0, c - floor((size-1)/2)) <= i <=
min(C-1, c + ceil((size-1)/2))``; ``y = x / (bias + alpha/size * square_sum)^beta`` (defaults alpha
1e-4, beta 0.75, bias 1).

Device: four device ops, all existing instructions (the quantizer emits them for one LRN node):

  sq  = LUT(x -> x^2)                       range [0, a^2], a = max |x| of x's int8 grid
  den = 1x1 Conv(sq), weight alpha/size on the channel window (a band matrix), bias ``bias``
                                            range [bias, bias + alpha a^2]
  inv = LUT(den -> max(den, bias)^-beta)    range [(bias + alpha a^2)^-beta, bias^-beta]
  y   = MUL(x, inv)                         the LRN output's calibrated range

The three inner ranges are derived from x's quantization, not calibrated (the tensors do not
exist in the ONNX graph); they bound the true values, so nothing saturates, at the price of
resolution on squares far below a^2 (which only move the denominator by alpha/size times them).
The band weights quantize exactly (every non-zero weight is the channel's maximum). The 1x1 Conv
spends C x C MACs per pixel on ``size`` useful ones.
"""
from __future__ import annotations

import math

import numpy as np

from tpucompile.ops.common import activation_params, bad_attr
from tpucompile.ops.conv import conv_qop
from tpucompile.ops.lut import lut_qop
from tpucompile.ops.mul import mul_qop
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "lrn_float", "band_weights"]

_DEFAULTS = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}


def _import(node, a: dict, opset: int) -> dict:
    out = dict(_DEFAULTS)
    for k, v in a.items():
        if k == "size":
            if int(v) < 1:
                raise bad_attr(node, k, v, "must be >= 1")
            out[k] = int(v)
        elif k in _DEFAULTS:
            out[k] = float(v)
        else:
            raise bad_attr(node, k, v, "is not supported")
    if "size" not in out:
        raise CompileError(f"node {node.name!r} (LRN): attribute size is required")
    if out["bias"] <= 0:
        raise bad_attr(node, "bias", out["bias"], "must be > 0 (the denominator's lower bound)")
    return out


def band_weights(c: int, size: int, scale: float) -> np.ndarray:
    """float32 [C, C, 1, 1]: ``scale`` where input channel i is in output channel c's window
    (ONNX LRN: c - floor((size-1)/2) <= i <= c + ceil((size-1)/2)), else 0."""
    lo, hi = (size - 1) // 2, math.ceil((size - 1) / 2)
    i = np.arange(c)
    band = (i[None, :] >= i[:, None] - lo) & (i[None, :] <= i[:, None] + hi)
    return (band * scale).astype(np.float32)[:, :, None, None]


def lrn_float(x: np.ndarray, attrs: dict) -> np.ndarray:
    """The ONNX LRN of NCHW ``x`` in float64 (also the constant-folding hook)."""
    x = np.asarray(x, np.float64)
    w = band_weights(x.shape[1], attrs["size"], 1.0)[:, :, 0, 0].astype(np.float64)
    ssum = np.einsum("ci,ni...->nc...", w, x * x)
    return x / (attrs["bias"] + attrs["alpha"] / attrs["size"] * ssum) ** attrs["beta"]


def _fold(node, x):
    return lrn_float(x, node.attrs).astype(np.asarray(x).dtype)


def _quantize(q, node) -> None:
    x = q.input(node)
    if len(x.shape) != 4:
        raise CompileError(f"node {node.name!r} (LRN): input {x.name!r} of shape {x.shape} is not NCHW")
    a = node.attrs
    amax = x.scale * max(128 + x.zero_point, 127 - x.zero_point)
    k, alpha, beta, n = a["bias"], a["alpha"], a["beta"], a["size"]
    y = node.outputs[0]
    sq = q.add_tensor(f"{y}__sq", *activation_params(0.0, amax * amax), shape=x.shape)
    q.add_op(lut_qop(f"{node.name}__sq", x, sq, lambda v: v * v, "Mul(x, x)"))
    den = q.add_tensor(f"{y}__den", *activation_params(0.0, k + alpha * amax * amax), shape=x.shape)
    c = x.shape[1]
    q.add_op(conv_qop(f"{node.name}__sum", sq, band_weights(c, n, alpha / n), np.full(c, k), den, (1, 1),
                      (0, 0, 0, 0), False))
    inv = q.add_tensor(f"{y}__inv", *activation_params(0.0, k ** -beta), shape=x.shape)
    q.add_op(lut_qop(f"{node.name}__inv", den, inv, lambda v: np.maximum(v, k) ** -beta,
                     f"Pow(Max(x, {k:g}), {-beta:g})"))
    sy, zy = q.out_params(node)
    out = q.add_tensor(y, sy, zy, shape=x.shape)
    q.add_op(mul_qop(node.name, x, inv, out, False))


OPS = (OpDef("LRN", import_node=_import, fold=_fold, quantize=_quantize),)
