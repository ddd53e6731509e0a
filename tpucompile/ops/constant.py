"""ConstantOfShape: only as a constant (the placeholder weights of the onnx "light" models),
evaluated by constant folding into a ``value``-filled array of the given shape. Constant (the
TorchScript exporter's Clip bounds, Reshape shapes): folded into its value (ONNX Constant: exactly
one of ``value``, ``value_float(s)``, ``value_int(s)``; sparse and string values are refused)."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from tpucompile.ops.common import bad_attr, one_line
from tpucompile.ops.registry import OpDef

__all__ = ["OPS"]


def _import(node, a: dict, opset: int) -> dict:
    v = a.get("value")
    try:
        arr = numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)
    except Exception as e:
        raise bad_attr(node, "value", f"<tensor dims {list(v.dims)}>", f"is malformed: {one_line(e)}") from None
    if arr.size != 1:
        raise bad_attr(node, "value", arr.tolist(), "must hold exactly one element")
    return {"value": arr}


def _fold(node, shape):
    value = node.attrs["value"]
    return np.full(tuple(int(d) for d in shape), value.reshape(-1)[0], dtype=value.dtype)


_CONSTANT_ATTRS = {"value": None, "value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


def _import_constant(node, a: dict, opset: int) -> dict:
    for k, v in a.items():
        if k not in _CONSTANT_ATTRS:
            raise bad_attr(node, k, one_line(v), "is not supported (only value, value_float(s), value_int(s))")
    if len(a) != 1:
        raise bad_attr(node, "value*", sorted(a), "must be exactly one attribute (ONNX Constant)")
    (k, v), = a.items()
    if k == "value":
        try:
            return {"value": numpy_helper.to_array(v)}
        except Exception as e:
            raise bad_attr(node, "value", f"<tensor dims {list(v.dims)}>", f"is malformed: {one_line(e)}") from None
    return {"value": np.asarray(v, _CONSTANT_ATTRS[k])}


def _fold_constant(node):
    return node.attrs["value"]


OPS = (OpDef("ConstantOfShape", import_node=_import, fold=_fold),
       OpDef("Constant", import_node=_import_constant, fold=_fold_constant))
