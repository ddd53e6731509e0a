"""Identity and Dropout (inference): no computation, removed by canonicalize into an ``Alias``
(the output name maps to the input's device tensor; no data movement). On constants they fold.

ONNX Dropout in inference (``training_mode`` absent or a constant false; opset <= 6 ``is_test``)
is the identity on its data input, whatever ``ratio`` is. Refused by name: a Dropout whose
``mask`` output is used, or whose ``training_mode`` is true or not a constant.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Node
from tpucompile.ops.common import bad_attr, no_attrs
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS"]


def _import_dropout(node, a: dict, opset: int) -> dict:
    for k, v in a.items():
        if k == "is_test" and v == 0:
            raise bad_attr(node, k, v, "unsupported (training-mode Dropout)")
        if k not in ("ratio", "seed", "is_test"):
            raise bad_attr(node, k, v, "is not supported")
    return {}


def _fold(node, x, *rest):
    return x


def _canonicalize(graph, node, producers) -> list:
    mask = node.outputs[1] if len(node.outputs) > 1 else None
    if mask and (mask in graph.outputs or any(mask in n.inputs for n in graph.nodes)):
        raise CompileError(f"node {node.name!r} (Dropout): its mask output {mask!r} is used; only the "
                           "data output of an inference Dropout is supported")
    if len(node.inputs) > 2 and node.inputs[2]:
        mode = graph.const(node.inputs[2])
        if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
            raise CompileError(f"node {node.name!r} (Dropout): training_mode {node.inputs[2]!r} is "
                               f"{'not a constant' if mode is None else 'true'}; only inference Dropout "
                               "(training_mode false) is supported")
    return [Node("Alias", node.name, [node.inputs[0]], node.outputs[:1])]


OPS = (
    OpDef("Identity", import_node=no_attrs, fold=_fold, canonicalize=_canonicalize),
    OpDef("Dropout", import_node=_import_dropout, fold=_fold, canonicalize=_canonicalize),
)
