"""PRelu (ONNX spec: ``y = x < 0 ? slope x : x``, slope broadcast unidirectionally to x).

One slope for every channel (torch's ``nn.PReLU()``, or equal per-channel values) is one function
of x: it joins the element-wise tables (``ops/lut.py``, ``passes/fuse_elementwise``).

Per-channel slopes (``nn.PReLU(C)``: shape (C, 1, 1)) are three device ops the quantizer emits
for the node, all existing instructions:

  pos    = LUT(x -> max(x, 0))      on x's grid (scale, zero point): exact, ``max(v, zp_x)``
  neg    = LUT(x -> min(x, 0))      on x's grid: exact, ``min(v, zp_x)``
  halves = Concat(pos, neg)         no copy: the two LUTs store into the halves of one buffer
  y      = 1x1 Conv(halves)         w[c, c] = 1, w[c, C + c] = slope_c, bias 0; requantized once
                                    to the PRelu's calibrated output

The weights are per-output-channel symmetric int8 (``weight_params``): the 1 is exact when
|slope_c| <= 1 and slope_c is rounded to max(1, |slope_c|)/127; nothing else rounds before the
output. The Conv spends 2C x C MACs per pixel on 2C useful ones (the array is otherwise idle
between two convs). Refused by name: a slope that is not a constant, does not broadcast to x or
varies over H or W; an input that is not NCHW with per-channel slopes.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops.common import no_attrs
from tpucompile.ops.concat import QConcat
from tpucompile.ops.conv import conv_qop
from tpucompile.ops.lut import lut_qop
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "channel_slopes"]


def _one_slope(slope) -> bool:
    """Whether the PRelu slope array holds one value (however many copies of it)."""
    slope = np.asarray(slope)
    return bool(slope.size) and bool(np.all(slope == slope.reshape(-1)[0]))


def _fold_prelu(node, x, slope):
    """ONNX PRelu: ``x < 0 ? slope x : x``, slope broadcast (unidirectionally) to x."""
    x, slope = np.asarray(x), np.asarray(slope)
    if _one_slope(slope):
        slope = slope.reshape(-1)[0]            # one slope: also on a table's 256 values
    return np.where(x < 0, np.asarray(slope, x.dtype) * x, x).astype(x.dtype)


def _elementwise_prelu(graph, node):
    """A PRelu with one slope for every channel (torch's ``nn.PReLU()``; or equal per-channel
    values) is a table on its own; differing per-channel slopes are not a function of one value
    (None: ``_quantize`` maps them)."""
    slope = graph.const(node.inputs[1]) if len(node.inputs) == 2 else None
    return True if slope is not None and _one_slope(slope) else None


def channel_slopes(node, slope, x_shape: tuple) -> np.ndarray:
    """float64 [C]: the slope of each channel of a PRelu on the NCHW ``x_shape`` (ONNX broadcasts
    ``slope`` unidirectionally to x: shapes (C, 1, 1), (1, C, 1, 1) or one value). CompileError naming the node and the slope when it is not a constant, does not
    broadcast, or varies over H or W (not one slope per channel)."""
    name = node.inputs[1]
    if slope is None:
        raise CompileError(f"node {node.name!r} (PRelu): its slope {name!r} is not a constant")
    slope = np.asarray(slope, np.float64)
    try:
        full = np.broadcast_to(slope, x_shape)
    except ValueError:
        raise CompileError(f"node {node.name!r} (PRelu): its slope {name!r} of shape {slope.shape} does not "
                           f"broadcast to the input {x_shape}") from None
    per_c = full.reshape(x_shape[0], x_shape[1], -1)
    if not np.all(per_c == per_c[:1, :, :1]):
        raise CompileError(f"node {node.name!r} (PRelu): its slope {name!r} of shape {slope.shape} varies over "
                           f"the batch or spatial axes of {x_shape}; only one slope per channel maps to the device")
    return per_c[0, :, 0].copy()


def _quantize(q, node) -> None:
    """PRelu with per-channel slopes (one slope: a table, ``fuse_elementwise``): ``y = max(x, 0) +
    slope_c min(x, 0)`` as two LUTs writing ``max(x, 0)`` and ``min(x, 0)`` on x's own grid
    (exact: ``max(v, zp_x)``, ``min(v, zp_x)``) into the halves of one Concat (views: no copy), and
    one 1x1 Conv on the 2C channels with weights ``w[c, c] = 1``, ``w[c, C + c] = slope_c`` (per
    output channel symmetric int8: the slope is rounded to 1/127 of max(1, |slope_c|)), bias 0,
    requantized once to the PRelu's calibrated output. The Conv spends 2C x C MACs per pixel on 2C
    useful ones."""
    x = q.input(node)
    if len(x.shape) != 4:
        raise CompileError(f"node {node.name!r} (PRelu): input {x.name!r} of shape {x.shape} is not NCHW; per-channel "
                           "slopes map to the device on a feature map only")
    s = channel_slopes(node, q.const(node.inputs[1]), tuple(x.shape))
    c, y = x.shape[1], node.outputs[0]
    halves = []
    for part, f, text in (("pos", lambda v: np.maximum(v, 0.0), "Max(x, 0)"),
                          ("neg", lambda v: np.minimum(v, 0.0), "Min(x, 0)")):
        t = q.add_tensor(f"{y}__{part}", x.scale, x.zero_point, shape=x.shape)
        q.add_op(lut_qop(f"{node.name}__{part}", x, t, f, text))
        halves.append(t)
    both = q.add_tensor(f"{y}__halves", x.scale, x.zero_point, shape=(1, 2 * c) + tuple(x.shape[2:]))
    q.add_op(QConcat(f"{node.name}__halves", tuple(t.name for t in halves), both.name, (0, c), (c, c)))
    w = np.zeros((c, 2 * c, 1, 1), np.float32)
    w[np.arange(c), np.arange(c), 0, 0] = 1.0
    w[np.arange(c), c + np.arange(c), 0, 0] = s
    sy, zy = q.out_params(node)
    out = q.add_tensor(y, sy, zy, shape=x.shape)
    q.add_op(conv_qop(node.name, both, w, np.zeros(c), out, (1, 1), (0, 0, 0, 0), False))


OPS = (OpDef("PRelu", import_node=no_attrs, fold=_fold_prelu, elementwise=_elementwise_prelu, quantize=_quantize),)
