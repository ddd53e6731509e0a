"""Canonicalise to the forms the quantizer maps 1:1 onto device ops, with each op's
``canonicalize`` hook of the op table (``tpucompile.ops``):

* Sum of two inputs -> Add (relu=False).
* Reshape/Flatten between (1, C, 1, 1) and (1, C) -> Alias (no data movement).
* Gemm (M = 1) -> 1x1 Conv on the (1, K, 1, 1) view of its input, followed by an Alias back to
  the Gemm's (1, N) output name. W' = W (transB=1) or W.T (transB=0), shaped [N, K, 1, 1].
* AveragePool whose kernel equals the input (H, W), without padding -> GlobalAveragePool.
"""
from __future__ import annotations

from tpucompile.ir import Graph, producers, prune
from tpucompile.ops import OP_TABLE

NAME = "canonicalize"


def run(graph: Graph) -> Graph:
    out: list = []
    prod = producers(graph)
    for node in graph.nodes:
        d = OP_TABLE.get(node.op)
        for new in [node] if d is None or d.canonicalize is None else d.canonicalize(graph, node, prod):
            out.append(new)
            for o in new.outputs:
                prod[o] = new
    graph.nodes = out
    return prune(graph)
