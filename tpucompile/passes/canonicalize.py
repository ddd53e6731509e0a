"""Canonicalise to the forms the quantizer maps 1:1 onto device ops, with each op's
``canonicalize`` hook of the op table (``tpucompile.ops``):

* Sum of two inputs -> Add (relu=False).
* Reshape/Flatten between (1, C, 1, 1) and (1, C) -> Alias (no data movement).
* Gemm (M = 1) -> 1x1 Conv on the (1, K, 1, 1) view of its input, followed by an Alias back to
  the Gemm's (1, N) output name. W' = W (transB=1) or W.T (transB=0), shaped [N, K, 1, 1].
* AveragePool whose kernel equals the input (H, W), without padding -> GlobalAveragePool.

A node whose hook refuses it (CompileError) is kept with the reason in ``attrs["refused"]``: the
compiler reports every such node at once before calibrating, unless they form the graph's host
tail (quantize/quantize.py, ops/host_tail.py).
"""
from __future__ import annotations

from tpucompile.ir import Graph, producers, prune
from tpucompile.ops import OP_TABLE
from tpusim.arch.errors import CompileError

NAME = "canonicalize"


def _canonical(graph, node, prod) -> list:
    """The node's canonical form; a node its hook refuses is kept as it is, the reason in
    ``attrs["refused"]`` (the quantizer reports it, or it runs on the host in a host tail)."""
    d = OP_TABLE.get(node.op)
    if d is None or d.canonicalize is None:
        return [node]
    try:
        return d.canonicalize(graph, node, prod)
    except CompileError as e:
        node.attrs["refused"] = str(e)
        return [node]


def run(graph: Graph) -> Graph:
    out: list = []
    prod = producers(graph)
    for node in graph.nodes:
        for new in _canonical(graph, node, prod):
            out.append(new)
            for o in new.outputs:
                prod[o] = new
    graph.nodes = out
    return prune(graph)
