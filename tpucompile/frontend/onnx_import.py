"""ONNX -> tpucompile float IR.

Loads the model, runs ``onnx.shape_inference``, checks every op and attribute against what the
accelerator flow supports, and normalises attributes with each op's import handler from the op
table (``tpucompile.ops``), e.g. Conv: kernel_shape, strides (sh, sw), pads (top, left, bottom,
right), relu=False; Softmax: axis (with the opset's default).

Anything unsupported raises CompileError naming the node, op and attribute/value.
"""
from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from tpucompile.frontend.lift_1d import input_dims, lift_sequence_model
from tpucompile.frontend.model_inputs import BIG_WEIGHT_ELEMENTS, runtime_inputs, static_shape, without_big_weights
from tpucompile.frontend.torch_lrn import fuse_torch_lrn
from tpucompile.ir import Graph, Node, Tensor, prune, verify
from tpucompile.ops import OP_TABLE
from tpucompile.ops.common import one_line, resolve_auto_pad, resolve_ceil_mode
from tpucompile.ops.reshape import vector_inputs_as_nchw
from tpusim.arch.errors import CompileError
from tpusim.arch.limits import DDR_ADDR_LIMIT

__all__ = ["SUPPORTED_OPS", "import_onnx", "read_onnx", "runtime_inputs", "unsupported_report"]

#: ONNX op types the importer accepts (the op table's, in its order)
SUPPORTED_OPS = OP_TABLE.onnx_types


def _attrs(node) -> dict:
    """Attribute name -> value; STRING attributes as str (ONNX stores them as bytes)."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return out


def grouped_report(errors: list, what: str, common: str | None = None, footer: str = "") -> CompileError:
    """One CompileError for the (op type, CompileError) pairs of every refused node: the single
    message when there is one; else "N nodes <what> (by op: ...)" with the count by op type (in
    order of appearance), each node's message on its own line with ``common`` (a text every
    message ends with, such as the supported-op list) removed, and ``footer`` last."""
    if len(errors) == 1:
        return errors[0][1]
    by_op: dict = {}
    for op, _ in errors:
        by_op[op] = by_op.get(op, 0) + 1
    counts = ", ".join(f"{op} x{n}" for op, n in by_op.items())
    lines = "\n".join(f"  {str(e).replace(common, '') if common else e}" for _, e in errors)
    return CompileError(f"{len(errors)} nodes {what} (by op: {counts}):\n{lines}" + (f"\n{footer}" if footer else ""))


def unsupported_report(errors: list) -> CompileError:
    """The importer's ``grouped_report``: the list of supported ops, when every refusal ends with
    the same one, is said once after the nodes."""
    tail = "; supported ops: "
    lists = {str(e)[str(e).index(tail):] for _, e in errors if tail in str(e)}
    if len(lists) == 1:
        (ops,) = lists
        return grouped_report(errors, "cannot be compiled", ops, f"supported ops: {ops[len(tail):]}")
    return grouped_report(errors, "cannot be compiled")


def read_onnx(path: Union[str, Path]) -> onnx.ModelProto:
    """The ONNX model in the file ``path``. Raises CompileError naming the file when it cannot be
    read or decoded, is empty, or decodes to a ModelProto without a graph (protobuf reads an
    empty file, and some other bytes, as an empty message without complaint)."""
    try:
        model = onnx.load(str(path))
    except Exception as e:  # DecodeError, OSError and others for a missing or corrupt file
        raise CompileError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    if not model.HasField("graph"):
        what = "the file is empty" if Path(path).stat().st_size == 0 else "it decodes to a ModelProto without a graph"
        raise CompileError(f"{path}: not an ONNX model ({what})")
    return model


def import_onnx(model: Union[str, Path, onnx.ModelProto], weights: dict | None = None) -> Graph:
    """Load an ONNX model (path or ModelProto) into a verified float IR Graph.

    ``weights``: a dict the import fills with {initializer name: its values, a read-only array}
    for the initializers of ``model`` itself (none when the importer rewrote the model first,
    e.g. a lifted Conv1d), so a later reader of the same ModelProto (the calibration session)
    need not copy ``raw_data`` again (VGG-19: 548 MB, 0.3 s a read).

    Raises CompileError for unsupported ops/attributes (naming node, op, attribute and value),
    dynamic or missing shapes (naming the tensor), or a malformed graph.
    """
    if not isinstance(model, onnx.ModelProto):
        model = read_onnx(model)
    try:
        return _import(model, weights)
    except UnicodeDecodeError as e:  # protobuf checks proto2 strings only when they are read
        raise CompileError(f"corrupt ONNX model: a name or string attribute is not valid UTF-8 ({e})") from None


def _check_input_rank(model: onnx.ModelProto) -> None:
    """CompileError naming the input for a run-time input of rank other than 2, 3 or 4 (a
    Conv3d's 5-D volume, a rank-1 vector), before any node is looked at."""
    for vi in runtime_inputs(model):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) not in (2, 3, 4):
            dims = input_dims(vi)
            raise CompileError(f"graph input {vi.name!r} shape {dims} ({len(dims)}-D) unsupported (only NCHW "
                               "images, (1, C, L) sequences and (1, K) vectors)")


