"""Slice and Split of an activation on the channel axis, without a copy: the output is a view of
the input's DDR buffer (the inverse of a channel Concat), and the op emits no instruction.

ONNX semantics (Slice opset 1-13, Split opset 1-18): ``y = x[:, a : a + n]`` for a Slice whose
only non-trivial axis is 1 with step 1 (other axes taken whole); a Split on axis 1 is one such
slice per output (``split`` sizes from the attribute (opset < 13) or the second input (13+), or
``num_outputs`` (18) parts of ceil(C / num_outputs) channels, the last one smaller). On
constants both fold (numpy). A (1, C) fully-connected tensor slices like (1, C, 1, 1).

Quantized graph (``QSlice``): the output shares the input's scale and zero point (the same bytes).

Device layout: the output is a view of the input's buffer starting at the block holding its
first channel (``block``); when that channel is not on a block boundary, or the input has a
channel map (a Concat's gap lanes), the output's channel map (``backend/channels.py``) places
its channels on the lanes they occupy, and its readers are rewritten onto them (a conv gets zero
weights on the other lanes, pools pass the map on) exactly as for a Concat output. The view shares
its buffer's border and row geometry (``backend/layout.py``, ``merge_view_borders``).

A slice output that is a part of a Concat cannot be a view of two buffers: the Concat copies it
(concat.py: a table lookup of the identity writes the part).

tf2onnx's channels-last Split (a Transpose to NHWC, a Split on its last axis, each part
transposed back) is the same Split on the NCHW tensor; the Transposes cancel.

A Slice or Split of H or W (positive steps) is a copy: a ``SpatialSlice`` (``ops/spatial_slice.py``)
of every channel, then a channel view if the channels are cut too.

Refused by name: a channel step other than 1 (not one block range of the blocked buffer), a
negative step on H or W, a slice of the batch, bounds that are not constants, an empty slice.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.channels import ChannelMap
from tpucompile.backend.work import no_work
from tpucompile.ir import Node, Tensor
from tpucompile.ops.common import ViewTiling, bad_attr, no_constants, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError

__all__ = ["QSlice", "OPS", "slice_bounds"]


@dataclass(frozen=True)
class QSlice(QOp):
    """Channels ``start .. start + count - 1`` of ``inp`` (NCHW int8), same scale and zero point.
    In the device graph ``block`` is the input block the view starts at (0 before remapping)."""
    name: str
    inp: str
    out: str
    start: int
    count: int
    block: int = 0

    def verify(self, qg) -> None:
        x, y = qg.tensors[self.inp], qg.tensors[self.out]
        if tuple(x.shape[2:]) != tuple(y.shape[2:]) or self.start < 0 or self.count <= 0:
            raise CompileError(f"QSlice {self.name!r}: {y.shape} is not a channel range "
                               f"[{self.start}, {self.start + self.count}) of {x.shape}")
        if (x.scale, x.zero_point) != (y.scale, y.zero_point):
            raise CompileError(f"QSlice {self.name!r}: output {self.out!r} does not share the scale and "
                               f"zero point of its input {self.inp!r}")


# ---------------------------------------------------------------- import and folding
def _import_slice(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k in ("starts", "ends", "axes") and opset < 10:
            out[k] = [int(x) for x in v]
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def slice_bounds(node, ndim: int, bounds: tuple) -> list:
    """Per axis of a rank-``ndim`` tensor, the Python ``slice`` of ONNX Slice ``node`` (bounds
    from its constant inputs ``bounds`` (opset 10+) or its attributes); ValueError for a step
    of 0 or an axis out of range."""
    if bounds:
        names = [n for n, i in zip(("starts", "ends", "axes", "steps"), node.inputs[1:]) if i]
        given = dict(zip(names, bounds))
    else:
        given = dict(node.attrs)
    starts = [int(v) for v in np.asarray(given["starts"]).reshape(-1)]
    ends = [int(v) for v in np.asarray(given["ends"]).reshape(-1)]
    axes = [int(v) for v in np.asarray(given.get("axes", range(len(starts)))).reshape(-1)]
    steps = [int(v) for v in np.asarray(given.get("steps", [1] * len(starts))).reshape(-1)]
    if 0 in steps:
        raise ValueError(f"node {node.name!r} (Slice): a step of 0")
    sl = [slice(None)] * ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        if not -ndim <= ax < ndim:
            raise ValueError(f"node {node.name!r} (Slice): axis {ax} of a rank-{ndim} tensor")
        sl[ax % ndim] = slice(s, e, st)
    return sl


def _fold_slice(node, data, *bounds):
    """ONNX Slice: negative bounds count from the end; bounds clamp as Python slicing does."""
    data = np.asarray(data)
    return data[tuple(slice_bounds(node, data.ndim, bounds))]


def _import_split(node, a: dict, opset: int) -> dict:
    out = {"axis": 0}
    for k, v in a.items():
        if k == "axis" or (k == "num_outputs" and opset >= 18):
            out[k] = int(v)
        elif k == "split" and opset < 13:
            out[k] = [int(x) for x in v]
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _split_sizes(node, dim: int, split) -> list:
    """Sizes of the parts of an axis of ``dim`` (ONNX Split: ``split``, else ``num_outputs`` parts
    of ceil(dim / n), else equal parts, one per output)."""
    if split is None:
        split = node.attrs.get("split")
    if split is not None:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if sum(sizes) != dim or len(sizes) != len(node.outputs) or min(sizes) < 0:
            raise CompileError(f"node {node.name!r} (Split): split {sizes} does not divide an axis of "
                               f"{dim} into {len(node.outputs)} outputs")
        return sizes
    n = node.attrs.get("num_outputs", len(node.outputs))
    if n != len(node.outputs) or n <= 0:
        raise CompileError(f"node {node.name!r} (Split): num_outputs {n} for {len(node.outputs)} outputs")
    part = -(-dim // n)
    if "num_outputs" not in node.attrs and dim % n:
        raise CompileError(f"node {node.name!r} (Split): an axis of {dim} does not split into {n} equal parts")
    return [min(part, dim - i * part) for i in range(n)]


def _fold_split(node, data, *rest):
    data = np.asarray(data)
    axis = node.attrs["axis"] % data.ndim
    sizes = _split_sizes(node, data.shape[axis], rest[0] if rest and rest[0] is not None else None)
    return tuple(np.split(data, np.cumsum(sizes)[:-1], axis=axis))


# ---------------------------------------------------------------- canonical form
def _channel_slice(node, name: str, out: str, shape: tuple, start: int, count: int) -> Node:
    if count <= 0:
        raise CompileError(f"node {node.name!r} ({node.op}): output {out!r} is empty (channels "
                           f"{start}..{start + count} of {shape})")
    if count == shape[1]:
        return Node("Alias", name, [node.inputs[0]], [out])
    return Node("ChannelSlice", name, [node.inputs[0]], [out], {"start": int(start), "count": int(count)})


def _activation_shape(graph, node) -> tuple:
    shape = tuple(graph.tensors[node.inputs[0]].shape)
    if len(shape) not in (2, 4) or shape[0] != 1:
        raise CompileError(f"node {node.name!r} ({node.op}): input {node.inputs[0]!r} of shape {shape} "
                           "unsupported (only (1, C, H, W) and (1, C))")
    return shape


def _nhwc_source(graph, producers, node):
    """The (1, C, H, W) tensor whose channels-last Transpose (perm [0, 2, 3, 1]) ``node`` reads
    (tf2onnx's layout around a Split), or None."""
    t = producers.get(node.inputs[0])
    if t is None or t.op != "Transpose" or tuple(t.attrs.get("perm") or ()) != (0, 2, 3, 1):
        return None
    return t.inputs[0] if len(graph.tensors[t.inputs[0]].shape) == 4 else None


def _via_nchw(graph, node, src: str, make) -> list:
    """``node`` (a Slice / Split on the last axis of the channels-last view of ``src``) done on
    ``src``'s channel axis: ``make(nchw_node)`` canonicalizes the same op reading ``src`` with
    axis 1 into NCHW outputs, each then transposed to the channels-last output ONNX expects (the
    Transpose back to NCHW that reads it cancels against it: transpose.py)."""
    outs, extra = [], []
    for o in node.outputs:
        if not o:
            outs.append(o)
            continue
        n_, h, w, c = graph.tensors[o].shape
        oc = f"{o}__nchw"
        graph.tensors[oc] = Tensor(oc, (n_, c, h, w), graph.tensors[o].dtype, onnx_name=graph.tensors[o].onnx_name)
        outs.append(oc)
        extra.append(Node("Transpose", f"{node.name}__{o}__nhwc", [oc], [o], {"perm": (0, 2, 3, 1)}))
    return make(Node(node.op, node.name, [src, *node.inputs[1:]], outs, dict(node.attrs))) + extra


def _canonicalize_slice(graph, node, producers) -> list:
    """A Slice whose only cut axis is the channels, step 1 -> ChannelSlice (or an Alias when it
    takes every channel); one on the last axis of a channels-last Transpose: the same on the
    Transpose's input; any other Slice of an activation refused naming the axis."""
    src = _nhwc_source(graph, producers, node)
    if src is not None:
        bounds = tuple(graph.const(i) for i in node.inputs[1:] if i)
        try:
            sl = slice_bounds(node, 4, bounds) if all(b is not None for b in bounds) else None
        except ValueError as e:
            raise CompileError(str(e)) from None
        if sl is not None and all(s == slice(None) for s in sl[:3]):
            def to_axis1(n):
                ax = graph.add_const(f"{node.name}__axis1", np.array([1], np.int64))
                st = graph.add_const(f"{node.name}__start", np.array([sl[3].start or 0], np.int64))
                en = graph.add_const(f"{node.name}__end", np.array([sl[3].stop if sl[3].stop is not None
                                                                     else np.iinfo(np.int64).max], np.int64))
                stp = graph.add_const(f"{node.name}__step", np.array([sl[3].step or 1], np.int64))
                return _canonicalize_slice(graph, Node("Slice", n.name, [n.inputs[0], st, en, ax, stp], n.outputs),
                                           producers)
            return _via_nchw(graph, node, src, to_axis1)
    shape = _activation_shape(graph, node)
    bounds = tuple(graph.const(i) for i in node.inputs[1:] if i)
    if any(b is None for b in bounds):
        raise CompileError(f"node {node.name!r} (Slice): its bounds are not constants (after folding "
                           "the shape computations); a data-dependent slice has no device mapping")
    try:
        sl = slice_bounds(node, len(shape), bounds)
    except ValueError as e:
        raise CompileError(str(e)) from None
    ranges = [range(d)[s] for d, s in zip(shape, sl)]
    for ax, (d, r) in enumerate(zip(shape, ranges)):
        if (ax == 0 and len(r) != d) or (ax >= 2 and len(r) and r.step < 0):
            raise CompileError(f"node {node.name!r} (Slice): a slice of axis {ax} of {shape} "
                               f"({r.start}:{r.stop}:{r.step}) is unsupported: only the channels (a view) "
                               "and H, W with positive steps (a copy) are sliced on the device")
    r = ranges[1]
    if len(r) and r.step != 1:
        raise CompileError(f"node {node.name!r} (Slice): channel step {r.step} unsupported (only 1: "
                           "a strided channel slice is not one range of lanes)")
    if len(shape) == 4 and any(len(q) != d for q, d in zip(ranges[2:], shape[2:])):
        return _spatial_then_channels(graph, node, shape, ranges)
    return [_channel_slice(node, node.name, node.outputs[0], shape, r.start if len(r) else 0, len(r))]


def _spatial_node(node, name: str, inp: str, out: str, rows: range, cols: range) -> Node:
    """The ``SpatialSlice`` (ops/spatial_slice.py) of ``rows`` and ``cols`` of ``inp``;
    CompileError naming the node if one is empty."""
    if not len(rows) or not len(cols):
        raise CompileError(f"node {node.name!r} ({node.op}): output {out!r} is empty (rows {rows}, columns {cols})")
    return Node("SpatialSlice", name, [inp], [out], {"rows": (rows.start, rows.step, len(rows)),
                                                        "cols": (cols.start, cols.step, len(cols))})


def _spatial_then_channels(graph, node, shape: tuple, ranges: list) -> list:
    """A Slice of H or W: a SpatialSlice of every channel, then a ChannelSlice view if the channels
    are cut too."""
    out, r = node.outputs[0], ranges[1]
    if len(r) == shape[1]:
        return [_spatial_node(node, node.name, node.inputs[0], out, ranges[2], ranges[3])]
    mid = f"{out}__hw"
    graph.tensors[mid] = Tensor(mid, (1, shape[1], len(ranges[2]), len(ranges[3])), graph.tensors[out].dtype)
    crop = _spatial_node(node, f"{node.name}__hw", node.inputs[0], mid, ranges[2], ranges[3])
    return [crop] + [_channel_slice(Node(node.op, node.name, [mid], [out]), node.name, out, graph.tensors[mid].shape,
                                    r.start if len(r) else 0, len(r))]


def _canonicalize_split(graph, node, producers) -> list:
    """A Split on the channels -> one ChannelSlice per output (also one on the last axis of a
    channels-last Transpose: on the Transpose's input); other axes refused."""
    src = _nhwc_source(graph, producers, node)
    if src is not None and node.attrs["axis"] in (3, -1):
        return _via_nchw(graph, node, src, lambda n: _canonicalize_split(
            graph, Node("Split", n.name, n.inputs, n.outputs, {**n.attrs, "axis": 1}), producers))
    shape = _activation_shape(graph, node)
    axis = node.attrs["axis"] % len(shape) if -len(shape) <= node.attrs["axis"] < len(shape) else None
    if axis not in (1, 2, 3) or (axis > 1 and len(shape) != 4):
        raise CompileError(f"node {node.name!r} (Split): axis {node.attrs['axis']} of {shape} is "
                           "unsupported: only the channels (views) and H, W (copies) split on the device")
    split = None
    if len(node.inputs) > 1 and node.inputs[1]:
        split = graph.const(node.inputs[1])
        if split is None:
            raise CompileError(f"node {node.name!r} (Split): split {node.inputs[1]!r} is not a constant")
    sizes = _split_sizes(node, shape[axis], split)
    starts = np.cumsum([0] + sizes[:-1])
    if axis > 1:
        whole = [range(shape[2]), range(shape[3])]
        return [_spatial_node(node, f"{node.name}__{i}", node.inputs[0], out,
                              *[range(s, s + n) if ax == axis else whole[ax - 2] for ax in (2, 3)])
                for i, (out, s, n) in enumerate(zip(node.outputs, starts, sizes)) if out]
    return [_channel_slice(node, f"{node.name}__{i}", out, shape, int(s), n)
            for i, (out, s, n) in enumerate(zip(node.outputs, starts, sizes)) if out]


# ---------------------------------------------------------------- quantization and golden
def _quantize(q, node) -> None:
    x = q.input(node)
    a, n = node.attrs["start"], node.attrs["count"]
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=(1, n) + tuple(x.shape[2:]))
    q.add_op(QSlice(node.name, x.name, out.name, a, n))


