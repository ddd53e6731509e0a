"""ConstantOfShape: only as a constant (the placeholder weights of the onnx "light" models),
evaluated by constant folding into a ``value``-filled array of the given shape."""
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


OPS = (OpDef("ConstantOfShape", import_node=_import, fold=_fold),)
