"""Channels-last image inputs (tf2onnx and Keras exports): a model whose run-time input is
(1, H, W, C) and is read only by ``Transpose perm [0, 3, 1, 2]`` nodes is, after those Transposes,
an NCHW network (with several inputs: each such one). ``nchw_input_model`` returns it with the input declared (1, C, H, W) under the
same name and the Transposes removed (their readers read the input), so the compiler, the
calibration and the FP32 reference all see one NCHW model; the original layout is recorded in the
model's ``metadata_props`` (``LAYOUT_KEY``), and ``to_model_layout`` turns a user's NHWC array
(``--input``, ``--calib`` stacks) into the NCHW one the model now takes. The compiled binary's
input is NCHW (the host transposes, as it quantizes)."""
from __future__ import annotations

import json

import numpy as np
import onnx

from tpucompile.frontend.model_inputs import runtime_inputs

__all__ = ["LAYOUT_KEY", "nchw_input_model", "input_layout", "add_layout", "to_model_layout", "permute_dims"]

LAYOUT_KEY = "tpusim.input_layout"
_TO_NCHW = (0, 3, 1, 2)


def _perm(node) -> tuple | None:
    return next((tuple(a.ints) for a in node.attribute if a.name == "perm"), None)


def _channels_last(model: onnx.ModelProto, vi) -> list | None:
    """The Transpose nodes reading run-time input ``vi`` if it is 4-D and read only by
    ``Transpose perm [0, 3, 1, 2]`` nodes (none of them, nor it, a graph output), else None."""
    if len(vi.type.tensor_type.shape.dim) != 4:
        return None
    readers = [n for n in model.graph.node if vi.name in n.input]
    outs = {o.name for o in model.graph.output}
    if not readers or vi.name in outs or any(n.op_type != "Transpose" or _perm(n) != _TO_NCHW
                                             or n.output[0] in outs for n in readers):
        return None
    return readers


def nchw_input_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself unless a run-time input is channels-last (module docstring); else the copy
    with every such input NCHW (a model with several inputs: each one read only through the
    Transposes; ``input_layout(model, name)`` records each)."""
    found = [(vi.name, r) for vi in runtime_inputs(model) if (r := _channels_last(model, vi)) is not None]
    if not found:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for name, readers in found:
        gone = {n.output[0] for n in readers}
        keep = [n for n in g.node if not (n.op_type == "Transpose" and name in n.input)]
        for n in keep:
            n.input[:] = [name if i in gone else i for i in n.input]
        del g.node[:]
        g.node.extend(keep)
        orig = permute_dims(next(i for i in g.input if i.name == name), _TO_NCHW)
        keep_vi = [v for v in g.value_info if v.name not in gone]
        del g.value_info[:]
        g.value_info.extend(keep_vi)
        add_layout(m, {"name": name, "layout": "NHWC", "shape": [v for v, _ in orig]})
    return m


def add_layout(model: onnx.ModelProto, entry: dict) -> None:
    """Record input ``entry`` ({"name", "layout", "shape"[, "perm"]}) in ``model``'s
    ``metadata_props`` under LAYOUT_KEY: the dict itself for one input, a list of them for several
    (ONNX refuses a metadata key twice)."""
    props = [p for p in model.metadata_props if p.key == LAYOUT_KEY]
    if not props:
        p = model.metadata_props.add()
        p.key, p.value = LAYOUT_KEY, json.dumps(entry)
        return
    old = json.loads(props[0].value)
    props[0].value = json.dumps((old if isinstance(old, list) else [old]) + [entry])


def permute_dims(vi, perm) -> list:
    """Permute the dims of ValueInfoProto ``vi`` in place by ``perm`` (values or symbolic names);
    returns the original [(dim_value, dim_param)]."""
    dims = vi.type.tensor_type.shape.dim
    orig = [(d.dim_value, d.dim_param) for d in dims]
    for d, (v, p) in zip(dims, [orig[i] for i in perm]):
        d.Clear()
        if p:
            d.dim_param = p
        else:
            d.dim_value = v
    return orig


def input_layout(model: onnx.ModelProto, name: str | None = None) -> dict | None:
    """{"name", "layout": "NHWC", "shape": the original (1, H, W, C)} of input ``name`` (None: the
    first one recorded) of a model made by ``nchw_input_model`` (or ``token_input``), None for
    any other input or model."""
    for p in model.metadata_props:
        if p.key == LAYOUT_KEY:
            value = json.loads(p.value)
            entries = value if isinstance(value, list) else [value]
            return next((e for e in entries if name is None or e.get("name") == name), None)
    return None


def to_model_layout(a: np.ndarray, layout: dict | None) -> np.ndarray:
    """A user's array in the model's original channels-last shape (with or without the batch
    axis) transposed to NCHW (a token model's (1, T, C): to (1, C, T), ``layout["perm"]``); any
    other array unchanged. When both layouts have one shape
    (H = W = C) the array is read as the model's own, channels-last, layout."""
    if layout is None:
        return a
    shape = tuple(layout["shape"])
    perm = tuple(layout.get("perm", _TO_NCHW))
    if a.ndim == len(shape) - 1 and tuple(a.shape) == shape[1:]:
        a = a[None]
    return np.ascontiguousarray(a.transpose(perm)) if tuple(a.shape) == shape else a
