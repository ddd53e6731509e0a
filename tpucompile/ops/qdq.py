"""QuantizeLinear / DequantizeLinear: pre-quantized (QDQ) models keep their own quantization.

ONNX spec: ``QuantizeLinear(x, s, zp) = saturate(round_half_even(x / s) + zp)`` (int8 or uint8
per ``zp``'s type), ``DequantizeLinear(q, s, zp) = (q - zp) * s``; ``axis`` picks the per-channel
axis of a 1-D ``s`` / ``zp``.

* On constants (the int8 weights and int32 biases ``onnxruntime.quantization.quantize_static``
  stores) both fold (``fold``): the Conv then sees float weights ``(q - zp) * s``. Our per-channel
  symmetric weight quantization (max |w| / 127) gives back exactly the model's integers when its
  weights are symmetric with max |q| = 127 per channel (onnxruntime's default); otherwise the
  weights are requantized (the verdict's LSB difference shows it).
* On activations, a pair ``DequantizeLinear(QuantizeLinear(x, s, zp), s, zp)`` is removed by the
  ``fold_qdq`` pass, which pins (s, zp) on x (``ir.Tensor.qparams``): the quantizer uses them
  instead of a calibrated range. uint8 activations map to int8 exactly: ``q8 = q - 128``,
  ``zp8 = zp - 128``, the same real values. Per-channel activation scales are refused.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import union_groups
from tpucompile.ops.common import bad_attr
from tpucompile.ops.registry import OpDef

__all__ = ["OPS", "pinned_params", "pins_follow_aliases"]


def _import(node, a: dict, opset: int) -> dict:
    out = {"axis": 1}
    for k, v in a.items():
        if k == "axis":
            out[k] = int(v)
        elif k == "saturate" and int(v) == 1:
            pass
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _per_axis(v, ndim: int, axis: int) -> np.ndarray:
    v = np.asarray(v)
    if v.ndim == 0 or v.size == 1:
        return v.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = v.size
    return v.reshape(shape)


def _fold_dq(node, q, s, zp=None):
    q = np.asarray(q)
    s = _per_axis(s, q.ndim, node.attrs["axis"]).astype(np.float64)
    z = 0 if zp is None else _per_axis(zp, q.ndim, node.attrs["axis"]).astype(np.float64)
    return ((q.astype(np.float64) - z) * s).astype(np.float32)


def _fold_q(node, x, s, zp=None):
    x = np.asarray(x, np.float64)
    dt = np.uint8 if zp is None else np.asarray(zp).dtype
    s = _per_axis(s, x.ndim, node.attrs["axis"]).astype(np.float64)
    z = 0 if zp is None else _per_axis(zp, x.ndim, node.attrs["axis"]).astype(np.float64)
    info = np.iinfo(dt)
    return np.clip(np.round(x / s) + z, info.min, info.max).astype(dt)


def pinned_params(scale, zero_point) -> tuple | None:
    """(scale, int8 zero point) of a per-tensor int8 / uint8 quantization, or None if it is per
    channel. A uint8 zero point z is the int8 zero point z - 128 (same real values)."""
    s, z = np.asarray(scale), np.asarray(zero_point) if zero_point is not None else np.uint8(0)
    if s.size != 1 or z.size != 1:
        return None
    zi = int(z.reshape(-1)[0]) - (128 if z.dtype == np.uint8 else 0)
    return float(s.reshape(-1)[0]), zi


OPS = (OpDef("QuantizeLinear", import_node=_import, fold=_fold_q),
       OpDef("DequantizeLinear", import_node=_import, fold=_fold_dq))


def pins_follow_aliases(graph) -> None:
    """Give every tensor of a chain of ``Alias`` nodes (no-op views sharing one device tensor,
    e.g. the Conv output ``y__nchw`` of a Gemm and the Gemm's own output ``y``: ops/gemm.py
    ``fc_as_conv``) the (scale, zero point) the QDQ model pinned on one of them
    (``ir.Tensor.qparams``, set by the fold_qdq pass), in place: the device tensor is quantized
    as the model says whichever view it pinned. Where views are pinned with different
    parameters, each keeps its own and the rest take the first pinned along the chain (the
    device tensor, the Alias's input, comes first)."""
    find, parent = union_groups([[n.inputs[0], n.outputs[0]] for n in graph.nodes if n.op == "Alias"])
    pins: dict = {}
    for t in [t for n in graph.nodes if n.op == "Alias" for t in (n.inputs[0], n.outputs[0])]:
        p = graph.tensors[t].qparams
        if p is not None:
            pins.setdefault(find(t), p)
    for t in parent:
        if graph.tensors[t].qparams is None and find(t) in pins:
            graph.tensors[t].qparams = pins[find(t)]
