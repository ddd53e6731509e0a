"""Concat on the channel axis, without a copy: every input is a view of a block range of the
output's DDR buffer, so its producer writes straight into its slice, and the Concat itself emits
no instruction.

Semantics (``QConcat``): ``y[:, offsets[i] : offsets[i] + counts[i]] = parts[i]``; in the
quantized graph the offsets are the running sums of the channel counts (ONNX Concat, axis 1). The
parts and the output share one scale and zero point: the quantizer calibrates them as one range,
the union of theirs (``shared_range``), so every producer requantizes into the common scale
(exact only up to rounding against onnxruntime's float Concat), a max pool or an alias before it
passing the range on to its own input, and a graph input part is quantized by the host with it.

Device layout: every part starts on a block boundary of the output (blk = the array rows). When a
part's channel count is not a multiple of blk, the output has gap lanes and a channel map
(``backend/channels.py``); its readers are rewritten onto the lanes (a conv gets zero weights on
the gaps, pools pass the map on), and its TensorDesc carries the map. The output buffer's border
is the largest any reader of the output or of a part needs (``backend/layout.py``,
``merge_view_borders``); two pad values on one buffer are refused naming both readers.

Refused by name: an axis other than the channels (an H or W slice of a blocked buffer is not one
block range, and the parts' borders would overlap their neighbours), a tensor that is twice an
input of one Concat or an input of two Concats that do not nest (it would need two places). A
Concat input that is itself a Concat output (DenseNet's growing concatenations) becomes a view
of the outer one. A single-input Concat is an Alias.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.channels import ChannelMap
from tpucompile.backend.layout import ceil_div
from tpucompile.backend.work import no_work
from tpucompile.ir import Node
from tpucompile.ops.common import ViewTiling, bad_attr, no_constants, no_input_transform, no_macs
from tpucompile.ops.lut import lut_qop
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.slice import QSlice
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError

__all__ = ["QConcat", "OPS"]


@dataclass(frozen=True)
class QConcat(QOp):
    """Channel concatenation: part i is channels ``offsets[i] .. offsets[i] + counts[i] - 1`` of
    ``out`` (the offsets strictly increasing, the parts disjoint); all share one scale and zero
    point. In the device graph the offsets are block aligned and the counts physical lanes."""
    name: str
    parts: tuple
    out: str
    offsets: tuple
    counts: tuple

    @property
    def inputs(self) -> tuple:
        return tuple(self.parts)

    def verify(self, qg) -> None:
        y = qg.tensors[self.out]
        if not len(self.parts) == len(self.offsets) == len(self.counts):
            raise CompileError(f"QConcat {self.name!r}: {len(self.parts)} parts, {len(self.offsets)} "
                               f"offsets, {len(self.counts)} counts")
        end = 0
        for part, off, c in zip(self.parts, self.offsets, self.counts):
            x = qg.tensors[part]
            if tuple(x.shape[2:]) != tuple(y.shape[2:]) or x.shape[1] != c:
                raise CompileError(f"QConcat {self.name!r}: part {part!r} of shape {x.shape} is not "
                                   f"{c} channels of {y.shape[2:]}")
            if (x.scale, x.zero_point) != (y.scale, y.zero_point):
                raise CompileError(f"QConcat {self.name!r}: part {part!r} (scale {x.scale:.6g}, zero "
                                   f"point {x.zero_point}) does not share the output's scale "
                                   f"{y.scale:.6g} and zero point {y.zero_point}")
            if off < end:
                raise CompileError(f"QConcat {self.name!r}: part {part!r} at channel {off} overlaps "
                                   f"the previous part (ending at {end})")
            end = off + c
        if end > y.shape[1]:
            raise CompileError(f"QConcat {self.name!r}: parts end at channel {end}, the output has {y.shape[1]}")


# ---------------------------------------------------------------- import, passes, quantization
def _import(node, a: dict, opset: int) -> dict:
    for k, v in a.items():
        if k != "axis":
            raise bad_attr(node, k, v, "is not supported")
    return {"axis": int(a.get("axis", 1))}


def _fold(node, *xs):
    return np.concatenate(xs, axis=node.attrs["axis"])


def _canonicalize(graph, node, producers) -> list:
    """The axis normalised to 1 (the channels of NCHW, or of an (N, C) fully-connected tensor);
    any other axis refused by name; one input: an Alias."""
    shape = tuple(graph.tensors[node.outputs[0]].shape)
    axis = node.attrs["axis"]
    ax = axis + len(shape) if axis < 0 else axis
    if len(shape) not in (2, 4) or ax != 1:
        raise CompileError(
            f"node {node.name!r} (Concat): axis {axis} of the rank-{len(shape)} output {shape} is "
            "unsupported: only the channel axis (1) concatenates without a copy (each input a "
            "block range of one blocked buffer); an H or W concatenation would need a copy")
    if len(node.inputs) == 1:
        return [Node("Alias", node.name, node.inputs, node.outputs)]
    node.attrs["axis"] = 1
    return [node]


def _shared_range(node) -> list:
    return list(node.inputs) + list(node.outputs[:1])


def _range_from_zero(node) -> bool:
    """A Relu fused into the Concat (passes/fuse_relu.py): its inputs' producers clamp by saturating
    at the group's zero point -128."""
    return bool(node.attrs.get("relu"))


