"""Transpose: folded on constants; on an activation only inside a channel shuffle that a Conv
absorbs. ShuffleNet's shuffle ``Reshape (1, C, H, W) -> (1, g, C/g, H, W)``, ``Transpose perm
[0, 2, 1, 3, 4]``, ``Reshape -> (1, C, H, W)`` only permutes channels: the Conv reading its result
reads the shuffle's input instead, with its weight's input channels permuted the same way
(``channel_permutation``, used by conv.py's canonicalize), so no data moves. A depthwise Conv
reading a shuffle whose every reader is a Conv runs on the shuffle's input with its filters
permuted, and the shuffle moves to its output , where those Convs absorb
it in turn: a ``ChannelPermute`` node (``perm``: output channel j is input channel perm[j])
is the moved shuffle, only ever absorbed. A Transpose left
over (another consumer, another permutation) has no int8 mapping and is refused by name.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Node
from tpucompile.ops import relayout, reshape
from tpucompile.ops.common import bad_attr
from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "channel_permutation"]

#: largest C*H*W a chain is traced on (an index array of that many int64)
MAX_TRACE_ELEMENTS = 1 << 24


def _import(node, a: dict, opset: int) -> dict:
    for k, v in a.items():
        if k != "perm":
            raise bad_attr(node, k, v, "is not supported")
    return {"perm": tuple(int(p) for p in a["perm"])} if "perm" in a else {}


def _fold(node, x):
    return np.transpose(x, node.attrs.get("perm"))


def channel_permutation(graph, producers, name: str):
    """(source tensor, perm) if ``name`` is a Reshape/Transpose/.../Reshape chain over a
    (1, C, H, W) source whose result is that source with channel ``j`` taken from source channel
    ``perm[j]`` (H, W untouched); None otherwise. Traced on an index array (exact for any chain
    of Reshape and Transpose nodes with constant shapes)."""
    chain, cur = [], name
    while True:
        p = producers.get(cur)
        if p is None or p.op not in ("Reshape", "Transpose", "ChannelPermute"):
            break
        chain.append(p)
        cur = p.inputs[0]
    if not any(n.op in ("Transpose", "ChannelPermute") for n in chain):
        return None
    src_shape, out_shape = graph.tensors[cur].shape, graph.tensors[name].shape
    if len(src_shape) != 4 or tuple(src_shape) != tuple(out_shape) or src_shape[0] != 1 or \
            int(np.prod(src_shape)) > MAX_TRACE_ELEMENTS:
        return None
    idx = np.arange(int(np.prod(src_shape)), dtype=np.int64).reshape(src_shape)
    for n in reversed(chain):
        if n.op == "ChannelPermute":
            if idx.ndim != 4:
                return None
            idx = idx[:, list(n.attrs["perm"])]
        elif n.op == "Transpose":
            perm = n.attrs.get("perm")
            if perm is not None and len(perm) != idx.ndim:
                return None
            idx = np.transpose(idx, perm)
        else:
            shape = graph.const(n.inputs[1]) if len(n.inputs) > 1 else None
            if shape is None:
                return None
            try:
                idx = reshape.fold_reshape(n, idx, shape)    # ONNX Reshape (0 copies a dimension)
            except ValueError:
                return None
    if tuple(idx.shape) != tuple(src_shape):
        return None
    c, hw = src_shape[1], src_shape[2] * src_shape[3]
    flat = idx.reshape(c, hw)
    perm = flat[:, 0] // hw
    if not np.array_equal(flat, perm[:, None] * hw + np.arange(hw)):
        return None
    return cur, perm


@refusal
def _refuse_permute(q, node) -> None:
    raise CompileError(f"node {node.name!r}: the channel shuffle moved after depthwise Conv "
                       f"{node.inputs[0]!r} is read by a node that does not absorb it")


def _canonicalize(graph, node, producers) -> list:
    """A Transpose of a Transpose that undoes it (tf2onnx's NHWC <-> NCHW pairs) -> an Alias of
    the first one's input; kept otherwise (a channel shuffle is absorbed by its reader)."""
    p = producers.get(node.inputs[0])
    if p is not None and p.op == "Transpose" and p.attrs.get("perm") and node.attrs.get("perm"):
        p1, p2 = p.attrs["perm"], node.attrs["perm"]
        if [p1[i] for i in p2] == list(range(len(p1))):
            return [Node("Alias", node.name, [p.inputs[0]], list(node.outputs))]
    return [node]


def _quantize_transpose(q, node) -> None:
    """A Transpose left after the passes: perm [0, 1, 3, 2] of a 4-D activation -> a
    ``QSpatialTranspose`` copy (``ops/relayout.py``); else CompileError saying which forms map."""
    perm = list(node.attrs.get("perm") or [])
    if perm == [0, 1, 3, 2] and len(q.shape(node.inputs[0])) == 4:
        return relayout.OPS[1].quantize(q, node)
    if node.inputs[0] in q.g.inputs:
        why = ("the channels-last input's Transpose to NCHW runs on the host only when every reader of the "
               "input is a Transpose with perm [0, 3, 1, 2] and none of them is a graph output")
    else:
        why = ("a Transpose of an activation maps only as a channel shuffle read by a Conv, a Transpose undone "
               "by the next one, a channels-last Flatten before a Gemm / MatMul, or a copy swapping H and W "
               "(perm [0, 1, 3, 2]); any other moves values across channels")
    raise CompileError(f"node {node.name!r} (Transpose perm {perm}): {why}")


OPS = (OpDef("Transpose", import_node=_import, fold=_fold, canonicalize=_canonicalize, quantize=_quantize_transpose),
       OpDef("ChannelPermute", quantize=_refuse_permute))      # created by conv.py's canonicalize only
