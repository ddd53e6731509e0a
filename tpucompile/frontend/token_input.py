"""Token sequences in the transformer layout: a model whose run-time input is float (1, T, C)
(tokens, hidden features last, as Hugging Face exports write every hidden state) and whose
rank-3 ops are the feature-wise ones of an encoder's non-attention part: ``MatMul`` by a constant
(C, N) (a Linear), ``Add`` / ``Sub`` / ``Mul`` / ``Div`` by a constant over the features or a
scalar, element-wise ops of two such tensors (residual ``Add``, GELU's ``Mul``), unary element-wise
functions (``Erf``, ``Tanh``, ...), ``LayerNormalization`` over the features (axis -1) and
``Softmax`` over the features.

``channels_first_tokens_model`` returns the same network on (1, C, T) (the (1, C, L) sequence
layout ``frontend/lift_1d`` lifts to (1, C, 1, T): tokens are pixels, features channels): each
Linear becomes a Conv1d with the transposed weight, a per-feature constant (N,) becomes (N, 1),
a LayerNorm becomes the ``Transpose(0, 2, 1)`` sandwich (one LAYERNORM), a Softmax takes axis 1.
Every rank-3 tensor keeps its name with its last two axes swapped, so calibration, the FP32
reference and the per-layer report run this model and compare like with like; graph outputs are
declared (1, N, T). The original layout is recorded under ``nhwc_input.LAYOUT_KEY`` ("NTC", the
perm (0, 2, 1)), so a user's (1, T, C) array is transposed by the host like an NHWC image.

With several run-time inputs, every rank-3 one is a token input. A model is taken as a token
model only when a ``MatMul`` by a constant or a ``LayerNormalization``
over the last axis reads a rank-3 tensor derived from its input (a Conv1d network never has one:
those were refused before). A self-attention in the exporter's pattern is rewritten per head
(``frontend/attention.py``); a ``Gather`` of one token (the pooler's [CLS]) becomes a Slice of the
tokens and its (1, C) view; any other op on a rank-3 tensor of a token model (a Reshape / Transpose
outside that pattern) is a CompileError naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tpucompile.frontend.attention import attention_blocks
from tpucompile.frontend.host_embeddings import KEY_MASK_SUFFIX
from tpucompile.frontend.lift_1d import ELEMENTWISE, constant_value
from tpucompile.frontend.model_inputs import inferred_shapes, runtime_inputs
from tpucompile.frontend.nhwc_input import add_layout, permute_dims
from tpusim.arch.errors import CompileError

__all__ = ["channels_first_tokens_model", "TOKENS_PERM"]

#: (1, T, C) -> (1, C, T)
TOKENS_PERM = (0, 2, 1)
#: binary element-wise ops whose constant operand may vary over the features
_BINARY = ("Add", "Sub", "Mul", "Div")


def _attr(node, name: str, default):
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _token_tensors(g, name: str, inits: dict) -> tuple[set, bool]:
    """Tensors derived from input ``name`` through rank-3 feature-wise ops (rank kept), and
    whether a Linear or a last-axis LayerNorm reads one (the model is a token model)."""
    derived, token = {name}, False
    for n in g.node:
        if not any(i in derived for i in n.input):
            continue
        if n.op_type == "MatMul" and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
            token = True
        elif n.op_type == "LayerNormalization" and _attr(n, "axis", -1) in (-1, 2):
            token = True
        derived.update(o for o in n.output if o)
    return derived, token


def _live(nodes: list, outputs: set) -> list:
    """``nodes`` without those whose outputs nothing reads (the folded attention mask's)."""
    need, keep = set(outputs), []
    for n in reversed(nodes):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(n.input)
    return keep[::-1]


def channels_first_tokens_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself unless it is a token model (module docstring); else its (1, C, T) copy.
    CompileError naming the node for a rank-3 op the rewrite cannot carry."""
    ins = [vi for vi in runtime_inputs(model) if len(vi.type.tensor_type.shape.dim) == 3
           and not vi.name.endswith(KEY_MASK_SUFFIX)]         # a key mask is (1, T, 1) keys-first already
    if not ins:
        return model
    inits = {t.name: t for t in model.graph.initializer}
    if not any(_token_tensors(model.graph, vi.name, inits)[1] for vi in ins):
        return model
    inferred = inferred_shapes(model)
    dims = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in list(inferred.graph.input)
            + list(inferred.graph.value_info) + list(inferred.graph.output) if vi.type.tensor_type.HasField("shape")}
    ranks = {k: len(v) for k, v in dims.items()}
    blocks = attention_blocks(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    cl = {vi.name for vi in ins}             # rank-3 tensors now (1, C, T)
    nodes = []
    in_block = {n.output[0]: b for b in blocks for n in b["nodes"]}
    done: set = set()

    def new_init(name: str, arr) -> str:
        g.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
        inits[name] = g.initializer[-1]
        return name

    for n in g.node:
        if n.output and n.output[0] in in_block:          # an attention block: rewritten per head
            b = in_block[n.output[0]]
            if id(b) not in done:
                done.add(id(b))
                nodes.extend(b["rewrite"](new_init))
                cl.add(b["ctx"])
            continue
        reads = [i for i in n.input if i in cl]
        if not reads:
            nodes.append(n)
            continue
        outs = [o for o in n.output if o]
        if n.op_type == "Gather" and n.input[0] in cl and _attr(n, "axis", 0) in (1, -2) \
                and (idx := constant_value(g, n.input[1], m.opset_import)) is not None and idx.ndim == 0:
            # one token (BERT's pooler: [CLS]): a Slice of the tokens, then its (1, C) view
            i, tok = int(idx), f"{outs[0]}__token"
            ch = dims[n.input[0]][2]              # the features of the tokens gathered (1, T, C)
            nodes += [helper.make_node("Slice", [n.input[0], new_init(f"{tok}__starts", np.array([i], np.int64)),
                                                 new_init(f"{tok}__ends", np.array([i + 1], np.int64)),
                                                 new_init(f"{tok}__axes", np.array([2], np.int64))], [tok], name=tok),
                      helper.make_node("Reshape", [tok, new_init(f"{tok}__shape", np.array([1, ch], np.int64))],
                                       list(n.output), name=n.name)]
            continue
        if n.op_type == "MatMul" and n.input[0] in cl and n.input[1] in inits and len(inits[n.input[1]].dims) == 2:
            w = numpy_helper.to_array(inits[n.input[1]])
            wt = new_init(f"{n.name or outs[0]}__conv_w", np.ascontiguousarray(w.T[:, :, None]))
            nodes.append(helper.make_node("Conv", [n.input[0], wt], list(n.output), name=n.name, kernel_shape=[1]))
        elif n.op_type == "LayerNormalization" and _attr(n, "axis", -1) in (-1, 2) and ranks.get(n.input[0]) == 3:
            t_in, t_out = f"{outs[0]}__tokens_last", f"{outs[0]}__normed_last"
            nodes.append(helper.make_node("Transpose", [n.input[0]], [t_in], name=f"{n.name}__to_last", perm=[0, 2, 1]))
            ln = onnx.NodeProto()
            ln.CopyFrom(n)
            ln.input[0], ln.output[0] = t_in, t_out
            nodes.append(ln)
            nodes.append(helper.make_node("Transpose", [t_out], [outs[0]], name=f"{n.name}__to_first", perm=[0, 2, 1]))
        elif n.op_type == "Softmax" and _attr(n, "axis", -1) in (-1, 2):
            s = onnx.NodeProto()
            s.CopyFrom(n)
            del s.attribute[:]
            s.attribute.append(helper.make_attribute("axis", 1))
            nodes.append(s)
        elif n.op_type in ELEMENTWISE:
            for k, i in enumerate(n.input):
                if i and i not in cl and n.op_type in _BINARY:
                    c = numpy_helper.to_array(inits[i]) if i in inits else constant_value(g, i, m.opset_import)
                    if c is None:
                        raise CompileError(f"node {n.name!r} ({n.op_type}): operand {i!r} is neither a token "
                                           "tensor nor a constant the compiler can evaluate")
                    if c.size > 1:
                        if c.shape[-1] != c.size:
                            raise CompileError(f"node {n.name!r} ({n.op_type}): constant {i!r} {c.shape} of a token "
                                               "tensor varies over more than the features")
                        n.input[k] = new_init(f"{i}__per_feature", np.ascontiguousarray(c.reshape(-1, 1)))
            nodes.append(n)
        else:
            raise CompileError(f"node {n.name!r} ({n.op_type}) reads the token tensor {reads[0]!r} (1, T, C) of a "
                               "transformer model: only Linears (MatMul by a constant), per-feature constants, "
                               "element-wise ops, LayerNormalization and Softmax over the features are mapped, and a "
                               "self-attention in the exporter's pattern (frontend/attention.py)")
        if ranks.get(outs[0]) == 3 or (n.op_type in ("MatMul", "LayerNormalization", "Softmax")
                                       and ranks.get(outs[0]) is None):
            cl.update(outs)
    nodes = _live(nodes, {o.name for o in g.output})
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    kept = [t for t in g.initializer if t.name in used]    # a Linear's (C, N) weight is now the Conv's
    del g.initializer[:]
    g.initializer.extend(kept)
    for vi in list(g.input) + list(g.output):
        if vi.name in cl and len(vi.type.tensor_type.shape.dim) == 3:     # an unshaped output: left to inference
            permute_dims(vi, TOKENS_PERM)
    del g.value_info[:]
    for vi in ins:
        add_layout(m, {"name": vi.name, "layout": "NTC", "shape": [d.dim_value for d in vi.type.tensor_type.shape.dim],
                       "perm": list(TOKENS_PERM)})
    return m
