"""ONNX -> tpucompile float IR.

Loads the model, runs ``onnx.shape_inference``, checks every op and attribute against what the
accelerator flow supports, and normalises attributes:

* Conv: kernel_shape, strides (sh, sw), pads (top, left, bottom, right) [ONNX order is
  (top, left, bottom, right) for 2-D], relu=False.
* MaxPool / AveragePool: kernel_shape, strides, pads likewise.
* Gemm: transB (0/1); BatchNormalization: epsilon; Softmax: axis; Flatten: axis;
  ConstantOfShape: value (np.ndarray).

Anything unsupported raises CompileError naming the node, op and attribute/value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from tpusim.errors import CompileError
from tpucompile.ir import Graph, Node, Tensor, prune, verify

__all__ = ["SUPPORTED_OPS", "import_onnx"]

SUPPORTED_OPS = ("Conv", "BatchNormalization", "Relu", "Sum", "Add", "MaxPool", "AveragePool",
                 "GlobalAveragePool", "Reshape", "Flatten", "Gemm", "Softmax", "ConstantOfShape")


def _bad(node, attr, value, why="unsupported"):
    return CompileError(f"node {node.name!r} ({node.op_type}): attribute {attr}={value!r} {why}")


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _spatial(node, a: dict, allowed: set) -> dict:
    """Common Conv/pool attribute checks; returns kernel_shape, strides, pads."""
    for k, v in a.items():
        if k not in allowed:
            raise _bad(node, k, v, "is not supported")
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise _bad(node, "auto_pad", a["auto_pad"], "unsupported (only NOTSET)")
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise _bad(node, "dilations", list(a["dilations"]), "unsupported (only 1)")
    if a.get("ceil_mode", 0) != 0:
        raise _bad(node, "ceil_mode", a["ceil_mode"], "unsupported (only 0)")
    if a.get("storage_order", 0) != 0:
        raise _bad(node, "storage_order", a["storage_order"], "unsupported (only 0)")
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) != 2:
        raise _bad(node, "kernel_shape", list(ks), "unsupported (only 2-D)")
    strides = tuple(a.get("strides", [1, 1]))
    pads = a.get("pads", [0, 0, 0, 0])
    if len(pads) != 4 or len(strides) != 2 or min(pads) < 0 or min(strides) < 1:
        raise _bad(node, "pads/strides", (list(pads), list(strides)), "invalid")
    # ONNX pads are [x1_begin, x2_begin, x1_end, x2_end] = (top, left, bottom, right)
    return {"kernel_shape": tuple(ks) if ks is not None else None, "strides": strides,
            "pads": tuple(int(p) for p in pads)}


def _conv(node, a):
    if a.get("group", 1) != 1:
        raise _bad(node, "group", a["group"], "unsupported (only 1)")
    out = _spatial(node, {k: v for k, v in a.items() if k != "group"},
                   {"kernel_shape", "strides", "pads", "dilations", "auto_pad"})
    out["relu"] = False
    return out


def _maxpool(node, a):
    if len([o for o in node.output if o]) != 1:
        raise _bad(node, "outputs", list(node.output), "unsupported (Indices output)")
    return _spatial(node, a, {"kernel_shape", "strides", "pads", "dilations", "auto_pad",
                              "ceil_mode", "storage_order"})


def _avgpool(node, a):
    out = _spatial(node, {k: v for k, v in a.items() if k != "count_include_pad"},
                   {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"})
    if any(out["pads"]):
        raise _bad(node, "pads", list(out["pads"]),
                   f"unsupported with count_include_pad={a.get('count_include_pad', 0)} "
                   "(average pooling supports no padding)")
    return out


def _bn(node, a):
    if a.get("spatial", 1) != 1:
        raise _bad(node, "spatial", a["spatial"], "unsupported (only 1)")
    if a.get("training_mode", 0) != 0:
        raise _bad(node, "training_mode", a["training_mode"], "unsupported (inference only)")
    if len([o for o in node.output if o]) != 1:
        raise _bad(node, "outputs", list(node.output), "unsupported (training outputs)")
    return {"epsilon": float(a.get("epsilon", 1e-5))}


def _gemm(node, a):
    if a.get("transA", 0) != 0:
        raise _bad(node, "transA", a["transA"], "unsupported (only 0)")
    for k in ("alpha", "beta"):
        if float(a.get(k, 1.0)) != 1.0:
            raise _bad(node, k, a[k], "unsupported (only 1.0)")
    if a.get("transB", 0) not in (0, 1):
        raise _bad(node, "transB", a["transB"], "invalid")
    return {"transB": int(a.get("transB", 0))}


def _softmax(node, a):
    return {"axis": int(a["axis"])} if "axis" in a else {}   # default depends on opset


def _flatten(node, a):
    if a.get("axis", 1) != 1:
        raise _bad(node, "axis", a["axis"], "unsupported (only 1)")
    return {"axis": 1}


def _cos(node, a):
    v = a.get("value")
    return {"value": numpy_helper.to_array(v) if v is not None else np.zeros(1, np.float32)}


def _none(node, a):
    for k, v in a.items():
        raise _bad(node, k, v, "is not supported")
    return {}


_HANDLERS = {"Conv": _conv, "BatchNormalization": _bn, "Relu": _none, "Sum": _none, "Add": _none,
             "MaxPool": _maxpool, "AveragePool": _avgpool, "GlobalAveragePool": _none,
             "Reshape": lambda n, a: {}, "Flatten": _flatten, "Gemm": _gemm,
             "Softmax": _softmax, "ConstantOfShape": _cos}


def _shape_of(vi, name: str) -> tuple:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        raise CompileError(f"tensor {name!r} has no static shape (shape inference failed)")
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            raise CompileError(f"tensor {name!r} has a dynamic/unknown dimension "
                               f"({d.dim_param or '?'}); only static shapes are supported")
        dims.append(int(d.dim_value))
    return tuple(dims)


def import_onnx(model: Union[str, Path, onnx.ModelProto]) -> Graph:
    """Load an ONNX model (path or ModelProto) into a verified float IR Graph.

    Raises CompileError for unsupported ops/attributes (naming node, op, attribute and value),
    dynamic or missing shapes (naming the tensor), or a malformed graph.
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [1])
    model = shape_inference.infer_shapes(model)
    g = model.graph
    tensors: dict = {}
    for init in g.initializer:
        arr = numpy_helper.to_array(init)
        tensors[init.name] = Tensor(init.name, tuple(arr.shape), str(arr.dtype), arr)
    infos = {v.name: v for v in list(g.input) + list(g.value_info) + list(g.output)}
    inputs = [i.name for i in g.input if i.name not in tensors]
    nodes = []
    for idx, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{idx}"
        if n.domain not in ("", "ai.onnx"):
            raise CompileError(f"node {name!r}: op {n.domain}::{n.op_type} unsupported; supported "
                               f"ops: {', '.join(SUPPORTED_OPS)}")
        if n.op_type not in _HANDLERS:
            raise CompileError(f"node {name!r}: op {n.op_type} unsupported; supported ops: "
                               f"{', '.join(SUPPORTED_OPS)}")
        n.name = name
        attrs = _HANDLERS[n.op_type](n, _attrs(n))
        if n.op_type == "Softmax" and "axis" not in attrs:
            attrs["axis"] = 1 if opset < 13 else -1
        nodes.append(Node(n.op_type, name, list(n.input), [o for o in n.output if o], attrs))
    for name in inputs + [o for nd in nodes for o in nd.outputs]:
        if name not in infos:
            raise CompileError(f"tensor {name!r} has no shape after shape inference")
        elem = infos[name].type.tensor_type.elem_type
        dtype = str(helper.tensor_dtype_to_np_dtype(elem)) if elem else "float32"
        tensors[name] = Tensor(name, _shape_of(infos[name], name), dtype)
    graph = prune(Graph(tensors, nodes, inputs, [o.name for o in g.output]))
    for name in graph.inputs:
        if graph.tensors[name].dtype != "float32":
            raise CompileError(f"graph input {name!r} has dtype {graph.tensors[name].dtype}, "
                               "only float32 is supported")
    verify(graph)
    return graph
