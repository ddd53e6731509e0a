"""Sequence models: a graph whose input is 3-D (1, C, L) (a 1-D CNN: Conv1d, BatchNorm1d, pools,
element-wise ops, Flatten, Gemm) is imported as the 2-D network it equals on (1, C, 1, L): every
rank-3 tensor gets an H axis of 1, a Conv / MaxPool / AveragePool with 1-D attributes the 2-D ones
with a 1 in front (kernel (1, k), strides (1, s), pads (0, b, 0, e), dilations (1, d)), a Conv's
rank-3 weight (M, C/g, k) the rank-4 (M, C/g, 1, k), a rank-3 constant operand of an element-wise
op (a (C, 1) or (1, C, 1) per-channel scale) its 4-D broadcast, a reduction, Concat, Split or
Slice over the length axis the same axis of the 4-D tensor (a Split or Slice of the length, like
any W slice, is then refused by slice.py; of the channels it is a view), a Pad's pads the 4-D ones (nothing on H), a Reshape
to 2-D (a flatten) stays. Tensor names do not change, so calibration and the
FP32 reference run the original model and compare by name (the values are the same, in the same
order), a Softmax over the channels (axis 1 / -2) the 4-D one over axis 1, a per-token LayerNorm
``Transpose(0, 2, 1) -> LayerNormalization(axis -1) -> Transpose(0, 2, 1)`` the 4-D channels-last
sandwich (perms (0, 2, 3, 1), (0, 3, 1, 2); ops/layernorm.py). Any other op on a rank-3 tensor
(Transpose, Reshape, a Softmax over the length, ...) is refused, naming the
node. An Unsqueeze / Squeeze of axis 2 (how the dynamo exporter writes 1-D pools: a 2-D pool
between them) is the lifted form itself, an Identity.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tpucompile.frontend.model_inputs import inferred_shapes, runtime_inputs
from tpusim.arch.errors import CompileError

__all__ = ["lift_sequence_model", "input_dims", "constant_value"]

#: ops whose 1-D spatial attributes gain a leading 1
SPATIAL = ("Conv", "MaxPool", "AveragePool")
#: ops that work element by element (a rank-3 constant operand is broadcast to 4-D)
ELEMENTWISE = ("Relu", "Clip", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Sum", "Sigmoid", "Tanh",
               "HardSigmoid", "HardSwish", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign", "Erf", "Gelu",
               "Mish", "Exp", "Sqrt", "Reciprocal", "Abs", "Neg", "Pow", "Identity", "Dropout",
               "QuantizeLinear", "DequantizeLinear")
#: the matmul of two (1, K, L) tensors over the channels (frontend/attention.py) and its lifted form
EINSUM_3D, EINSUM_4D = "bkn,bkm->bnm", "bkxn,bkxm->bnxm"
#: ops that take a rank-3 input as it is on (1, C, 1, L) (their output is not rank 3)
SHAPE_FREE = ("GlobalAveragePool", "GlobalMaxPool", "Flatten")


def _rank(vi) -> int | None:
    tt = vi.type.tensor_type
    return len(tt.shape.dim) if tt.HasField("shape") else None


def _lift_attr(node, a: onnx.AttributeProto) -> None:
    if a.name in ("kernel_shape", "strides", "dilations") and len(a.ints) == 1:
        a.ints[:] = [1, a.ints[0]]
    elif a.name == "pads" and len(a.ints) == 2:
        a.ints[:] = [0, a.ints[0], 0, a.ints[1]]
    elif a.name in ("kernel_shape", "strides", "dilations", "pads"):
        raise CompileError(f"node {node.name!r} ({node.op_type}) on a 3-D tensor: {a.name}={list(a.ints)} "
                           "is not 1-D")


def constant_value(graph, name: str, opsets) -> np.ndarray | None:
    """The value of tensor ``name`` if it depends on initializers and Constant nodes only (the
    exporters' shape arithmetic for a Pad's pads), by onnx's reference evaluator; None otherwise."""
    inits = {t.name: t for t in graph.initializer}
    if name in inits:
        return numpy_helper.to_array(inits[name])
    prod = {o: n for n in graph.node for o in n.output}
    need, todo, used = [], [name], set()
    while todo:
        t = todo.pop()
        if t in used or t in inits or not t:
            continue
        used.add(t)
        n = prod.get(t)
        if n is None:
            return None                   # a graph input: not a constant
        if n not in need:
            need.append(n)
            todo.extend(n.input)
    order = [n for n in graph.node if n in need]
    sub = helper.make_model(helper.make_graph(order, "const", [], [helper.make_tensor_value_info(name, 0, None)],
                                              [inits[i] for i in {i for n in order for i in n.input} if i in inits]),
                            opset_imports=opsets)
    try:
        return np.asarray(ReferenceEvaluator(sub).run(None, {})[0])
    except Exception:                     # an op the evaluator does not know: not foldable here
        return None