def _golden(op: QSlice, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x[:, op.start:op.start + op.count])


# ---------------------------------------------------------------- device lowering
def _remap_channels(op: QSlice, maps: dict, blk: int):
    """The lanes of the slice's channels in the input's map (the identity if none); the view
    starts at the block of the first, and the output's map is those lanes from there."""
    m = maps.get(op.inp)
    src = m.segments if m is not None else ((0, 0, 10 ** 9),)
    lo, hi = op.start, op.start + op.count
    segs = [(max(l, lo), p + max(l, lo) - l, min(l + n, hi) - max(l, lo)) for l, p, n in src
            if l < hi and l + n > lo]
    block = segs[0][1] // blk
    out = ChannelMap.of([(l - lo, p - block * blk, n) for l, p, n in segs])
    return (op if block == op.block else dataclasses.replace(op, block=block)), out


def _layout(op: QSlice, qg, lays) -> None:
    """The output is a view of its input's buffer from block ``op.block``."""
    lay = lays[op.out]
    lay.view_of, lay.view_block, lay.view_by, lay.view_written = op.inp, op.block, op.name, False


def _tile(op: QSlice, lays: dict, cfg) -> ViewTiling:
    return ViewTiling()


def _emit(P, op: QSlice, lays: dict, tl: ViewTiling, consts: dict) -> None:
    """Nothing: the output is the input's bytes."""


def _describe(op: QSlice, tl: ViewTiling) -> dict:
    return dict(start=op.start, count=op.count, view_block=op.block, views=True)


DEVICE = DeviceOp(QSlice, golden=_golden, input_transform=no_input_transform, remap_channels=_remap_channels,
                  plan_layout=_layout, constants=no_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=no_work)
OPS = (
    OpDef("Slice", import_node=_import_slice, fold=_fold_slice, canonicalize=_canonicalize_slice),
    OpDef("Split", import_node=_import_split, fold=_fold_split, canonicalize=_canonicalize_split),
    OpDef("ChannelSlice", quantize=_quantize, calibrated=False, device=DEVICE),   # created by canonicalize only
)