def _all_finite(arr: np.ndarray) -> bool:
    """Every value of float array ``arr`` is finite: its sum is finite (a NaN or an infinity makes
    it NaN or infinite; one pass, no mask) unless the sum overflows, then value by value."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(arr.sum()):
            return True
    return bool(np.isfinite(arr).all())


def _import(model: onnx.ModelProto, weights: dict | None = None) -> Graph:
    _check_input_rank(model)
    given = model
    model = fuse_torch_lrn(lift_sequence_model(model))
    if model is not given:
        weights = None                   # rewritten: its initializers are not the caller's
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [1])
    _check_input_dtypes(model)
    errors = []
    for idx, n in enumerate(model.graph.node):   # ops and attributes first: the clearest message
        try:
            _check_node(idx, n, opset)
        except CompileError as e:
            errors.append((n.op_type, e))
    if errors:
        raise unsupported_report(errors)
    inferred = _checked_and_inferred(model).graph
    if not _all_static(inferred):
        model = _fold_shape_subgraphs(model, opset)
        inferred = _checked_and_inferred(model).graph
    g = model.graph
    tensors: dict = {}
    for init in g.initializer:
        try:
            arr = numpy_helper.to_array(init)
        except Exception as e:  # data size vs dims, unknown data_type, ...
            raise CompileError(f"initializer {init.name!r} (dims {list(init.dims)}) is malformed: "
                               f"{one_line(e)}") from None
        if arr.dtype.kind == "f" and not _all_finite(arr):
            raise CompileError(f"initializer {init.name!r} (dims {list(init.dims)}) holds "
                               f"{int((~np.isfinite(arr)).sum())} non-finite values (NaN or infinity)")
        tensors[init.name] = Tensor(init.name, tuple(arr.shape), str(arr.dtype), arr)
        if weights is not None and not arr.flags.writeable:     # read-only: no pass can change it
            weights[init.name] = arr
    infos = {v.name: v for v in list(inferred.input) + list(inferred.value_info) + list(inferred.output)}
    inputs = [i.name for i in g.input if i.name not in tensors]
    if not inputs:
        raise CompileError("the model has no graph input that is not an initializer")
    nodes = []
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for idx, n in enumerate(g.node):
        name = _check_node(idx, n, opset)
        n.name = name
        attrs = OP_TABLE.importer(n.op_type, name)(n, _attrs(n), opset)
        outs = [o if o and (k == 0 or o in used) else "" for k, o in enumerate(n.output)]  # unused: absent ("")
        while len(outs) > 1 and not outs[-1]:
            outs.pop()                     # trailing absent outputs dropped; inner ones keep positions (Split)
        nodes.append(Node(n.op_type, name, list(n.input), outs, attrs))
    for name in inputs + [o for nd in nodes for o in nd.outputs if o]:
        if name not in infos:
            raise CompileError(f"tensor {name!r} has no shape after shape inference")
        elem = infos[name].type.tensor_type.elem_type
        dtype = str(helper.tensor_dtype_to_np_dtype(elem)) if elem else "float32"
        tensors[name] = Tensor(name, static_shape(infos[name], name), dtype)
    for nd in nodes:
        if nd.attrs.get("auto_pad") is not None:
            nd.attrs = resolve_auto_pad(nd, tensors)
        if nd.attrs.get("ceil_mode"):
            nd.attrs = resolve_ceil_mode(nd, tensors)
    nodes = vector_inputs_as_nchw(tensors, nodes, inputs)
    graph = prune(Graph(tensors, nodes, inputs, [o.name for o in g.output]))
    for name in graph.inputs:
        if graph.tensors[name].dtype != "float32":
            raise CompileError(f"graph input {name!r} has dtype {graph.tensors[name].dtype}, "
                               "only float32 is supported")
    verify(graph)
    check_activation_footprint(graph)
    return graph


def _static_shapes(graph) -> dict:
    """tensor name -> static shape of the inferred tensors whose every dimension is known."""
    out = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in tt.shape.dim)
    return out


def _all_static(graph) -> bool:
    """Every node output the importer keeps (the first, and any other one read) has a static shape."""
    shapes = _static_shapes(graph)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    return all(o in shapes for n in graph.node for k, o in enumerate(n.output) if o and (k == 0 or o in used))


def _fold_shape_subgraphs(model: onnx.ModelProto, opset: int, rounds: int = 16) -> onnx.ModelProto:
    """A copy of ``model`` whose shape computations are constants: repeatedly infer shapes (with
    data propagation), then replace by an initializer every node the op table can evaluate
    (``fold_shape`` from its inputs' static shapes, or ``fold`` of constant inputs) whose value
    is shape-like (integer or boolean of at most BIG_WEIGHT_ELEMENTS elements, or at most
    SHAPE_FLOAT_ELEMENTS floats: a Resize's scales), until nothing changes; weights are left to
    the constant-folding pass. For exporter output whose
    Reshape / Resize / Slice operands come from ``Shape`` and whose shapes ONNX inference alone
    leaves unknown (torch's ``x.view(x.size(0), -1)``)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    consts = {}
    for i in m.graph.initializer:
        if int(np.prod(i.dims, dtype=np.int64)) <= BIG_WEIGHT_ELEMENTS:
            try:
                consts[i.name] = numpy_helper.to_array(i)
            except Exception:       # malformed: the importer's initializer check names it
                pass
    for _ in range(rounds):
        try:
            inferred = shape_inference.infer_shapes(without_big_weights(m), data_prop=True)
        except Exception as e:  # onnx.shape_inference.InferenceError
            raise CompileError(f"ONNX shape inference failed while folding shape computations: {one_line(e)}") from None
        shapes = _static_shapes(inferred.graph)
        keep, folded = [], False
        for idx, n in enumerate(m.graph.node):
            value = _fold_node(n, idx, opset, shapes, consts)
            if value is None or value.size > (BIG_WEIGHT_ELEMENTS if value.dtype.kind in "biu" else SHAPE_FLOAT_ELEMENTS):
                keep.append(n)
                continue
            consts[n.output[0]] = value
            m.graph.initializer.append(numpy_helper.from_array(value, n.output[0]))
            if m.ir_version < 4:                    # IR < 4: every initializer is a graph input
                m.graph.input.append(helper.make_tensor_value_info(
                    n.output[0], helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
            folded = True
        if not folded:
            break
        del m.graph.node[:]
        m.graph.node.extend(keep)
    return m


def _fold_node(n, idx: int, opset: int, shapes: dict, consts: dict):
    """The constant value of ONNX node ``n`` if the op table can evaluate it now, else None."""
    d = OP_TABLE.get(n.op_type)
    outs = [o for o in n.output if o]
    if d is None or len(outs) != 1 or (d.fold is None and d.fold_shape is None):
        return None
    ins = [i for i in n.input if i]
    node = Node(n.op_type, n.name or f"{n.op_type}_{idx}", list(n.input), outs, d.import_node(n, _attrs(n), opset))
    try:
        if d.fold_shape is not None and all(i in shapes for i in ins):
            return np.asarray(d.fold_shape(node, [shapes[i] for i in ins]))
        if d.fold is not None and all(i in consts for i in ins):
            return np.asarray(d.fold(node, *(consts[i] for i in ins)))
    except Exception as e:  # numpy errors of a malformed model (shapes, dtypes, overflow)
        raise CompileError(f"node {node.name!r} ({n.op_type}): cannot evaluate on its constant inputs: "
                           f"{type(e).__name__}: {e}") from None
    return None


def _check_node(idx: int, n, opset: int) -> str:
    """CompileError for an unsupported op or attribute value of node ``n``; returns its name."""
    name = n.name or f"{n.op_type}_{idx}"
    if n.domain not in ("", "ai.onnx"):
        raise CompileError(f"node {name!r}: op {n.domain}::{n.op_type} unsupported; supported "
                           f"ops: {', '.join(SUPPORTED_OPS)}")
    import_node = OP_TABLE.importer(n.op_type, name)
    _check_attr_types(name, n, opset)
    c = onnx.NodeProto()
    c.CopyFrom(n)
    c.name = name
    import_node(c, _attrs(c), opset)
    return name


def _check_attr_types(name: str, n, opset: int) -> None:
    """Each attribute must have the type the ONNX schema of the op gives it (the handlers rely
    on it; onnx.checker would say so too, but only after the shape checks)."""
    try:
        schema = onnx.defs.get_schema(n.op_type, max(1, opset), "")
    except Exception:
        schema = onnx.defs.get_schema(n.op_type, "")
    for a in n.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            raise CompileError(f"node {name!r} ({n.op_type}): attribute {a.name!r} is not defined "
                               f"for {n.op_type} in opset {opset}")
        if a.type != spec.type.value:
            got = onnx.AttributeProto.AttributeType.Name(a.type) \
                if a.type in onnx.AttributeProto.AttributeType.values() else str(a.type)
            raise CompileError(f"node {name!r} ({n.op_type}): attribute {a.name} has type {got}, "
                               f"expected {spec.type.name}")


def _check_input_dtypes(model: onnx.ModelProto) -> None:
    """Every runtime graph input (not an initializer) must be float32: CompileError otherwise."""
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        elem = vi.type.tensor_type.elem_type
        if vi.name in inits or not vi.type.HasField("tensor_type") or elem in (0, onnx.TensorProto.FLOAT):
            continue
        try:
            dtype = str(helper.tensor_dtype_to_np_dtype(elem))
        except Exception:
            dtype = onnx.TensorProto.DataType.Name(elem) if elem in onnx.TensorProto.DataType.values() \
                else f"elem_type {elem}"
        raise CompileError(f"graph input {vi.name!r} has dtype {dtype}, only float32 is supported")


def _checked_and_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """Graph inputs with a shape, then onnx.checker, then strict shape/type inference; returns
    the model with inferred shapes, its large weights as typed graph inputs instead of
    initializers (``without_big_weights``: the checks and inference never serialize them; their
    data is checked where the importer reads it). The checker runs on a copy whose untyped-shape
    graph outputs get an empty shape (many exporters leave output shapes to inference, which the
    checker would refuse). Any failure is a CompileError quoting the ONNX message (naming the
    node)."""
    inits = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name not in inits and not vi.type.tensor_type.HasField("shape"):
            raise CompileError(f"graph input {vi.name!r} has no shape; only static shapes are supported")
    c = without_big_weights(model)
    for vi in c.graph.output:
        if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.SetInParent()
    try:
        onnx.checker.check_model(c)
    except Exception as e:  # onnx.checker.ValidationError (and a few C++ exceptions)
        raise CompileError(f"model fails onnx.checker: {one_line(e)}") from None
    light = without_big_weights(model)
    try:
        shape_inference.infer_shapes(light, check_type=True, strict_mode=True)
        return shape_inference.infer_shapes(light, data_prop=True)   # shape subgraphs: Shape -> Slice -> Concat
    except Exception as e:  # onnx.shape_inference.InferenceError
        first = one_line(e).replace("[ShapeInferenceError] Inference error(s): ", "")
        first = "(op_type:" + first.split("(op_type:")[1].strip() if "(op_type:" in first else first
        raise CompileError(f"ONNX shape/type inference failed: {first}") from None




#: float values of at most this many elements count as shape computations (Resize scales)
SHAPE_FLOAT_ELEMENTS = 64

def check_activation_footprint(graph: Graph) -> None:
    """The inputs and outputs of one node live in DDR at the same time, at least one int8 byte
    per element: CompileError naming the node if that alone reaches 2^40 bytes (checked before
    calibration, which would otherwise try to allocate them in float32)."""
    def size(name):
        t = graph.tensors.get(name)
        return 0 if t is None or t.is_const else int(np.prod(t.shape, dtype=object))
    for name in graph.inputs:
        if size(name) >= DDR_ADDR_LIMIT:
            t = graph.tensors[name]
            raise CompileError(f"graph input {name!r} of shape {t.shape} needs {size(name)} bytes "
                               "of DDR, past the 40-bit address space (2^40 bytes)")
    for n in graph.nodes:
        total = sum(size(t) for t in dict.fromkeys(list(n.inputs) + list(n.outputs)) if t)
        if total >= DDR_ADDR_LIMIT:
            shapes = ", ".join(f"{t} {graph.tensors[t].shape}" for t in dict.fromkeys(list(n.inputs) + list(n.outputs))
                               if t and size(t))
            raise CompileError(f"node {n.name!r} ({n.op}): DDR footprint of its activations "
                               f"({shapes}) is {total} bytes, past the 40-bit address space (2^40 bytes)")
