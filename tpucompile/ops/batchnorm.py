"""BatchNormalization: inference-mode only, folded into the preceding Conv
(``passes/fold_batchnorm.py``: s = gamma / sqrt(var + eps), W'[n] = W[n] * s[n],
b' = (b - mean) * s + beta). One that cannot be folded has no int8 mapping and is refused by name.
"""
from __future__ import annotations

from tpucompile.ops.common import bad_attr
from tpucompile.ops.registry import OpDef

__all__ = ["OPS"]


def _import(node, a: dict, opset: int) -> dict:
    if a.get("spatial", 1) != 1:
        raise bad_attr(node, "spatial", a["spatial"], "unsupported (only 1)")
    if a.get("training_mode", 0) != 0:
        raise bad_attr(node, "training_mode", a["training_mode"], "unsupported (inference only)")
    if len([o for o in node.output if o]) != 1:
        raise bad_attr(node, "outputs", list(node.output), "unsupported (training outputs)")
    return {"epsilon": float(a.get("epsilon", 1e-5))}


OPS = (OpDef("BatchNormalization", import_node=_import),)
