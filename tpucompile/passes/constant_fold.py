"""Constant folding: evaluate with numpy every node whose inputs are all constants.

Handles ConstantOfShape (the placeholder weights of the onnx "light" models), Reshape, Flatten,
Relu, Add, Sum. Other all-constant nodes are left in place (they then fail later, by name).
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.errors import CompileError
from tpucompile.ir import Graph, prune

NAME = "constant_fold"
#: Largest constant folding may create (elements); ResNet-50's largest weight has 2.4 M.
MAX_CONST_ELEMENTS = 1 << 28


def _reshape(node, x, shape):
    shape = [int(s) for s in shape]
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


_EVAL = {
    "ConstantOfShape": lambda n, s: np.full(tuple(int(d) for d in s), n.attrs["value"].reshape(-1)[0],
                                            dtype=n.attrs["value"].dtype),
    "Reshape": _reshape,
    "Flatten": lambda n, x: x.reshape(x.shape[0], -1),
    "Relu": lambda n, x: np.maximum(x, 0).astype(x.dtype),
    "Add": lambda n, a, b: (a + b).astype(a.dtype),
    "Sum": lambda n, *xs: np.sum(np.stack(xs), axis=0).astype(xs[0].dtype),
}


def run(graph: Graph) -> Graph:
    kept = []
    for node in graph.nodes:
        vals = [graph.const(i) for i in node.inputs if i]
        if node.op in _EVAL and vals and all(v is not None for v in vals) and len(node.outputs) == 1:
            t = graph.tensors.get(node.outputs[0])
            n_out = int(np.prod(t.shape, dtype=object)) if t is not None and t.shape else 0
            if n_out > MAX_CONST_ELEMENTS:
                raise CompileError(f"node {node.name!r} ({node.op}): folding it would create a constant "
                                   f"of shape {t.shape} ({n_out} elements, more than {MAX_CONST_ELEMENTS})")
            try:
                out = _EVAL[node.op](node, *vals)
            except (ValueError, TypeError, IndexError, OverflowError, MemoryError) as e:
                raise CompileError(f"node {node.name!r} ({node.op}): cannot evaluate on its constant "
                                   f"inputs: {e}") from None
            t = graph.tensors[node.outputs[0]]
            t.value, t.shape, t.dtype = out, tuple(out.shape), str(out.dtype)
        else:
            kept.append(node)
    graph.nodes = kept
    return prune(graph)
