"""Relu: fused into its producer (``passes/fuse_relu.py``: Conv and Add clamp their output at the
zero point, ``attrs["relu"]``). One that cannot be fused has no int8 mapping and is refused by name.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops.common import no_attrs
from tpucompile.ops.registry import OpDef

__all__ = ["OPS"]


def _fold(node, x):
    return np.maximum(x, 0).astype(x.dtype)


OPS = (OpDef("Relu", import_node=no_attrs, fold=_fold),)
