"""Fuse an op with the producer of one of its inputs (``DeviceOp.fuse_producer``): a residual
Add with the Conv making one of its operands (ops/conv_add.py), a MaxPool with the Conv making
its input (ops/conv_pool.py).

After layout (the ops on physical lanes, both Add operands in one channel map): an op whose
``fuse_producer`` hook accepts the producer of one of its inputs, where that input is read by
the op alone and is neither a graph output, nor a view, nor has views, becomes the fused op at
its own place in the op list (every tensor the producer reads exists there already). If both
inputs qualify, the producer later in the list is fused. The producer's output leaves the graph
and the layouts: it is never written to DDR.

The logical graph (``LayoutPlan.graph.qg``, whose ops the MAC counts and the true compulsory
traffic read) and the lanes graph get the same rewrite, op for op, so both op lists stay
parallel. The golden model runs the unfused QGraph: the fused layer's output is the op's own.
"""
from __future__ import annotations

import dataclasses

from tpucompile.ops import OP_TABLE
from tpucompile.qgraph import QGraph

__all__ = ["fuse_residual", "fused_pairs", "fusion_candidates"]


def fusion_candidates(qg: QGraph, lays: dict) -> dict:
    """{index of an op in ``qg.ops`` that has a ``fuse_producer`` hook: the indices of the
    producers of its inputs that the module's rule lets it fuse, in input order, before the hook
    is asked} (read only from the graph and the views of ``lays``, never the config)."""
    readers: dict = {}
    for op in qg.ops:
        for t in dict.fromkeys(op.inputs):
            readers[t] = readers.get(t, 0) + 1
    outputs = {qg.resolve(o) for o in qg.outputs}
    viewed = {lay.view_of for lay in lays.values() if lay.view_of is not None}
    made = {op.out: i for i, op in enumerate(qg.ops)}
    out = {}
    for j, op in enumerate(qg.ops):
        if OP_TABLE.device(op).fuse_producer is None:
            continue
        out[j] = [made[t] for t in dict.fromkeys(op.inputs) if t in made and readers[t] == 1 and t not in outputs
                  and t not in viewed and lays[t].view_of is None]
    return out


def fused_pairs(qg: QGraph, lays: dict, cfg, accepts=None, candidates: dict | None = None) -> dict:
    """{index of an op in ``qg.ops``: index of the producer fused into it}, by the module's rule
    (the hooks may weigh the tilings of ``lays`` on config ``cfg``). ``accepts(j, i)``: whether
    op ``j``'s hook accepts producer ``i`` (default: ask the hook; the estimator passes a cached
    answer), asked about each pair of ``candidates`` (default ``fusion_candidates``)."""
    if accepts is None:
        def accepts(j: int, i: int) -> bool:
            op = qg.ops[j]
            return OP_TABLE.device(op).fuse_producer(op, qg.ops[i], lays, cfg) is not None
    pairs = {}
    for j, cands in (fusion_candidates(qg, lays) if candidates is None else candidates).items():
        ok = [i for i in cands if accepts(j, i)]
        if ok:
            pairs[j] = max(ok)
    return pairs


def _rewrite(qg: QGraph, pairs: dict) -> QGraph:
    fused = set(pairs.values())
    ops, tensors = [], dict(qg.tensors)
    for k, op in enumerate(qg.ops):
        if k in fused:
            continue
        if k in pairs:
            producer = qg.ops[pairs[k]]
            del tensors[producer.out]
            op = OP_TABLE.device(op).fuse_producer(op, producer, None, None)
        ops.append(op)
    return dataclasses.replace(qg, tensors=tensors, ops=ops)


def fuse_residual(lp, pairs: dict | None = None):
    """The ``LayoutPlan`` with every fusable pair fused (module docstring; ``pairs``: the
    ``fused_pairs`` if known); ``lp`` itself when there is none."""
    if pairs is None:
        pairs = fused_pairs(lp.qg, lp.tensors, lp.graph.cfg)
    if not pairs:
        return lp
    gone = {lp.qg.ops[i].out for i in pairs.values()}
    lays = {n: L for n, L in lp.tensors.items() if n not in gone}
    graph = dataclasses.replace(lp.graph, qg=_rewrite(lp.graph.qg, pairs))
    lanes = None if lp.lanes is None else _rewrite(lp.lanes, pairs)
    return dataclasses.replace(lp, graph=graph, tensors=lays, lanes=lanes)
