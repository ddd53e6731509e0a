"""Remove the QuantizeLinear -> DequantizeLinear pairs of a pre-quantized (QDQ) model, pinning
their (scale, zero point) on the float tensor they quantize (``ir.Tensor.qparams``), which the
quantizer then uses instead of a calibrated range (``tpucompile.ops.qdq``). When the pair reads
the tensor alone, its producer writes the pair's output instead (that ONNX tensor, the
dequantized values, is then the one calibration and the per-layer report see); else the pair's
output is renamed to the tensor itself, also as a graph output (a QDQ model's last pair often
follows a host op, e.g. the classifier's Softmax: the output is then that op's own tensor). Weight and bias
DequantizeLinear nodes of constants are left to constant_fold. A pair on a tensor an earlier pair
already quantized with other parameters (two pairs back to back) becomes an identity ``Lut``
from one grid to the other, so both clamps hold. CompileError naming the node for a pair whose
two halves disagree, a per-channel activation quantization, or a QuantizeLinear read by anything
but one DequantizeLinear.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Graph, consumers, producers, prune
from tpucompile.ops.lut import lut_node
from tpucompile.ops.qdq import pinned_params
from tpusim.arch.errors import CompileError

NAME = "fold_qdq"
Q, DQ = "QuantizeLinear", "DequantizeLinear"


def _operands(graph, node) -> tuple:
    vals = [graph.const(i) if i else None for i in (node.inputs + ["", ""])[1:3]]
    if vals[0] is None or (len(node.inputs) > 2 and node.inputs[2] and vals[1] is None):
        raise CompileError(f"node {node.name!r} ({node.op}): scale and zero point must be constants")
    return vals[0], vals[1]


def _keep_weights(graph, dq) -> bool:
    """A DequantizeLinear of symmetric int8 weights (a constant [Cout, ...], zero point 0, per
    tensor or per axis 0): the float weights become a constant that remembers the model's scales
    (``ir.Tensor.weight_scale``), so the Conv quantizes back to exactly its integers. False (left
    to constant_fold) for anything else (uint8 or asymmetric weights, biases)."""
    w = graph.const(dq.inputs[0])
    if w is None or np.asarray(w).dtype != np.int8 or np.asarray(w).ndim < 2:
        return False
    s, z = _operands(graph, dq)
    axis = dq.attrs.get("axis", 1) % np.asarray(w).ndim
    s = np.asarray(s, np.float64).reshape(-1)
    if (z is not None and np.any(np.asarray(z) != 0)) or (s.size != 1 and axis != 0) or np.any(s <= 0):
        return False
    t = graph.tensors[dq.outputs[0]]
    scale = np.broadcast_to(s, (np.asarray(w).shape[0],)).copy()
    t.value = (np.asarray(w, np.float64) * scale.reshape(-1, *([1] * (np.asarray(w).ndim - 1)))).astype(np.float32)
    t.shape, t.dtype, t.weight_scale = tuple(t.value.shape), "float32", scale
    return True


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    rename, drop, out = {}, set(), []
    for n in graph.nodes:
        if n.op == DQ and _keep_weights(graph, n):
            continue
        q = prod.get(n.inputs[0]) if n.op == DQ else None
        if q is None or q.op != Q or graph.const(q.inputs[0]) is not None:
            out.append(n)
            continue
        (sq, zq), (sd, zd) = _operands(graph, q), _operands(graph, n)
        if not (np.array_equal(sq, sd) and (zq is None) == (zd is None) and (zq is None or np.array_equal(zq, zd))):
            raise CompileError(f"node {n.name!r} (DequantizeLinear): scale / zero point differ from those of "
                               f"its QuantizeLinear {q.name!r}")
        zdt = np.asarray(zd).dtype if zd is not None else np.dtype(np.uint8)
        if zdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise CompileError(f"node {n.name!r} (DequantizeLinear): {zdt} activations unsupported (the device's "
                               "activations are int8; a uint8 or int8 quantization maps onto them)")
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
        pinned = graph.tensors[x].qparams
        if pinned is not None and pinned != p:
            # x is already quantized (an earlier pair): this pair requantizes it, clamping to
            # both grids, which an identity table lookup from x's grid to this one does
            graph.tensors[y].qparams = p
            out.append(lut_node(graph, n.name, x, y))
            prod[y] = out[-1]
            continue
        if [c.op for c in cons.get(x, [])] == [Q] and x in prod and x not in graph.outputs:
            # the producer writes the pair's output itself: that ONNX tensor holds the quantized
            # values the model means (onnxruntime's quantizer drops a Relu whose clamp the zero
            # point -128 does, so x itself may be the unclamped float)
            prod[x].outputs = [y if o == x else o for o in prod[x].outputs]
            graph.tensors[y].qparams = p
            prod[y] = prod[x]
            continue
        graph.tensors[x].qparams = p
        rename[y] = x
    graph.nodes = [n for n in out if id(n) not in drop]
    for n in graph.nodes:
        n.inputs = [rename.get(i, i) for i in n.inputs]
    graph.outputs = [rename.get(o, o) for o in graph.outputs]
    return prune(graph)
