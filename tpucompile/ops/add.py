"""Add: element-wise residual add of two int8 tensors on the vector unit (ADD); Sum of two inputs
becomes an Add.

Integer semantics (``QAdd``, TFLite style): ``arith.add_int8(a, b, zp_a, mult_a, shift_a, zp_b,
mult_b, shift_b, zp_out, mult_out, shift_out, relu)``: ``a2 = (a - zp_a) << 20``, likewise b;
``s = sat32(requant(a2, mult_a, shift_a) + requant(b2, mult_b, shift_b))``;
``y = requant(s, mult_out, shift_out) + zp_out`` clamped to [zp_out if relu else -128, 127].
Quantization (``arith.add_multipliers``): mult_a/shift_a = quantize_multiplier(s_a / (2 max(s_a,
s_b))), likewise b; mult_out/shift_out = quantize_multiplier(2 max(s_a, s_b) / (2**20 s_out)).
Broadcasting is refused (shapes must match).

Device: per tile of th x tw pixels x kbg channel blocks, LOAD both operands, one ADD over all of
them, STORE; two slot groups of (a, b, out) (``backend.tiling.tile_vector``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.channels import ChannelMapRequest
from tpucompile.backend.tiling import (
    EltTiling,
    elt_tiles,
    field_max,
    load_bw,
    place_slot_groups,
    tile_vector,
    untileable,
)
from tpucompile.backend.work import elt_work
from tpucompile.frontend.host_embeddings import KEY_MASK_SUFFIX
from tpucompile.ir import Node
from tpucompile.ops.act_matmul import fuse_key_mask
from tpucompile.ops.common import affine_of_constant, no_attrs, no_constants, no_input_transform, no_macs
from tpucompile.ops.conv import QConv, lane_copy_qop
from tpucompile.ops.conv_add import fused_conv_add
from tpucompile.ops.lut import elementwise_binary
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["QAdd", "OPS", "two_operand_channels"]


@dataclass(frozen=True)
class QAdd(QOp):
    """Element-wise residual add of two int8 tensors of the same shape (TFLite arithmetic).

    mult_a/shift_a = quantize_multiplier(s_a / (2 max(s_a, s_b))), likewise b;
    mult_out/shift_out = quantize_multiplier(2 max(s_a, s_b) / (2**20 s_out)).
    """
    name: str
    a: str
    b: str
    out: str
    zp_a: int
    mult_a: int
    shift_a: int
    zp_b: int
    mult_b: int
    shift_b: int
    zp_out: int
    mult_out: int
    shift_out: int
    relu: bool

    @property
    def inputs(self) -> tuple:
        return (self.a, self.b)

    def int8(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The Add's int8 output of int8 operands ``a``, ``b`` (same shape): ``arith.add_int8``
        with this op's zero points, multipliers and relu."""
        return arith.add_int8(a, b, self.zp_a, self.mult_a, self.shift_a, self.zp_b, self.mult_b, self.shift_b,
                              self.zp_out, self.mult_out, self.shift_out, self.relu)

    def qregs(self, P, pinned: tuple = ()) -> tuple:
        """(qreg_a, qreg_b, qreg_out) of the ADD instruction, from ``P.qregs`` with ``pinned``
        (registers the caller still needs) and each other kept."""
        qa = P.qregs.get(self.mult_a, self.shift_a, self.zp_a, pinned=pinned)
        qb = P.qregs.get(self.mult_b, self.shift_b, self.zp_b, pinned=(*pinned, qa))
        qo = P.qregs.get(self.mult_out, self.shift_out, self.zp_out, pinned=(*pinned, qa, qb))
        return qa, qb, qo


# ---------------------------------------------------------------- passes, quantization
def _fold_add(node, a, b):
    return (a + b).astype(a.dtype)


def _fold_sum(node, *xs):
    return np.sum(np.stack(xs), axis=0).astype(xs[0].dtype)


def _affine(graph, node, cout: int, bias):
    """Add of a per-channel constant after a Conv: s = 1, t = c (passes/fold_affine)."""
    return affine_of_constant(graph, node, cout, bias, lambda c, x_first: (1.0, c))


def _canonicalize_add(graph, node, producers) -> list:
    node.attrs.setdefault("relu", False)
    return [node]


def _canonicalize_sum(graph, node, producers) -> list:
    """Sum of two inputs -> Add (of other counts: left, and refused by the quantizer)."""
    if len(node.inputs) != 2:
        return [node]
    return _canonicalize_add(graph, Node("Add", node.name, node.inputs, node.outputs, dict(node.attrs)), producers)


