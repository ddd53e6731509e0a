"""BatchNormalization: inference-mode only, folded into the preceding Conv
(``passes/fold_affine.py``: s = gamma / sqrt(var + eps), W'[n] = W[n] * s[n],
b' = (b - mean) * s + beta). One that cannot be folded has no int8 mapping and is refused by name.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops.common import bad_attr
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS"]


def _import(node, a: dict, opset: int) -> dict:
    if a.get("spatial", 1) != 1:
        raise bad_attr(node, "spatial", a["spatial"], "unsupported (only 1)")
    if a.get("training_mode", 0) != 0:
        raise bad_attr(node, "training_mode", a["training_mode"], "unsupported (inference only)")
    if len([o for o in node.output if o]) != 1:
        raise bad_attr(node, "outputs", list(node.output), "unsupported (training outputs)")
    return {"epsilon": float(a.get("epsilon", 1e-5))}


def _affine(graph, node, cout: int, bias):
    params = [graph.const(i) for i in node.inputs[1:5]]
    if any(p is None for p in params):
        return None
    if any(p.shape != (cout,) for p in params):
        raise CompileError(f"node {node.name!r} (BatchNormalization): parameters of shapes "
                           f"{[tuple(p.shape) for p in params]} do not match the {cout} output "
                           "channels of the Conv before it")
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    s = gamma / np.sqrt(var + node.attrs["epsilon"])
    b = np.zeros(cout) if bias is None else bias
    return s, (b - mean) * s + beta


OPS = (OpDef("BatchNormalization", import_node=_import, affine=_affine),)