def _pads4(pads: list) -> list:
    """Rank-3 Pad pads [b0, b1, b2, e0, e1, e2] as rank-4 [b0, b1, 0, b2, e0, e1, 0, e2]."""
    return [pads[0], pads[1], 0, pads[2], pads[3], pads[4], 0, pads[5]]


def _lift_pads(node, graph, opsets) -> None:
    """A Pad of a rank-3 tensor pads its 4-D form (no padding of the H axis): the ``pads``
    attribute (opset < 11), or its input, a constant (an initializer, a Constant node, or a Cast
    of one, as the TorchScript exporter writes it): the Pad then reads a new initializer with
    the 8 values."""
    for a in node.attribute:
        if a.name in ("pads", "paddings") and len(a.ints) == 6:
            a.ints[:] = _pads4(list(a.ints))
            return
    src = node.input[1] if len(node.input) > 1 else ""
    val = constant_value(graph, src, opsets)
    if val is None or val.size != 6:
        raise CompileError(f"node {node.name!r} (Pad) on a 3-D tensor: pads {src!r} are not 6 constant values")
    pads = [int(v) for v in val.reshape(-1)]
    name = f"{node.name}__pads4"
    graph.initializer.append(numpy_helper.from_array(np.array(_pads4(pads), np.int64), name))
    node.input[1] = name


def _lift_axes(node, axes) -> list:
    """Axes of a rank-3 tensor as axes of its (1, C, 1, L) form: 0, 1 stay, 2 (length) -> 3."""
    out = []
    for ax in axes:
        ax = ax + 3 if ax < 0 else ax
        if not 0 <= ax < 3:
            raise CompileError(f"node {node.name!r} ({node.op_type}): axis {ax} of a 3-D tensor")
        out.append(3 if ax == 2 else ax)
    return out


def _lift_slice_axes(node, graph, opsets) -> None:
    """A Slice of a rank-3 tensor: its axes (attribute before opset 10, else the constant fourth
    input, default 0 .. len(starts) - 1) lifted."""
    attrs = {a.name: a for a in node.attribute}
    if "starts" in attrs:
        axes = list(attrs["axes"].ints) if "axes" in attrs else list(range(len(attrs["starts"].ints)))
        if "axes" in attrs:
            node.attribute.remove(attrs["axes"])
        node.attribute.append(helper.make_attribute("axes", _lift_axes(node, axes)))
        return
    given = node.input[3] if len(node.input) > 3 and node.input[3] else None
    val = constant_value(graph, given or node.input[1], opsets)
    if val is None:
        raise CompileError(f"node {node.name!r} (Slice): {'axes' if given else 'starts'} "
                           f"{given or node.input[1]!r} of a 3-D tensor is not a constant")
    axes = [int(a) for a in val.reshape(-1)] if given else list(range(val.size))
    name = f"{node.name}__axes4"
    graph.initializer.append(numpy_helper.from_array(np.array(_lift_axes(node, axes), np.int64), name))
    while len(node.input) < 4:
        node.input.append("")
    node.input[3] = name


