"""Built-in transformer encoders with seeded weights, in the graph shape ``torch.onnx.export`` gives
Hugging Face ``BertModel`` at opset 17 (no download, no torch: built with ``onnx.helper``).

``bert_model(layers, hidden, heads, ffn, seq, vocab, seed)``: inputs ``input_ids``,
``attention_mask``, ``token_type_ids``, int64 (1, seq); outputs ``last_hidden_state`` float32
(1, seq, hidden) and ``pooler_output`` (1, hidden). Graph, per the exporter:

* embeddings: ``Gather(word_embeddings, input_ids)`` + ``Gather(token_type_embeddings,
  token_type_ids)`` + ``Gather(position_embeddings, position_ids)`` (a constant 0 .. seq-1),
  ``LayerNormalization(axis -1, epsilon 1e-12)``;
* extended attention mask: ``Unsqueeze(axes 1, 2)`` -> ``Cast(float)`` -> ``Sub(1, m)`` ->
  ``Mul(·, finfo(float32).min)``: 0 for a kept key, about -3.4e38 for a padded one;
* per layer: Q, K, V = ``MatMul(x, W) + b`` (W stored (in, out), ``Add(bias, MatMul)``),
  ``Reshape(1, seq, heads, d)``, ``Transpose(0, 2, 1, 3)`` for Q and V and the fused
  ``Transpose(0, 2, 3, 1)`` for Kᵀ; ``MatMul(Q, Kᵀ)``, ``Div(√d)``, ``Add(mask)``,
  ``Softmax(axis -1)``, ``MatMul(·, V)``, ``Transpose(0, 2, 1, 3)``, ``Reshape(1, seq, hidden)``,
  output projection, residual ``Add``, ``LayerNormalization``; FFN ``MatMul + Add``, Erf-form
  GELU (``Div(√2)``, ``Erf``, ``Add(1)``, ``Mul(x)``, ``Mul(0.5)``), ``MatMul + Add``, residual,
  ``LayerNormalization``;
* pooler: ``Gather(axis 1, index 0)`` (the [CLS] token), ``Gemm(transB 1)``, ``Tanh``.

Weights (seeded normal; scales of a trained BERT, not its init): embeddings std 0.05, linear
weights std ``1/sqrt(fan_in)``, biases std 0.02, LayerNorm gamma ``1 + N(0, 0.05)``, beta std
0.02. ``bert_inputs(model, seed)``: token ids, a mask with the last eighth of the tokens padded,
token types 0 / 1 for the two halves.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["bert_model", "bert_tiny", "bert_base", "bert_inputs", "BERT_OPSET"]

BERT_OPSET = 17
#: torch.finfo(torch.float32).min: what HF's get_extended_attention_mask multiplies by
FLOAT32_MIN = float(np.finfo(np.float32).min)


def bert_model(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128,
               vocab: int = 30522, seed: int = 0, name: str = "bert") -> onnx.ModelProto:
    """A BertModel-shaped ONNX encoder (module docstring). ValueError if hidden % heads != 0."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    d = hidden // heads
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(n, arr, dtype=np.float32):
        inits.append(numpy_helper.from_array(np.asarray(arr, dtype), n))
        return n

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x, fan_in, fan_out, p):
        w = const(f"{p}.weight", rng.normal(0, 1 / np.sqrt(fan_in), (fan_in, fan_out)))
        b = const(f"{p}.bias", rng.normal(0, 0.02, fan_out))
        return node("Add", [b, node("MatMul", [x, w], f"/{p}/MatMul")], f"/{p}/Add")

    def layernorm(x, p):
        g = const(f"{p}.weight", 1 + rng.normal(0, 0.05, hidden))
        b = const(f"{p}.bias", rng.normal(0, 0.02, hidden))
        return node("LayerNormalization", [x, g, b], f"/{p}/LayerNormalization", axis=-1, epsilon=1e-12)

    # embeddings
    we = const("embeddings.word_embeddings.weight", rng.normal(0, 0.05, (vocab, hidden)))
    pe = const("embeddings.position_embeddings.weight", rng.normal(0, 0.05, (512, hidden)))
    te = const("embeddings.token_type_embeddings.weight", rng.normal(0, 0.05, (2, hidden)))
    pos = const("embeddings.position_ids", np.arange(seq)[None, :], np.int64)
    e = node("Add", [node("Gather", [we, "input_ids"], "/embeddings/word_embeddings/Gather"),
                     node("Gather", [te, "token_type_ids"], "/embeddings/token_type_embeddings/Gather")],
             "/embeddings/Add")
    e = node("Add", [e, node("Gather", [pe, pos], "/embeddings/position_embeddings/Gather")], "/embeddings/Add_1")
    x = layernorm(e, "embeddings.LayerNorm")
    # extended attention mask (1, 1, 1, seq)
    ax1, ax2 = const("/Constant_axes1", [1], np.int64), const("/Constant_axes2", [2], np.int64)
    m = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", ax1], "/Unsqueeze"), ax2], "/Unsqueeze_1")
    m = node("Cast", [m], "/Cast", to=TensorProto.FLOAT)
    m = node("Sub", [const("/Constant_one", 1.0), m], "/Sub")
    mask = node("Mul", [m, const("/Constant_min", FLOAT32_MIN)], "/Mul")
    heads_shape = const("/Constant_heads_shape", [1, seq, heads, d], np.int64)
    hidden_shape = const("/Constant_hidden_shape", [1, seq, hidden], np.int64)
    sqrt_d, sqrt2 = const("/Constant_sqrt_d", np.sqrt(d)), const("/Constant_sqrt2", np.sqrt(2.0))
    one, half = const("/Constant_gelu_one", 1.0), const("/Constant_gelu_half", 0.5)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        a = f"{p}.attention.self"

        def heads_of(t, perm, what):
            r = node("Reshape", [t, heads_shape], f"/{a}/{what}/Reshape")
            return node("Transpose", [r], f"/{a}/{what}/Transpose", perm=perm)
        q = heads_of(linear(x, hidden, hidden, f"{a}.query"), [0, 2, 1, 3], "query")
        kt = heads_of(linear(x, hidden, hidden, f"{a}.key"), [0, 2, 3, 1], "key")
        v = heads_of(linear(x, hidden, hidden, f"{a}.value"), [0, 2, 1, 3], "value")
        s = node("Div", [node("MatMul", [q, kt], f"/{a}/MatMul"), sqrt_d], f"/{a}/Div")
        s = node("Softmax", [node("Add", [s, mask], f"/{a}/Add")], f"/{a}/Softmax", axis=-1)
        c = node("Transpose", [node("MatMul", [s, v], f"/{a}/MatMul_1")], f"/{a}/Transpose_ctx", perm=[0, 2, 1, 3])
        c = node("Reshape", [c, hidden_shape], f"/{a}/Reshape_ctx")
        o = linear(c, hidden, hidden, f"{p}.attention.output.dense")
        x = layernorm(node("Add", [o, x], f"/{p}/attention/output/Add"), f"{p}.attention.output.LayerNorm")
        h = linear(x, hidden, ffn, f"{p}.intermediate.dense")
        g = node("Div", [h, sqrt2], f"/{p}/intermediate/intermediate_act_fn/Div")
        g = node("Erf", [g], f"/{p}/intermediate/intermediate_act_fn/Erf")
        g = node("Add", [g, one], f"/{p}/intermediate/intermediate_act_fn/Add")
        g = node("Mul", [h, g], f"/{p}/intermediate/intermediate_act_fn/Mul")
        g = node("Mul", [g, half], f"/{p}/intermediate/intermediate_act_fn/Mul_1")
        o = linear(g, ffn, hidden, f"{p}.output.dense")
        x = layernorm(node("Add", [o, x], f"/{p}/output/Add"), f"{p}.output.LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/last_hidden_state"))
    cls = node("Gather", ["last_hidden_state", const("/pooler/Constant_0", 0, np.int64)], "/pooler/Gather", axis=1)
    pw = const("pooler.dense.weight", rng.normal(0, 1 / np.sqrt(hidden), (hidden, hidden)))
    pb = const("pooler.dense.bias", rng.normal(0, 0.02, hidden))
    pooled = node("Gemm", [cls, pw, pb], "/pooler/dense/Gemm", alpha=1.0, beta=1.0, transB=1)
    nodes.append(helper.make_node("Tanh", [pooled], ["pooler_output"], name="/pooler/activation/Tanh"))
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, hidden])]
    g = helper.make_graph(nodes, f"{name}_l{layers}_h{hidden}_s{seq}", ins, outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", BERT_OPSET)], producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def bert_tiny(seed: int = 0) -> onnx.ModelProto:
    """BERT-tiny: 2 layers, hidden 128, 2 heads, FFN 512, sequence 128."""
    return bert_model(2, 128, 2, 512, 128, seed=seed, name="bert_tiny")


def bert_base(seed: int = 0) -> onnx.ModelProto:
    """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, sequence 128."""
    return bert_model(12, 768, 12, 3072, 128, seed=seed, name="bert_base")


def bert_inputs(model: onnx.ModelProto, seed: int = 0) -> dict:
    """Inputs of a ``bert_model``: input_ids uniform in [0, vocab), attention_mask 1 except the
    last seq // 8 tokens (padding), token_type_ids 0 for the first half, 1 for the second."""
    seq = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    vocab = next(t.dims[0] for t in model.graph.initializer if t.name == "embeddings.word_embeddings.weight")
    rng = np.random.default_rng(seed)
    mask = np.ones((1, seq), np.int64)
    mask[:, seq - seq // 8:] = 0
    types = (np.arange(seq) >= seq // 2).astype(np.int64)[None, :]
    return {"input_ids": rng.integers(0, vocab, (1, seq), dtype=np.int64), "attention_mask": mask,
            "token_type_ids": types}
