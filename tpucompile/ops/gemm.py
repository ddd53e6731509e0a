"""Gemm (M = 1, transA = 0; alpha folded into the weight, beta into the bias): becomes a 1x1 Conv (conv.py) on the (1, K, 1, 1)
view of its input, followed by an Alias back to the Gemm's (1, N) output name (canonicalize).
W' = W (transB=1) or W.T (transB=0), shaped [N, K, 1, 1]; the bias C (size N or 1) broadcast.

A Gemm fed by a Reshape/Flatten of a (1, C, H, W) activation into (1, C*H*W) (VGG, AlexNet heads)
becomes a Conv with an H x W kernel and no padding on the 4-D tensor itself, W' shaped
[N, C, H, W]: ONNX flattens row-major over (C, H, W), the order of a Conv weight's (Cin, kh, kw),
so both compute the same sums; the Reshape is then unused and pruned. A flatten of the
channels-last Transpose (perm [0, 2, 3, 1]) of such a map (tf2onnx's Keras Flatten) is the same
Conv with the weight's K axis read in (h, w, c) order.

MatMul of a (1, K) activation by a constant (K, N) (tf2onnx's Dense, torch's Linear on a 2-D
input in some exports) is the Gemm with W = B.T and no bias; a per-channel Add / Mul after a
Gemm or such a MatMul (the Dense's bias) folds into its weight and bias (passes/fold_affine).
A MatMul of two activations, of a constant by an activation, or of a 3-D / 4-D activation has no
device mapping and is refused naming the node."""
from __future__ import annotations

import numpy as np

from tpucompile.ir import Node, Tensor
from tpucompile.ops.common import bad_attr, is_fc_view, no_attrs
from tpucompile.ops.registry import OpDef
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "fc_as_conv", "fc_params", "absorb_affine"]


def _import(node, a: dict, opset: int) -> dict:
    if a.get("transA", 0) != 0:
        raise bad_attr(node, "transA", a["transA"], "unsupported (only 0)")
    for k in a:
        if k not in ("alpha", "beta", "transA", "transB"):
            raise bad_attr(node, k, a[k], "is not supported")
    if a.get("transB", 0) not in (0, 1):
        raise bad_attr(node, "transB", a["transB"], "invalid")
    return {"transB": int(a.get("transB", 0)), "alpha": float(a.get("alpha", 1.0)), "beta": float(a.get("beta", 1.0))}


def _scaled(node, w, c):
    """ONNX Gemm's ``alpha A B + beta C``: alpha folds into the weight, beta into the bias."""
    alpha, beta = node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0)
    return (w if alpha == 1.0 else w * alpha), (c if c is None or beta == 1.0 else c * beta)


def _canonicalize(graph, node, producers) -> list:
    wn = node.inputs[1]
    w = graph.const(wn)
    if w is None:
        raise CompileError(f"node {node.name!r} (Gemm): weight {wn!r} is not a constant")
    w = w if node.attrs.get("transB", 0) else w.T
    n = w.shape[0]
    c = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(n, np.float32)
    if c is None or c.size not in (1, n):
        raise CompileError(f"node {node.name!r} (Gemm): bias {node.inputs[2]!r} must be a constant of "
                           f"size {n}, got {None if c is None else c.shape}")
    return fc_as_conv(graph, node, producers, *_scaled(node, w, c))


def _canonicalize_matmul(graph, node, producers) -> list:
    """MatMul of a (1, K) activation by a constant (K, N): the Gemm with that weight, no bias."""
    a, b = (graph.const(i) for i in node.inputs)
    sa, sb = (tuple(graph.tensors[i].shape) for i in node.inputs)
    if a is not None or b is None or b.ndim != 2 or len(sa) != 2:
        what = ("of two activations" if a is None and b is None else
                f"of {'a constant' if a is not None else 'an activation'} {sa} by "
                f"{'an activation' if b is None else 'a constant of shape'} {sb}")
        raise CompileError(f"node {node.name!r} (MatMul): a product {what} has no device mapping (only a "
                           "(1, K) activation by a constant (K, N) matrix: a fully-connected layer)")
    return fc_as_conv(graph, node, producers, b.T, np.zeros(b.shape[1], np.float32))