def _attr_s(node, name: str) -> str:
    v = next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), b"")
    return v.decode() if isinstance(v, bytes) else str(v)


def _attr_i(node, name: str, default: int) -> int:
    return next((int(a.i) for a in node.attribute if a.name == name), default)


def _set_attr(node, name: str, value) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


def _layernorm_sandwiches(g, rank3: set) -> dict:
    """Output name of a node -> its lifted form's attribute for each ``Transpose(0, 2, 1) -> LayerNormalization
    (axis -1 / 2) -> Transpose(0, 2, 1)`` on a rank-3 tensor (a per-token LayerNorm of a (1, C, L)
    sequence, each Transpose read by the next node alone): the Transposes get perms (0, 2, 3, 1)
    and (0, 3, 1, 2), the channels-last sandwich ``ops/layernorm.py`` maps to one LAYERNORM."""
    readers: dict = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outs = {o.name for o in g.output}

    def only_reader(t):
        r = readers.get(t, [])
        return r[0] if len(r) == 1 and t not in outs else None

    def perm(n):
        return next((tuple(a.ints) for a in n.attribute if a.name == "perm"), None)
    out = {}
    for t1 in g.node:
        if t1.op_type != "Transpose" or perm(t1) != (0, 2, 1) or not t1.input or t1.input[0] not in rank3:
            continue
        ln = only_reader(t1.output[0])
        if ln is None or ln.op_type != "LayerNormalization" or _attr_i(ln, "axis", -1) not in (-1, 2):
            continue
        t2 = only_reader(ln.output[0])
        if t2 is not None and t2.op_type == "Transpose" and perm(t2) == (0, 2, 1):
            out.update({t1.output[0]: [0, 2, 3, 1], ln.output[0]: -1, t2.output[0]: [0, 3, 1, 2]})
    return out


