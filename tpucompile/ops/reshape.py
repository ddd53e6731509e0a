"""Reshape, Flatten, Squeeze and Unsqueeze of an activation: only as no-op views between
(1, C, 1, 1) and (1, C) (a fully-connected head; tf2onnx writes a global pool's Squeeze of axes
2, 3), which become ``Alias`` nodes (canonicalize) and then QGraph aliases: the ONNX name maps to
the device tensor holding the same bytes. Any other Reshape or Flatten of an activation has no
int8 mapping and is refused by name; on constants they are folded (Unsqueeze and Squeeze: axes
as an attribute before opset 13, as a second input from 13)."""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Node, Tensor
from tpucompile.ops import relayout
from tpucompile.ops.common import bad_attr, is_fc_view
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "fold_reshape", "vector_inputs_as_nchw"]


def _import_reshape(node, a: dict, opset: int) -> dict:
    return {}


def _import_flatten(node, a: dict, opset: int) -> dict:
    if a.get("axis", 1) != 1:
        raise bad_attr(node, "axis", a["axis"], "unsupported (only 1)")
    return {"axis": 1}


def fold_reshape(node, x, shape):
    """ONNX Reshape: a 0 copies the input's dimension."""
    shape = [int(s) for s in shape]
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _fold_flatten(node, x):
    return x.reshape(x.shape[0], -1)


def _import_axes(node, a: dict, opset: int) -> dict:
    for k, v in a.items():
        if k != "axes":
            raise bad_attr(node, k, v, "is not supported")
    return {"axes": tuple(int(x) for x in a["axes"])} if "axes" in a else {}


def _raw_axes(node, rest):
    """The axes of Unsqueeze/Squeeze: the attribute (opset < 13) or the second input (13+)."""
    if "axes" in node.attrs:
        return node.attrs["axes"]
    return tuple(int(x) for x in rest[0].reshape(-1)) if rest else None


def _fold_unsqueeze(node, x, *rest):
    axes = _raw_axes(node, rest)
    ndim = x.ndim + len(axes)
    return x.reshape(_unsqueezed_shape(x.shape, {a % ndim for a in axes}, ndim))


def _unsqueezed_shape(shape, axes, ndim) -> tuple:
    it = iter(shape)
    return tuple(1 if i in axes else next(it) for i in range(ndim))


def _fold_squeeze(node, x, *rest):
    axes = _raw_axes(node, rest)
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(a % x.ndim for a in axes))


def _canonicalize(graph, node, producers) -> list:
    a, b = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
    if is_fc_view(a, b) or is_fc_view(b, a):
        return [Node("Alias", node.name, [node.inputs[0]], node.outputs)]
    return [node]


def vector_inputs_as_nchw(tensors: dict, nodes: list, inputs: list) -> list:
    """A (1, K) graph input (an MLP's) becomes the NCHW tensor (1, K, 1, 1) of the same name and
    bytes, read by the graph through an ``Alias`` with the (1, K) view (so a Gemm on it is a 1x1
    Conv on the input itself). The binary's input is then (1, K, 1, 1); ``golden.quantize_input``
    and the cosim accept the (1, K) array."""
    out = list(nodes)
    for name in inputs:
        t = tensors[name]
        if len(t.shape) == 2 and t.shape[0] == 1:
            flat = f"{name}__2d"
            tensors[flat] = Tensor(flat, t.shape, t.dtype, onnx_name=name)
            tensors[name] = Tensor(name, (1, t.shape[1], 1, 1), t.dtype)
            for nd in out:
                nd.inputs = [flat if i == name else i for i in nd.inputs]
            out.insert(0, Node("Alias", f"{name}__view", [name], [flat]))
    return out


def _quantize_reshape(q, node) -> None:
    """A Reshape / Flatten left after the passes: the same shape -> an alias; one that regroups
    the pixels of each channel -> a ``QRegroup`` copy (``ops/relayout.py``); else CompileError
    saying which forms map."""
    a, b = tuple(q.shape(node.inputs[0])), tuple(q.shape(node.outputs[0]))
    if a == b:
        return _quantize_alias(q, node)
    if relayout.is_regroup(a, b):
        return relayout.OPS[0].quantize(q, node)
    raise CompileError(f"node {node.name!r} ({node.op}): a {node.op} of the activation {node.inputs[0]!r} from "
                       f"{a} to {b} moves values across channels: it maps only as a view between (1, C, 1, 1) and "
                       "(1, C), the flatten before a Gemm or MatMul, inside a channel shuffle read by a Conv, a "
                       "copy that keeps C and the pixel order ((1, C, H, W) -> (1, C, H', W')), or at the end of "
                       "the graph on the host")


def _quantize_alias(q, node) -> None:
    q.input(node)
    q.add_alias(node.outputs[0], node.inputs[0])


OPS = (
    OpDef("Reshape", import_node=_import_reshape, fold=fold_reshape, canonicalize=_canonicalize,
          quantize=_quantize_reshape),
    OpDef("Flatten", import_node=_import_flatten, fold=_fold_flatten, canonicalize=_canonicalize,
          quantize=_quantize_reshape),
    OpDef("Unsqueeze", import_node=_import_axes, fold=_fold_unsqueeze, canonicalize=_canonicalize),
    OpDef("Squeeze", import_node=_import_axes, fold=_fold_squeeze, canonicalize=_canonicalize),
    OpDef("Alias", quantize=_quantize_alias, calibrated=False),   # created by canonicalize only
)
