"""Softmax: a host op. The accelerator has no exponent unit, so it runs in float32 on the host
after the device, on the dequantized device output (``QGraph.host_ops``); that device output
(the logits) becomes a graph output. Default axis: 1 before opset 13, -1 from opset 13 (ONNX)."""
from __future__ import annotations

import numpy as np

from tpucompile.ops.registry import OpDef

__all__ = ["OPS"]


def _import(node, a: dict, opset: int) -> dict:
    return {"axis": int(a["axis"]) if "axis" in a else (1 if opset < 13 else -1)}


def _quantize(q, node) -> None:
    q.add_host_op(node, {"op": node.op, "inp": node.inputs[0], "out": node.outputs[0],
                         "axis": int(node.attrs["axis"]), "shape": tuple(q.shape(node.inputs[0]))})


def _host(h: dict, x: np.ndarray) -> np.ndarray:
    """float32 softmax of ``x`` (already in the ONNX shape ``h["shape"]``) over ``h["axis"]``."""
    e = np.exp(x - x.max(axis=h["axis"], keepdims=True))
    return (e / e.sum(axis=h["axis"], keepdims=True)).astype(np.float32)


OPS = (OpDef("Softmax", import_node=_import, quantize=_quantize, calibrated=False, host=_host),)
