"""Self-attention of a (1, T, C) token model rewritten per head onto the (1, C, T) layout
(``frontend/token_input.py`` calls it; docs/backend.md "Transformers").

The exporter's pattern (Hugging Face BertSelfAttention, ``torch.onnx.export`` opset 17), from the
hidden state ``x``: ``Q = Add(bq, MatMul(x, Wq))`` (likewise K, V); ``Reshape(1, T, h, d)`` and
``Transpose(0, 2, 1, 3)`` (``(0, 2, 3, 1)`` for Kᵀ); ``MatMul(Q, Kᵀ)``; ``Div(√d)`` (or a scalar
``Mul``); ``Add(mask)``; ``Softmax(axis -1)``; ``MatMul(P, V)``; ``Transpose(0, 2, 1, 3)``;
``Reshape(1, T, C)`` -> ``ctx``.

Rewritten, per head ``i`` (all tensors (1, channels, T) unless said; names carry ``__h<i>``):

* ``qkv = Conv1x1(x, [Wq | Wk | Wv]ᵀ) + [bq | bk | bv]`` (1, 3C, T): one projection of
  every head's Q, K and V, so x is read once per layer (one scale for all: Q is not scaled by
  1/√d, which would cost it 3 bits of 8 for d = 64; the Softmax takes the 1/√d, below);
  ``q_i, k_i, v_i`` = ``Split(qkv, axis 1)`` into 3h parts of d channels,
  views of its buffer. A data operand of the array must start on a block, so the back end has
  the projection write every head from its own block (``ops/act_matmul.py``
  ``head_slice_maps``: gap lanes after a head of d < blk channels, neither loaded as weight
  columns nor read);
* ``s_i = Einsum("bkn,bkm->bnm", k_i, q_i)``: (1, T keys, T queries), the keys on the channels;
* ``p_i = Softmax(Mul(s_i, 1/√d), axis 1)`` (over the keys; the scalar Mul goes into the
  SOFTMAX's ``exp_mult``, ``ops/softmax.py``; after the mask Add: a masked key stays masked);
* ``vt_i = Einsum("bkn,bkm->bnm", v_i, I_d)``: Vᵀ (1, T, d), the tokens on the channels: the
  array transposes it (v_i stationary, the identity streamed; ``ops/act_matmul.py``);
* ``c_i = Einsum("bkn,bkm->bnm", vt_i, p_i)``: (1, d, T queries);
* ``ctx = Concat(c_0 .. c_{h-1}, axis 1)`` (the heads' views of one buffer, no copy).

``Einsum("bkn,bkm->bnm", B, A)`` = ``Bᵀ·A`` over the channels k is the one form the op table maps
(``ops/act_matmul.py``: A streamed, B stationary). The mask operand is a constant of zeros
(dropped) or the Reshape of a key-mask input ``<ext>__key_mask`` (1, T, 1) back to the exporter's
(1, 1, 1, T), possibly Expanded over the queries (``frontend/host_embeddings.py``: a run-time
``attention_mask``): then per head
``s_i = Add(Einsum(k_i, q_i), <ext>__key_mask)``, one value per key added over the queries (the
quantizer fuses it into the scores' requant, ``ops/act_matmul.py``); anything else is refused.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tpucompile.frontend.host_embeddings import KEY_MASK_SUFFIX
from tpucompile.frontend.lift_1d import EINSUM_3D, constant_value
from tpusim.arch.errors import CompileError

__all__ = ["attention_blocks", "EINSUM_BT_A"]

#: the Einsum the rewrite writes: y[n, m] = sum_k B[k, n] A[k, m] (B stationary, A streamed)
EINSUM_BT_A = EINSUM_3D


def _perm(n) -> tuple:
    return tuple(next((helper.get_attribute_value(a) for a in n.attribute if a.name == "perm"), ()))


class _Graph:
    def __init__(self, model):
        self.m, self.g = model, model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.prod = {o: n for n in self.g.node for o in n.output}
        self.cons: dict = {}
        for n in self.g.node:
            for i in n.input:
                self.cons.setdefault(i, []).append(n)

    def const(self, name):
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        return constant_value(self.g, name, self.m.opset_import)

    def only(self, name, op):
        c = self.cons.get(name, [])
        return c[0] if len(c) == 1 and c[0].op_type == op else None

    def linear(self, t, where):
        """(x, W (C, N), b (N,), [nodes]) of ``t = Add(b, MatMul(x, W))``."""
        add = self.prod.get(t)
        if add is None or add.op_type != "Add":
            raise CompileError(f"node {where!r}: attention operand {t!r} is not a Linear (MatMul + Add)")
        mm = next((self.prod[i] for i in add.input if i in self.prod and self.prod[i].op_type == "MatMul"), None)
        b = next((self.const(i) for i in add.input if self.const(i) is not None), None)
        if mm is None or b is None or self.const(mm.input[1]) is None:
            raise CompileError(f"node {where!r}: attention operand {t!r} is not a Linear (MatMul by a constant + Add)")
        return mm.input[0], self.const(mm.input[1]), b, [mm, add]

    def heads(self, t4, perm, where):
        """(2-D source tensor, heads, d, [nodes]) of ``t4 = Transpose(Reshape(src, (1, T, h, d)), perm)``."""
        tr = self.prod.get(t4)
        if tr is None or tr.op_type != "Transpose" or _perm(tr) != perm:
            raise CompileError(f"node {where!r}: operand {t4!r} is not Transpose(perm {list(perm)}) of the heads")
        rs = self.prod.get(tr.input[0])
        shape = self.const(rs.input[1]) if rs is not None and rs.op_type == "Reshape" else None
        if shape is None or len(shape) != 4:
            raise CompileError(f"node {where!r}: operand {t4!r} is not a Reshape into (1, T, heads, d)")
        return rs.input[0], int(shape[2]), int(shape[3]), [rs, tr]


def _block(G: _Graph, qk) -> dict:
    """The nodes of one attention block from its Q·Kᵀ MatMul, and what the rewrite needs."""
    where = qk.name
    qsrc, h, d, qn = G.heads(qk.input[0], (0, 2, 1, 3), where)
    ksrc, _, _, kn = G.heads(qk.input[1], (0, 2, 3, 1), where)
    nodes, scale, t = [qk] + qn + kn, 1.0, qk.output[0]
    nxt = G.cons.get(t, [None])[0]
    if nxt is not None and nxt.op_type in ("Div", "Mul"):
        c = G.const(nxt.input[1])
        if c is None or c.size != 1:
            raise CompileError(f"node {nxt.name!r} ({nxt.op_type}): the scores' scaling is not a scalar constant")
        scale = 1 / float(c.reshape(-1)[0]) if nxt.op_type == "Div" else float(c.reshape(-1)[0])
        nodes.append(nxt)
        t, nxt = nxt.output[0], G.cons.get(nxt.output[0], [None])[0]
    key_mask = None
    if nxt is not None and nxt.op_type == "Add":
        other = next(i for i in nxt.input if i != t)
        mask = G.const(other)
        src = G.prod.get(other)
        while src is not None and src.op_type == "Expand" and src.input[0] in G.prod:     # over the queries
            src = G.prod[src.input[0]]
        if mask is None and src is not None and src.op_type == "Reshape" and src.input[0].endswith(KEY_MASK_SUFFIX) \
                and src.input[0] in {vi.name for vi in G.g.input}:
            key_mask = src.input[0]            # the host's additive mask, (1, T, 1): keys on the channels
        elif mask is None or np.any(mask != 0):
            raise CompileError(f"node {nxt.name!r} (Add): the attention mask {other!r} is neither a constant of zeros "
                               "nor the extended mask of a run-time attention_mask input (frontend/host_embeddings.py)")
        nodes.append(nxt)
        t, nxt = nxt.output[0], G.cons.get(nxt.output[0], [None])[0]
    axis = next((helper.get_attribute_value(a) for a in nxt.attribute if a.name == "axis"), -1) if nxt else None
    if nxt is None or nxt.op_type != "Softmax" or axis not in (-1, 3):
        raise CompileError(f"node {where!r}: the scores are not followed by a Softmax over the keys")
    sm, p_t, casts = nxt, nxt.output[0], []
    while (c := G.only(p_t, "Cast")) is not None and helper.get_attribute_value(c.attribute[0]) == onnx.TensorProto.FLOAT:
        casts.append(c)               # a float-to-float Cast (transformers 5's softmax dtype): the identity
        p_t = c.output[0]
    pv = G.only(p_t, "MatMul")
    if pv is None or pv.input[0] != p_t:
        raise CompileError(f"node {sm.name!r}: the probabilities are not multiplied by V (MatMul(P, V))")
    vsrc, _, _, vn = G.heads(pv.input[1], (0, 2, 1, 3), pv.name)
    tr = G.only(pv.output[0], "Transpose")
    rs = G.only(tr.output[0], "Reshape") if tr is not None and _perm(tr) == (0, 2, 1, 3) else None
    if rs is None:
        raise CompileError(f"node {pv.name!r}: the context is not Transpose(0, 2, 1, 3) + Reshape back to (1, T, C)")
    nodes += [sm, pv, tr, rs] + vn + casts
    lin = {}
    for what, src in (("q", qsrc), ("k", ksrc), ("v", vsrc)):
        x, w, b, ln = G.linear(src, where)
        lin[what] = (x, w, b)
        nodes += ln
    if len({lin[k][0] for k in lin}) != 1:
        raise CompileError(f"node {where!r}: Q, K and V are not projections of one hidden state")
    n = lin["q"][1].shape[1]              # a -1 in the Reshape into heads (transformers 5's exports)
    h, d = (n // d if h == -1 and d > 0 else h), (n // h if d == -1 and h > 0 else d)
    if h <= 0 or d <= 0 or h * d != n:
        raise CompileError(f"node {where!r}: the Reshape into heads gives {h} heads of {d} for {n} features")
    return {"nodes": nodes, "heads": h, "d": d, "scale": scale, "lin": lin, "scores": qk.output[0], "key_mask": key_mask,
            "probs": sm.output[0], "pv": pv.output[0], "ctx": rs.output[0], "x": lin["q"][0]}


def _per_head(blk: dict, new_init) -> list:
    """The rewritten nodes of one block (module docstring)."""
    mk = helper.make_node
    h, d, x = blk["heads"], blk["d"], blk["x"]
    eye = new_init(f"{blk['ctx']}__eye", np.eye(d, dtype=np.float32)[None])
    # one projection of x for Q, K and V of every head (x read once), split into the heads
    lin = blk["lin"]
    qkv = f"{blk['ctx']}__qkv"
    w = np.concatenate([lin[what][1] for what in lin], axis=1)       # (C, 3 h d)
    b = np.concatenate([np.asarray(lin[what][2], np.float64).reshape(-1) for what in lin])
    wt = new_init(f"{qkv}__w", np.ascontiguousarray(w.T[:, :, None]).astype(np.float32))
    bb = new_init(f"{qkv}__b", b.reshape(-1, 1).astype(np.float32))
    heads = [f"{blk['ctx']}__{what}__h{i}" for what in lin for i in range(h)]
    out = [mk("Conv", [x, wt], [f"{qkv}__mm"], name=f"{qkv}__mm", kernel_shape=[1]),
           mk("Add", [f"{qkv}__mm", bb], [qkv], name=qkv),
           mk("Split", [qkv], heads, name=f"{qkv}__heads", axis=1)]
    parts = []
    for i in range(h):
        proj = {what: f"{blk['ctx']}__{what}__h{i}" for what in lin}
        s, p = f"{blk['scores']}__h{i}", f"{blk['probs']}__h{i}"
        vt, c = f"{proj['v']}__t", f"{blk['pv']}__h{i}"
        if blk["key_mask"]:         # the run-time mask: added to the raw scores per key (channel)
            out += [mk("Einsum", [proj["k"], proj["q"]], [f"{s}__raw"], name=f"{s}__raw", equation=EINSUM_BT_A),
                    mk("Add", [f"{s}__raw", blk["key_mask"]], [s], name=s)]
        else:
            out.append(mk("Einsum", [proj["k"], proj["q"]], [s], name=s, equation=EINSUM_BT_A))
        if blk["scale"] != 1.0:     # 1/√d: into the Softmax's exp_mult (ops/softmax.py)
            k = new_init(f"{s}__scale", np.array(blk["scale"], np.float32))
            out.append(mk("Mul", [s, k], [f"{s}__scaled"], name=f"{s}__scaled"))
            s = f"{s}__scaled"
        out += [mk("Softmax", [s], [p], name=p, axis=1),
                mk("Einsum", [proj["v"], eye], [vt], name=vt, equation=EINSUM_BT_A),
                mk("Einsum", [vt, p], [c], name=c, equation=EINSUM_BT_A)]
        parts.append(c)
    out.append(mk("Concat", parts, [blk["ctx"]], name=f"{blk['ctx']}__heads", axis=1))
    return out


def attention_blocks(model: onnx.ModelProto) -> list[dict]:
    """Every attention block of the (1, T, C) model (a MatMul of two non-constant rank-4 operands
    starts one); CompileError naming the node for one that is not the exporter's pattern."""
    G = _Graph(model)
    blocks = []
    for n in model.graph.node:
        if n.op_type == "MatMul" and all(G.const(i) is None for i in n.input) and n.input[0] in G.prod \
                and G.prod[n.input[0]].op_type == "Transpose" and _perm(G.prod[n.input[0]]) == (0, 2, 1, 3) \
                and n.input[1] in G.prod and _perm(G.prod[n.input[1]]) == (0, 2, 3, 1):
            blk = _block(G, n)
            blk["rewrite"] = lambda new_init, b=blk: _per_head(b, new_init)
            blocks.append(blk)
    return blocks
