"""torch's LocalResponseNorm as its exporters write it, recognised and replaced by one ONNX LRN.

``torch.nn.functional.local_response_norm`` on a 4-D x is (torch 2.x source)::

    div = x * x                                    Mul(x, x)
    div = div.view(N, 1, C, H, W)                  Reshape to 5-D (1, 1, C, H, W or -1)
    div = F.pad(div, (0, 0, 0, 0, size // 2, (size - 1) // 2))   Pad of axis 2 only, zeros
    div = F.avg_pool3d(div, (size, 1, 1), stride=1)              AveragePool (size, 1, 1), strides 1
    div = div.view(N, C, H, W)                     Squeeze (axis 1) or Reshape to 4-D
    div = div * alpha + k                          Mul by a scalar, Add of a scalar (either order)
    div = div ** beta                              Pow by a scalar
    y = x / div                                    Div

which is ONNX ``LRN(x, size, alpha, beta, bias=k)`` (ONNX spec: ``y = x / (bias + alpha/size *
sum of squares over the window)^beta``; the average pool divides the window's sum by ``size``,
counting the zero pads) when the window is ONNX's: ``size // 2`` channels before and
``(size - 1) // 2`` after equal ONNX's ``floor((size-1)/2)`` before and ``ceil((size-1)/2)``
after, i.e. an odd ``size``. The dynamo exporter (torch 2.13, opset 18) writes exactly these
nodes (``tests/fixtures/lrn_12.dynamo.onnx``). ``fuse_torch_lrn`` replaces each such chain whose
inner tensors nothing else reads by one LRN node named after the Div and writing its output. A chain with an even ``size``
(torch's window is one channel off ONNX's) is left alone, so its 3-D AveragePool is refused by
the importer as before. The TorchScript exporter (opset 17) writes the same chain with its
shapes computed (Shape, Gather, Concat: the chain does not depend on their values) and the
squeeze behind an ``If`` on the batch size whose two branches Squeeze or pass on the pool's
output before a Reshape to 4-D (``tests/fixtures/lrn_12.ts.onnx``): recognised too. Nodes
left reading nothing but the removed chains (that shape arithmetic) are dropped.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tpucompile.frontend.lift_1d import constant_value

__all__ = ["fuse_torch_lrn"]


def _scalar(graph, name: str, opsets):
    v = constant_value(graph, name, opsets)
    return None if v is None or np.asarray(v).size != 1 else float(np.asarray(v).reshape(-1)[0])


def _attr(node, name: str, default=None):
    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


class _Chain:
    """Walks one candidate chain backwards from a Div; ``lrn()`` gives (the LRN node, the chain's
    other nodes) or None."""

    def __init__(self, graph, opsets, readers: dict) -> None:
        self.graph, self.opsets, self.readers = graph, opsets, readers
        self.prod = {o: n for n in graph.node for o in n.output}

    def _only(self, name: str, op: str, shapes: int = 0):
        """The producer of ``name`` if it is an ``op`` node and nothing else reads ``name`` (but
        ``shapes`` Shape nodes)."""
        n = self.prod.get(name)
        shape_readers = sum(1 for r in self.graph.node if r.op_type == "Shape" and name in r.input)
        ok = n is not None and n.op_type == op and shape_readers <= shapes
        return n if ok and self.readers.get(name, 0) == 1 + shape_readers else None

    def _unsqueezed(self, name: str) -> str:
        """The tensor both branches of the If producing ``name`` squeeze or pass on (TorchScript's
        squeeze of a possibly-1 batch), or ``name`` itself."""
        n = self._only(name, "If")
        if n is None:
            return name
        srcs = set()
        for a in n.attribute:
            body = {o: b for b in a.g.node for o in b.output}
            b = body.get(a.g.output[0].name)
            srcs.add(b.input[0] if b is not None and b.op_type in ("Squeeze", "Identity") else None)
        return srcs.pop() if len(srcs) == 1 and None not in srcs else name

    def _scalar_operand(self, node):
        """(the non-constant input, the scalar) of a binary node with one scalar constant operand."""
        for i, j in ((0, 1), (1, 0)):
            v = _scalar(self.graph, node.input[j], self.opsets)
            if v is not None:
                return node.input[i], v
        return None, None

    def lrn(self, div):
        x = div.input[0]
        pw = self._only(div.input[1], "Pow")
        beta = pw and _scalar(self.graph, pw.input[1], self.opsets)
        add = pw and self._only(pw.input[0], "Add")
        m, k = self._scalar_operand(add) if add else (None, None)
        mul = m and self._only(m, "Mul")
        s, alpha = self._scalar_operand(mul) if mul else (None, None)
        sq = s and (self._only(s, "Squeeze") or self._only(s, "Reshape"))
        branch = sq and self._only(sq.input[0], "If")
        pool = sq and self._only(self._unsqueezed(sq.input[0]), "AveragePool", shapes=1)
        size = self._window(pool)
        pad = size and self._only(pool.input[0], "Pad")
        view = pad and self._only(pad.input[0], "Reshape")
        square = view and self._only(view.input[0], "Mul")
        if None in (beta, k, alpha, size, square) or list(square.input) != [x, x] or not self._pads(pad, size):
            return None
        lrn = helper.make_node("LRN", [x], [div.output[0]], name=div.name, size=size, alpha=alpha, beta=beta, bias=k)
        return lrn, (pw, add, mul, sq, branch, pool, pad, view, square)

    def _window(self, pool):
        """The window size of a torch LRN's AveragePool ((size, 1, 1), strides 1, no pads), if odd."""
        if pool is None:
            return None
        kernel = list(_attr(pool, "kernel_shape", []))
        if len(kernel) != 3 or kernel[1:] != [1, 1] or kernel[0] % 2 == 0 or \
                list(_attr(pool, "strides", [1, 1, 1])) != [1, 1, 1] or any(_attr(pool, "pads", [0] * 6)):
            return None
        return int(kernel[0])

    def _pads(self, pad, size: int) -> bool:
        """``pad`` zero-pads axis 2 of the 5-D view by size // 2 on both sides (odd size), nothing else."""
        if len(pad.input) < 2 or (len(pad.input) > 3 and pad.input[3]):
            return False
        pads = constant_value(self.graph, pad.input[1], self.opsets)
        value = _scalar(self.graph, pad.input[2], self.opsets) if len(pad.input) > 2 and pad.input[2] else 0.0
        want = [0, 0, size // 2, 0, 0, 0, 0, size // 2, 0, 0]
        return pads is not None and [int(p) for p in np.asarray(pads).reshape(-1)] == want and value == 0.0


def fuse_torch_lrn(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every torch LocalResponseNorm chain (module docstring) ending in a Div
    replaced by one LRN node (the Div's name and output); the model itself if there is none."""
    g = model.graph
    if not any(n.op_type == "AveragePool" and len(_attr(n, "kernel_shape", [])) == 3 for n in g.node):
        return model
    readers: dict = {}
    for n in g.node:
        for i in list(n.input) + sorted(_captured(n)):
            readers[i] = readers.get(i, 0) + 1
    for o in g.output:
        readers[o.name] = readers.get(o.name, 0) + 1
    chain = _Chain(g, model.opset_import, readers)
    found = {i: f for i, n in enumerate(g.node) if n.op_type == "Div" and (f := chain.lrn(n))}
    if not found:
        return model
    gone = {id(inner) for _, chain_nodes in found.values() for inner in chain_nodes}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(_live(g, [found[i][0] if i in found else n for i, n in enumerate(g.node)
                                    if id(n) not in gone]))
    return out


def _captured(node) -> set:
    """Outer-scope tensors the subgraphs of ``node`` (an If's branches) read."""
    names = set()
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            inner = {o for b in a.g.node for o in b.output}
            names |= {i for b in a.g.node for i in b.input if i and i not in inner}
    return names


def _live(graph, nodes: list) -> list:
    """``nodes`` without those whose outputs nothing reads (the chains' shape arithmetic)."""
    outputs = {o.name for o in graph.output}
    while True:
        read = outputs | {i for n in nodes for i in n.input} | {i for n in nodes for i in _captured(n)}
        keep = [n for n in nodes if any(o in read for o in n.output)]
        if len(keep) == len(nodes):
            return nodes
        nodes = keep