def _quantize(q, node) -> None:
    xs = [q.input(node, i) for i in range(len(node.inputs))]
    seen = {}
    for name, x in zip(node.inputs, xs):
        if x.name in seen:
            what = (f"input {name!r} appears twice" if seen[x.name] == name else
                    f"inputs {seen[x.name]!r} and {name!r} are the same device tensor {x.name!r}")
            raise CompileError(f"node {node.name!r} (Concat): {what}; without a copy a tensor is one "
                               "part only")
        seen[x.name] = name
    sy, zy = q.out_params(node)
    views = {op.out for op in q.qg.ops if isinstance(op, QSlice)}
    xs = [x if (x.scale, x.zero_point) == (sy, zy) and x.name not in views else _requantized(q, node, x, sy, zy)
          for x in xs]
    counts = tuple(int(x.shape[1]) for x in xs)
    offsets = tuple(int(o) for o in np.cumsum((0,) + counts[:-1]))
    out = q.add_tensor(node.outputs[0], sy, zy, shape=(1, sum(counts)) + tuple(xs[0].shape[2:]))
    q.add_op(QConcat(node.name, tuple(x.name for x in xs), out.name, offsets, counts))


def _requantized(q, node, x, sy: float, zy: int):
    """A part whose scale or zero point differs from the output's (a pre-quantized model pins
    each tensor's own; calibrated parts share the output's range already), or that is a view of
    another buffer already (a channel Slice's output): a LUT that maps it onto the output's grid (``y = clamp(round(s_x (x - zp_x) / s_y) + zp_y)``) writes the part instead."""
    part = q.add_tensor(f"{x.name}__to_{node.outputs[0]}", sy, zy, shape=x.shape)
    q.add_op(lut_qop(f"{node.name}__requant_{x.name}", x, part, lambda v: v, "x"))
    return part


# ---------------------------------------------------------------- golden
def _golden(op: QConcat, *xs: np.ndarray) -> np.ndarray:
    n, _, h, w = xs[0].shape
    y = np.zeros((n, op.offsets[-1] + op.counts[-1], h, w), np.int8)
    for x, off in zip(xs, op.offsets):
        y[:, off:off + x.shape[1]] = x
    return y


# ---------------------------------------------------------------- device lowering
def _remap_channels(op: QConcat, maps: dict, blk: int):
    """Every part starts on the next block boundary; the output's map is the parts' maps shifted
    there (None when that is the identity: every part but the last a multiple of blk)."""
    segs, offsets, counts = [], [], []
    logical = block = 0
    for part, c in zip(op.parts, op.counts):
        m = maps.get(part) or ChannelMap.identity(c)
        segs += m.shifted(logical, block * blk)
        offsets.append(block * blk)
        counts.append(m.physical)
        logical += m.logical
        block += ceil_div(m.physical, blk)
    out = ChannelMap.of(segs)
    if out is None:
        return op, None
    return dataclasses.replace(op, offsets=tuple(offsets), counts=tuple(counts)), out


def _layout(op: QConcat, qg, lays) -> None:
    """Each part becomes a view of its block range of the output."""
    for part, off in zip(op.parts, op.offsets):
        lay = lays[part]
        if off % lay.blk:
            raise CompileError(f"internal: QConcat {op.name!r}: part {part!r} at channel {off}, not on "
                               f"a {lay.blk}-channel block")
        if lay.view_of is not None:
            raise CompileError(f"tensor {part!r} is an input of Concat {lay.view_by!r} and of {op.name!r}: "
                               "without a copy a tensor is a part of one Concat output only")
        lay.view_of, lay.view_block, lay.view_by = op.out, off // lay.blk, op.name


def _tile(op: QConcat, lays: dict, cfg) -> ViewTiling:
    return ViewTiling()


def _emit(P, op: QConcat, lays: dict, tl: ViewTiling, consts: dict) -> None:
    """Nothing: the producers of the parts wrote them in place."""


def _describe(op: QConcat, tl: ViewTiling) -> dict:
    return dict(parts=list(op.parts), offsets=list(op.offsets), views=True)


DEVICE = DeviceOp(QConcat, golden=_golden, input_transform=no_input_transform,
                  remap_channels=_remap_channels, plan_layout=_layout, constants=no_constants,
                  tile=_tile, emit=_emit, describe=_describe, macs=no_macs, work=no_work)
OPS = (OpDef("Concat", import_node=_import, fold=_fold, canonicalize=_canonicalize, quantize=_quantize,
             shared_range=_shared_range, range_from_zero=_range_from_zero, device=DEVICE),)
