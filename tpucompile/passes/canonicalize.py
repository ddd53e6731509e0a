"""Canonicalise to the forms the quantizer maps 1:1 onto device ops.

* Sum of two inputs -> Add.
* Reshape/Flatten between (1, C, 1, 1) and (1, C) -> Alias (no data movement).
* Gemm (M = 1) -> 1x1 Conv on the (1, K, 1, 1) view of its input, followed by an Alias back to
  the Gemm's (1, N) output name. W' = W (transB=1) or W.T (transB=0), shaped [N, K, 1, 1].
* AveragePool whose kernel equals the input (H, W), without padding -> GlobalAveragePool.
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.errors import CompileError
from tpucompile.ir import Graph, Node, Tensor, producers, prune

NAME = "canonicalize"


def _is_fc_view(a: tuple, b: tuple) -> bool:
    return len(a) == 4 and len(b) == 2 and a[0] == b[0] == 1 and a[2] == a[3] == 1 and a[1] == b[1]


def _gemm(graph: Graph, node: Node, prod: dict, out: list) -> None:
    x, wn = node.inputs[0], node.inputs[1]
    xs = graph.tensors[x].shape
    if len(xs) != 2 or xs[0] != 1:
        raise CompileError(f"node {node.name!r} (Gemm): input {x!r} shape {xs} unsupported (only 1xK)")
    w = graph.const(wn)
    if w is None:
        raise CompileError(f"node {node.name!r} (Gemm): weight {wn!r} is not a constant")
    w = w if node.attrs.get("transB", 0) else w.T
    n, k = w.shape
    c = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(n, np.float32)
    if c is None or c.size not in (1, n):
        raise CompileError(f"node {node.name!r} (Gemm): bias {node.inputs[2]!r} must be a constant of "
                           f"size {n}, got {None if c is None else c.shape}")
    src = prod.get(x)
    if src is not None and src.op == "Alias" and _is_fc_view(graph.tensors[src.inputs[0]].shape, xs):
        x4 = src.inputs[0]
    else:
        x4 = f"{x}__nchw"
        graph.tensors[x4] = Tensor(x4, (1, k, 1, 1), onnx_name=graph.tensors[x].onnx_name or x)
        out.append(Node("Alias", f"{node.name}__in", [x], [x4]))
    y = node.outputs[0]
    y4 = f"{y}__nchw"
    graph.tensors[y4] = Tensor(y4, (1, n, 1, 1), onnx_name=graph.tensors[y].onnx_name or y)
    wname = graph.add_const(f"{node.name}__w", np.ascontiguousarray(w.reshape(n, k, 1, 1)).astype(np.float32))
    bname = graph.add_const(f"{node.name}__b", np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32))
    out.append(Node("Conv", node.name, [x4, wname, bname], [y4],
                    {"kernel_shape": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0), "relu": False}))
    out.append(Node("Alias", f"{node.name}__out", [y4], [y]))
    prod[y] = out[-1]


def run(graph: Graph) -> Graph:
    out: list = []
    prod = producers(graph)
    for node in graph.nodes:
        if node.op == "Sum" and len(node.inputs) == 2:
            node = Node("Add", node.name, node.inputs, node.outputs, dict(node.attrs))
        if node.op == "Add":
            node.attrs.setdefault("relu", False)
        if node.op in ("Reshape", "Flatten"):
            a, b = graph.tensors[node.inputs[0]].shape, graph.tensors[node.outputs[0]].shape
            if _is_fc_view(a, b) or _is_fc_view(b, a):
                node = Node("Alias", node.name, [node.inputs[0]], node.outputs)
        if node.op == "AveragePool":
            shp = graph.tensors[node.inputs[0]].shape
            if tuple(node.attrs["kernel_shape"]) == tuple(shp[2:]) and not any(node.attrs["pads"]):
                node = Node("GlobalAveragePool", node.name, node.inputs, node.outputs)
        if node.op == "Gemm":
            _gemm(graph, node, prod, out)
            continue
        out.append(node)
        for o in node.outputs:
            prod[o] = node
    graph.nodes = out
    return prune(graph)