def lift_sequence_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` itself if no run-time input is 3-D, else the lifted copy (module docstring; a
    model with several inputs: every 3-D tensor lifted, messages name its first 3-D input);
    CompileError naming the node for an op the lifting cannot carry, or the problem for a
    malformed model (a bad initializer, shapes that do not infer)."""
    inp = next((i for i in runtime_inputs(model) if _rank(i) == 3), None)
    if inp is None:
        return model
    try:
        return _lift(model, inp)
    except (ValueError, TypeError, IndexError, KeyError, onnx.onnx_cpp2py_export.shape_inference.InferenceError) as e:
        raise CompileError(f"sequence model (input {inp.name!r} {input_dims(inp)}): cannot lift it to 2-D: "
                           f"{str(e).splitlines()[0][:300]}") from None


def _lift(model: onnx.ModelProto, inp) -> onnx.ModelProto:
    inferred = inferred_shapes(model)
    ranks = {vi.name: _rank(vi) for vi in list(inferred.graph.input) + list(inferred.graph.value_info)
             + list(inferred.graph.output)}
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    rank3 = {n for n, r in ranks.items() if r == 3 and n not in inits}
    lifted_consts: set = set()

    def lift_const(name: str, node) -> None:
        t = inits.get(name)
        if t is None or name in lifted_consts:
            return
        # a reshape that inserts a 1 keeps the row-major data: only the dims change (in place,
        # not a copy of the values: BERT-base's 72 weight matrices, 1 s of a compile)
        d = list(t.dims)
        if len(d) == 3:
            t.dims[:] = [d[0], d[1], 1, d[2]]
        elif len(d) == 2 and node.op_type != "Conv":     # (C, 1): a per-channel operand of (1, C, L)
            t.dims[:] = [d[0], 1, d[1]]
        lifted_consts.add(name)

    def axes_of(node) -> list | None:
        for a in node.attribute:
            if a.name == "axes":
                return list(a.ints)
        if len(node.input) > 1 and node.input[1] in inits:
            return [int(v) for v in numpy_helper.to_array(inits[node.input[1]]).reshape(-1)]
        return None

    def as_identity(node) -> None:
        del node.attribute[:]
        node.input[:] = node.input[:1]
        node.op_type = "Identity"

    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 13)
    sandwich = _layernorm_sandwiches(g, rank3)
    for node in g.node:
        reads3 = [i for i in node.input if i in rank3]
        if node.op_type == "Squeeze" and node.output[0] in rank3 and axes_of(node) in ([2], [-2]):
            as_identity(node)             # (1, C, 1, L) -> (1, C, L): already the lifted form
            continue
        if not reads3:
            continue
        if node.op_type == "Unsqueeze" and axes_of(node) in ([2], [-2]):
            as_identity(node)             # (1, C, L) -> (1, C, 1, L): the lifted form itself
            continue
        if node.op_type in SPATIAL:
            for a in node.attribute:
                _lift_attr(node, a)
            if node.op_type == "Conv" and len(node.input) > 1:
                lift_const(node.input[1], node)
        elif node.op_type in ELEMENTWISE:
            for i in node.input:
                if i in inits and len(inits[i].dims) >= 2:
                    lift_const(i, node)
        elif node.op_type in ("ReduceMean", "ReduceMax", "Concat", "Split"):
            for a in node.attribute:
                if a.name == "axes":
                    a.ints[:] = _lift_axes(node, a.ints)
                    if 3 in a.ints and 2 not in a.ints:
                        a.ints.append(2)
                elif a.name == "axis":
                    a.i = _lift_axes(node, [a.i])[0]
            if node.op_type not in ("Concat", "Split") and len(node.input) > 1 and node.input[1] in inits:
                ax = [int(v) for v in numpy_helper.to_array(inits[node.input[1]]).reshape(-1)]
                ax = _lift_axes(node, ax)
                ax = sorted(set(ax) | ({2} if 3 in ax else set()))
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(np.array(ax, np.int64), node.input[1]))
        elif node.op_type == "Pad":
            _lift_pads(node, g, m.opset_import)
        elif node.op_type == "Slice":
            _lift_slice_axes(node, g, m.opset_import)
        elif node.op_type == "Softmax" and _attr_i(node, "axis", 1 if opset < 13 else -1) in (1, -2):
            _set_attr(node, "axis", 1)    # over the channels (a rank-3 Softmax over the length is refused)
        elif node.op_type == "Transpose" and node.output[0] in sandwich:
            _set_attr(node, "perm", sandwich[node.output[0]])
        elif node.op_type == "LayerNormalization" and node.output[0] in sandwich:
            _set_attr(node, "axis", -1)
        elif node.op_type == "Einsum" and _attr_s(node, "equation") == EINSUM_3D:
            _set_attr(node, "equation", EINSUM_4D)        # B^T A over the channels (ops/act_matmul.py)
            for i in node.input:
                lift_const(i, node)
        elif node.op_type == "Reshape" and ranks.get(node.output[0]) in (1, 2):
            pass                          # a flatten: the same values in the same order
        elif node.op_type not in SHAPE_FREE:
            raise CompileError(f"node {node.name!r} ({node.op_type}) reads the 3-D tensor {reads3[0]!r} of a "
                               f"sequence model (input {inp.name!r} {input_dims(inp)}): only Conv, pools, "
                               "element-wise ops, reductions and Concat over the channel or length axis, Split and Slice over "
                               "the channel axis, "
                               "Flatten and global pools are supported on 3-D tensors")
    for vi in list(g.input) + list(g.output):
        if vi.name in rank3 and len(vi.type.tensor_type.shape.dim) == 3:
            dims = vi.type.tensor_type.shape.dim
            vals = [(d.dim_value, d.dim_param) for d in dims]
            del dims[:]
            for v, p in vals[:2] + [(1, "")] + vals[2:]:
                d = dims.add()
                if p:
                    d.dim_param = p
                else:
                    d.dim_value = v
    del g.value_info[:]                      # re-inferred by the importer
    return m


def input_dims(vi) -> tuple:
    """The dims of a ValueInfoProto: values, or their names where symbolic."""
    return tuple(d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim)
