"""LayerNormalization (ONNX opset 17) over the channels of each pixel, on the vector unit (LAYERNORM).

Accepted forms (the normalised axis must be the channels of the (1, C, H, W) device tensor):
* ``Transpose(perm 0,2,3,1) -> LayerNormalization(axis -1) -> Transpose(perm 0,3,1,2)``, the
  channels-last sandwich exporters write for a per-pixel LayerNorm of an NCHW network (ConvNeXt;
  torch ``x.permute(0, 2, 3, 1)``; a rank-3 (1, C, L) sequence's ``Transpose(0, 2, 1)`` pair
  after ``frontend/lift_1d``): one LAYERNORM on the Transposes' outer tensors, no data moves
  for the Transposes (``canonicalize``: the first Transpose is dropped, the second becomes the
  LayerNorm).
* a LayerNormalization whose normalised axes hold only the channels: (1, C, 1, 1) axis 1, or a
  rank-4 tensor with H = W = 1 and axis -3.
Anything else (another axis, a Transpose read by another node) is refused naming the node.

Integer arithmetic: docs/integer_nonlinear.md, docs/isa.md (LAYERNORM; I-BERT's integer variance
and integer square root, Kim et al. 2021, with ``var = N*sumsq - sum^2`` exact), golden
``tpusim.arch.arith.layernorm_stats`` / ``layernorm_out``. Quantization (``QLayerNorm``): the
input's zero point cancels; gamma (ONNX ``Scale``) int16 at ``S_g = max|gamma| / 32767``, beta
(``B``, zeros if absent) int32 at ``S_g * 2^-12``; ``eps = round(epsilon * N^2 / S_in^2 * 2^16)``
(48-bit field; BERT's 1e-12 gives 0 on any int8 scale, which is its float effect too); output
scale and zero point from calibration, ``quantize_multiplier(S_g * 2^-12 / S_out)``. Error:
<= 0.55 output LSB against float LayerNorm of the same int8 input and quantized gamma/beta
(measured 0.531; tests/test_rowops_arith.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpucompile.ir import readers
from tpucompile.ops.common import bad_attr, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.rows import emit_rows, no_channel_map, tile_rows, work_rows
from tpucompile.ops.softmax import from_rows, rows_of
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.errors import CompileError
from tpusim.arch.rowops import accesses_per_word, ln_param_words

__all__ = ["QLayerNorm", "OPS", "ln_quantize_params"]

#: int16 range of the quantized gamma
GAMMA_MAX = 32767


@dataclass(frozen=True)
class QLayerNorm(QOp):
    """Integer LayerNorm over the channels of each pixel of an int8 (1, C, H, W) tensor.

    gamma: int16 [C] at scale S_g; beta: int32 [C] at S_g * 2^-12; eps: the 48-bit LAYERNORM field;
    mult/shift: quantize_multiplier(S_g * 2^-12 / S_out); zp_out: the output zero point."""
    name: str
    inp: str
    out: str
    gamma: np.ndarray = field(repr=False, compare=False)
    beta: np.ndarray = field(repr=False, compare=False)
    eps: int
    mult: int
    shift: int
    zp_out: int

    def verify(self, qg) -> None:
        x, y = qg.tensors[self.inp], qg.tensors[self.out]
        if len(x.shape) != 4 or x.shape != y.shape:
            raise CompileError(f"QLayerNorm {self.name!r}: input {x.shape} and output {y.shape} must be one "
                               "(1, C, H, W) shape")
        if self.gamma.shape != (x.shape[1],) or self.beta.shape != (x.shape[1],):
            raise CompileError(f"QLayerNorm {self.name!r}: gamma {self.gamma.shape} / beta {self.beta.shape} "
                               f"do not have the {x.shape[1]} channels of {self.inp!r}")


def _import(node, a: dict, opset: int) -> dict:
    out = {"axis": -1, "epsilon": 1e-5}
    for k, v in a.items():
        if k == "axis":
            out["axis"] = int(v)
        elif k == "epsilon":
            out["epsilon"] = float(v)
        elif k == "stash_type":
            if int(v) != 1:
                raise bad_attr(node, k, v, "is not supported (only 1: float32 statistics)")
        else:
            raise bad_attr(node, k, v, "is not supported")
    if len(node.output) > 1 and any(node.output[1:]):
        raise CompileError(f"node {node.name!r} (LayerNormalization): the Mean / InvStdDev outputs "
                           f"{[o for o in node.output[1:] if o]} are not supported (inference only)")
    return out


def _fold(node, x, scale, bias=None):
    """ONNX LayerNormalization on constants (float64 statistics)."""
    axis = node.attrs.get("axis", -1) % x.ndim
    ax = tuple(range(axis, x.ndim))
    xd = np.asarray(x, np.float64)
    m = xd.mean(axis=ax, keepdims=True)
    v = ((xd - m) ** 2).mean(axis=ax, keepdims=True)
    y = (xd - m) / np.sqrt(v + node.attrs.get("epsilon", 1e-5)) * scale
    return (y if bias is None else y + bias).astype(x.dtype)


def _canonicalize(graph, node, producers) -> list:
    """The channels-last sandwich -> a LayerNorm over the channels (attrs["channels"] = True)
    written by the second Transpose's node; a LayerNorm on (1, C, 1, 1) likewise; else kept
    (refused by ``_quantize``)."""
    if node.attrs.get("channels"):
        return [node]
    shape = tuple(graph.tensors[node.inputs[0]].shape)
    axis = node.attrs["axis"] % len(shape) if shape else node.attrs["axis"]
    if len(shape) == 4 and shape[2:] == (1, 1) and axis == 1:
        node.attrs["channels"] = True
        return [node]
    t1 = producers.get(node.inputs[0])
    outs = readers(graph, node.outputs[0])
    if (len(shape) != 4 or axis != 3 or t1 is None or t1.op != "Transpose" or t1.attrs.get("perm") != (0, 2, 3, 1)
            or len(outs) != 1 or outs[0].op != "Transpose" or outs[0].attrs.get("perm") != (0, 3, 1, 2)
            or node.outputs[0] in graph.outputs):
        return [node]
    t2 = outs[0]
    # the second Transpose (later in graph order) becomes the LayerNorm over the NCHW tensor;
    # the first one is left unread and pruned
    t2.op, t2.name, t2.inputs = "LayerNormalization", node.name, [t1.inputs[0]] + list(node.inputs[1:])
    t2.attrs = dict(node.attrs, axis=1, channels=True)
    return []


def ln_quantize_params(gamma, beta, eps_real: float, n: int, s_in: float, s_out: float):
    """(gamma int16 [C], beta int32 [C], eps, mult, shift) of a LAYERNORM: S_g = max|gamma| /
    32767 (1 if gamma is all 0), beta at S_g * 2^-12 (rounded, saturated to int32), eps =
    round(eps_real * n^2 / s_in^2 * 2^16). ValueError naming the value out of its field."""
    gamma = np.asarray(gamma, np.float64)
    beta = np.zeros_like(gamma) if beta is None else np.asarray(beta, np.float64)
    gmax = float(np.abs(gamma).max()) if gamma.size else 0.0
    s_g = gmax / GAMMA_MAX if gmax > 0 else 1.0
    g = np.clip(np.round(gamma / s_g), -GAMMA_MAX, GAMMA_MAX).astype(np.int16)
    s_b = s_g * 2.0 ** -arith.LAYERNORM_N_FRAC_BITS
    b = np.clip(np.round(beta / s_b), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    eps = round(eps_real * n * n / (s_in * s_in) * 2 ** 16)
    if not 0 <= eps < 1 << 48:
        raise ValueError(f"epsilon {eps_real:g} at input scale {s_in:g} over {n} channels is {eps} in LAYERNORM's "
                         "units, outside its 48-bit field")
    mult, shift = arith.quantize_multiplier(s_b / s_out)
    return g, b, eps, mult, shift


def _per_channel(node, what: str, value, c: int) -> np.ndarray:
    """float64 [c]: LayerNormalization's ``what`` (Scale or B), one value or one per channel;
    CompileError naming the node and the shape otherwise."""
    v = np.asarray(value, np.float64).reshape(-1)
    if v.size not in (1, c):
        raise CompileError(f"node {node.name!r} (LayerNormalization): {what} {node.inputs[1 if what == 'Scale' else 2]!r} "
                           f"of shape {np.shape(value)} has {v.size} values for {c} channels (1 or {c} expected)")
    return np.broadcast_to(v, (c,))


def _quantize(q, node) -> None:
    if not node.attrs.get("channels"):
        shape = q.shape(node.inputs[0])
        raise CompileError(f"node {node.name!r} (LayerNormalization): axis {node.attrs['axis']} of {shape} does not "
                           "normalise the channels of a (1, C, H, W) tensor alone; supported: the channels-last "
                           "Transpose(0,2,3,1) -> LayerNormalization(axis -1) -> Transpose(0,3,1,2) form, or "
                           "(1, C, 1, 1) with axis 1")
    x = q.input(node)
    c = x.shape[1]
    gamma = q.const(node.inputs[1])
    beta = q.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if gamma is None or (len(node.inputs) > 2 and node.inputs[2] and beta is None):
        raise CompileError(f"node {node.name!r} (LayerNormalization): Scale / B must be constants")
    gamma = _per_channel(node, "Scale", gamma, c)
    beta = None if beta is None else _per_channel(node, "B", beta, c)
    sy, zy = q.out_params(node)
    try:
        g, b, eps, mult, shift = ln_quantize_params(gamma, beta, float(node.attrs["epsilon"]), c, x.scale, sy)
    except ValueError as e:
        raise CompileError(f"node {node.name!r} (LayerNormalization): {e}") from None
    out = q.add_tensor(node.outputs[0], sy, zy, shape=x.shape)
    q.add_op(QLayerNorm(node.name, x.name, out.name, g, b, eps, mult, shift, zy))


# ---------------------------------------------------------------- golden
def _golden(op: QLayerNorm, x: np.ndarray) -> np.ndarray:
    r = rows_of(x)
    n = r.shape[1]
    valid = np.ones(n, bool)
    total, sumsq = arith.layernorm_stats(r, valid)
    y = arith.layernorm_out(r, valid, total, sumsq, n, op.eps, op.gamma.astype(np.int64), op.beta.astype(np.int64),
                            op.mult, op.shift, op.zp_out)
    return np.ascontiguousarray(from_rows(y, x.shape))


# ---------------------------------------------------------------- device lowering
def _layout(op: QLayerNorm, qg, lays) -> None:
    op.verify(qg)


def _constants(op: QLayerNorm, cfg) -> dict:
    return {"ln": ln_param_words(op.gamma, op.beta, cfg.word_bytes).tobytes()}


def _table_words(op: QLayerNorm, cfg) -> int:
    return arith.LAYERNORM_PARAM_PLANES * -(-len(op.gamma) // cfg.word_bytes)


def _tile(op: QLayerNorm, lays: dict, cfg):
    return tile_rows(op, lays, cfg, "LAYERNORM", accesses_per_word("LAYERNORM"), _table_words(op, cfg))


def _emit(P, op: QLayerNorm, lays: dict, tl, consts: dict) -> None:
    q = P.qregs.get(op.mult, op.shift, op.zp_out)
    emit_rows(P, op, lays, tl, "LAYERNORM", {"qreg_out": q, "eps": op.eps},
              table=(consts["ln"], _table_words(op, P.cfg)))


def _work(op: QLayerNorm, lays: dict, tl, cfg):
    """The gamma/beta table once, per tile LOAD, [POOL copy], LAYERNORM, [POOL copy], STORE."""
    return work_rows(op, lays, tl, cfg, accesses_per_word("LAYERNORM"), _table_words(op, cfg))


def _describe(op: QLayerNorm, tl) -> dict:
    return dict(eps=op.eps, tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


DEVICE = DeviceOp(QLayerNorm, golden=_golden, input_transform=no_input_transform, remap_channels=no_channel_map,
                  plan_layout=_layout, constants=_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=_work)

OPS = (OpDef("LayerNormalization", import_node=_import, fold=_fold, canonicalize=_canonicalize, quantize=_quantize,
             device=DEVICE),)
