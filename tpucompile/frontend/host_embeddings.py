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
attention mask (any other is refused naming it): it is taken as all
ones (no padding: every key attended, HF's default without a mask) and becomes a constant, so
the extended mask ``(1 - m) * finfo.min`` folds to zeros at compile time (``token_input`` drops
the Add of a zero mask). ``mask_inputs`` names them; a test input with a 0 in one is refused
(``check_masks``): padded masks are not mapped yet.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tpucompile.frontend.model_inputs import runtime_inputs
from tpusim.arch.errors import CompileError

__all__ = ["split_host_embeddings", "HostHead", "check_masks", "HEAD_OPS"]

#: ops the host head may hold (lookups and the element-wise sum of the embeddings)
HEAD_OPS = ("Gather", "Add", "Sub", "Mul", "Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity")
_INT_TYPES = (TensorProto.INT64, TensorProto.INT32)


class HostHead:
    """The host part of a token-id model: ``model`` (ONNX, integer inputs -> float outputs),
    ``token_inputs`` [(name, shape)], ``masks`` {name: shape} (inputs taken as all ones)."""

    def __init__(self, model: onnx.ModelProto, token_inputs: list, masks: dict):
        self.model, self.token_inputs, self.masks = model, token_inputs, masks
        self._session = None

    def run(self, feeds: dict) -> dict:
        """{device input name: float32 array} from {token input name: int array}."""
        if self._session is None:
            self._session = ort.InferenceSession(self.model.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = [o.name for o in self.model.graph.output]
        vals = self._session.run(outs, {n: np.asarray(feeds[n], np.int64) for n, _ in self.token_inputs})
        return {n: v.astype(np.float32) for n, v in zip(outs, vals)}

    def describe(self) -> str:
        ops: dict = {}
        for n in self.model.graph.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
        return (f"embeddings on the host (onnxruntime, float32): {len(self.model.graph.node)} nodes ("
                + ", ".join(f"{k} x{v}" for k, v in ops.items()) + f") from {', '.join(n for n, _ in self.token_inputs)}"
                + f" to {', '.join(o.name for o in self.model.graph.output)}"
                + (f"; {', '.join(self.masks)} taken as all ones (no padding)" if self.masks else ""))


def check_masks(head: HostHead, feeds: dict) -> None:
    """CompileError naming the input if a mask input given holds a 0 (padding is not mapped)."""
    for name in head.masks:
        if name in feeds and not np.all(np.asarray(feeds[name]) == 1):
            raise CompileError(f"input {name!r}: padded attention masks (a 0 in the mask) are not mapped yet; "
                               "the device model takes every token as attended (all ones)")


def _dims(vi) -> tuple:
    return tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)


def split_host_embeddings(model: onnx.ModelProto) -> tuple[onnx.ModelProto, HostHead | None]:
    """(device model, HostHead) for a model with integer run-time inputs (module docstring);
    ``(model, None)`` for any other. CompileError naming the input when an integer input reaches
    a node the head cannot hold."""
    ints = [vi for vi in runtime_inputs(model) if vi.type.tensor_type.elem_type in _INT_TYPES]
    if not ints:
        return model, None
    g = model.graph
    inits = {t.name for t in g.initializer}
    gather_idx = {n.input[1] for n in g.node if n.op_type == "Gather" and len(n.input) > 1}
    masks = {vi.name: _dims(vi) for vi in ints if vi.name not in gather_idx}
    for name in masks:
        if "mask" not in name.lower():
            raise CompileError(f"input {name!r}: an integer input that is neither the indices of an embedding "
                               "Gather nor an attention mask (a name with 'mask') has no mapping")
    tokens = [(vi.name, _dims(vi)) for vi in ints if vi.name in gather_idx]
    head_t = {n for n, _ in tokens}
    # a lookup of constants only (position embeddings of position_ids 0 .. T-1) joins the head
    # when a head node reads it
    const_gathers = {n.output[0]: n for n in g.node if n.op_type == "Gather" and all(i in inits for i in n.input)}
    head_nodes = []
    for n in g.node:
        live = [i for i in n.input if i and i not in inits and i not in const_gathers]
        if n.op_type in HEAD_OPS and live and all(i in head_t for i in live):
            head_nodes += [const_gathers[i] for i in n.input if i in const_gathers]
            head_nodes.append(n)
            head_t.update(o for o in n.output if o)
    head_ids = {id(n) for n in head_nodes}
    head_nodes = [n for n in g.node if id(n) in head_ids]
    rest = [n for n in g.node if id(n) not in head_ids]
    read_by_rest = {i for n in rest for i in n.input} | {o.name for o in g.output}
    frontier = [o for n in head_nodes for o in n.output if o in read_by_rest]
    for n in rest:
        for i in n.input:
            if i in {t for t, _ in tokens}:
                raise CompileError(f"node {n.name!r} ({n.op_type}) reads the token-id input {i!r}: only embedding "
                                   f"lookups and their sums ({', '.join(HEAD_OPS)}) run on the host")
    inferred = onnx.shape_inference.infer_shapes(model)
    vis = {vi.name: vi for vi in inferred.graph.value_info}
    for f in frontier:
        if f not in vis or vis[f].type.tensor_type.elem_type != TensorProto.FLOAT:
            raise CompileError(f"embedding output {f!r}: not a float tensor of known shape")
    used_head = {i for n in head_nodes for i in n.input}
    head_graph = helper.make_graph(
        head_nodes, f"{g.name}_host_embeddings", [vi for vi in g.input if vi.name in {t for t, _ in tokens}],
        [vis[f] for f in frontier], [t for t in g.initializer if t.name in used_head])
    head = onnx.helper.make_model(head_graph, opset_imports=model.opset_import)
    head.ir_version = model.ir_version

    m = onnx.ModelProto()
    m.CopyFrom(model)
    mg = m.graph
    del mg.node[:]
    mg.node.extend(rest)
    new_inputs = [vis[f] for f in frontier] + [vi for vi in g.input if vi.name in inits]
    for name, shape in masks.items():
        mg.initializer.append(numpy_helper.from_array(np.ones(shape, np.int64), name))
    del mg.input[:]
    mg.input.extend(new_inputs)
    used = {i for n in rest for i in n.input}
    kept = [t for t in mg.initializer if t.name in used]
    del mg.initializer[:]
    mg.initializer.extend(kept)
    return m, HostHead(head, tokens, masks)
