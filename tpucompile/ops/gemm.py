"""Gemm (M = 1, alpha = beta = 1, transA = 0): becomes a 1x1 Conv (conv.py) on the (1, K, 1, 1)
view of its input, followed by an Alias back to the Gemm's (1, N) output name (canonicalize).
W' = W (transB=1) or W.T (transB=0), shaped [N, K, 1, 1]; the bias C (size N or 1) broadcast.

A Gemm fed by a Reshape/Flatten of a (1, C, H, W) activation into (1, C*H*W) (VGG, AlexNet heads)
becomes a Conv with an H x W kernel and no padding on the 4-D tensor itself, W' shaped
[N, C, H, W]: ONNX flattens row-major over (C, H, W), the order of a Conv weight's (Cin, kh, kw),
so both compute the same sums; the Reshape is then unused and pruned."""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Node, Tensor
from tpucompile.ops.common import bad_attr, is_fc_view
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS"]


def _import(node, a: dict, opset: int) -> dict:
    if a.get("transA", 0) != 0:
        raise bad_attr(node, "transA", a["transA"], "unsupported (only 0)")
    for k in ("alpha", "beta"):
        if float(a.get(k, 1.0)) != 1.0:
            raise bad_attr(node, k, a[k], "unsupported (only 1.0)")
    if a.get("transB", 0) not in (0, 1):
        raise bad_attr(node, "transB", a["transB"], "invalid")
    return {"transB": int(a.get("transB", 0))}


def _canonicalize(graph, node, producers) -> list:
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
    out = []
    src = producers.get(x)
    kernel = (1, 1)
    if src is not None and src.op == "Alias" and is_fc_view(graph.tensors[src.inputs[0]].shape, xs):
        x4 = src.inputs[0]
    elif src is not None and src.op in ("Reshape", "Flatten") and _nchw_flatten(graph.tensors[src.inputs[0]].shape, xs):
        x4 = src.inputs[0]                  # Gemm(flatten(x)) = Conv with an H x W kernel on x
        kernel = graph.tensors[x4].shape[2:]
    else:
        x4 = f"{x}__nchw"
        graph.tensors[x4] = Tensor(x4, (1, k, 1, 1), onnx_name=graph.tensors[x].onnx_name or x)
        out.append(Node("Alias", f"{node.name}__in", [x], [x4]))
    y = node.outputs[0]
    y4 = f"{y}__nchw"
    graph.tensors[y4] = Tensor(y4, (1, n, 1, 1), onnx_name=graph.tensors[y].onnx_name or y)
    wname = graph.add_const(f"{node.name}__w", np.ascontiguousarray(
        w.reshape(n, k // (kernel[0] * kernel[1]), *kernel)).astype(np.float32))
    bname = graph.add_const(f"{node.name}__b", np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32))
    out.append(Node("Conv", node.name, [x4, wname, bname], [y4],
                    {"kernel_shape": tuple(kernel), "strides": (1, 1), "pads": (0, 0, 0, 0), "relu": False}))
    out.append(Node("Alias", f"{node.name}__out", [y4], [y]))
    return out


def _nchw_flatten(a: tuple, b: tuple) -> bool:
    """``b`` = (1, C*H*W) is the row-major flatten of ``a`` = (1, C, H, W), H*W > 1."""
    return len(a) == 4 and len(b) == 2 and a[0] == b[0] == 1 and a[2] * a[3] > 1 and a[1] * a[2] * a[3] == b[1]


OPS = (OpDef("Gemm", import_node=_import, canonicalize=_canonicalize),)
