"""Fold per-channel affine ops into the preceding Conv (constant weights, single consumer):
BatchNormalization, and Mul / Add / Sub / Div by a per-channel or scalar constant (each op's
``OpDef.affine`` hook gives y = s * x + t with s, t of shape [Cout]).

W'[n] = W[n] * s[n];  b' = b * s + t  (BatchNormalization: b' = (b - mean) * s + beta, its own
``affine`` form, s = gamma / sqrt(var + eps)). The Conv takes over the op's output name, so a
chain Conv -> BN -> Mul -> Add (inception_v2, densenet121) folds into one Conv.

An affine op on a 4-D activation not produced by such a Conv (densenet121's pre-activation BN
after a Concat or a pool) becomes a 1x1 Conv with the diagonal weight diag(s) and bias t, into
which the ops after it fold in turn. That is exact up to int8 rounding (each channel's weight
quantizes to +-127 with the per-channel scale |s| / 127) but spends C x C MACs per pixel on C
useful ones: on the seed chip a 1024-channel BN at 7 x 7 costs 8 x 8 weight tiles of which 8
are non-zero. A vector-unit per-channel requantize is the better design (not built yet).

On a (1, N) fully-connected tensor, an affine op folds into the Gemm (or MatMul by a constant)
that made it (``ops.gemm.absorb_affine``): tf2onnx's Dense (MatMul + Add), BatchNorm1d after a
Linear.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, Node, consumers, producers, prune
from tpucompile.ops import OP_TABLE
from tpucompile.ops.gemm import absorb_affine, fc_params
from tpucompile.ops.softmax import absorbed_by_softmax
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


def _fold_into(graph, conv, node, w, s, b_new) -> None:
    wname = graph.add_const(f"{conv.name}__w_{node.op.lower()}",
                            (w.astype(np.float64) * s[:, None, None, None]).astype(np.float32))
    bname = graph.add_const(f"{conv.name}__b_{node.op.lower()}", b_new.astype(np.float32))
    conv.inputs = [conv.inputs[0], wname, bname]
    conv.outputs = [node.outputs[0]]


def _diagonal_conv(graph, node, x, s, t) -> Node:
    """A standalone per-channel affine as a 1x1 Conv with weight diag(s) and bias t."""
    c = graph.tensors[x].shape[1]
    w = np.zeros((c, c, 1, 1), np.float32)
    w[np.arange(c), np.arange(c), 0, 0] = s
    wname = graph.add_const(f"{node.name}__w_diag", w)
    bname = graph.add_const(f"{node.name}__b_diag", t.astype(np.float32))
    return Node("Conv", node.name, [x, wname, bname], list(node.outputs[:1]),
                {"kernel_shape": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0), "relu": False})


def _fold_into_fc(graph, node, d, x, prod, cons, out) -> None:
    """An affine op on a (1, N) tensor: folded into the Gemm / MatMul by a constant that made it
    (single consumer), else left (refused later by name if nothing maps it)."""
    fc = prod.get(x)
    params = fc_params(graph, fc) if fc is not None and fc.op in ("Gemm", "MatMul") else None
    if params is not None and len(cons.get(x, [])) == 1 and x not in graph.outputs:
        w, b = params
        folded = d.affine(graph, node, w.shape[0], b)
        if folded is not None:
            absorb_affine(graph, fc, *folded, node.outputs[0])
            prod[node.outputs[0]] = fc
            return
    out.append(node)


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    out = []
    for node in graph.nodes:
        d = OP_TABLE.get(node.op)
        x = next((i for i in node.inputs if i and graph.const(i) is None), None)
        if d is None or d.affine is None or x is None or len(graph.tensors[x].shape) not in (2, 4):
            out.append(node)
            continue
        if len(graph.tensors[x].shape) == 2:
            _fold_into_fc(graph, node, d, x, prod, cons, out)
            continue
        conv = prod.get(x)
        params = _conv_params(graph, conv) if conv is not None and conv.op == "Conv" else None
        if params is not None and len(cons.get(x, [])) == 1 and x not in graph.outputs:
            w, b = params
            folded = d.affine(graph, node, w.shape[0], None if b is None else b.astype(np.float64))
            if folded is not None:
                _fold_into(graph, conv, node, w, *folded)
                prod[node.outputs[0]] = conv
                continue
        if absorbed_by_softmax(graph, node, cons):
            out.append(node)        # softmax(x / c) inside the network: c goes into its exp_mult
            continue
        folded = d.affine(graph, node, graph.tensors[x].shape[1], None)
        if folded is None:
            out.append(node)        # not an affine of constants (e.g. Add of two activations)
            continue
        new = _diagonal_conv(graph, node, x, *folded)
        out.append(new)
        prod[node.outputs[0]] = new
    graph.nodes = out
    return prune(graph)
