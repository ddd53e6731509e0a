"""Softmax: on the vector unit (SOFTMAX) inside the network, on the host after the device at its end.

Where it runs:
* **device** (``QSoftmax``): a Softmax whose output another node reads (attention scores) or that
  is not a graph output, over the channel axis of a (1, C, H, W) tensor (axis 1 / -3; a rank-3
  (1, C, L) sequence tensor is lifted to (1, C, 1, L) by ``frontend/lift_1d``): one row per
  pixel, C elements. Integer arithmetic: docs/integer_nonlinear.md and docs/isa.md (SOFTMAX;
  Softermax's base-2 exponential with I-BERT's integer-only structure), golden
  ``tpusim.arch.arith.softmax_stats`` / ``softmax_out``. Quantization: input scale ``S_in``
  (zero point cancels), ``exp_mult = round(S_in * k * log2(e) * 2^20)`` (24-bit field) with
  ``k`` the factor of a scalar Div / Mul folded in (``softmax(x / sqrt(d))``: the scaling is
  free); output scale and zero point from calibration (attention rows of 128 keys have
  probabilities far below 1: a calibrated range [0, max p] resolves them several times better
  than a fixed 1/255), ``quantize_multiplier(2^-30 / S_out)``. ``mask`` is 0 (a -128
  input is an ordinary logit) unless the scores carry a run-time attention mask
  (``ops/act_matmul.py``): then 1, a masked key's -128 has probability 0 (as is any score that
  saturates to -128, below the calibrated range), and a row of only masked keys (an all-zero
  mask) gives p = 0 everywhere: the context is 0 + bias, no NaN (float: uniform 1/T over the keys). Error: <= 0.51 output LSB against float softmax of the same int8
  inputs (measured 0.503, tests/test_rowops_arith.py).
* **host** (float32, as before): a Softmax whose output is a graph output that no node reads (a
  classifier's final Softmax): the device output (the logits) becomes a graph output
  (``QGraph.host_ops``), any axis. Default axis: 1 before opset 13, -1 from opset 13 (ONNX).

Errors (CompileError naming the node): a device Softmax over another axis than the channels, an
``exp_mult`` over 24 bits (input scale too large).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpucompile.ir import Node, readers
from tpucompile.ops.act_matmul import masked_scores
from tpucompile.ops.common import no_constants, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.rows import emit_rows, no_channel_map, tile_rows, work_rows
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.errors import CompileError
from tpusim.arch.rowops import accesses_per_word

__all__ = ["QSoftmax", "OPS", "softmax_score_tensors"]


@dataclass(frozen=True)
class QSoftmax(QOp):
    """Integer softmax over the channels of each pixel of an int8 (1, C, H, W) tensor.

    exp_mult: round(S_in * k * log2(e) * 2^20) (24 bits); mult/shift: quantize_multiplier(2^-30 /
    S_out); zp_out: the output zero point; mask: -128 inputs are masked (probability 0)."""
    name: str
    inp: str
    out: str
    exp_mult: int
    mult: int
    shift: int
    zp_out: int
    mask: bool = False

    def verify(self, qg) -> None:
        x, y = qg.tensors[self.inp], qg.tensors[self.out]
        if len(x.shape) != 4 or x.shape != y.shape:
            raise CompileError(f"QSoftmax {self.name!r}: input {x.shape} and output {y.shape} must be one "
                               "(1, C, H, W) shape")


def softmax_score_tensors(g) -> list:
    """ONNX names of the attention scores a device Softmax over the channels cancels a per-pixel
    offset of (``quantize.calibrate``'s ``row_offset_free``; float IR ``g`` after passes): the input of every Softmax that reads the
    output of an Einsum (a matmul of two activations, ``ops/act_matmul.py``), directly or through
    Adds of a per-channel operand (1, C, 1, 1) (the key mask: one value per key, the same for
    every query, so an offset common to a query's keys passes it unchanged), and each tensor on
    that path, as long as the Softmax or the next Add on the path is its only reader. softmax(x
    + c) = softmax(x) for any c per pixel, so such an offset is free to move between inputs."""
    prod = {o: n for n in g.nodes for o in n.outputs}
    readers: dict = {}
    for n in g.nodes:
        for i in n.inputs:
            readers[i] = readers.get(i, 0) + 1
    out = []
    for n in g.nodes:
        if n.op != "Softmax" or not n.inputs or n.attrs.get("axis", 1) not in (1, -3):
            continue
        path, t = [], n.inputs[0]
        while readers.get(t, 0) == 1 and t in prod:
            p = prod[t]
            path.append(t)
            if p.op == "Einsum":
                out += [g.tensors[x].onnx_name or x for x in path]
                break
            if p.op != "Add" or len(p.inputs) != 2:
                break
            shapes = [tuple(g.tensors[x].shape) if x in g.tensors else () for x in p.inputs]
            bias = [k for k, s in enumerate(shapes) if len(s) == 4 and s[0] == 1 and s[2:] == (1, 1)]
            if len(bias) != 1:
                break
            t = p.inputs[1 - bias[0]]
    return list(dict.fromkeys(out))


def _import(node, a: dict, opset: int) -> dict:
    return {"axis": int(a["axis"]) if "axis" in a else (1 if opset < 13 else -1)}


def _scalar_factor(graph, node):
    """k if ``node`` is x / c or x * c (either order for Mul) with a finite positive scalar
    constant c (k = 1/c resp. c), else None; also the non-constant input."""
    if node.op not in ("Div", "Mul") or len(node.inputs) != 2:
        return None
    consts = [graph.const(i) for i in node.inputs]
    for i, c in enumerate(consts):
        if c is None or np.asarray(c).size != 1 or (node.op == "Div" and i == 0):
            continue
        v = float(np.asarray(c).reshape(-1)[0])
        if consts[1 - i] is None and math.isfinite(v) and v > 0:
            return (1.0 / v if node.op == "Div" else v), node.inputs[1 - i]
    return None


def absorbed_by_softmax(graph, node, cons: dict) -> bool:
    """``node`` is a scalar Div / Mul (by c > 0) whose only reader is a Softmax that runs on the
    device (its output is read by a node): ``passes/fold_affine`` leaves it to that Softmax's
    ``canonicalize`` (no diagonal 1x1 Conv)."""
    readers = cons.get(node.outputs[0], [])
    if _scalar_factor(graph, node) is None or len(readers) != 1 or readers[0].op != "Softmax":
        return False
    return node.outputs[0] not in graph.outputs and bool(cons.get(readers[0].outputs[0]))


def _canonicalize(graph, node, producers) -> list:
    """A scalar Div / Mul (by c > 0) read only by this Softmax is folded into it: attrs["scale"]
    (softmax(x / sqrt(d)): the device folds it into exp_mult, the host multiplies)."""
    p = producers.get(node.inputs[0])
    f = _scalar_factor(graph, p) if p is not None else None
    if f is None or node.inputs[0] in graph.outputs or len(readers(graph, node.inputs[0])) != 1:
        return [node]
    k, x = f
    return [Node("Softmax", node.name, [x], list(node.outputs), dict(node.attrs, scale=node.attrs.get("scale", 1.0) * k))]


def _on_host(q, node) -> bool:
    """A Softmax that ends the graph (its output a graph output no node reads) stays on the host."""
    return node.outputs[0] in q.g.outputs and not readers(q.g, node.outputs[0])


def _quantize(q, node) -> None:
    shape = tuple(q.shape(node.inputs[0]))
    scale = float(node.attrs.get("scale", 1.0))
    if _on_host(q, node):
        h = {"op": node.op, "inp": node.inputs[0], "out": node.outputs[0], "axis": int(node.attrs["axis"]),
             "shape": shape}
        if scale != 1.0:
            h["scale"] = scale
        q.add_host_op(node, h)
        return
    x = q.input(node)
    axis = int(node.attrs["axis"])
    if len(x.shape) != 4 or axis not in (1, -3):
        raise CompileError(f"node {node.name!r} (Softmax): axis {axis} of a {len(x.shape)}-D tensor {x.shape}: "
                           "inside the network only the channel axis of a (1, C, H, W) tensor (axis 1) maps "
                           "to the vector unit's SOFTMAX")
    exp_mult = round(x.scale * scale * math.log2(math.e) * 2 ** arith.SOFTMAX_EXP_FRAC_BITS)
    if not 0 < exp_mult < 1 << 24:
        raise CompileError(f"node {node.name!r} (Softmax): input scale {x.scale:g} x {scale:g} gives exp_mult "
                           f"{exp_mult}, outside SOFTMAX's 24-bit field (1 .. {(1 << 24) - 1})")
    s_out, zp = q.out_params(node)
    mult, shift = arith.quantize_multiplier(2.0 ** -30 / s_out)
    out = q.add_tensor(node.outputs[0], s_out, zp, shape=x.shape)
    q.add_op(QSoftmax(node.name, x.name, out.name, exp_mult, mult, shift, zp, masked_scores(q.qg, x.name)))


def _host(h: dict, x: np.ndarray) -> np.ndarray:
    """float32 softmax of ``h["scale"] * x`` (x already in the ONNX shape ``h["shape"]``) over ``h["axis"]``."""
    x = x * np.float32(h.get("scale", 1.0))
    e = np.exp(x - x.max(axis=h["axis"], keepdims=True))
    return (e / e.sum(axis=h["axis"], keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------- golden
def rows_of(x: np.ndarray) -> np.ndarray:
    """(1, C, H, W) -> (H*W, C): one row per pixel."""
    return np.asarray(x).transpose(0, 2, 3, 1).reshape(-1, x.shape[1])


def from_rows(r: np.ndarray, shape) -> np.ndarray:
    """(H*W, C) -> (1, C, H, W)."""
    _, c, h, w = shape
    return r.reshape(1, h, w, c).transpose(0, 3, 1, 2)


def _golden(op: QSoftmax, x: np.ndarray) -> np.ndarray:
    r = rows_of(x)
    valid = np.ones(r.shape[1], bool)
    xmax, total = arith.softmax_stats(r, valid, op.exp_mult, op.mask)
    y = arith.softmax_out(r, valid, xmax, total, op.exp_mult, op.mask, op.mult, op.shift, op.zp_out)
    return np.ascontiguousarray(from_rows(y, x.shape))


# ---------------------------------------------------------------- device lowering
def _layout(op: QSoftmax, qg, lays) -> None:
    op.verify(qg)


def _tile(op: QSoftmax, lays: dict, cfg):
    return tile_rows(op, lays, cfg, "SOFTMAX", accesses_per_word("SOFTMAX"))


def _emit(P, op: QSoftmax, lays: dict, tl, consts: dict) -> None:
    q = P.qregs.get(op.mult, op.shift, op.zp_out)
    emit_rows(P, op, lays, tl, "SOFTMAX", {"qreg_out": q, "exp_mult": op.exp_mult, "mask": int(op.mask)})


def _describe(op: QSoftmax, tl) -> dict:
    return dict(exp_mult=op.exp_mult, mask=bool(op.mask), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _work(op: QSoftmax, lays: dict, tl, cfg):
    """Per tile LOAD, [POOL copy], SOFTMAX, [POOL copy], STORE."""
    return work_rows(op, lays, tl, cfg, accesses_per_word("SOFTMAX"))


DEVICE = DeviceOp(QSoftmax, golden=_golden, input_transform=no_input_transform, remap_channels=no_channel_map,
                  plan_layout=_layout, constants=no_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=_work)

OPS = (OpDef("Softmax", import_node=_import, canonicalize=_canonicalize, quantize=_quantize, host=_host,
             device=DEVICE),)
