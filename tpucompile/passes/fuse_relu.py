"""Fuse Relu into its producer (Conv, Add, Sum) when the producer's output has no other reader:
the producer gets attrs["relu"] = True and takes over the Relu's output name. Also fuses
Relu(Alias(Conv)) (an FC layer followed by Relu): the Alias then writes the Relu's output name."""
from __future__ import annotations

from tpucompile.ir import Graph, consumers, producers, prune
from tpucompile.ops import OP_TABLE

NAME = "fuse_relu"
#: ops that clamp their own output (op table: ``fuses_relu``): Conv, Add, Sum
FUSABLE = tuple(d.op_type for d in OP_TABLE if d.fuses_relu)


def _single(graph, cons, name) -> bool:
    return len(cons.get(name, [])) == 1 and name not in graph.outputs


def run(graph: Graph) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    drop = set()
    for relu in graph.nodes:
        if relu.op != "Relu" or not _single(graph, cons, relu.inputs[0]):
            continue
        p = prod.get(relu.inputs[0])
        if p is not None and p.op == "Alias":
            c = prod.get(p.inputs[0])
            if c is not None and c.op == "Conv" and not c.attrs.get("relu") and \
                    _single(graph, cons, p.inputs[0]):
                c.attrs["relu"] = True
                graph.tensors[c.outputs[0]].onnx_name = relu.outputs[0]
                p.outputs = [relu.outputs[0]]
                drop.add(id(relu))
            continue
        if p is None or p.op not in FUSABLE or p.attrs.get("relu"):
            continue
        p.attrs["relu"] = True
        p.outputs = [relu.outputs[0]]
        drop.add(id(relu))
    graph.nodes = [n for n in graph.nodes if id(n) not in drop]
    return prune(graph)
