"""Token-id inputs: the embedding lookups of a transformer run on the host.

A model whose run-time inputs are integer token ids (Hugging Face ``BertModel``: ``input_ids``,
``token_type_ids``, ``attention_mask``, int64 (1, T)) starts with table lookups the chip has no
instruction for: ``Gather(word_embeddings, input_ids)`` + ``Gather(token_type_embeddings, ...)``
+ ``Gather(position_embeddings, position_ids)``. ``split_host_embeddings`` cuts them off:

* the **head** (an ONNX model run by onnxruntime on the host, float32): every node whose
  non-constant inputs are integer inputs or head outputs and whose op is a lookup or an
  element-wise op (``HEAD_OPS``: Gather, the Adds of the three embeddings); its outputs are the
  tensors the rest of the graph reads (BERT: the embeddings sum ``/embeddings/Add_1``, (1, T, C));
* the **device model**: the rest, with those tensors as its float run-time inputs (same names, so
  calibration, the FP32 reference and the per-layer report compare like with like).

An integer input that no Gather reads as its indices and whose name says ``mask`` is an
attention mask (any other is refused naming it): a run-time input, 0/1 per token (1, T). Its
exporter-written path to the additive extended mask (every node computed from the mask and
constants only: ``Unsqueeze``, ``Cast``, ``Sub(1, m)``, ``Mul(finfo.min)`` in older exports;
``Shape``, ``Flatten``, ``Gather``, ``And``, ``Expand``, ``Where`` in transformers 5's; 0 for an
attended key, a large negative for a padded one, (1, 1, 1, T) or expanded over the queries (1, 1,
Tq, T)) joins the head too: the **host step** that turns the 0/1 mask into the additive bias row.
The head then reshapes it (its first query row) to (1, T, 1) (the keys on the channels) as the device model's input
``<name>__key_mask`` (``KEY_MASK_SUFFIX``); the device model reshapes it back for the exporter's
Adds, which the attention rewrite (``frontend/attention.py``) turns into the score MatMuls' run-time
bias (``ops/act_matmul.py``). Checked at the split: the head gives 0 for a 1 and at most
``-1e4`` for a 0 in the mask, in every query row (else CompileError naming the tensor). ``check_mask_feeds`` checks a
user's mask: the right number of values, each 0 or 1.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tpucompile.frontend.model_inputs import inferred_shapes, runtime_inputs, static_shape
from tpusim.arch.errors import CompileError

__all__ = ["split_host_embeddings", "HostHead", "check_mask_feeds", "HEAD_OPS", "KEY_MASK_SUFFIX"]

#: ops the host head may hold (lookups and the element-wise sum of the embeddings)
HEAD_OPS = ("Gather", "Add", "Sub", "Mul", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity")
#: the device model's input holding a key mask's additive bias (1, T, 1): <extended mask>__key_mask
KEY_MASK_SUFFIX = "__key_mask"
#: a padded key's extended-mask value must be at most this (HF: finfo.min or -10000)
MASKED_AT_MOST = -1e4
_INT_TYPES = (TensorProto.INT64, TensorProto.INT32)


class HostHead:
    """The host part of a token-id model: ``model`` (ONNX, integer inputs -> float outputs),
    ``token_inputs`` [(name, shape)], ``masks`` {name: shape} (0/1 run-time attention masks)."""

    def __init__(self, model: onnx.ModelProto, token_inputs: list, masks: dict):
        self.model, self.token_inputs, self.masks = model, token_inputs, masks
        self._session = None

    def run(self, feeds: dict) -> dict:
        """{device input name: float32 array} from {token or mask input name: int array} (a mask
        not given: all ones, every token attended)."""
        if self._session is None:
            self._session = ort.InferenceSession(self.model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = [o.name for o in self.model.graph.output]
        ins = {vi.name for vi in self.model.graph.input}
        given = {n: np.asarray(feeds[n], np.int64) for n, _ in self.token_inputs}
        given.update({n: np.asarray(feeds[n], np.int64) if n in feeds else np.ones(shape, np.int64)
                      for n, shape in self.masks.items() if n in ins})
        vals = self._session.run(outs, given)
        return {n: v.astype(np.float32) for n, v in zip(outs, vals)}

    def describe(self) -> str:
        ops: dict = {}
        for n in self.model.graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        return (f"embeddings on the host (onnxruntime, float32): {len(self.model.graph.node)} nodes ("
                + ", ".join(f"{k} x{v}" for k, v in ops.items()) + f") from {', '.join(n for n, _ in self.token_inputs)}"
                + (f" and the attention mask(s) {', '.join(self.masks)} (0/1 -> additive bias per key)"
                   if self.masks else "") + f" to {', '.join(o.name for o in self.model.graph.output)}")


def check_mask_feeds(head: HostHead, feeds: dict, where: str) -> dict:
    """{mask name: int64 array of its shape} of the masks in ``feeds``; CompileError naming the
    input (and ``where``, e.g. the --input file) when one is missing, has another number of values
    than its tokens or a value other than 0 and 1 (a bool mask is taken as 1 for True)."""
    out = {}
    for name, shape in head.masks.items():
        if name not in feeds:
            raise CompileError(f"{where}: no array {name!r} (the attention mask, int 0/1 {tuple(shape)}: 1 for a "
                               "real token, 0 for padding)")
        m = np.asarray(feeds[name])
        if m.size != int(np.prod(shape)):
            raise CompileError(f"{where}: attention mask {name!r} has shape {tuple(m.shape)}, the model's is "
                               f"{tuple(shape)}")
        if m.dtype == np.bool_:     # True = real token, as a tokenizer's boolean mask
            m = m.astype(np.int64)
        bad = m[(m != 0) & (m != 1)]
        if bad.size or not np.issubdtype(m.dtype, np.number):
            raise CompileError(f"{where}: attention mask {name!r} holds {bad.reshape(-1)[0] if bad.size else m.dtype}; "
                               "a mask is 1 (real token) or 0 (padding)")
        out[name] = m.reshape(shape).astype(np.int64)
    return out


def _dims(vi) -> tuple:
    return tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def split_host_embeddings(model: onnx.ModelProto) -> tuple[onnx.ModelProto, HostHead | None]:
    """(device model, HostHead) for a model with integer run-time inputs (module docstring);
    ``(model, None)`` for any other. CompileError naming the input when an integer input reaches
    a node the head cannot hold."""
    ints = [vi for vi in runtime_inputs(model) if vi.type.tensor_type.elem_type in _INT_TYPES]
    if not ints:
        return model, None
    for vi in ints:                 # an exporter's dynamic batch / sequence: before onnxruntime sees it
        static_shape(vi, vi.name)
    g = model.graph
    inits = {t.name for t in g.initializer}
    gather_idx = {n.input[1] for n in g.node if n.op_type == "Gather" and len(n.input) > 1}
    masks = {vi.name: _dims(vi) for vi in ints if vi.name not in gather_idx}
    for name in masks:
        if "mask" not in name.lower():
            raise CompileError(f"input {name!r}: an integer input that is neither the indices of an embedding "
                               "Gather nor an attention mask (a name with 'mask') has no mapping")
    tokens = [(vi.name, _dims(vi)) for vi in ints if vi.name in gather_idx]
    head_t = {n for n, _ in tokens} | set(masks)
    from_mask = set(masks)          # tensors derived from a mask (and constants) only
    # constant-only nodes (Constant, a lookup of constants: the position embeddings of
    # position_ids 0 .. T-1, the mask builder's shapes) join the head when a head node reads them
    nodes = list(g.node)            # one wrapper per node: id() below stays valid
    consts, const_nodes = set(inits), {}
    for n in nodes:
        if all(not i or i in consts for i in n.input):
            const_nodes.update({o: n for o in n.output if o})
            consts.update(o for o in n.output if o)
    head_ids: set = set()

    def take(n):                    # n and the constant nodes it reads, transitively
        if id(n) in head_ids:
            return
        head_ids.add(id(n))
        for i in n.input:
            if i in const_nodes:
                take(const_nodes[i])
    for n in nodes:
        live = [i for i in n.input if i and i not in consts]
        if not live:
            continue
        if all(i in from_mask for i in live):          # the mask's extension: any op, checked below
            take(n)
            from_mask.update(o for o in n.output if o)
            head_t.update(o for o in n.output if o)
        elif n.op_type in HEAD_OPS and all(i in head_t for i in live):
            take(n)
            head_t.update(o for o in n.output if o)
    head_nodes = [n for n in nodes if id(n) in head_ids]
    rest = [n for n in nodes if id(n) not in head_ids or any(o in const_nodes for o in n.output)]
    read_by_rest = {i for n in rest for i in n.input} | {o.name for o in g.output}
    frontier = [o for n in head_nodes for o in n.output if o in read_by_rest and o not in consts]
    for n in rest:
        for i in n.input:
            if i in {t for t, _ in tokens} | set(masks):
                raise CompileError(f"node {n.name!r} ({n.op_type}) reads the {'mask' if i in masks else 'token-id'} "
                                   f"input {i!r}: only embedding lookups and their sums ({', '.join(HEAD_OPS)}) and "
                                   "the attention mask's extension (nodes of the mask and constants) run on the host")
    inferred = inferred_shapes(model)
    vis = {vi.name: vi for vi in inferred.graph.value_info}
    for f in frontier:
        if f not in from_mask and (f not in vis or vis[f].type.tensor_type.elem_type != TensorProto.FLOAT):
            raise CompileError(f"embedding output {f!r}: not a float tensor of known shape")
    head_in = [vi for vi in g.input if vi.name in {t for t, _ in tokens} | set(masks)]
    used_head = {i for n in head_nodes for i in n.input}
    exts = _probe_extensions(model, head_nodes, head_in, [t for t in g.initializer if t.name in used_head],
                             [f for f in frontier if f in from_mask], tokens, masks)
    mk = helper.make_node
    head_outs, dev_ins, front, extra_init = [], [], [], []
    for f in frontier:
        if f not in from_mask:
            head_outs.append(vis[f])
            dev_ins.append(vis[f])
            continue
        shape = exts[f].shape
        t = shape[-1] if shape else 0
        rows = shape[-2] if len(shape) > 1 else 1         # queries: an expanded (1, 1, Tq, T) mask
        if not shape or t <= 1 or int(np.prod(shape)) != t * rows:
            raise CompileError(f"attention mask extension {f!r} {shape}: not one value per key (1, .., 1, T) "
                               "nor one row of keys per query (1, .., 1, Tq, T)")
        keys = f + KEY_MASK_SUFFIX
        src = f
        if rows > 1:        # the rows are equal (checked below): the first one
            extra_init += [numpy_helper.from_array(np.array([rows, t], np.int64), f"{keys}__rows_shape"),
                           numpy_helper.from_array(np.array(0, np.int64), f"{keys}__row0")]
            head_nodes += [mk("Reshape", [f, f"{keys}__rows_shape"], [f"{keys}__rows"], name=f"{keys}__rows"),
                           mk("Gather", [f"{keys}__rows", f"{keys}__row0"], [f"{keys}__row"], name=f"{keys}__row",
                              axis=0)]
            src = f"{keys}__row"
        extra_init += [numpy_helper.from_array(np.array([1, t, 1], np.int64), f"{keys}__shape")]
        head_nodes.append(mk("Reshape", [src, f"{keys}__shape"], [keys], name=f"{keys}__reshape"))
        head_outs.append(helper.make_tensor_value_info(keys, TensorProto.FLOAT, [1, t, 1]))
        dev_ins.append(helper.make_tensor_value_info(keys, TensorProto.FLOAT, [1, t, 1]))
        one = numpy_helper.from_array(np.array([1] * (len(shape) - 1) + [t], np.int64), f"{f}__row_shape")
        if rows == 1:
            front.append((mk("Reshape", [keys, one.name], [f], name=f"{f}__from_keys"), [one]))
        else:           # back to the exporter's (1, 1, Tq, T): the row over every query
            full = numpy_helper.from_array(np.array(shape, np.int64), f"{f}__shape")
            front.append((mk("Reshape", [keys, one.name], [f"{f}__row_view"], name=f"{f}__from_keys"), [one]))
            front.append((mk("Expand", [f"{f}__row_view", full.name], [f], name=f"{f}__expand"), [full]))
    head_graph = helper.make_graph(head_nodes, f"{g.name}_host_embeddings", head_in, head_outs,
                                   [t for t in g.initializer if t.name in used_head] + extra_init)
    head = onnx.helper.make_model(head_graph, opset_imports=model.opset_import)
    head.ir_version = model.ir_version
    hh = HostHead(head, tokens, masks)

    m = onnx.ModelProto()
    m.CopyFrom(model)
    mg = m.graph
    del mg.node[:]
    mg.node.extend([n for n, _ in front] + rest)
    mg.initializer.extend([b for _, bs in front for b in bs])
    new_inputs = dev_ins + [vi for vi in g.input if vi.name in inits]
    del mg.input[:]
    mg.input.extend(new_inputs)
    used = {i for n in mg.node for i in n.input}
    kept = [t for t in mg.initializer if t.name in used]
    del mg.initializer[:]
    mg.initializer.extend(kept)
    return m, hh


def _probe_extensions(model, nodes: list, inputs: list, inits: list, exts: list, tokens: list, masks: dict) -> dict:
    """{extended mask: float array} of the head's nodes run (onnxruntime) on token ids 0 and the
    mask 1, 0, 1, 0, ...: CompileError naming the tensor unless it is float, 0 for an attended
    token and at most MASKED_AT_MOST for a padded one in every query row (its shape is the
    array's: the exporter's may be symbolic)."""
    if not exts:
        return {}
    g = helper.make_graph(nodes, "mask_probe", inputs, [onnx.ValueInfoProto(name=e)
                                                        for e in exts], inits)
    probe = helper.make_model(g, opset_imports=model.opset_import)
    probe.ir_version = model.ir_version
    feeds = {n: np.zeros(shape, np.int64) for n, shape in tokens}
    for n, shape in masks.items():
        feeds[n] = np.ones(shape, np.int64)
        feeds[n].reshape(-1)[1::2] = 0
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    ins = {vi.name for vi in inputs}
    vals = sess.run(exts, {n: v for n, v in feeds.items() if n in ins})
    t = int(np.prod(next(iter(masks.values()))))
    want = np.ones(t, bool)
    want[1::2] = False
    for e, v in zip(exts, vals):
        rows = np.asarray(v).reshape(-1, t) if np.asarray(v).size % t == 0 else None
        if v.dtype != np.float32 or rows is None or np.any(rows[:, want] != 0) or np.any(rows[:, ~want] > MASKED_AT_MOST):
            raise CompileError(f"attention mask extension {e!r}: not an additive float mask (0 for an attended token, "
                               f"at most {MASKED_AT_MOST:g} for padding, per key): {np.asarray(v).reshape(-1)[:4].tolist()}"
                               f"... ({v.dtype} {tuple(v.shape)}) for the mask 1, 0, 1, 0, ...")
    return dict(zip(exts, vals))
