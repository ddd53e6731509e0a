"""Remove the QuantizeLinear -> DequantizeLinear pairs of a pre-quantized (QDQ) model, pinning
their (scale, zero point) on the float tensor they quantize (``ir.Tensor.qparams``), which the
quantizer then uses instead of a calibrated range (``tpucompile.ops.qdq``). When the pair reads
the tensor alone, its producer writes the pair's output instead (that ONNX tensor, the
dequantized values, is then the one calibration and the per-layer report see); else the pair's
output is renamed to the tensor itself, also as a graph output (a QDQ model's last pair often
follows a host op, e.g. the classifier's Softmax: the output is then that op's own tensor). Weight and bias
DequantizeLinear nodes of constants are left to constant_fold. CompileError naming the node for a
pair whose two halves disagree, a per-channel activation quantization, two pairs pinning
different parameters on one tensor, or a QuantizeLinear read by anything but DequantizeLinear.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, consumers, producers, prune
from tpucompile.ops.qdq import pinned_params
from tpusim.arch.errors import CompileError

NAME = "fold_qdq"
Q, DQ = "QuantizeLinear", "DequantizeLinear"


def _operands(graph, node) -> tuple:
    vals = [graph.const(i) if i else None for i in (node.inputs + ["", ""])[1:3]]
    if vals[0] is None or (len(node.inputs) > 2 and node.inputs[2] and vals[1] is None):
        raise CompileError(f"node {node.name!r} ({node.op}): scale and zero point must be constants")
    return vals[0], vals[1]


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    rename, drop, out = {}, set(), []
    for n in graph.nodes:
        q = prod.get(n.inputs[0]) if n.op == DQ else None
        if q is None or q.op != Q or graph.const(q.inputs[0]) is not None:
            out.append(n)
            continue
        (sq, zq), (sd, zd) = _operands(graph, q), _operands(graph, n)
        if not (np.array_equal(sq, sd) and (zq is None) == (zd is None) and (zq is None or np.array_equal(zq, zd))):
            raise CompileError(f"node {n.name!r} (DequantizeLinear): scale / zero point differ from those of "
                               f"its QuantizeLinear {q.name!r}")
        p = pinned_params(sd, zd)
        if p is None:
            raise CompileError(f"node {n.name!r} (DequantizeLinear): per-channel activation quantization "
                               f"(scale of shape {np.shape(sd)}) unsupported; activations are per tensor")
        x, y = q.inputs[0], n.outputs[0]
        others = [c for c in cons.get(q.outputs[0], []) if c.op != DQ]
        if len(cons.get(q.outputs[0], [])) > 1:
            raise CompileError(f"node {q.name!r} (QuantizeLinear): read by {len(cons[q.outputs[0]])} nodes; one "
                               "DequantizeLinear per QuantizeLinear is supported")
        if others or q.outputs[0] in graph.outputs:
            raise CompileError(f"node {q.name!r} (QuantizeLinear): its int8 output is read by "
                               f"{others[0].name if others else 'the graph output'!r}, not only by DequantizeLinear")
        drop.add(id(q))
        if [c.op for c in cons.get(x, [])] == [Q] and x in prod and x not in graph.outputs:
            # the producer writes the pair's output itself: that ONNX tensor holds the quantized
            # values the model means (onnxruntime's quantizer drops a Relu whose clamp the zero
            # point -128 does, so x itself may be the unclamped float)
            prod[x].outputs = [y if o == x else o for o in prod[x].outputs]
            graph.tensors[y].qparams = p
            prod[y] = prod[x]
            continue
        t = graph.tensors[x]
        if t.qparams is not None and t.qparams != p:
            raise CompileError(f"node {n.name!r} (DequantizeLinear): tensor {x!r} is already quantized with "
                               f"(scale {t.qparams[0]:g}, zero point {t.qparams[1]}), this pair gives "
                               f"(scale {p[0]:g}, zero point {p[1]})")
        t.qparams = p
        rename[y] = x
    graph.nodes = [n for n in out if id(n) not in drop]
    for n in graph.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
    graph.outputs = [rename.get(o, o) for o in graph.outputs]
    return prune(graph)
