"""Float IR (after passes) + calibration ranges -> QGraph (see tpucompile.qgraph for semantics).

Choices (all deterministic):

* Activations: per-tensor asymmetric int8. Range [min(lo, 0), max(hi, 0)] (always contains 0),
  scale = (hi - lo) / 255, zp = round_half_even(-128 - lo / scale) clipped to [-128, 127], so real
  0 is exactly representable. A degenerate range (scale 0, non-finite, or below float32's smallest
  normal 1.1754944e-38) gets scale 1.0, zp 0 (as onnxruntime's quantize_static does).
* Weights: per-output-channel symmetric, zp 0, scale = max|w[n]| / 127, q = clip(round_half_even(
  w / scale), -127, 127). An all-zero channel gets scale 1.0 (its weights quantize to 0).
* Bias: int32 round_half_even(b / (s_x * s_w[n])), then the zero-point correction
  ``- x_zp * sum(q_w[n])``; a value outside int32 raises CompileError naming the node.
* Requantization multipliers: ``arith.quantize_multiplier(s_x * s_w[n] / s_y)`` (Q31, rounded
  half away from zero; multipliers < 2**-32 flush to 0).
* MaxPool output shares its input's parameters; average pools and residual Adds get their own.
* Softmax runs on the host in float32 on the dequantized logits: the accelerator has no
  exponent unit.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np
import onnx

from tpusim.arch import arith
from tpusim.arch.errors import CompileError
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ir import Graph
from tpucompile.passes.pipeline import run_passes
from tpucompile.qgraph import QAdd, QAvgPool, QConv, QGraph, QMaxPool, QTensor
from tpucompile.quantize.calibrate import calibrate

__all__ = ["activation_params", "weight_params", "quantize_graph", "calibration_names", "compile_model"]

HOST_OPS = ("Softmax",)
_TINY = float(np.finfo(np.float32).tiny)


def activation_params(lo: float, hi: float) -> tuple:
    """Float range -> (scale: float, zero_point: int) for int8 (see module docstring)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0
    if not np.isfinite(scale) or scale < _TINY:
        return 1.0, 0
    zp = int(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return float(scale), zp


def weight_params(w: np.ndarray) -> tuple:
    """float weight [Cout, ...] -> (q int8 [Cout, ...], scale float64 [Cout]), symmetric per channel."""
    amax = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
    scale = np.where(amax / 127.0 >= _TINY, amax / 127.0, 1.0)
    q = np.clip(np.round(w / scale.reshape(-1, *([1] * (w.ndim - 1)))), -127, 127).astype(np.int8)
    return q, scale


def _mult(node: str, real: float) -> tuple:
    try:
        return arith.quantize_multiplier(real)
    except ValueError as e:
        raise CompileError(f"node {node!r}: requantization multiplier {real!r} unsupported: {e}") from e


def calibration_names(graph: Graph) -> list:
    """ONNX names of every tensor needing calibrated ranges (inputs and device op outputs)."""
    names = list(graph.inputs)
    for n in graph.nodes:
        if n.op not in ("Alias", "MaxPool") + HOST_OPS:
            names += [graph.tensors[o].onnx_name or o for o in n.outputs]
    return names


def _conv(g: Graph, node, qg: QGraph, qt: QTensor, stats: dict) -> QConv:
    w = g.const(node.inputs[1])
    if w is None:
        raise CompileError(f"node {node.name!r} (Conv): weight {node.inputs[1]!r} is not a constant")
    b = g.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(w.shape[0])
    if b is None:
        raise CompileError(f"node {node.name!r} (Conv): bias {node.inputs[2]!r} is not a constant")
    if w.ndim != 4 or b.shape != (w.shape[0],):
        raise CompileError(f"node {node.name!r} (Conv): weight of shape {w.shape} and bias of shape "
                           f"{b.shape} do not describe a 2-D convolution with {w.shape[0]} outputs")
    out = node.outputs[0]
    sy, zy = activation_params(*stats[g.tensors[out].onnx_name or out])
    qw, sw = weight_params(w.astype(np.float64))
    bq = np.round(b.astype(np.float64) / (qt.scale * sw))
    beff = bq - qt.zero_point * qw.reshape(qw.shape[0], -1).astype(np.int64).sum(axis=1)
    if np.abs(beff).max(initial=0) > arith.INT32_MAX:
        raise CompileError(f"node {node.name!r} (Conv): bias {beff[np.argmax(np.abs(beff))]:.0f} "
                           "does not fit int32")
    ms = [_mult(node.name, qt.scale * s / sy) for s in sw]
    qg.tensors[out] = QTensor(out, tuple(g.tensors[out].shape), sy, zy)
    return QConv(node.name, qt.name, out, qw, beff.astype(np.int32),
                 np.array([m for m, _ in ms], np.int32), np.array([s for _, s in ms], np.int32),
                 tuple(node.attrs["strides"]), tuple(node.attrs["pads"]), bool(node.attrs["relu"]),
                 qt.zero_point, zy)


def quantize_graph(g: Graph, stats: dict) -> QGraph:
    """Build the QGraph from a passed float IR and {onnx_name: (min, max)} ranges.

    Raises CompileError naming any node that has no device mapping (e.g. an unfolded
    BatchNormalization, a broadcasting Add, a general Reshape) or a missing range.
    """
    qg = QGraph({}, [], [], [])
    host_outs = set()

    def need(name, node):
        if name in host_outs:
            raise CompileError(f"node {node.name!r} ({node.op}) reads host-op output {name!r}; "
                               "host ops must come last")
        r = qg.resolve(name)
        if r not in qg.tensors:
            raise CompileError(f"node {node.name!r} ({node.op}) reads {name!r}, which is not an "
                               "int8 device tensor")
        return qg.tensors[r]

    try:
        for name in g.inputs:
            shape = tuple(g.tensors[name].shape)
            if len(shape) != 4:
                raise CompileError(f"graph input {name!r} shape {shape} unsupported (only NCHW)")
            qg.tensors[name] = QTensor(name, shape, *activation_params(*stats[name]))
            qg.inputs.append(name)
        for node in g.nodes:
            op, out = node.op, node.outputs[0]
            oname = g.tensors[out].onnx_name or out
            if op == "Conv":
                qg.ops.append(_conv(g, node, qg, need(node.inputs[0], node), stats))
            elif op == "MaxPool":
                qt = need(node.inputs[0], node)
                qg.tensors[out] = QTensor(out, tuple(g.tensors[out].shape), qt.scale, qt.zero_point)
                qg.ops.append(QMaxPool(node.name, qt.name, out, tuple(node.attrs["kernel_shape"]),
                                       tuple(node.attrs["strides"]), tuple(node.attrs["pads"])))
            elif op in ("GlobalAveragePool", "AveragePool"):
                qt = need(node.inputs[0], node)
                k = tuple(qt.shape[2:]) if op == "GlobalAveragePool" else tuple(node.attrs["kernel_shape"])
                st = (1, 1) if op == "GlobalAveragePool" else tuple(node.attrs["strides"])
                sy, zy = activation_params(*stats[oname])
                m, s = _mult(node.name, qt.scale / (k[0] * k[1] * sy))
                qg.tensors[out] = QTensor(out, tuple(g.tensors[out].shape), sy, zy)
                qg.ops.append(QAvgPool(node.name, qt.name, out, k, st, (0, 0, 0, 0), m, s,
                                       qt.zero_point, zy))
            elif op == "Add":
                a, b = need(node.inputs[0], node), need(node.inputs[1], node)
                if a.shape != b.shape:
                    raise CompileError(f"node {node.name!r} (Add): broadcasting {a.shape} + {b.shape} "
                                       "unsupported (shapes must match)")
                sy, zy = activation_params(*stats[oname])
                try:
                    (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(a.scale, b.scale, sy)
                except ValueError as e:
                    raise CompileError(f"node {node.name!r} (Add): {e}") from e
                qg.tensors[out] = QTensor(out, a.shape, sy, zy)
                qg.ops.append(QAdd(node.name, a.name, b.name, out, a.zero_point, ma, sa,
                                   b.zero_point, mb, sb, zy, mo, so, bool(node.attrs.get("relu"))))
            elif op == "Alias":
                need(node.inputs[0], node)
                qg.aliases[out] = node.inputs[0]
            elif op in HOST_OPS:
                src = need(node.inputs[0], node)
                qg.host_ops.append({"op": op, "inp": node.inputs[0], "out": out,
                                    "axis": int(node.attrs["axis"]),
                                    "shape": tuple(g.tensors[node.inputs[0]].shape)})
                if src.name not in qg.outputs:
                    qg.outputs.append(src.name)
                host_outs.add(out)
            else:
                raise CompileError(f"node {node.name!r} ({op}) has no int8 device mapping "
                                   f"(supported after passes: Conv, MaxPool, AveragePool, "
                                   f"GlobalAveragePool, Add, Alias; host: {', '.join(HOST_OPS)})")
    except KeyError as e:
        raise CompileError(f"no calibration range for tensor {e.args[0]!r}") from None
    for o in g.outputs:
        if o not in host_outs and qg.resolve(o) not in qg.outputs:
            qg.outputs.append(qg.resolve(o))
    qg.fp32_outputs = list(g.outputs)
    qg.validate()
    return qg


def compile_model(model: Union[str, Path, onnx.ModelProto], calib_images,
                  dump_dir: Optional[Union[str, Path]] = None) -> tuple:
    """ONNX model -> (QGraph, float IR after passes): import, passes, calibrate, quantize.

    ``calib_images`` may also be a callable returning them, called only once the model has
    been imported and checked (so a refused model never makes calibration data)."""
    if not isinstance(model, onnx.ModelProto):
        try:
            model = onnx.load(str(model))
        except Exception as e:  # DecodeError, OSError and others for a missing or corrupt file
            raise CompileError(f"{model}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    g = run_passes(import_onnx(model), dump_dir)
    if callable(calib_images):
        calib_images = calib_images()
    stats = calibrate(model, calib_images, calibration_names(g))
    return quantize_graph(g, stats), g
