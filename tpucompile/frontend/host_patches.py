"""A vision transformer's patch embedding as host patch extraction + ONE device MatMul.

Hugging Face ``ViTModel`` (``torch.onnx.export``, opset 17) starts with the patch embedding
(``transformer_models.vit_model``): from the image ``pixel_values`` (1, Cin, H, W) float,

    ``Conv(W (C, Cin, p, p), b, kernel = stride = p, no padding)`` -> ``Reshape(1, C, P)`` ->
    ``Transpose(0, 2, 1)`` -> ``Concat(E, ·, axis 1)`` -> ``Add(pos)``  ->  (1, T, C)

with P = (H / p) * (W / p) patches, E (1, n, C) constant extra tokens (the [CLS] token, possibly
through an ``Expand``; optional), pos (1, T, C) constant position embeddings (optional), T = n + P.
Non-overlapping patches make the Conv a plain matrix product of each patch's pixels, and the
token-wise constants a product of a one-hot token index, so ``split_host_patches`` cuts the chain
into:

* the **host** (``HostPatches.run``, numpy, float32): patch extraction, ``tokens`` (1, T, K),
  K = Cin*p*p + T. Row t < n: zeros, then a 1 at column Cin*p*p + t; row t = n + oy*(W/p) + ox:
  the patch's pixels ``x[c, oy*p + ky, ox*p + kx]`` at column ``(c*p + ky)*p + kx`` (the Conv
  weight's own flattening), then a 1 at column Cin*p*p + t. Pure data movement: no arithmetic;
* the **device model**: the rest of the graph with ``tokens`` as its run-time input (name
  ``<pixel input>__patch_tokens``) and one ``MatMul(tokens, Wt)`` producing the chain's output
  tensor (same name: calibration, the FP32 reference and the per-layer report compare like with
  like), ``Wt`` (K, C) = [W.reshape(C, -1)ᵀ ; table], ``table[t] = pos[t] + (E[t] if t < n else
  b)``: the projection, its bias, the extra tokens and the position embeddings in one product.

The pixels (ViT's normalisation: [-1, 1]) and the one-hot 1s share the input's int8 scale.
Overlapping or padded patches (stride != kernel, pads, dilations, groups) are refused naming the
Conv; a chain of another shape after a Conv-to-tokens Reshape is refused naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tpucompile.frontend.lift_1d import constant_value
from tpucompile.frontend.model_inputs import inferred_shapes, runtime_inputs
from tpusim.arch.errors import CompileError

__all__ = ["split_host_patches", "HostPatches", "patch_tokens"]


def _attr(node, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def patch_tokens(x: np.ndarray, patch: tuple, extra: int) -> np.ndarray:
    """float (1, Cin, H, W) -> float32 (1, T, Cin*ph*pw + T), T = extra + (H/ph)*(W/pw) (module
    docstring). ValueError if the image is not whole patches."""
    _, cin, h, w = x.shape
    ph, pw = patch
    if h % ph or w % pw:
        raise ValueError(f"image {h}x{w} is not a whole number of {ph}x{pw} patches")
    gh, gw = h // ph, w // pw
    t = extra + gh * gw
    k0 = cin * ph * pw
    out = np.zeros((1, t, k0 + t), np.float32)
    out[0, extra:, :k0] = x[0].reshape(cin, gh, ph, gw, pw).transpose(1, 3, 0, 2, 4).reshape(gh * gw, k0)
    out[0, np.arange(t), k0 + np.arange(t)] = 1.0
    return out


class HostPatches:
    """The host part of a patch-embedding model: ``image`` (name, (1, Cin, H, W)), ``patch``
    (ph, pw), ``extra`` tokens before the patches, ``tokens_name`` the device input it writes,
    ``model`` the original ONNX model (for its image input's data)."""

    def __init__(self, model: onnx.ModelProto, image: tuple, patch: tuple, extra: int, tokens_name: str):
        self.model, self.image, self.patch, self.extra, self.tokens_name = model, image, patch, extra, tokens_name

    def run(self, feeds: dict) -> dict:
        """{tokens_name: float32 (1, T, K)} from {image input name: float (1, Cin, H, W)}.
        CompileError naming the input for a missing image or one of another shape."""
        name, shape = self.image
        if name not in feeds:
            raise CompileError(f"no array for the image input {name!r}")
        x = np.asarray(feeds[name], np.float32)
        if tuple(x.shape) != tuple(shape):
            raise CompileError(f"input {name!r}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
        return {self.tokens_name: patch_tokens(x, self.patch, self.extra)}

    def describe(self) -> str:
        name, (_, cin, h, w) = self.image
        t = self.extra + (h // self.patch[0]) * (w // self.patch[1])
        return (f"patch extraction on the host: {name!r} (1, {cin}, {h}, {w}) -> {self.tokens_name!r} (1, {t}, "
                f"{cin * self.patch[0] * self.patch[1] + t}) ({self.patch[0]}x{self.patch[1]} patches, "
                f"{self.extra} extra token(s), one-hot token columns); the patch projection, its bias, the extra "
                "tokens and the position embeddings are one device MatMul")


def _chain(g, conv, cons, prod, shapes, opsets):
    """[nodes], output tensor, extra tokens (n, C) or None, pos (T, C) or None, after ``conv``."""
    def only(t):
        c = cons.get(t, [])
        if len(c) != 1:
            raise CompileError(f"tensor {t!r} of the patch embedding (from node {conv.name!r}) is read by {len(c)} "
                               "nodes; the host patch extraction needs exactly one")
        return c[0]
    rs = only(conv.output[0])
    tr = only(rs.output[0])
    if tr.op_type != "Transpose" or tuple(_attr(tr, "perm", ())) != (0, 2, 1):
        raise CompileError(f"node {tr.name!r} ({tr.op_type}): after the patch Reshape {rs.name!r} a "
                           "Transpose(0, 2, 1) to (1, patches, channels) is expected")
    nodes, t, extra, pos = [rs, tr], tr.output[0], None, None
    nxt = only(t) if cons.get(t) else None
    if nxt is not None and nxt.op_type == "Concat" and _attr(nxt, "axis", 0) in (1, -2):
        if list(nxt.input).index(t) != len(nxt.input) - 1:
            raise CompileError(f"node {nxt.name!r} (Concat): extra tokens after the patches are not mapped")
        parts = []
        for i in nxt.input[:-1]:
            e = constant_value(g, i, opsets)
            if e is None:
                raise CompileError(f"node {nxt.name!r} (Concat): token operand {i!r} is not a constant")
            known = shapes.get(i, ())
            full = np.broadcast_to(e, known) if known and all(known) else e     # an Expand to a computed shape
            parts.append(full.reshape(-1, full.shape[-1]))
            if i in prod and prod[i].op_type == "Expand":
                nodes.append(prod[i])
        extra = np.concatenate(parts).astype(np.float32)
        nodes.append(nxt)
        t = nxt.output[0]
        nxt = only(t) if cons.get(t) else None
    if nxt is not None and nxt.op_type == "Add":
        other = next(i for i in nxt.input if i != t)
        p = constant_value(g, other, opsets)
        if p is not None:
            _, n_patch, c = shapes[tr.output[0]]
            want = (1, n_patch + (0 if extra is None else extra.shape[0]), c)
            pos = np.broadcast_to(p, want).reshape(want[1:]).astype(np.float32)
            nodes.append(nxt)
            t = nxt.output[0]
    return nodes, t, extra, pos


def _fold_static_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each ``Shape`` of a tensor whose shape inference knows every dimension
    replaced by a Constant (transformers 5's ViT export computes the patch Reshape's shape from
    the Conv output's Shape); ``model`` itself when there is none."""
    inferred = inferred_shapes(model)
    dims = {vi.name: [d.dim_value if d.HasField("dim_value") else 0 for d in vi.type.tensor_type.shape.dim]
            for vi in list(inferred.graph.input) + list(inferred.graph.value_info)
            if vi.type.tensor_type.HasField("shape")}
    folded = []
    for i, n in enumerate(model.graph.node):
        d = dims.get(n.input[0]) if n.op_type == "Shape" and n.input else None
        if d and all(v > 0 for v in d):
            lo, hi = _attr(n, "start", 0), _attr(n, "end", len(d))
            folded.append((i, helper.make_node("Constant", [], list(n.output), name=n.name,
                                               value=numpy_helper.from_array(np.array(d[lo:hi], np.int64)))))
    if not folded:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, c in folded:
        m.graph.node[i].CopyFrom(c)
    return m


def split_host_patches(model: onnx.ModelProto) -> tuple[onnx.ModelProto, HostPatches | None]:
    """(device model, HostPatches) for a model whose float image input is read by a Conv that a
    Reshape turns into (1, C, P) tokens (module docstring); ``(model, None)`` for any other.
    CompileError naming the node for a patch Conv with overlap, padding, dilation or groups, or a
    chain after it of another shape."""
    g = model.graph
    images = [vi for vi in runtime_inputs(model) if len(vi.type.tensor_type.shape.dim) == 4
              and vi.type.tensor_type.elem_type == TensorProto.FLOAT]
    if len(runtime_inputs(model)) != 1 or len(images) != 1:
        return model, None
    img = images[0].name
    orig, model = model, _fold_static_shapes(model)     # the original unless it is a patch model
    g = model.graph
    cons: dict = {}
    for n in g.node:
        for i in n.input:
            cons.setdefault(i, []).append(n)
    prod = {o: n for n in g.node for o in n.output}
    conv = next((n for n in cons.get(img, []) if n.op_type == "Conv"), None)
    rs = cons.get(conv.output[0], []) if conv is not None else []
    if not (len(cons.get(img, [])) == 1 and len(rs) == 1 and rs[0].op_type in ("Reshape", "Flatten")):
        return orig, None
    inferred = inferred_shapes(model, data_prop=True)   # a Reshape shape from Shape ops
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
              for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output)
              if vi.type.tensor_type.HasField("shape")}
    if len(shapes.get(rs[0].output[0], ())) != 3:
        return orig, None                     # not a Conv turned into tokens
    inits = {t.name: t for t in g.initializer}
    w = numpy_helper.to_array(inits[conv.input[1]]) if conv.input[1] in inits else None
    kernel = tuple(_attr(conv, "kernel_shape", w.shape[2:] if w is not None else ()))
    strides = tuple(_attr(conv, "strides", (1, 1)))
    pads, dil = tuple(_attr(conv, "pads", (0, 0, 0, 0))), tuple(_attr(conv, "dilations", (1, 1)))
    if w is None or strides != kernel or any(pads) or set(dil) != {1} or _attr(conv, "group", 1) != 1 \
            or _attr(conv, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise CompileError(f"node {conv.name!r} (Conv): a patch embedding (a Conv turned into tokens) is mapped for "
                           f"non-overlapping patches only: constant weights, strides == kernel_shape, no pads, "
                           f"dilations 1, group 1 (got kernel {list(kernel)}, strides {list(strides)}, pads "
                           f"{list(pads)}, dilations {list(dil)}, group {_attr(conv, 'group', 1)})")
    shape = shapes[img]
    if shape[2] % kernel[0] or shape[3] % kernel[1]:
        raise CompileError(f"node {conv.name!r} (Conv): image {shape[2]}x{shape[3]} is not a whole number of "
                           f"{kernel[0]}x{kernel[1]} patches")
    nodes, out, extra, pos = _chain(g, conv, cons, prod, shapes, model.opset_import)
    c, n_patch = w.shape[0], (shape[2] // kernel[0]) * (shape[3] // kernel[1])
    n_extra = 0 if extra is None else extra.shape[0]
    t = n_extra + n_patch
    bias = numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 and conv.input[2] in inits \
        else np.zeros(c, np.float32)
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits:
        raise CompileError(f"node {conv.name!r} (Conv): the bias {conv.input[2]!r} is not a constant")
    table = np.zeros((t, c), np.float32) if pos is None else pos.copy()
    table[n_extra:] += bias
    if extra is not None:
        table[:n_extra] += extra
    wt = np.concatenate([w.reshape(c, -1).T, table]).astype(np.float32)
    tokens_name = f"{img}__patch_tokens"
    m = onnx.ModelProto()
    m.CopyFrom(model)
    mg = m.graph
    drop = {id(n) for n in [conv] + nodes}
    rest = [n for n in g.node if id(n) not in drop]
    wname = f"{conv.name}__patch_matmul_w"
    mg.initializer.append(numpy_helper.from_array(wt, wname))
    del mg.node[:]
    mg.node.extend([helper.make_node("MatMul", [tokens_name, wname], [out], name=f"{conv.name}__patch_matmul")] + rest)
    del mg.input[:]
    mg.input.extend([helper.make_tensor_value_info(tokens_name, TensorProto.FLOAT, [1, t, wt.shape[0]])]
                    + [vi for vi in g.input if vi.name in inits])
    used = {i for n in mg.node for i in n.input}
    kept = [x for x in mg.initializer if x.name in used]
    del mg.initializer[:]
    mg.initializer.extend(kept)
    del mg.value_info[:]
    return m, HostPatches(model, (img, shape), kernel, n_extra, tokens_name)
