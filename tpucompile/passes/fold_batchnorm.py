"""Fold BatchNormalization into the preceding Conv (constant weights, single consumer).

s = gamma / sqrt(var + eps);  W'[n] = W[n] * s[n];  b' = (b - mean) * s + beta.
The Conv takes over the BN's output name. A BN not after such a Conv is left (and refused later).
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, consumers, producers, prune
from tpusim.arch.errors import CompileError

NAME = "fold_batchnorm"


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    drop = set()
    for bn in graph.nodes:
        if bn.op != "BatchNormalization":
            continue
        conv = prod.get(bn.inputs[0])
        params = [graph.const(i) for i in bn.inputs[1:5]]
        if (conv is None or conv.op != "Conv" or len(cons.get(bn.inputs[0], [])) != 1
                or any(p is None for p in params) or graph.const(conv.inputs[1]) is None
                or (len(conv.inputs) > 2 and conv.inputs[2] and graph.const(conv.inputs[2]) is None)
                or bn.inputs[0] in graph.outputs):
            continue   # left in place: the quantizer refuses an unfolded BatchNormalization by name
        cout = graph.const(conv.inputs[1]).shape[0]
        if len(conv.inputs) > 2 and conv.inputs[2] and graph.const(conv.inputs[2]).shape != (cout,):
            raise CompileError(f"node {conv.name!r} (Conv): bias {conv.inputs[2]!r} of shape "
                               f"{graph.const(conv.inputs[2]).shape} does not match its {cout} output channels")
        if any(p.shape != (cout,) for p in params):
            raise CompileError(f"node {bn.name!r} (BatchNormalization): parameters of shapes "
                               f"{[tuple(p.shape) for p in params]} do not match the {cout} output "
                               f"channels of Conv {conv.name!r}")
        gamma, beta, mean, var = (p.astype(np.float64) for p in params)
        w = graph.const(conv.inputs[1]).astype(np.float64)
        b = graph.const(conv.inputs[2]).astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] \
            else np.zeros(w.shape[0])
        s = gamma / np.sqrt(var + bn.attrs["epsilon"])
        wname = graph.add_const(f"{conv.name}__w_bn", (w * s[:, None, None, None]).astype(np.float32))
        bname = graph.add_const(f"{conv.name}__b_bn", ((b - mean) * s + beta).astype(np.float32))
        conv.inputs = [conv.inputs[0], wname, bname]
        conv.outputs = [bn.outputs[0]]
        drop.add(id(bn))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return prune(graph)
