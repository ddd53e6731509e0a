"""ConvAdd: a Conv whose output only a residual Add reads, fused with that Add (back end only).

Integer semantics (``QConvAdd``): exactly the two ops it replaces, ``y = arith.add_int8(c, s,
...)`` of the Add (operands in the Add's order, ``skip_is_a`` saying which one the skip tensor
``skip`` is) on ``c = conv_int8(conv)`` (the Conv's own requantization to the int8 tensor
``conv_out``, zero point ``y_zp``): bit-identical to the unfused pair, so the golden model runs
the QGraph unfused and the fused layer's output (``out``, the Add's) compares with it.

Made by ``backend.fuse_residual`` after layout (the ops are then on physical lanes, the skip
tensor in the output's channel map); never imported or quantized.

Device: the conv's loop nest (ops/conv.py) with an epilogue per REQUANT chunk: while the
chunk's int8 conv output is in its output slot, LOAD the matching skip tile (the STORE's shape)
into the next of ``tiling.SKIP_SLOTS`` skip slots (a ring), ADD (the Add's three quant
registers and relu) the two in place into the output slot, STORE it as the Add's output. The conv output never goes to DDR: per
residual element one LOAD and one STORE less than the standalone Add (which loads both operands
and stores). The tiler counts the skip slots, their loads and ADDs (``tile_conv(skip=True)``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import tile_conv
from tpucompile.ops.conv import DEVICE as CONV_DEVICE
from tpucompile.ops.conv import QConv, _emit as conv_emit, _work as conv_work, conv_int8
from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["QConvAdd", "fused_conv_add", "OPS"]


@dataclass(frozen=True)
class QConvAdd(QConv):
    """QConv (its fields; ``out`` the Add's output, ``y_zp`` the zero point of the conv's own
    int8 output ``conv_out``) + the residual Add reading it (``add_name``; skip tensor ``skip``,
    operand a of the Add if ``skip_is_a`` else b; the Add's quantization ``zp_a .. shift_out``
    as in ``add.QAdd``; ``add_relu`` its clamp)."""
    conv_name: str = ""
    conv_out: str = ""
    add_name: str = ""
    skip: str = ""
    skip_is_a: bool = False
    zp_a: int = 0
    mult_a: int = 0
    shift_a: int = 0
    zp_b: int = 0
    mult_b: int = 0
    shift_b: int = 0
    zp_out: int = 0
    mult_out: int = 0
    shift_out: int = 0
    add_relu: bool = False

    @property
    def inputs(self) -> tuple:
        return (self.inp, self.skip)

    def verify(self, qg) -> None:
        if self.x_zp != qg.tensors[self.inp].zero_point or self.zp_out != qg.tensors[self.out].zero_point:
            raise CompileError(f"QConvAdd {self.name!r}: zero points disagree with its tensors")
        if qg.tensors[self.skip].shape != qg.tensors[self.out].shape:
            raise CompileError(f"QConvAdd {self.name!r}: skip {self.skip!r} of shape {qg.tensors[self.skip].shape} "
                               f"differs from output {qg.tensors[self.out].shape}")

    def operands(self, conv: np.ndarray, skip: np.ndarray) -> tuple:
        """(a, b) of the Add: the skip tensor and the conv output in the Add's order."""
        return (skip, conv) if self.skip_is_a else (conv, skip)


def fused_conv_add(conv: QConv, add) -> QConvAdd:
    """The QConvAdd of ``conv`` (exactly a QConv) and the ``add.QAdd`` reading its output (and
    another tensor, the skip)."""
    skip_is_a = add.b == conv.out
    fields = {f.name: getattr(conv, f.name) for f in dataclasses.fields(QConv)}
    fields.update(name=f"{conv.name}+{add.name}", out=add.out)
    return QConvAdd(**fields, conv_name=conv.name, conv_out=conv.out, add_name=add.name,
                    skip=add.a if skip_is_a else add.b, skip_is_a=skip_is_a,
                    zp_a=add.zp_a, mult_a=add.mult_a, shift_a=add.shift_a, zp_b=add.zp_b, mult_b=add.mult_b,
                    shift_b=add.shift_b, zp_out=add.zp_out, mult_out=add.mult_out, shift_out=add.shift_out,
                    add_relu=add.relu)


# ---------------------------------------------------------------- golden
def _golden(op: QConvAdd, x: np.ndarray, skip: np.ndarray) -> np.ndarray:
    a, b = op.operands(conv_int8(op, x), skip)
    return arith.add_int8(a, b, op.zp_a, op.mult_a, op.shift_a, op.zp_b, op.mult_b, op.shift_b,
                          op.zp_out, op.mult_out, op.shift_out, op.add_relu)


# ---------------------------------------------------------------- device lowering
def _tile(op: QConvAdd, lays: dict, cfg):
    cout, cin = op.weight.shape[:2]
    Y = lays[op.out]
    return tile_conv(op.name, op.kernel, op.strides, cin, cout, Y.H, Y.W, cfg, skip=True)


def _emit(P, op: QConvAdd, lays: dict, tl, consts: dict) -> None:
    """The conv's loop nest; per chunk (``epilogue``): LOAD the skip tile, ADD in place, then the
    conv's STORE of the chunk (now the Add's output)."""
    S, W = lays[op.skip], P.cfg.word_bytes
    qconv = P.qregs.get(0, 0, op.y_zp)
    qa = P.qregs.get(op.mult_a, op.shift_a, op.zp_a, pinned=(qconv,))
    qb = P.qregs.get(op.mult_b, op.shift_b, op.zp_b, pinned=(qconv, qa))
    qo = P.qregs.get(op.mult_out, op.shift_out, op.zp_out, pinned=(qconv, qa, qb))
    slots, ring = tl.regions["s"], [0]

    def epilogue(P, os_: int, blk: int, oy: int, ox: int, k: int, n: int, planes: int) -> None:
        ss = slots[ring[0]]
        ring[0] = (ring[0] + 1) % len(slots)
        words = planes * k * n
        more = (planes, S.block_bytes, k * n * W) if planes > 1 else ()
        P.dma("DMA_LOAD", S.iaddr(blk, oy, ox), ss, n * W, k, S.row_bytes, n * W, *more, buf=S.buf_id)
        sa, sb = op.operands(os_, ss)
        P.add("ADD", rs=[(sa, sa + words), (sb, sb + words)], ws=[(os_, os_ + words)], src_a=sa, src_b=sb,
              dst_addr=os_, count=words, qreg_a=qa, qreg_b=qb, qreg_out=qo, relu=int(op.add_relu))

    conv_emit(P, op, lays, tl, consts, epilogue=epilogue)


def _work(op: QConvAdd, lays: dict, tl, cfg):
    return conv_work(op, lays, tl, cfg, residual=True)


def _describe(op: QConvAdd, tl) -> dict:
    return {**CONV_DEVICE.describe(op, tl), "fused": [op.conv_name, op.add_name], "add_relu": bool(op.add_relu)}


@refusal
def _quantize(q, node) -> None:
    raise CompileError(f"node {node.name!r} (ConvAdd): made by the back end (fuse_residual) from a quantized "
                       "Conv and Add, never quantized itself")


DEVICE = dataclasses.replace(CONV_DEVICE, qop=QConvAdd, golden=_golden, tile=_tile, emit=_emit, describe=_describe,
                             work=_work, remap_output=None)
OPS = (OpDef("ConvAdd", quantize=_quantize, device=DEVICE),)
