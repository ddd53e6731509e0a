"""ConvAdd: a Conv whose output only a residual Add reads, fused with that Add (back end only).

Integer semantics (``QConvAdd``): exactly the two ops it replaces, ``y = arith.add_int8(c, s,
...)`` of the Add (operands in the Add's order, ``skip_is_a`` saying which one the skip tensor
``skip`` is) on ``c = conv_int8(conv)`` (the Conv's own requantization to the int8 tensor
``conv_out``, zero point ``y_zp``): bit-identical to the unfused pair, so the golden model runs
the QGraph unfused and the fused layer's output (``out``, the Add's) compares with it.

Made by ``backend.fuse_residual`` after layout (the ops are then on physical lanes, the skip
tensor in the output's channel map); never imported or quantized.

Device: the conv's loop nest (ops/conv.py); per REQUANT chunk, LOAD the matching skip tile (the
STORE's shape, planes in the output slot's layout) into the next slot of a ring of the two
output slots and the ``tiling.SKIP_SLOTS`` skip slots, then REQUANT_ADD in place (the conv's table and relu, the Add's three quant registers
and relu; the conv side is operand a, the skip operand b, so ``skip_is_a`` swaps the Add's
registers: ``add_int8`` is symmetric in (a, qreg_a) and (b, qreg_b)) requantizes the
accumulator rows and adds the skip in one pass over the slot (each word read, then written),
and the conv's STORE moves it as the Add's output. The conv's int8 output exists nowhere: per residual element one LOAD and
one STORE less than the standalone Add (which loads both operands and stores), and per output
word 2 VPU accesses (read the skip, write) instead of REQUANT's write and ADD's 3. The tiler
counts the skip slots, their loads and the REQUANT_ADD accesses (``tile_conv(skip=True)``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import tile_conv
from tpucompile.ops.conv import DEVICE as CONV_DEVICE
from tpucompile.ops.conv import QConv, conv_int8
from tpucompile.ops.conv import _emit as conv_emit
from tpucompile.ops.conv import _work as conv_work
from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch.errors import CompileError

__all__ = ["QConvAdd", "fused_conv_add", "OPS"]


@dataclass(frozen=True)
class QConvAdd(QConv):
    """QConv (its fields; ``out`` the Add's output, ``y_zp`` the zero point of the conv's own
    int8 output ``conv_out``) + the residual Add reading it (``add``, the ``add.QAdd`` itself:
    its quantization, relu and name; skip tensor ``skip``, operand a of the Add if ``skip_is_a``
    else b)."""
    conv_name: str = ""
    conv_out: str = ""
    add: object = None
    skip: str = ""
    skip_is_a: bool = False

    @property
    def inputs(self) -> tuple:
        return (self.inp, self.skip)

    def verify(self, qg) -> None:
        if self.x_zp != qg.tensors[self.inp].zero_point or self.add.zp_out != qg.tensors[self.out].zero_point:
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
    return QConvAdd(**fields, conv_name=conv.name, conv_out=conv.out, add=add,
                    skip=add.a if skip_is_a else add.b, skip_is_a=skip_is_a)


# ---------------------------------------------------------------- golden
def _golden(op: QConvAdd, x: np.ndarray, skip: np.ndarray) -> np.ndarray:
    return op.add.int8(*op.operands(conv_int8(op, x), skip))


# ---------------------------------------------------------------- device lowering
def _conv_shape(op: QConvAdd, lays: dict) -> tuple:
    cout, cin = op.weight.shape[:2]
    Y = lays[op.out]
    return op.kernel, op.strides, cin, cout, Y.H, Y.W, True, None


def _tile(op: QConvAdd, lays: dict, cfg):
    kernel, strides, cin, cout, oh, ow, skip, _ = _conv_shape(op, lays)
    return tile_conv(op.name, kernel, strides, cin, cout, oh, ow, cfg, skip=skip)


def _emit(P, op: QConvAdd, lays: dict, tl, consts: dict) -> None:
    """The conv's loop nest; per chunk (``skip``): LOAD the skip tile, then REQUANT_ADD into the
    output slot and the conv's STORE of the chunk (the Add's output)."""
    S, W = lays[op.skip], P.cfg.word_bytes
    qconv = P.qregs.get(0, 0, op.y_zp)
    qa, qb, qo = op.add.qregs(P, pinned=(qconv,))
    qc, qs = (qb, qa) if op.skip_is_a else (qa, qb)      # the conv side's, the skip's
    zc = op.add.zp_b if op.skip_is_a else op.add.zp_a
    if zc != op.y_zp:       # REQUANT_ADD's qreg is both the requant zero point and operand a's
        raise CompileError(f"QConvAdd {op.name!r}: the Add's zero point {zc} of the conv output differs "
                           f"from the conv's {op.y_zp}")
    # one ring of the output and skip slots, alternating between their two parity groups (bank
    # sets, tiling.conv_regions): a chunk's LOAD, REQUANT_ADD and STORE use one slot
    o, sk = tl.regions["o"], tl.regions["s"]
    slots, ring = [o[0], o[1], *sk], [0]

    def skip(P, blk: int, oy: int, ox: int, k: int, n: int, planes: int) -> tuple:
        ss = slots[ring[0]]
        ring[0] = (ring[0] + 1) % len(slots)
        more = (planes, S.block_bytes, k * n * W) if planes > 1 else ()
        P.dma("DMA_LOAD", S.iaddr(blk, oy, ox), ss, n * W, k, S.row_bytes, n * W, *more, buf=S.buf_id)
        return ss, dict(skip_addr=ss, qreg=qc, qreg_b=qs, qreg_out=qo, add_relu=int(op.add.relu))

    conv_emit(P, op, lays, tl, consts, skip=skip)


def _work(op: QConvAdd, lays: dict, tl, cfg):
    return conv_work(op, lays, tl, cfg, residual=True)


def _describe(op: QConvAdd, tl) -> dict:
    return {**CONV_DEVICE.describe(op, tl), "fused": [op.conv_name, op.add.name], "add_relu": bool(op.add.relu)}


@refusal
def _quantize(q, node) -> None:
    raise CompileError(f"node {node.name!r} (ConvAdd): made by the back end (fuse_residual) from a quantized "
                       "Conv and Add, never quantized itself")


DEVICE = dataclasses.replace(CONV_DEVICE, qop=QConvAdd, golden=_golden, tile=_tile, emit=_emit, describe=_describe,
                             work=_work, remap_output=None, conv_shape=_conv_shape)
OPS = (OpDef("ConvAdd", quantize=_quantize, device=DEVICE),)
