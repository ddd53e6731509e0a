"""Constant folding: evaluate with numpy every node whose inputs are all constants.

Each op's ``fold`` hook of the op table (``tpucompile.ops``) evaluates it, and ``fold_shape``
evaluates Shape and Size from their input's static shape whatever it holds: ConstantOfShape (the
placeholder weights of the onnx "light" models), Constant, Reshape, Flatten, Relu, Clip, Add, Sum. Other
all-constant nodes are left in place (they then fail later, by name).
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, prune
from tpucompile.ops import OP_TABLE
from tpusim.arch.errors import CompileError

NAME = "constant_fold"
#: Largest constant folding may create (elements); ResNet-50's largest weight has 2.4 M.
MAX_CONST_ELEMENTS = 1 << 28


def run(graph: Graph) -> Graph:
    kept = []
    for node in graph.nodes:
        vals = [graph.const(i) for i in node.inputs if i]
        d = OP_TABLE.get(node.op)
        if d is not None and d.fold_shape is not None and len(node.outputs) == 1:
            out = np.asarray(d.fold_shape(node, [graph.tensors[i].shape for i in node.inputs if i]))
            t = graph.tensors[node.outputs[0]]
            t.value, t.shape, t.dtype = out, tuple(out.shape), str(out.dtype)
        elif d is not None and d.fold is not None and (vals or not node.inputs) and \
                all(v is not None for v in vals):
            ts = [graph.tensors.get(o) for o in node.outputs if o]
            n_out = sum(int(np.prod(t.shape, dtype=object)) for t in ts if t is not None and t.shape)
            if n_out > MAX_CONST_ELEMENTS:
                raise CompileError(f"node {node.name!r} ({node.op}): folding it would create a constant "
                                   f"of shape {', '.join(str(t.shape) for t in ts if t is not None)} "
                                   f"({n_out} elements, more than {MAX_CONST_ELEMENTS})")
            try:
                out = d.fold(node, *vals)
            except (ValueError, TypeError, IndexError, OverflowError, MemoryError) as e:
                raise CompileError(f"node {node.name!r} ({node.op}): cannot evaluate on its constant "
                                   f"inputs: {e}") from None
            outs = out if isinstance(out, tuple) else (out,)      # Split: one array per output
            if len(outs) != len(node.outputs):                     # Dropout's mask: not folded
                kept.append(node)
                continue
            for name, o in zip(node.outputs, outs):
                if name:
                    t = graph.tensors[name]
                    t.value, t.shape, t.dtype = o, tuple(o.shape), str(o.dtype)
        else:
            kept.append(node)
    graph.nodes = kept
    return prune(graph)
