"""Float IR (after passes) + calibration ranges -> QGraph (see tpucompile.qgraph for semantics).

Each node is quantized by its op's ``quantize`` hook of the op table (``tpucompile.ops``), through
a ``Quantizer`` holding the QGraph being built. Choices (all deterministic):

* Activations: per-tensor asymmetric int8 (``ops.common.activation_params``); real 0 is exactly
  representable; a degenerate range gets scale 1.0, zp 0.
* Weights: per-output-channel symmetric, zp 0 (``ops.common.weight_params``).
* Bias: int32 round_half_even(b / (s_x * s_w[n])), then the zero-point correction
  ``- x_zp * sum(q_w[n])``; a value outside int32 raises CompileError naming the node (ops/conv.py).
* Requantization multipliers: ``arith.quantize_multiplier`` (Q31, rounded half away from zero;
  multipliers < 2**-32 flush to 0).
* MaxPool output shares its input's parameters; average pools and residual Adds get their own.
* Tensors an op's ``shared_range`` ties together (a Concat's inputs and output) get one range,
  the union of their calibrated ranges (``shared_ranges``), carried through ops that reuse their
  input's parameters (``calibrated`` False: MaxPool, Alias) to the tensor that has the range.
* Softmax runs on the host in float32 on the dequantized logits: the accelerator has no
  exponent unit.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np
import onnx

from tpucompile.frontend.host_embeddings import KEY_MASK_SUFFIX
from tpucompile.frontend.onnx_import import grouped_report, import_onnx, read_onnx
from tpucompile.ir import Graph, prune, union_groups
from tpucompile.ops import OP_TABLE
from tpucompile.ops.common import activation_params, weight_params
from tpucompile.ops.host_tail import HoldsWeights, tail_host_op
from tpucompile.ops.qdq import pins_follow_aliases
from tpucompile.ops.softmax import softmax_score_tensors
from tpucompile.passes.pipeline import run_passes
from tpucompile.qgraph import QGraph, QTensor, dump_qgraph
from tpucompile.quantize.calibrate import calibrate, check_host_memory
from tpucompile.stages import IrDumps
from tpusim.arch.errors import CompileError

__all__ = ["activation_params", "weight_params", "quantize_graph", "calibration_names", "compile_model",
           "Quantizer", "shared_ranges"]


def calibration_names(graph: Graph) -> list:
    """ONNX names of every tensor needing calibrated ranges (inputs and outputs of every op whose
    op-table entry is ``calibrated``, and of ops the table does not know), float tensors only (a
    boolean or integer tensor left over is refused by its node's missing mapping, not fed to
    onnxruntime as a float output)."""
    names = list(graph.inputs)
    for n in graph.nodes:
        d = OP_TABLE.get(n.op)
        if d is None or d.calibrated:
            names += [graph.tensors[o].onnx_name or o for o in n.outputs
                      if graph.tensors[o].dtype.startswith("float")]
    return names


def shared_ranges(g: Graph, stats: dict) -> dict:
    """``stats`` with every group of tensors that must share one scale and zero point (the op
    table's ``shared_range``; an op that reuses its input's parameters, ``calibrated`` False and
    not a host op, joins its output to its input) given the union of the group's ranges, from 0
    for the group of a Concat with a fused Relu (every producer's saturation at zero point -128
    is then the clamp). The same dict when no op ties tensors together."""
    groups = [d.shared_range(n) for n in g.nodes
              if (d := OP_TABLE.get(n.op)) is not None and d.shared_range is not None]
    if not groups:
        return stats
    for n in g.nodes:
        d = OP_TABLE.get(n.op)
        if d is not None and not d.calibrated and d.host is None and d.quantize is not None:
            groups.append([n.inputs[0]] + list(n.outputs[:1]))
    find, parent = union_groups(groups)
    key = {t: g.tensors[t].onnx_name or t for t in parent}
    union: dict = {}
    for t in parent:
        if key[t] in stats:
            lo, hi = stats[key[t]]
            r = find(t)
            union[r] = (min(lo, union[r][0]), max(hi, union[r][1])) if r in union else (lo, hi)
    for n in g.nodes:
        d = OP_TABLE.get(n.op)
        if d is not None and d.range_from_zero is not None and d.range_from_zero(n) and find(n.outputs[0]) in union:
            lo, hi = union[find(n.outputs[0])]
            union[find(n.outputs[0])] = (max(lo, 0.0), max(hi, 0.0))
    out = dict(stats)
    for t in parent:
        if key[t] in stats:
            out[key[t]] = union[find(t)]
    return out


def symmetric_tensors(g: Graph) -> set:
    """IR tensors quantized symmetrically (zero point 0, scale max|x| / 127): those an op's
    ``symmetric_inputs`` names, and the inputs of the ops that reuse their input's parameters
    (``calibrated`` False: views, aliases) leading to them."""
    prod = {o: n for n in g.nodes for o in n.outputs}
    todo = [t for n in g.nodes if (d := OP_TABLE.get(n.op)) is not None and d.symmetric_inputs is not None
            for t in d.symmetric_inputs(n)]
    out: set = set()
    while todo:
        t = todo.pop()
        if t in out:
            continue
        out.add(t)
        n = prod.get(t)
        d = OP_TABLE.get(n.op) if n is not None else None
        if d is not None and not d.calibrated and n.inputs:
            todo.append(n.inputs[0])
    return out


class Quantizer:
    """The QGraph under construction, as the op table's ``quantize`` hooks see it.

    g: the float IR after passes (a QDQ model's pins made to follow its Alias views, in place:
    ``ops.qdq.pins_follow_aliases``); stats: {onnx_name: (min, max)} calibration ranges; cfg: the
    HwConfig the QGraph is for (an op may choose its form by it: a global pool splits only where
    the whole map does not fit the SRAM), None for one that compiles on every shipped config."""

    def __init__(self, g: Graph, stats: dict, cfg=None):
        pins_follow_aliases(g)
        self.g, self.stats, self.cfg = g, stats, cfg
        self.qg = QGraph({}, [], [], [])
        self.host_outs: set = set()
        self.symmetric = symmetric_tensors(g)

    def const(self, name: str):
        """The float constant ``name`` of the IR (np.ndarray), or None if it is not a constant."""
        return self.g.const(name)

    def shape(self, name: str) -> tuple:
        """The IR (ONNX) shape of tensor ``name``."""
        return tuple(self.g.tensors[name].shape)

    def input(self, node, i: int = 0) -> QTensor:
        """The int8 device tensor of the node's i-th input; CompileError naming the node if it is a
        host-op output or no device tensor."""
        name = node.inputs[i]
        if name in self.host_outs:
            raise CompileError(f"node {node.name!r} ({node.op}) reads host-op output {name!r}; "
                               "host ops must come last")
        r = self.qg.resolve(name)
        if r not in self.qg.tensors:
            raise CompileError(f"node {node.name!r} ({node.op}) reads {name!r}, which is not an "
                               "int8 device tensor")
        return self.qg.tensors[r]

    def out_params(self, node) -> tuple:
        """(scale, zero_point) of the node's output: pinned by the model's own quantization
        (``ir.Tensor.qparams``), else from its calibrated range."""
        return self.params(node.outputs[0])

    def params(self, name: str) -> tuple:
        """(scale, zero_point) of IR tensor ``name`` (see ``out_params``)."""
        t = self.g.tensors[name]
        if t.qparams is not None:
            return t.qparams
        lo, hi = self.stats[t.onnx_name or name]
        if name in self.symmetric:
            m = max(abs(float(lo)), abs(float(hi)))
            return (m / 127, 0) if np.isfinite(m) and m > 1e-30 else (1.0, 0)
        return activation_params(lo, hi)

    def add_tensor(self, name: str, scale: float, zero_point: int, shape: tuple | None = None) -> QTensor:
        """A new device tensor (shape: the IR's unless given)."""
        t = QTensor(name, tuple(self.g.tensors[name].shape) if shape is None else tuple(shape), scale, zero_point)
        self.qg.tensors[name] = t
        return t

    def add_op(self, op) -> None:
        self.qg.ops.append(op)

    def add_alias(self, name: str, target: str) -> None:
        """``name`` holds the same bytes as device tensor ``target`` (a no-op view)."""
        self.qg.aliases[name] = target

    def add_host_op(self, node, h: dict) -> None:
        """A host op (dict with "op", "inp", "out", ...) reading the device tensor ``h["inp"]``,
        which becomes a device output."""
        src = self.input(node)
        self.qg.host_ops.append(h)
        if src.name not in self.qg.outputs:
            self.qg.outputs.append(src.name)
        self.host_outs.add(h["out"])


def _mapped_ops() -> str:
    device = [d.op_type for d in OP_TABLE if d.quantize is not None and d.host is None
              and not getattr(d.quantize, "refuses", False)]
    host = [d.op_type for d in OP_TABLE if d.quantize is not None and d.host is not None
            and not getattr(d.quantize, "refuses", False)]
    return f"supported after passes: {', '.join(device)}; host: {', '.join(host)}"


def _no_mapping(node) -> CompileError:
    return CompileError(f"node {node.name!r} ({node.op}) has no int8 device mapping ({_mapped_ops()})")


def _refusals(errors: list) -> CompileError:
    """One CompileError for every node the quantizer refused (a node reading a refused node's
    output is not tried): the single message when there is one; else a count by op, each
    node's message on its own line, and the mapped ops once."""
    return grouped_report(errors, "have no int8 device mapping or are refused", f" ({_mapped_ops()})", _mapped_ops())


def _layer_in(nodes):
    """The first node that is a layer with weights (op table ``layer``: never part of a host
    tail), or None."""
    return next((n for n in nodes if (d := OP_TABLE.get(n.op)) is not None and d.layer), None)


def _declined(errors: list, why: str) -> CompileError:
    return CompileError(f"{_refusals(errors)}\n(--host-tail not applied: {why})")


def _tail_made_and_reads(tail: list, g: Graph) -> tuple[set, list]:
    """(IR tensors the nodes ``tail`` compute, the non-constant IR tensors they read from outside,
    in node order, repeats kept)."""
    made = {o for n in tail for o in n.outputs if o}
    return made, [i for n in tail for i in n.inputs if i and i not in made and g.const(i) is None]


def _onnx_names(g: Graph, ids: list) -> list:
    """The ONNX names of the IR tensors ``ids`` (their own id where they have none), first-seen order."""
    return list(dict.fromkeys(g.tensors[i].onnx_name or i for i in ids))


def _host_tail(q, g: Graph, tail: list, model, pending: dict) -> None:
    """The refused nodes ``tail`` (and those reading them), with the tail the passes cut off
    (``pending``, from ``split_host_tail``), as one OnnxTail host op (ops/host_tail.py), its
    inputs made device outputs; HoldsWeights if a layer is among them, CompileError if they
    are not a tail."""
    layer = _layer_in(tail)
    if layer is not None:
        raise HoldsWeights(f"the layer {layer.name!r} ({layer.op}) reads what they compute, so they are not "
                           "the graph's post-processing")
    made, reads = _tail_made_and_reads(tail, q.g)
    reads += [i for i in pending.get("reads", ()) if i not in made]
    inputs = _onnx_names(g, reads)
    for name in inputs:
        if q.qg.resolve(name) not in q.qg.tensors:
            raise CompileError(f"host tail: its input {name!r} is not a device tensor")
    finals = pending.get("outputs", list(g.outputs))
    outputs = [o for o in finals if o in made or o in pending.get("made", ())]
    h = tail_host_op(model, inputs, outputs)
    for name in inputs:
        if q.qg.resolve(name) not in q.qg.outputs:
            q.qg.outputs.append(q.qg.resolve(name))
    q.qg.host_ops.append(h)
    q.host_outs.update(made | set(outputs))


def split_host_tail(g: Graph, model) -> tuple:
    """(IR without its host tail, the tail for ``quantize_graph``: {"reads": IR tensors it reads,
    "made": graph outputs it computes, "outputs": the graph's outputs}): the nodes the passes
    refused (``attrs["refused"]``) and every node after them become the host tail when they are
    post-processing (ops/host_tail.py); CompileError naming every refused node otherwise,
    before calibration. ``(g, {}, outputs)`` when the passes refused nothing."""
    refused = [n for n in g.nodes if "refused" in n.attrs]
    if not refused:
        return g, {}, list(g.outputs)
    errors = [(n.op, CompileError(n.attrs["refused"])) for n in refused]
    made, tail = set(), []
    for n in g.nodes:
        if "refused" in n.attrs or made & set(n.inputs):
            tail.append(n)
            made.update(o for o in n.outputs if o)
    made, reads = _tail_made_and_reads(tail, g)
    if model is None:
        raise _refusals(errors)
    layer = _layer_in(tail)
    if layer is not None:
        raise _declined(errors, f"the layer {layer.name!r} ({layer.op}) reads what the refused nodes compute, so "
                                "they are not the graph's post-processing")
    try:
        tail_host_op(model, _onnx_names(g, reads),
                     [o for o in g.outputs if o in made])         # a tail (checked before calibration)
    except CompileError as why:
        raise _declined(errors, str(why)) from None
    keep = [n for n in g.nodes if n not in tail]
    outs = [o for o in g.outputs if o not in made] + [r for r in dict.fromkeys(reads) if r not in g.outputs]
    pending = {"reads": list(dict.fromkeys(reads)), "made": [o for o in g.outputs if o in made],
               "outputs": list(g.outputs)}
    return prune(Graph(g.tensors, keep, list(g.inputs), outs)), pending, list(g.outputs)


def quantize_graph(g: Graph, stats: dict, model=None, pending: dict | None = None, cfg=None) -> QGraph:
    """Build the QGraph from a passed float IR and {onnx_name: (min, max)} ranges.

    Raises CompileError naming every node that has no device mapping or that its op refuses
    (e.g. a broadcasting Add, a general Reshape), all at once, or a missing range. With the
    source ONNX ``model``, refused nodes that nothing on the device reads (the graph's tail:
    a detector's decoding) become a host op run by onnxruntime instead (ops/host_tail.py), when
    they are post-processing (no real share of the weights); else the refusals are raised.
    """
    q = Quantizer(g, shared_ranges(g, stats), cfg)
    qg = q.qg
    try:
        for name in g.inputs:
            shape = tuple(g.tensors[name].shape)
            if len(shape) != 4:
                raise CompileError(f"graph input {name!r} shape {shape} unsupported (only NCHW images, (1, C, L) sequences and (1, K) vectors)")
            if (g.tensors[name].onnx_name or name).endswith(KEY_MASK_SUFFIX):
                # a run-time attention mask: 0 / large negative per key, int8 0 / -128 (ops/act_matmul.py)
                qg.tensors[name] = QTensor(name, shape, 1.0, 0)
            else:
                qg.tensors[name] = QTensor(name, shape, *q.params(name))
            qg.inputs.append(name)
        errors, refused, tail = [], set(), []
        for node in g.nodes:
            if refused & set(node.inputs):
                refused.update(node.outputs)          # its inputs never became device tensors
                tail.append(node)
                continue
            d = OP_TABLE.get(node.op)
            try:
                if d is None or d.quantize is None:
                    raise _no_mapping(node)
                d.quantize(q, node)
            except CompileError as e:
                errors.append((node.op, e))
                refused.update(node.outputs)
                tail.append(node)
        if errors or pending:
            if model is None:
                raise _refusals(errors)
            try:
                _host_tail(q, g, tail, model, pending or {})
            except CompileError as why:
                raise _declined(errors, str(why)) from None
    except KeyError as e:
        raise CompileError(f"no calibration range for tensor {e.args[0]!r}") from None
    for o in g.outputs:
        if o not in q.host_outs and qg.resolve(o) not in qg.outputs:
            qg.outputs.append(qg.resolve(o))
    qg.fp32_outputs = list((pending or {}).get("outputs", g.outputs))
    qg.validate()
    return qg


def compile_model(model: Union[str, Path, onnx.ModelProto], calib_images,
                  dump_dir: Optional[Union[str, Path, IrDumps]] = None, calib_method: str = "minmax",
                  host_tail: bool = False, cfg=None, notes: list | None = None) -> tuple:
    """ONNX model -> (QGraph, float IR after passes): import, passes, calibrate, quantize.

    ``calib_images`` may also be a callable returning them, called only once the model has
    been imported and checked (so a refused model never makes calibration data).
    ``dump_dir``: a directory (or the IrDumps of a whole compile) for the IR after every pass
    and ``NN_quantize.txt``, the QGraph. ``calib_method``: calibrate.CALIB_METHODS. ``host_tail``:
    nodes at the end of the graph without a device mapping run on the host (ops/host_tail.py)
    instead of being refused. ``cfg``: the HwConfig the QGraph is for (``Quantizer``), None for
    one that compiles on every shipped config. ``notes``: a list the calibration's warnings
    (clipped input outliers, an outsized sample) are appended to besides stderr (the verdict's)."""
    if not isinstance(model, onnx.ModelProto):
        model = read_onnx(model)
    dumps = IrDumps.open(dump_dir)
    weights: dict = {}              # the initializers' arrays, read once for import and calibration
    g, pending, _ = split_host_tail(run_passes(import_onnx(model, weights), dumps, host_tail),
                                    model if host_tail else None)
    names = calibration_names(g)
    check_host_memory(g, names)
    if callable(calib_images):
        calib_images = calib_images()
    stats = calibrate(model, calib_images, names, method=calib_method, row_offset_free=softmax_score_tensors(g),
                      weights=weights, notes=notes)
    qg = quantize_graph(g, stats, model if host_tail else None, pending, cfg)
    if dumps is not None:
        dumps.write("quantize", dump_qgraph(qg))
    return qg, g
