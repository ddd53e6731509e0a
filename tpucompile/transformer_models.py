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

``vit_model(layers, hidden, heads, ffn, image, patch, seed)`` / ``vit_tiny(seed)``: Hugging Face
``ViTModel`` likewise (its docstring gives the graph: the patch Conv, [CLS] Concat, position Add,
pre-LN layers, final LayerNorm, pooler).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["bert_model", "bert_tiny", "bert_base", "bert_inputs", "vit_model", "vit_tiny", "BERT_OPSET",
           "VIT_IMAGE_MEAN", "VIT_IMAGE_STD"]

BERT_OPSET = 17
#: torch.finfo(torch.float32).min: what HF's get_extended_attention_mask multiplies by
FLOAT32_MIN = float(np.finfo(np.float32).min)


class _Builder:
    """Initializers and nodes of one encoder graph, drawn from ``rng`` in call order."""

    def __init__(self, rng, hidden: int):
        self.rng, self.hidden, self.inits, self.nodes = rng, hidden, [], []

    def const(self, n, arr, dtype=np.float32):
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), n))
        return n

    def node(self, op, ins, out, **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(self, x, fan_in, fan_out, p):
        w = self.const(f"{p}.weight", self.rng.normal(0, 1 / np.sqrt(fan_in), (fan_in, fan_out)))
        b = self.const(f"{p}.bias", self.rng.normal(0, 0.02, fan_out))
        return self.node("Add", [b, self.node("MatMul", [x, w], f"/{p}/MatMul")], f"/{p}/Add")

    def layernorm(self, x, p):
        g = self.const(f"{p}.weight", 1 + self.rng.normal(0, 0.05, self.hidden))
        b = self.const(f"{p}.bias", self.rng.normal(0, 0.02, self.hidden))
        return self.node("LayerNormalization", [x, g, b], f"/{p}/LayerNormalization", axis=-1, epsilon=1e-12)

    def constants(self, tokens: int, heads: int) -> dict:
        """The shape and scalar constants every layer reads."""
        d = self.hidden // heads
        return {"heads_shape": self.const("/Constant_heads_shape", [1, tokens, heads, d], np.int64),
                "hidden_shape": self.const("/Constant_hidden_shape", [1, tokens, self.hidden], np.int64),
                "sqrt_d": self.const("/Constant_sqrt_d", np.sqrt(d)), "sqrt2": self.const("/Constant_sqrt2", np.sqrt(2.0)),
                "one": self.const("/Constant_gelu_one", 1.0), "half": self.const("/Constant_gelu_half", 0.5)}

    def attention(self, x, a, k: dict, mask=None):
        """Q, K, V Linears of ``x`` (prefix ``a``), per-head scores / √d (+ ``mask``), Softmax,
        P·V, heads merged back to (1, T, hidden) (the context, before the output dense)."""
        hidden = self.hidden

        def heads_of(t, perm, what):
            r = self.node("Reshape", [t, k["heads_shape"]], f"/{a}/{what}/Reshape")
            return self.node("Transpose", [r], f"/{a}/{what}/Transpose", perm=perm)
        q = heads_of(self.linear(x, hidden, hidden, f"{a}.query"), [0, 2, 1, 3], "query")
        kt = heads_of(self.linear(x, hidden, hidden, f"{a}.key"), [0, 2, 3, 1], "key")
        v = heads_of(self.linear(x, hidden, hidden, f"{a}.value"), [0, 2, 1, 3], "value")
        s = self.node("Div", [self.node("MatMul", [q, kt], f"/{a}/MatMul"), k["sqrt_d"]], f"/{a}/Div")
        if mask is not None:
            s = self.node("Add", [s, mask], f"/{a}/Add")
        s = self.node("Softmax", [s], f"/{a}/Softmax", axis=-1)
        c = self.node("Transpose", [self.node("MatMul", [s, v], f"/{a}/MatMul_1")], f"/{a}/Transpose_ctx",
                      perm=[0, 2, 1, 3])
        return self.node("Reshape", [c, k["hidden_shape"]], f"/{a}/Reshape_ctx")

    def ffn(self, x, p, ffn: int, k: dict):
        """intermediate dense, Erf-form GELU, output dense (prefix ``p``)."""
        h = self.linear(x, self.hidden, ffn, f"{p}.intermediate.dense")
        g = self.node("Div", [h, k["sqrt2"]], f"/{p}/intermediate/intermediate_act_fn/Div")
        g = self.node("Erf", [g], f"/{p}/intermediate/intermediate_act_fn/Erf")
        g = self.node("Add", [g, k["one"]], f"/{p}/intermediate/intermediate_act_fn/Add")
        g = self.node("Mul", [h, g], f"/{p}/intermediate/intermediate_act_fn/Mul")
        g = self.node("Mul", [g, k["half"]], f"/{p}/intermediate/intermediate_act_fn/Mul_1")
        return self.linear(g, ffn, self.hidden, f"{p}.output.dense")

    def pooler(self, x):
        """The [CLS] token's Gemm + Tanh -> ``pooler_output``; returns its value info."""
        cls = self.node("Gather", [x, self.const("/pooler/Constant_0", 0, np.int64)], "/pooler/Gather", axis=1)
        pw = self.const("pooler.dense.weight", self.rng.normal(0, 1 / np.sqrt(self.hidden), (self.hidden, self.hidden)))
        pb = self.const("pooler.dense.bias", self.rng.normal(0, 0.02, self.hidden))
        pooled = self.node("Gemm", [cls, pw, pb], "/pooler/dense/Gemm", alpha=1.0, beta=1.0, transB=1)
        self.nodes.append(helper.make_node("Tanh", [pooled], ["pooler_output"], name="/pooler/activation/Tanh"))
        return helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, [1, self.hidden])

    def model(self, name: str, ins: list, outs: list) -> onnx.ModelProto:
        model = helper.make_model(helper.make_graph(self.nodes, name, ins, outs, self.inits),
                                  opset_imports=[helper.make_opsetid("", BERT_OPSET)], producer_name="pytorch")
        model.ir_version = 8
        return model


