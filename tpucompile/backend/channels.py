"""Channel maps: where a tensor's logical channels sit among the lanes of its blocked DDR buffer.

A tensor assembled from views (a channel Concat: every input is a view of a block range of the
output's buffer, written in place by its producer) starts every part on a block boundary, so when
a part's channel count is not a multiple of blk (= the array rows, the SRAM word) the buffer has
unused *gap* lanes. Its ``ChannelMap`` lists segments ``(logical, physical, count)``: logical
channels ``logical .. logical + count - 1`` are lanes ``physical .. physical + count - 1``; the
segments are in logical order and cover ``[0, C)``; physical starts are increasing. The identity
(channel c at lane c) is ``None`` everywhere.

In the device graph (``remap_graph``, run by the layout pass) a mapped tensor has its *physical*
channel count; its consumers were rewritten by their op's ``remap_channels`` hook: a conv (or an
FC layer) gets zero weights on the gap lanes, a lane-wise op (pools) passes the map on to its
output, an element-wise op of two operands (Add) needs them to share one map. Gap lanes hold
whatever the producers write there (a conv's padded output channels: its zero point); no
consumer's result depends on them. ``TensorDesc.channels`` carries the map into the binary, so
outputs and kept layer tensors read back in logical order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.qgraph import QGraph, QTensor
from tpusim.arch.errors import CompileError

__all__ = ["ChannelMap", "ChannelMapRequest", "remap_graph"]


@dataclass(frozen=True)
class ChannelMap:
    """Segments ``(logical, physical, count)`` of a tensor's channels (module docstring)."""
    segments: tuple

    @property
    def logical(self) -> int:
        """Logical channel count C."""
        return sum(n for _, _, n in self.segments)

    @property
    def physical(self) -> int:
        """Lanes spanned (the device tensor's channel count)."""
        return max(p + n for _, p, n in self.segments)

    @staticmethod
    def identity(c: int) -> "ChannelMap":
        return ChannelMap(((0, 0, int(c)),))

    @staticmethod
    def of(segments) -> "ChannelMap | None":
        """The map of ``segments`` with contiguous ones merged; None if that is the identity."""
        out = []
        for l, p, n in segments:
            if out and out[-1][0] + out[-1][2] == l and out[-1][1] + out[-1][2] == p:
                out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
            else:
                out.append((int(l), int(p), int(n)))
        return None if len(out) == 1 and out[0][:2] == (0, 0) else ChannelMap(tuple(out))

    def shifted(self, dl: int, dp: int) -> tuple:
        """The segments moved by ``dl`` logical channels and ``dp`` lanes."""
        return tuple((l + dl, p + dp, n) for l, p, n in self.segments)

    def widen(self, a: np.ndarray, axis: int) -> np.ndarray:
        """``a`` with its logical ``axis`` spread onto the lanes, zeros on the gaps."""
        shape = list(a.shape)
        shape[axis] = self.physical
        out = np.zeros(shape, a.dtype)
        for l, p, n in self.segments:
            dst = [slice(None)] * a.ndim
            src = [slice(None)] * a.ndim
            dst[axis], src[axis] = slice(p, p + n), slice(l, l + n)
            out[tuple(dst)] = a[tuple(src)]
        return out

    def as_json(self) -> list:
        return [list(s) for s in self.segments]


class ChannelMapRequest(CompileError):
    """Raised by a ``remap_channels`` hook that needs its input ``tensor`` laid out with ``map``
    (an Add of a Concat result and a conv output, the two halves of one tensor); the message is
    the error if nobody can. ``copy(name, src, out) -> QOp``, if given, makes an op that writes
    QTensor ``src`` again as ``out`` (same shape, scale and zero point) and can write any map
    (a ``remap_output`` hook); ``reread(tensor) -> QOp`` is the requesting op reading ``tensor``
    instead."""

    def __init__(self, tensor: str, map_: "ChannelMap", message: str, copy=None, reread=None) -> None:
        super().__init__(message)
        self.tensor, self.map, self.copy, self.reread = tensor, map_, copy, reread