def fc_as_conv(graph, node, producers, w: np.ndarray, c: np.ndarray) -> list:
    """The nodes computing ``y = x @ w.T + c`` for the (1, K) activation ``x = node.inputs[0]``
    and a constant ``w`` of shape (N, K): a Conv on the (1, K, 1, 1) view of x (or with an H x W
    kernel on the (1, C, H, W) tensor a Flatten/Reshape made x from), an Alias to ``node``'s
    (1, N) output. CompileError naming the node for an input that is not 1 x K."""
    x = node.inputs[0]
    xs = graph.tensors[x].shape
    if len(xs) != 2 or xs[0] != 1:
        raise CompileError(f"node {node.name!r} ({node.op}): input {x!r} shape {xs} unsupported (only 1xK)")
    n, k = w.shape
    out = []
    src = producers.get(x)
    kernel = (1, 1)
    if src is not None and src.op == "Alias" and is_fc_view(graph.tensors[src.inputs[0]].shape, xs):
        x4 = src.inputs[0]
    elif src is not None and src.op in ("Reshape", "Flatten") and _nhwc_flatten(graph, producers, src.inputs[0], xs):
        x4 = producers[src.inputs[0]].inputs[0]     # flatten(transpose(x, 0 2 3 1)): the weight's K in (h, w, c) order
        _, c_, h_, w_ = graph.tensors[x4].shape
        kernel = (h_, w_)
        w = w.reshape(n, h_, w_, c_).transpose(0, 3, 1, 2).reshape(n, k)
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
    wname = graph.add_const(f"{node.name}__w", np.ascontiguousarray(     # no copy of a float32 weight
        w.reshape(n, k // (kernel[0] * kernel[1]), *kernel), dtype=np.float32))      # (VGG-19's fc6: 411 MB)
    bname = graph.add_const(f"{node.name}__b", np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32))
    out.append(Node("Conv", node.name, [x4, wname, bname], [y4],
                    {"kernel_shape": tuple(kernel), "strides": (1, 1), "pads": (0, 0, 0, 0), "relu": False}))
    out.append(Node("Alias", f"{node.name}__out", [y4], [y]))
    return out


def _nhwc_flatten(graph, producers, name: str, b: tuple) -> bool:
    """``name`` is ``Transpose(x, perm [0, 2, 3, 1])`` of a (1, C, H, W) ``x`` and ``b`` = (1, H*W*C)
    (tf2onnx's Flatten of a channels-last map before a Dense)."""
    t = producers.get(name)
    if t is None or t.op != "Transpose" or tuple(t.attrs.get("perm") or ()) != (0, 2, 3, 1):
        return False
    a = graph.tensors[t.inputs[0]].shape
    return len(a) == 4 and len(b) == 2 and a[0] == b[0] == 1 and a[2] * a[3] > 1 and a[1] * a[2] * a[3] == b[1]


def _nchw_flatten(a: tuple, b: tuple) -> bool:
    """``b`` = (1, C*H*W) is the row-major flatten of ``a`` = (1, C, H, W), H*W > 1."""
    return len(a) == 4 and len(b) == 2 and a[0] == b[0] == 1 and a[2] * a[3] > 1 and a[1] * a[2] * a[3] == b[1]


def _fold_matmul(node, a, b):
    return np.matmul(a, b)


def fc_params(graph, node):
    """(weight float64 (N, K), bias float64 (N,) or None) of a Gemm or of a MatMul of a (1, K)
    activation by a constant (passes/fold_affine folds a following per-channel affine into
    them); None if the weight (or bias) is not a constant."""
    w = graph.const(node.inputs[1])
    if w is None or w.ndim != 2 or graph.const(node.inputs[0]) is not None:
        return None
    if node.op == "MatMul":
        return w.T.astype(np.float64), None
    b = graph.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(node.inputs) > 2 and node.inputs[2] and (b is None or b.size not in (1, w.shape[1 - node.attrs["transB"]])):
        return None
    w, b = _scaled(node, w if node.attrs.get("transB", 0) else w.T, b)
    return w.astype(np.float64), None if b is None else np.broadcast_to(b.reshape(-1), (w.shape[0],)).astype(np.float64)


def absorb_affine(graph, node, s: np.ndarray, b_new: np.ndarray, out: str) -> None:
    """``node`` (Gemm or MatMul, ``fc_params`` not None) becomes the Gemm ``(x @ W.T) * s + b'``
    writing ``out``: W'[n] = W[n] * s[n], bias b' (float64 [N])."""
    w, _ = fc_params(graph, node)
    wname = graph.add_const(f"{node.name}__w_affine", (w * s[:, None]).astype(np.float32))
    bname = graph.add_const(f"{node.name}__b_affine", b_new.astype(np.float32))
    node.op, node.attrs = "Gemm", {"transB": 1, "alpha": 1.0, "beta": 1.0}
    node.inputs, node.outputs = [node.inputs[0], wname, bname], [out]


OPS = (OpDef("Gemm", import_node=_import, canonicalize=_canonicalize, layer=True),
       OpDef("MatMul", import_node=no_attrs, fold=_fold_matmul, canonicalize=_canonicalize_matmul, layer=True))
