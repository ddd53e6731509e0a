"""Relu and Clip: fused into their producer (``passes/fuse_relu.py``: Conv and Add clamp their
output at the zero point, ``attrs["relu"]``). One that cannot be fused (after a max pool, a
Slice, a Resize: producers without a clamp) is a table lookup of max(x, 0) / clip(x, lo, hi)
(``lut.lut_qop``) from its input's quantization to its own calibrated one.

Clip(x, lo, hi) (ONNX Clip: ``lo``/``hi`` attributes before opset 11, optional constant inputs
from 11; absent = no bound) with ``lo <= 0 <= hi`` fuses the same way, the int8 way of TFLite's
fused ReLU6: the producer writes the Clip's output tensor, whose calibrated range (observed on the
Clip's own output, so inside ``[lo, hi]``) sets its scale and zero point; requantization
saturates at the range's ends, so the upper bound (and a negative lower one) is the int8
saturation and ``lo = 0`` is the zero-point clamp (``relu``). A range ``[lo, hi]`` without 0 (it
would need a clamp at a non-zero code) is refused, naming the node and the bounds.
"""
from __future__ import annotations

import math

import numpy as np

from tpucompile.ops.common import bad_attr, no_attrs
from tpucompile.ops.lut import is_scalar, lut_qop
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "clip_bounds"]


def _fold(node, x):
    return np.maximum(x, 0).astype(x.dtype)


def _import_clip(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k in ("min", "max") and opset < 11:
            out[k] = float(v)
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def clip_bounds(graph, node) -> tuple:
    """(lo, hi) floats of a Clip (-inf / inf where absent); CompileError naming the node if a
    bound input is not a constant scalar."""
    bounds = [node.attrs.get("min", -math.inf), node.attrs.get("max", math.inf)]
    for i, which in ((1, "min"), (2, "max")):
        if len(node.inputs) > i and node.inputs[i]:
            c = graph.const(node.inputs[i])
            if c is None or np.asarray(c).size != 1:
                raise CompileError(f"node {node.name!r} (Clip): {which} {node.inputs[i]!r} must be a constant "
                                   f"scalar, got {'a run-time tensor' if c is None else np.asarray(c).shape}")
            bounds[i - 1] = float(np.asarray(c).reshape(-1)[0])
    return bounds[0], bounds[1]


def _fold_clip(node, x, *bounds):
    """``bounds``: the constant values of the non-empty bound inputs, in input order."""
    lim = {"min": node.attrs.get("min"), "max": node.attrs.get("max")}
    given = iter(bounds)
    for which, name in zip(("min", "max"), node.inputs[1:3]):
        if name:
            lim[which] = float(np.asarray(next(given)).reshape(-1)[0])
    return np.clip(x, lim["min"], lim["max"]).astype(x.dtype)


def _canonicalize_clip(graph, node, producers) -> list:
    lo, hi = clip_bounds(graph, node)
    if lo > 0 or hi < 0 or lo > hi:
        raise CompileError(f"node {node.name!r} (Clip): bounds [{lo:g}, {hi:g}] do not contain 0; only "
                           "a Clip whose range holds 0 (ReLU6-like) maps onto int8 requantization")
    node.attrs = {"min": lo, "max": hi}
    node.inputs = node.inputs[:1]
    return [node]


def _elementwise_relu(graph, node) -> bool:
    return False


def _elementwise_clip(graph, node):
    """Joins a table lookup when its bounds are constant scalars (or absent)."""
    return False if all(not b or is_scalar(graph, b) for b in node.inputs[1:3]) else None


def _quantize_relu(q, node) -> None:
    """A Relu left after fusion: the LUT of max(x, 0)."""
    x = q.input(node)
    out = q.add_tensor(node.outputs[0], *q.out_params(node), shape=x.shape)
    q.add_op(lut_qop(node.name, x, out, lambda v: np.maximum(v, 0.0), "max(x, 0)"))


def _quantize_clip(q, node) -> None:
    """A Clip left after fusion: the LUT of clip(x, lo, hi)."""
    lo, hi = node.attrs["min"], node.attrs["max"]
    x = q.input(node)
    out = q.add_tensor(node.outputs[0], *q.out_params(node), shape=x.shape)
    q.add_op(lut_qop(node.name, x, out, lambda v: np.clip(v, lo, hi), f"clip(x, {lo:g}, {hi:g})"))


OPS = (OpDef("Relu", import_node=no_attrs, fold=_fold, elementwise=_elementwise_relu, quantize=_quantize_relu),
       OpDef("Clip", import_node=_import_clip, fold=_fold_clip, canonicalize=_canonicalize_clip,
             elementwise=_elementwise_clip, quantize=_quantize_clip))
