"""Mul: by a per-channel or scalar constant (folded into the Conv before it as a per-channel
affine, ``passes/fold_affine``; inside a group of element-wise functions of one tensor a table
lookup, ``passes/fuse_elementwise``), or of two activations on the vector unit (MUL).

Integer semantics of two activations (``QMul``, TFLite int8 Mul): ``arith.mul_int8(a, b, zp_a,
zp_b, zp_out, mult, shift, relu)``: ``p = (a - zp_a)(b - zp_b)`` (exact in int32),
``y = requant(p, mult, shift) + zp_out`` clamped to [zp_out if relu else -128, 127], with
``mult/shift = quantize_multiplier(s_a s_b / s_out)``. Shapes: equal, or ``b`` of shape
(1, C, 1, 1) against ``a`` (1, C, H, W) (a channel gate: squeeze-and-excite; either operand
order); other broadcasts are refused naming the node.

Device: per tile of th x tw pixels x kbg channel blocks, LOAD a (and b: the tile's pixels, or
the kbg gate words), then one MUL over the tile (per channel block with ``stride_b = 0`` for a
gate), STORE; two slot groups of (a, b, out) (``backend.tiling.tile_vector``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import (
    EltTile,
    EltTiling,
    elt_tiles,
    field_max,
    load_bw,
    place_slot_groups,
    tile_vector,
    untileable,
)
from tpucompile.backend.work import elt_work
from tpucompile.ops.add import two_operand_channels
from tpucompile.ops.common import affine_of_constant, no_attrs, no_constants, no_input_transform, no_macs
from tpucompile.ops.lut import elementwise_binary
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["QMul", "OPS", "mul_qop"]


@dataclass(frozen=True)
class QMul(QOp):
    """``out = mul_int8(a, b)`` (module docstring); ``gate``: b is (1, C, 1, 1), one word per
    channel block for every pixel."""
    name: str
    a: str
    b: str
    out: str
    zp_a: int
    zp_b: int
    zp_out: int
    mult: int
    shift: int
    relu: bool
    gate: bool

    @property
    def inputs(self) -> tuple:
        return (self.a, self.b)


# ---------------------------------------------------------------- passes, quantization
def _fold(node, a, b):
    return np.multiply(a, b).astype(np.result_type(a, b))


def _mul(c, x_first):
    return c, 0.0


def _is_gate(shape, full) -> bool:
    return len(shape) == 4 and len(full) == 4 and shape[1] == full[1] and shape[0] == full[0] == 1 \
        and tuple(shape[2:]) == (1, 1)


def _quantize(q, node) -> None:
    for i in node.inputs:
        c = q.g.const(i)
        if c is not None:
            raise CompileError(f"node {node.name!r} (Mul): constant {i!r} of shape {tuple(np.shape(c))} neither a "
                               "scalar nor per channel, so it does not fold into a Conv (and a Mul of an "
                               "activation by a full constant tensor has no device mapping)")
    a, b = q.input(node, 0), q.input(node, 1)
    if a.shape != b.shape and _is_gate(a.shape, b.shape):
        a, b = b, a                                   # the gate second
    gate = a.shape != b.shape
    if gate and not _is_gate(b.shape, a.shape):
        raise CompileError(f"node {node.name!r} (Mul): broadcasting {a.shape} * {b.shape} unsupported (shapes "
                           "must match, or one operand must be a (1, C, 1, 1) channel gate of the other)")
    sy, zy = q.out_params(node)
    out = q.add_tensor(node.outputs[0], sy, zy, shape=a.shape)
    q.add_op(mul_qop(node.name, a, b, out, bool(node.attrs.get("relu"))))


def mul_qop(name: str, a, b, out, relu: bool) -> "QMul":
    """The QMul of int8 device tensors ``a`` and ``b`` (b equal in shape or a (1, C, 1, 1) gate of a)
    into ``out`` (QTensors); CompileError naming ``name`` for an unsupported multiplier."""
    try:
        m, s = arith.quantize_multiplier(a.scale * b.scale / out.scale)
    except ValueError as e:
        raise CompileError(f"node {name!r} (Mul): {e}") from e
    return QMul(name, a.name, b.name, out.name, a.zero_point, b.zero_point, out.zero_point, m, s, relu,
                a.shape != b.shape)


# ---------------------------------------------------------------- golden
def _golden(op: QMul, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return arith.mul_int8(a, b, op.zp_a, op.zp_b, op.zp_out, op.mult, op.shift, op.relu)


# ---------------------------------------------------------------- device lowering
def _layout(op: QMul, qg, lays) -> None:
    y = qg.tensors[op.out]
    if qg.tensors[op.a].shape != y.shape or (not op.gate and qg.tensors[op.b].shape != y.shape):
        raise CompileError(f"QMul {op.name!r}: operand shapes {qg.tensors[op.a].shape}, "
                           f"{qg.tensors[op.b].shape} do not fit output {y.shape}")


def _tile(op: QMul, lays: dict, cfg) -> EltTiling:
    Y = lays[op.out]
    W, bw = cfg.word_bytes, load_bw(cfg)

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        nb = kbg if op.gate else n
        fits = (n <= field_max("MUL", "count")) & (2 * (2 * n + nb) <= cfg.sram_words)
        return np.where(fits, nt * (n * W * 2 + nb * W) / bw + 60 * nt * (2 + (kbg if op.gate else 1)), np.inf)

    tl = tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise untileable(f"QMul {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    n = tl.kbg * tl.th * tl.tw
    place_slot_groups(tl, {"a": n, "b": tl.kbg if op.gate else n, "o": n}, cfg)
    return tl


def _describe(op: QMul, tl: EltTiling) -> dict:
    return dict(relu=bool(op.relu), gate=bool(op.gate), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit(P, op: QMul, lays: dict, tl: EltTiling, consts: dict) -> None:
    """Per tile: LOAD a, LOAD b (or its gate words), MUL (one per channel block for a gate), STORE."""
    A, B, Y = lays[op.a], lays[op.b], lays[op.out]
    _, _, Ho, Wo = Y.shape
    qa = P.qregs.get(0, 0, op.zp_a)
    qb = P.qregs.get(0, 0, op.zp_b, pinned=(qa,))
    qo = P.qregs.get(op.mult, op.shift, op.zp_out, pinned=(qa, qb))
    reg = tl.regions
    for t in elt_tiles(Y.nblocks, Ho, Wo, tl):
        sa, sb, so = reg["a"][t.slot], reg["b"][t.slot], reg["o"][t.slot]
        P.tile_dma("DMA_LOAD", A, sa, t)
        if op.gate:
            P.tile_dma("DMA_LOAD", B, sb, EltTile(t.k0, t.nk, 0, 1, 0, 1, t.slot))
            px = t.th * t.tw
            for j in range(t.nk):
                a0, o0 = sa + j * px, so + j * px
                P.add("MUL", rs=[(a0, a0 + px), (sb + j, sb + j + 1)], ws=[(o0, o0 + px)], src_a=a0,
                      src_b=sb + j, dst_addr=o0, count=px, stride_b=0, qreg_a=qa, qreg_b=qb, qreg_out=qo,
                      relu=int(op.relu))
        else:
            n = t.words
            P.tile_dma("DMA_LOAD", B, sb, t)
            P.add("MUL", rs=[(sa, sa + n), (sb, sb + n)], ws=[(so, so + n)], src_a=sa, src_b=sb, dst_addr=so,
                  count=n, stride_b=1, qreg_a=qa, qreg_b=qb, qreg_out=qo, relu=int(op.relu))
        P.tile_dma("DMA_STORE", Y, so, t)


def _work(op: QMul, lays: dict, tl, cfg):
    """Per tile: both operands (a channel gate is one word per block), one MUL per tile, STORE."""
    Y = lays[op.out]
    return elt_work(tl, Y.nblocks, Y.H, Y.W, cfg, inputs=2, vpu_per_output=3, block_instrs=False)


DEVICE = DeviceOp(QMul, golden=_golden, input_transform=no_input_transform, remap_channels=two_operand_channels,
                  plan_layout=_layout, constants=no_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=_work)
OPS = (
    OpDef("Mul", import_node=no_attrs, fold=_fold, affine=lambda g, n, cout, b: affine_of_constant(g, n, cout, b, _mul),
          fuses_relu=True, quantize=_quantize, elementwise=elementwise_binary, device=DEVICE),
)
