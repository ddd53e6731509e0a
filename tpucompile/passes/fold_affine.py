"""Fold per-channel affine ops into the preceding Conv (constant weights, single consumer):
BatchNormalization, and Mul / Add / Sub / Div by a per-channel or scalar constant (each op's
``OpDef.affine`` hook gives y = s * x + t with s, t of shape [Cout]).

W'[n] = W[n] * s[n];  b' = b * s + t  (BatchNormalization: b' = (b - mean) * s + beta, its own
``affine`` form, s = gamma / sqrt(var + eps)). The Conv takes over the op's output name, so a
chain Conv -> BN -> Mul -> Add (inception_v2, densenet121) folds into one Conv. An affine op not
after such a Conv is left (and refused later by name).
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, consumers, producers, prune
from tpucompile.ops import OP_TABLE
from tpusim.arch.errors import CompileError

NAME = "fold_affine"


def _conv_params(graph, conv):
    """(weight, bias or None) of a foldable Conv, or None if one of them is not a constant."""
    w = graph.const(conv.inputs[1])
    has_b = len(conv.inputs) > 2 and conv.inputs[2]
    b = graph.const(conv.inputs[2]) if has_b else None
    if w is None or (has_b and b is None):
        return None
    if b is not None and b.shape != (w.shape[0],):
        raise CompileError(f"node {conv.name!r} (Conv): bias {conv.inputs[2]!r} of shape {b.shape} "
                           f"does not match its {w.shape[0]} output channels")
    return w, b


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    drop = set()
    for node in graph.nodes:
        d = OP_TABLE.get(node.op)
        if d is None or d.affine is None:
            continue
        x = next((i for i in node.inputs if i and graph.const(i) is None), None)
        conv = prod.get(x)
        if (conv is None or conv.op != "Conv" or len(cons.get(x, [])) != 1 or x in graph.outputs
                or id(conv) in drop):
            continue
        params = _conv_params(graph, conv)
        if params is None:
            continue
        w, b = params
        folded = d.affine(graph, node, w.shape[0], None if b is None else b.astype(np.float64))
        if folded is None:
            continue   # not an affine of constants (e.g. Add of two activations)
        s, b_new = folded
        wname = graph.add_const(f"{conv.name}__w_{node.op.lower()}",
                                (w.astype(np.float64) * s[:, None, None, None]).astype(np.float32))
        bname = graph.add_const(f"{conv.name}__b_{node.op.lower()}", b_new.astype(np.float32))
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = [node.outputs[0]]
        prod[node.outputs[0]] = conv
        drop.add(id(node))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return prune(graph)