def _quantize(q, node) -> None:
    a, b = q.input(node, 0), q.input(node, 1)
    for x, m in ((a, b), (b, a)):
        if m.name in q.qg.inputs and m.name.endswith(KEY_MASK_SUFFIX):   # a run-time attention mask
            fuse_key_mask(q, node, x.name, m.name)
            return
    if a.shape != b.shape:
        raise CompileError(f"node {node.name!r} (Add): broadcasting {a.shape} + {b.shape} "
                           "unsupported (shapes must match)")
    sy, zy = q.out_params(node)
    try:
        (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(a.scale, b.scale, sy)
    except ValueError as e:
        raise CompileError(f"node {node.name!r} (Add): {e}") from e
    out = q.add_tensor(node.outputs[0], sy, zy, shape=a.shape)
    q.add_op(QAdd(node.name, a.name, b.name, out.name, a.zero_point, ma, sa, b.zero_point, mb, sb,
                  zy, mo, so, bool(node.attrs.get("relu"))))


# ---------------------------------------------------------------- golden
def _golden(op: QAdd, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return op.int8(a, b)


# ---------------------------------------------------------------- device lowering
def _layout(op: QAdd, qg, lays) -> None:
    y = qg.tensors[op.out]
    if qg.tensors[op.a].shape != y.shape or qg.tensors[op.b].shape != y.shape:
        raise CompileError(f"QAdd {op.name!r}: operand shapes {qg.tensors[op.a].shape}, "
                           f"{qg.tensors[op.b].shape} differ from output {y.shape}")


def two_operand_channels(op, maps: dict, blk: int):
    """Lane-wise: both operands must have one channel map, which the output takes. When they
    differ, ``ChannelMapRequest`` asks for operand ``b`` in ``a``'s map (or ``a`` in ``b``'s when
    ``a`` has its channels in order): ``backend.channels.remap_graph`` has its producer write it
    so if it can (a Conv read by this op alone), else inserts a lane-moving copy
    (``conv.lane_copy_qop``, an identity 1x1 Conv on the array: exact) before this op."""
    ma, mb = maps.get(op.a), maps.get(op.b)
    if ma == mb:
        return op, ma
    field, m = ("b", ma) if ma is not None else ("a", mb)
    moved = getattr(op, field)

    def text(m):
        return "its channels in order" if m is None else f"lanes {m.as_json()}"
    raise ChannelMapRequest(moved, m, f"{type(op).__name__} {op.name!r}: operand {moved!r} has {text(maps.get(moved))}, "
                            f"the other one {text(m)} ([logical, lane, count]: a Concat's gap lanes or a channel "
                            "Slice off a block boundary)", copy=lane_copy_qop,
                            reread=lambda t: dataclasses.replace(op, **{field: t}))


def _tile(op: QAdd, lays: dict, cfg) -> EltTiling:
    """Two slot groups of (a, b, out), each kbg blocks of th x tw pixels; one ADD per tile."""
    Y = lays[op.out]
    W, bw = cfg.word_bytes, load_bw(cfg)

    def cost(th, tw, ih, iw, kbg, nt):
        fits = (kbg * th * tw <= field_max("ADD", "count")) & (2 * kbg * th * tw * 3 <= cfg.sram_words)
        return np.where(fits, nt * kbg * ih * iw * W * 2 / bw + 60 * nt * 3, np.inf)

    tl = tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise untileable(f"QAdd {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    n = tl.kbg * tl.th * tl.tw
    place_slot_groups(tl, {"a": n, "b": n, "o": n}, cfg)
    return tl


def _work(op: QAdd, lays: dict, tl: EltTiling, cfg):
    """Per tile: both operands loaded, one ADD (3 accesses per word), the store."""
    Y = lays[op.out]
    return elt_work(tl, Y.nblocks, Y.H, Y.W, cfg, inputs=2, vpu_per_output=3, block_instrs=False)


def _describe(op: QAdd, tl: EltTiling) -> dict:
    return dict(relu=bool(op.relu), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit(P, op: QAdd, lays: dict, tl: EltTiling, consts: dict) -> None:
    """Per tile: LOAD both operands, ADD, STORE."""
    A, B, Y = lays[op.a], lays[op.b], lays[op.out]
    _, _, Ho, Wo = Y.shape
    qa, qb, qo = op.qregs(P)
    reg = tl.regions
    for t in elt_tiles(Y.nblocks, Ho, Wo, tl):
        n = t.words
        sa, sb, so = reg["a"][t.slot], reg["b"][t.slot], reg["o"][t.slot]
        P.tile_dma("DMA_LOAD", A, sa, t)
        P.tile_dma("DMA_LOAD", B, sb, t)
        P.add("ADD", rs=[(sa, sa + n), (sb, sb + n)], ws=[(so, so + n)], src_a=sa, src_b=sb,
              dst_addr=so, count=n, qreg_a=qa, qreg_b=qb, qreg_out=qo, relu=int(op.relu))
        P.tile_dma("DMA_STORE", Y, so, t)


def _fuse_producer(op: QAdd, producer, lays, cfg):
    """A Conv (exactly: not an ActMatMul) whose output this Add alone reads: the two fused into
    one ConvAdd (ops/conv_add.py: the Add in the conv's requantization, REQUANT_ADD)."""
    return fused_conv_add(producer, op) if type(producer) is QConv else None


DEVICE = DeviceOp(QAdd, golden=_golden, input_transform=no_input_transform,
                  remap_channels=two_operand_channels, plan_layout=_layout,
                  constants=no_constants, tile=_tile, emit=_emit, describe=_describe, macs=no_macs,
                  work=_work, fuse_producer=_fuse_producer)
OPS = (
    OpDef("Sum", import_node=no_attrs, fold=_fold_sum, canonicalize=_canonicalize_sum, fuses_relu=True),
    OpDef("Add", import_node=no_attrs, fold=_fold_add, canonicalize=_canonicalize_add, affine=_affine,
          fuses_relu=True, quantize=_quantize, elementwise=elementwise_binary, device=DEVICE),
)