def bert_model(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, seq: int = 128,
               vocab: int = 30522, seed: int = 0, name: str = "bert") -> onnx.ModelProto:
    """A BertModel-shaped ONNX encoder (module docstring). ValueError if hidden % heads != 0."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    rng = np.random.default_rng(seed)
    B = _Builder(rng, hidden)
    const, node = B.const, B.node
    # embeddings
    we = const("embeddings.word_embeddings.weight", rng.normal(0, 0.05, (vocab, hidden)))
    pe = const("embeddings.position_embeddings.weight", rng.normal(0, 0.05, (512, hidden)))
    te = const("embeddings.token_type_embeddings.weight", rng.normal(0, 0.05, (2, hidden)))
    pos = const("embeddings.position_ids", np.arange(seq)[None, :], np.int64)
    e = node("Add", [node("Gather", [we, "input_ids"], "/embeddings/word_embeddings/Gather"),
                     node("Gather", [te, "token_type_ids"], "/embeddings/token_type_embeddings/Gather")],
             "/embeddings/Add")
    e = node("Add", [e, node("Gather", [pe, pos], "/embeddings/position_embeddings/Gather")], "/embeddings/Add_1")
    x = B.layernorm(e, "embeddings.LayerNorm")
    # extended attention mask (1, 1, 1, seq)
    ax1, ax2 = const("/Constant_axes1", [1], np.int64), const("/Constant_axes2", [2], np.int64)
    m = node("Unsqueeze", [node("Unsqueeze", ["attention_mask", ax1], "/Unsqueeze"), ax2], "/Unsqueeze_1")
    m = node("Cast", [m], "/Cast", to=TensorProto.FLOAT)
    m = node("Sub", [const("/Constant_one", 1.0), m], "/Sub")
    mask = node("Mul", [m, const("/Constant_min", FLOAT32_MIN)], "/Mul")
    k = B.constants(seq, heads)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        c = B.attention(x, f"{p}.attention.self", k, mask)
        o = B.linear(c, hidden, hidden, f"{p}.attention.output.dense")
        x = B.layernorm(node("Add", [o, x], f"/{p}/attention/output/Add"), f"{p}.attention.output.LayerNorm")
        o = B.ffn(x, p, ffn, k)
        x = B.layernorm(node("Add", [o, x], f"/{p}/output/Add"), f"{p}.output.LayerNorm")
    B.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/last_hidden_state"))
    pooled = B.pooler("last_hidden_state")
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden]), pooled]
    model = B.model(f"{name}_l{layers}_h{hidden}_s{seq}", ins, outs)
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


#: ViTImageProcessor's normalisation (google/vit-*): x = (pixel / 255 - 0.5) / 0.5, per channel
VIT_IMAGE_MEAN = (0.5, 0.5, 0.5)
VIT_IMAGE_STD = (0.5, 0.5, 0.5)


def vit_model(layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, image: int = 224,
              patch: int = 16, seed: int = 0, name: str = "vit", pooler: bool = True) -> onnx.ModelProto:
    """A ViTModel-shaped ONNX encoder (Hugging Face ``ViTModel``, eager attention, as
    ``torch.onnx.export`` writes it at opset 17; built with ``onnx.helper``). Input
    ``pixel_values`` float32 (1, 3, image, image), normalised like ViTImageProcessor (mean 0.5,
    std 0.5: recorded in the model's metadata ``image_mean`` / ``image_std``); outputs
    ``last_hidden_state`` float32 (1, T, hidden), T = 1 + (image / patch)^2, and with ``pooler``
    ``pooler_output`` (1, hidden). Graph:

    * embeddings: ``Conv(3 -> hidden, kernel = stride = patch)`` (the patch projection),
      ``Reshape(1, hidden, P)`` (torch's ``flatten(2)``), ``Transpose(0, 2, 1)``,
      ``Concat(Expand(cls_token (1, 1, hidden), (1, 1, 1)), patches, axis 1)`` (torch writes
      the -1s of ``expand(batch, -1, -1)`` as 1s), ``Add(position_embeddings
      (1, T, hidden))``;
    * per layer (pre-LN): ``LayerNormalization`` (layernorm_before, eps 1e-12), self-attention as
      in ``bert_model`` without a mask, output dense, residual ``Add``, ``LayerNormalization``
      (layernorm_after), FFN with Erf-form GELU, residual ``Add``;
    * final ``LayerNormalization`` -> last_hidden_state; pooler ``Gather(axis 1, 0)`` (the CLS
      token), ``Gemm(transB 1)``, ``Tanh``.

    Weights (seeded normal, scales of a trained ViT): patch conv std ``1/sqrt(3*patch^2)``, cls
    token and position embeddings std 0.02, linear weights std ``1/sqrt(fan_in)``, biases std
    0.02, LayerNorm gamma ``1 + N(0, 0.05)``, beta std 0.02. ValueError if hidden % heads != 0 or
    image % patch != 0."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    if image % patch:
        raise ValueError(f"image {image} is not a multiple of patch {patch}")
    grid = image // patch
    tokens = 1 + grid * grid
    rng = np.random.default_rng(seed)
    B = _Builder(rng, hidden)
    const, node = B.const, B.node
    # embeddings
    pw = const("embeddings.patch_embeddings.projection.weight",
               rng.normal(0, 1 / np.sqrt(3 * patch * patch), (hidden, 3, patch, patch)))
    pb = const("embeddings.patch_embeddings.projection.bias", rng.normal(0, 0.02, hidden))
    e = node("Conv", ["pixel_values", pw, pb], "/embeddings/patch_embeddings/projection/Conv",
             kernel_shape=[patch, patch], strides=[patch, patch], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    e = node("Reshape", [e, const("/embeddings/patch_embeddings/Constant", [1, hidden, grid * grid], np.int64)],
             "/embeddings/patch_embeddings/Reshape")
    e = node("Transpose", [e], "/embeddings/patch_embeddings/Transpose", perm=[0, 2, 1])
    cls = node("Expand", [const("embeddings.cls_token", rng.normal(0, 0.02, (1, 1, hidden))),
                          const("/embeddings/Constant", [1, 1, 1], np.int64)], "/embeddings/Expand")
    e = node("Concat", [cls, e], "/embeddings/Concat", axis=1)
    x = node("Add", [e, const("embeddings.position_embeddings", rng.normal(0, 0.02, (1, tokens, hidden)))],
             "/embeddings/Add")
    k = B.constants(tokens, heads)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        c = B.attention(B.layernorm(x, f"{p}.layernorm_before"), f"{p}.attention.attention", k)
        o = B.linear(c, hidden, hidden, f"{p}.attention.output.dense")
        x = node("Add", [o, x], f"/{p}/Add")
        o = B.ffn(B.layernorm(x, f"{p}.layernorm_after"), p, ffn, k)
        x = node("Add", [o, x], f"/{p}/output/Add")
    x = B.layernorm(x, "layernorm")
    B.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/last_hidden_state"))
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, tokens, hidden])]
    if pooler:
        outs.append(B.pooler("last_hidden_state"))
    ins = [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, image, image])]
    model = B.model(f"{name}_l{layers}_h{hidden}_i{image}_p{patch}", ins, outs)
    helper.set_model_props(model, {"image_mean": ",".join(map(str, VIT_IMAGE_MEAN)),
                                   "image_std": ",".join(map(str, VIT_IMAGE_STD))})
    onnx.checker.check_model(model)
    return model


def vit_tiny(seed: int = 0) -> onnx.ModelProto:
    """ViT-tiny/16: 12 layers, hidden 192, 3 heads, FFN 768, 224x224 image, patch 16 (197 tokens)."""
    return vit_model(12, 192, 3, 768, 224, 16, seed=seed, name="vit_tiny")
