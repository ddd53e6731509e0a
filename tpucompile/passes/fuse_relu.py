"""Fuse Relu and Clip into their producer (Conv, Add, Sum) when the producer's output has no other
reader: the producer takes over the Relu's (Clip's) output name, so its int8 range is the one
calibrated on that output, and gets attrs["relu"] = True (a Clip: when its lower bound is 0;
ops/relu.py). Also fuses Relu(Alias(Conv)) (an FC layer followed by Relu): the Alias then writes
the Relu's output name; and Relu(Concat) into the Concat (``_concat_takes_relu``)."""
from __future__ import annotations

from tpucompile.ir import Graph, consumers, producers, prune
from tpucompile.ops import OP_TABLE

NAME = "fuse_relu"
#: ops that clamp their own output (op table: ``fuses_relu``): Conv, Add, Sum
FUSABLE = tuple(d.op_type for d in OP_TABLE if d.fuses_relu)


def _single(graph, cons, name) -> bool:
    return len(cons.get(name, [])) == 1 and name not in graph.outputs


def _concat_takes_relu(graph, cat, prod, cons) -> bool:
    """Relu(Concat(a, b, ...)) = Concat of clamped inputs, when each input is read by the Concat
    alone and made by an op that requantizes into its own output range (Conv, Add, an average
    pool): the quantizer then starts the Concat group's shared range at 0 (zero point -128,
    ``quantize.shared_ranges``), so every producer's int8 saturation is the clamp."""
    for t in cat.inputs:
        p = prod.get(t)
        d = OP_TABLE.get(p.op) if p is not None else None
        if d is None or not d.calibrated or d.device is None or p.op == "Concat" or not _single(graph, cons, t):
            return False
    return True


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    drop = set()
    for relu in graph.nodes:
        if relu.op not in ("Relu", "Clip") or "refused" in relu.attrs or not _single(graph, cons, relu.inputs[0]):
            continue
        clamp = relu.op == "Relu" or relu.attrs["min"] == 0
        p = prod.get(relu.inputs[0])
        if p is not None and p.op == "Alias":
            c = prod.get(p.inputs[0])
            if c is not None and c.op == "Conv" and not c.attrs.get("relu") and \
                    _single(graph, cons, p.inputs[0]):
                c.attrs["relu"] = clamp
                graph.tensors[c.outputs[0]].onnx_name = relu.outputs[0]
                p.outputs = [relu.outputs[0]]
                drop.add(id(relu))
            continue
        if p is not None and p.op == "Concat" and relu.op == "Relu" and _concat_takes_relu(graph, p, prod, cons):
            p.attrs["relu"] = True
            p.outputs = [relu.outputs[0]]
            drop.add(id(relu))
            continue
        if p is None or p.op not in FUSABLE or p.attrs.get("relu"):
            continue
        p.attrs["relu"] = clamp
        p.outputs = [relu.outputs[0]]
        drop.add(id(relu))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return prune(graph)
