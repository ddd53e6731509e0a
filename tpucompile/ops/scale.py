"""Sub and Div with a constant operand (Mul: ``ops/mul.py``): folded into the preceding Conv as a
per-channel affine (``passes/fold_affine.py``; the shift of a Caffe2-style BatchNorm in
inception_v2 and densenet121 is an ``Add`` of an ``Unsqueeze``d constant), or folded outright on
constants.

  Sub  x - c -> s = 1,  t = -c;   c - x -> s = -1, t = c
  Div  x / c -> s = 1/c, t = 0 (c / x is not affine: refused)

The constant must be a scalar or vary along channels only (``ops.common.per_channel``). A Sub or
Div inside a group of element-wise functions of one tensor (GELU's ``Div(x, sqrt 2)``) becomes
part of one table lookup (``passes/fuse_elementwise``, ``ops/lut.py``). Anything else (of two
activations) has no int8 mapping and is refused by name. Opset < 7 ``broadcast``/``axis``
attributes are refused.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops.common import affine_of_constant, no_attrs
from tpucompile.ops.lut import elementwise_binary
from tpucompile.ops.registry import OpDef

__all__ = ["OPS"]


def _binary_fold(fn):
    def fold(node, a, b):
        return fn(a, b).astype(np.result_type(a, b))
    return fold


def _fold_div(node, a, b):
    """ONNX Div: integer division truncates toward zero."""
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(np.result_type(a, b))
    return np.divide(a, b).astype(np.result_type(a, b))


def _sub(c, x_first):
    return (1.0, -c) if x_first else (-1.0, c)


def _div_affine(graph, node, cout: int, bias):
    if graph.const(node.inputs[1]) is None:
        return None                     # c / x
    c = graph.const(node.inputs[1])
    if np.any(np.asarray(c) == 0):
        return None                     # left, and refused later by name
    return affine_of_constant(graph, node, cout, bias, lambda c, x_first: (1.0 / c, 0.0))


OPS = (
    OpDef("Sub", import_node=no_attrs, fold=_binary_fold(np.subtract), elementwise=elementwise_binary,
          affine=lambda g, n, cout, b: affine_of_constant(g, n, cout, b, _sub)),
    OpDef("Div", import_node=no_attrs, fold=_fold_div, affine=_div_affine, elementwise=elementwise_binary),
)