def remap_graph(qg: QGraph, blk: int, device, wanted: dict | None = None) -> tuple:
    """The device graph with every mapped tensor at its physical channel count and every op
    rewritten by its ``remap_channels`` hook (``device(op)`` gives the op's DeviceOp), in graph
    order. Returns (QGraph, {tensor: ChannelMap} of the mapped tensors, the logical QGraph: ``qg``
    with the lane copies inserted, if any, else ``qg`` itself). The graph is returned
    unchanged when no tensor has a map and no hook rewrote its op (a Slice's view block). A
    hook's ``ChannelMapRequest`` for a tensor whose producer has a ``remap_output`` hook and no
    other reader (nor is a graph output) is met by that producer writing the map; otherwise, if
    the request offers a copy, by a copy of the tensor inserted before the requesting op and
    writing the map (``_with_lane_copy``). The pass then starts over. ``wanted``: {tensor:
    ChannelMap} its producers (each with a ``remap_output`` hook) write from the start (the
    heads of a transformer's projection, ``ops/act_matmul.py`` ``head_slice_maps``)."""
    wanted = dict(wanted or {})
    while True:
        try:
            return _remap(qg, blk, device, wanted) + (qg,)
        except ChannelMapRequest as req:
            prod = next((op for op in qg.ops if op.out == req.tensor), None)
            readers = sum(op.inputs.count(req.tensor) for op in qg.ops)
            if prod is not None and device(prod).remap_output is not None and readers == 1 \
                    and req.tensor not in qg.outputs and req.tensor not in wanted:
                wanted[req.tensor] = req.map
            elif req.copy is not None:
                qg, copy = _with_lane_copy(qg, req)
                wanted[copy] = req.map
            else:
                raise CompileError(str(req)) from None


def _with_lane_copy(qg: QGraph, req: ChannelMapRequest) -> tuple:
    """(``qg`` with ``req.copy`` of ``req.tensor`` inserted before the op that raised ``req``,
    which reads the copy instead; the copy's name)."""
    reader = req.reread(req.tensor)
    src = qg.tensors[req.tensor]
    name = f"{req.tensor}__lanes_{reader.name}"
    tensors = {**qg.tensors, name: QTensor(name, src.shape, src.scale, src.zero_point)}
    ops = []
    for op in qg.ops:
        if op.name == reader.name:
            ops += [req.copy(f"{reader.name}__lanes_{req.tensor}", src, tensors[name]), req.reread(name)]
        else:
            ops.append(op)
    return QGraph(tensors, ops, list(qg.inputs), list(qg.outputs), list(qg.host_ops), list(qg.fp32_outputs),
                  dict(qg.aliases)), name


def _remap(qg: QGraph, blk: int, device, wanted: dict) -> tuple:
    maps: dict = {}
    ops = []
    for op in qg.ops:
        new, m = device(op).remap_channels(op, maps, blk)
        if op.out in wanted:
            if m is not None:
                raise CompileError(f"internal: op {op.name!r}: asked to write {op.out!r} in a channel map "
                                   "but its inputs give it one already")
            new, m = device(op).remap_output(new, wanted[op.out]), wanted[op.out]
        if m is not None:
            y = qg.tensors[op.out]
            if m.logical != y.shape[1]:
                raise CompileError(f"internal: op {op.name!r}: channel map of {m.logical} channels for "
                                   f"{op.out!r} of {y.shape[1]}")
            maps[op.out] = m
        ops.append(new)
    if not maps and all(a is b for a, b in zip(ops, qg.ops)):
        return qg, {}
    tensors = dict(qg.tensors)
    for name, m in maps.items():
        t = tensors[name]
        tensors[name] = QTensor(t.name, (t.shape[0], m.physical) + tuple(t.shape[2:]), t.scale, t.zero_point)
    out = QGraph(tensors, ops, list(qg.inputs), list(qg.outputs), list(qg.host_ops),
                 list(qg.fp32_outputs), dict(qg.aliases))
    out.validate()
    return out, maps
