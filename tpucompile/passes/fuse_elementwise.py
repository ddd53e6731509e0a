"""Fuse each group of element-wise functions of one tensor into table lookups (``Lut`` nodes).

A node is element-wise here when its op's ``elementwise`` hook (op table) says so and every
non-constant input has the output's shape. Its *root* is the root of its non-constant inputs'
producers when they all share one (the tensor itself for any other producer): so
``Mul(c, Sigmoid(c))``, ``Mul(Mul(c, 0.5), Add(Erf(Div(c, 1.414)), 1))`` (the Erf-form GELU
exporters write) and ``Div(Mul(c, Clip(Add(c, 3), 0, 6)), 6)`` (HardSwish written out) are all
functions of the Conv output ``c``.

A tensor of the group is *seeded* when a non-linear node (hook True: Sigmoid, Pow, x * y, ...)
lies between it and the root. Every seeded tensor the rest of the graph reads (or a graph
output) becomes one ``Lut`` node; its input is the nearest tensor of the group that every path
from the root to it passes through and that exists anyway (the root, or an unseeded tensor read
outside: Relu(c) read by a Conv stays a Relu, and a Lut after it reads it). Its ``steps`` are
the nodes between, evaluated in float64 (``tpucompile.ops.lut.evaluate``). Unseeded chains (Relu,
Clip, Mul by a scalar alone) are left to fuse_relu and fold_affine. Runs before fold_affine, so a
scalar Mul inside GELU is not first made a diagonal 1x1 Conv.
"""
from __future__ import annotations

from tpucompile.ir import Graph, consumers, prune
from tpucompile.ops import OP_TABLE
from tpucompile.ops.lut import lut_node

NAME = "fuse_elementwise"


def _nonconst(graph, node) -> list:
    return [i for i in node.inputs if i and graph.const(i) is None]


def _classify(graph: Graph):
    """(root, seeded, member): tensor -> root tensor, tensor -> seeded?, tensor -> its node, for
    the outputs of element-wise nodes."""
    root, seeded, member = {}, {}, {}
    for n in graph.nodes:
        d = OP_TABLE.get(n.op)
        kind = None if d is None or d.elementwise is None or len(n.outputs) != 1 else d.elementwise(graph, n)
        ins = _nonconst(graph, n)
        if kind is None or not ins:
            continue
        shape = graph.tensors[n.outputs[0]].shape
        if any(graph.tensors[i].shape != shape for i in ins):
            continue
        roots = {root.get(i, i) for i in ins}
        if len(roots) != 1:
            continue
        out = n.outputs[0]
        root[out] = roots.pop()
        seeded[out] = bool(kind) or any(seeded.get(i, False) for i in ins)
        member[out] = n
    return root, seeded, member


def run(graph: Graph) -> Graph:
    root, seeded, member = _classify(graph)
    if not any(seeded.values()):
        return graph
    cons = consumers(graph)

    def read_outside(t: str) -> bool:
        return t in graph.outputs or any(c.outputs[0] not in member or root[c.outputs[0]] != root[t]
                                         for c in cons.get(t, []) if c.outputs)

    luts = {}
    for t, n in member.items():
        if not seeded[t] or not read_outside(t):
            continue
        r = root[t]
        anchors = [r] + [u for u in member if root[u] == r and not seeded[u] and read_outside(u)]
        best = None
        for a in anchors:
            steps = _cone_from(graph, t, a, member)
            if steps is not None and (best is None or len(steps) < len(best[1])):
                best = (a, steps)
        a, steps = best
        luts[t] = lut_node(graph, n.name, a, t, steps)
    graph.nodes = [luts.get(n.outputs[0], n) if n.outputs else n for n in graph.nodes]
    return prune(graph)


def _cone_from(graph, t: str, anchor: str, member: dict) -> list | None:
    """The nodes computing ``t`` from ``anchor`` (topological order), or None if ``t`` also
    depends on the root by a path that does not pass through ``anchor``."""
    order, seen = [], set()

    def visit(x) -> bool:
        if x == anchor:
            return True
        n = member.get(x)
        if n is None:
            return False
        if x in seen:
            return True
        seen.add(x)
        for i in _nonconst(graph, n):
            if not visit(i):
                return False
        order.append(n)
        return True
    return order if visit(t) else None
