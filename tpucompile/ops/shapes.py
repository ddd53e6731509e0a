"""Shape-computation ops of exporter output, evaluated at compile time (every shape is static).

``torch.onnx.export`` and tf2onnx compute Reshape targets, Resize sizes and Slice bounds from
the activations' shapes: ``Shape -> Gather / Slice -> Unsqueeze -> Concat -> Reshape``
(Slice itself: slice.py),
``Cast``, ``Equal``/``Where``, ``ConstantOfShape``/``Expand``, ``Range``. ``Shape`` and ``Size``
read only their input's (static) shape (``fold_shape`` hook, ``passes/constant_fold``); the
others fold once their inputs are constants (``fold``, numpy, with the ONNX spec's semantics).
None of them has a device mapping: one left over (e.g. a Gather of an activation) is
refused by name after the passes. Comparisons, logic and Where of functions of one tensor join
that tensor's table lookup (``passes/fuse_elementwise``).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tpucompile.ops.common import bad_attr, no_attrs
from tpucompile.ops.lut import elementwise_binary, is_scalar
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS"]


def _import_shape(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k in ("start", "end"):
            out[k] = int(v)
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _fold_shape(node, shapes) -> np.ndarray:
    """ONNX Shape (opset 15: ``start`` / ``end``, negative counted from the rank, clamped)."""
    s = np.array(shapes[0], np.int64)
    return s[slice(node.attrs.get("start", 0), node.attrs.get("end"))]


def _fold_size(node, shapes) -> np.ndarray:
    return np.array(int(np.prod(shapes[0], dtype=np.int64)), np.int64)


def _import_axis(node, a: dict, opset: int) -> dict:
    out = {"axis": 0}
    for k, v in a.items():
        if k != "axis":
            raise bad_attr(node, k, v, "is not supported")
        out[k] = int(v)
    return out


def _fold_gather(node, data, idx):
    return np.take(data, np.asarray(idx, np.int64), axis=node.attrs["axis"])


def _import_cast(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k == "to":
            out[k] = int(v)
        elif k == "saturate":
            pass
        else:
            raise bad_attr(node, k, v, "is not supported")
    if "to" not in out:
        raise CompileError(f"node {node.name!r} (Cast): attribute to is required")
    return out


def _fold_cast(node, x):
    return np.asarray(x).astype(helper.tensor_dtype_to_np_dtype(node.attrs["to"]))


def _fold_expand(node, x, shape):
    x = np.asarray(x)
    target = np.broadcast_shapes(x.shape, tuple(int(v) for v in np.asarray(shape).reshape(-1)))
    return np.broadcast_to(x, target).copy()


def _fold_range(node, start, limit, delta):
    return np.arange(np.asarray(start).item(), np.asarray(limit).item(), np.asarray(delta).item()).astype(
        np.result_type(start, limit, delta))


def _binary(fn):
    def fold(node, a, b):
        return fn(np.asarray(a), np.asarray(b))
    return fold


def _fold_where(node, c, a, b):
    return np.where(np.asarray(c, bool), a, b)


def _fold_not(node, x):
    return np.logical_not(x)


def _elementwise_select(graph, node):
    """Where (a piecewise function: worth a table alone, e.g. a leaky ReLU written
    Where(x > 0, x, 0.1 x)) and Not (joins one): element-wise when every operand is a function of
    the group's tensor or a scalar constant (torch's dynamo export of Softplus:
    Where(Greater(x, 20), x, Softplus(x)))."""
    if any(graph.const(i) is not None and not is_scalar(graph, i) for i in node.inputs if i):
        return None
    return node.op == "Where"


def _elementwise_compare(graph, node):
    """Equal, Less, Greater, And, Or: like arithmetic, but never worth a table alone."""
    return None if elementwise_binary(graph, node) is None else False


OPS = (
    OpDef("Shape", import_node=_import_shape, fold_shape=_fold_shape),
    OpDef("Size", import_node=no_attrs, fold_shape=_fold_size),
    OpDef("Gather", import_node=_import_axis, fold=_fold_gather),
    OpDef("Cast", import_node=_import_cast, fold=_fold_cast),
    OpDef("Expand", import_node=no_attrs, fold=_fold_expand),
    OpDef("Range", import_node=no_attrs, fold=_fold_range),
    OpDef("Equal", import_node=no_attrs, elementwise=_elementwise_compare, fold=_binary(np.equal)),
    OpDef("Less", import_node=no_attrs, elementwise=_elementwise_compare, fold=_binary(np.less)),
    OpDef("Greater", import_node=no_attrs, elementwise=_elementwise_compare, fold=_binary(np.greater)),
    OpDef("And", import_node=no_attrs, elementwise=_elementwise_compare, fold=_binary(np.logical_and)),
    OpDef("Or", import_node=no_attrs, elementwise=_elementwise_compare, fold=_binary(np.logical_or)),
    OpDef("Not", import_node=no_attrs, fold=_fold_not, elementwise=_elementwise_select),
    OpDef("Where", import_node=no_attrs, fold=_fold_where, elementwise=_elementwise_select),
)
