"""Reshapes and Transposes of an activation that the device does as a copy into a new layout.

A blocked tensor (``backend/layout.py``) keeps each channel on its lane and, per block of blk
channels, its pixels row after row. Two rearrangements keep every value on its lane, so they
are copies that move whole words (pixels), never bytes within a word:

* ``QRegroup``: a Reshape (1, C, H, W) -> (1, C, H', W') with H' W' = H W (the pixels of each
  channel in the same row-major order, cut into rows of W' instead of W: e.g. (1, C, H, W) ->
  (1, C, 1, H W), a sequence of tokens). Per tile of kbg blocks x th output rows: one DMA_LOAD of
  the whole input rows holding them into dense SRAM words, one DMA_STORE of the output rows from
  the word of their first pixel (SRAM is word addressed; both DDR ends start a row, on the
  granule). No vector-unit work.
* ``QSpatialTranspose``: a Transpose with perm [0, 1, 3, 2] (y[c, i, j] = x[c, j, i]). Per tile
  of kbg blocks x th x tw output pixels: one DMA_LOAD of the tw input rows it reads (from the
  granule at or before input column oy0, as ``spatial_slice`` does), then per block one POOL with
  a 1x1 window whose output (y, x) reads source word ``x * row + y`` (``out_stride_x`` = the
  SRAM row, ``out_stride_y`` = 1: a transposed read, written dense), one DMA_STORE.

Both outputs share the input's scale and zero point (no calibration) and are exact (copies).
Refused by name (``ops/reshape.py``, ``ops/transpose.py``): any Reshape or Transpose that moves
values across lanes (it changes C or the position of the channel axis: NCHW <-> NHWC mid-graph,
a pixel shuffle), and those the other op modules map without a copy (FC views, the flatten
before a Gemm, channel shuffles, cancelling pairs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpucompile.backend import tiling
from tpucompile.backend.layout import align_px
from tpucompile.ops.common import lane_wise_channels, no_constants, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError

__all__ = ["QRegroup", "QSpatialTranspose", "OPS", "is_regroup"]


def is_regroup(a: tuple, b: tuple) -> bool:
    """A Reshape from shape ``a`` to ``b`` is a ``QRegroup``: both (1, C, *, *) with one C and
    as many pixels, and not the same shape."""
    return len(a) == len(b) == 4 and a[:2] == b[:2] and a[0] == 1 and a[2] * a[3] == b[2] * b[3] and a != b


def _verify_copy(op, qg, want: tuple) -> None:
    x, y = qg.tensors[op.inp], qg.tensors[op.out]
    if tuple(y.shape) != want or (x.scale, x.zero_point) != (y.scale, y.zero_point):
        raise CompileError(f"{type(op).__name__} {op.name!r}: output {y.shape} (scale {y.scale:.6g}, zero point "
                           f"{y.zero_point}) is not {want} on the input's grid")


@dataclass(frozen=True)
class QRegroup(QOp):
    """``y = x.reshape(1, C, *hw)``: the channel count unchanged (module docstring)."""
    name: str
    inp: str
    out: str
    hw: tuple

    def verify(self, qg) -> None:
        a, b = tuple(qg.tensors[self.inp].shape), tuple(qg.tensors[self.out].shape)
        if not is_regroup(a, b) or b[2:] != tuple(self.hw):
            raise CompileError(f"QRegroup {self.name!r}: {a} -> {b} is not a regrouping of the pixels of each channel")
        _verify_copy(self, qg, b)


@dataclass(frozen=True)
class QSpatialTranspose(QOp):
    """``y = x.transpose(0, 1, 3, 2)`` (module docstring)."""
    name: str
    inp: str
    out: str

    def verify(self, qg) -> None:
        n, c, h, w = qg.tensors[self.inp].shape
        _verify_copy(self, qg, (n, c, w, h))


def _quantize_regroup(q, node) -> None:
    x = q.input(node)
    hw = tuple(int(d) for d in q.shape(node.outputs[0])[2:])
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=tuple(x.shape[:2]) + hw)
    q.add_op(QRegroup(node.name, x.name, out.name, hw))


def _quantize_transpose(q, node) -> None:
    x = q.input(node)
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=tuple(x.shape[:2]) + (x.shape[3], x.shape[2]))
    q.add_op(QSpatialTranspose(node.name, x.name, out.name))


# ---------------------------------------------------------------- golden
def _golden_regroup(op: QRegroup, x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[:2] + tuple(op.hw))


def _golden_transpose(op: QSpatialTranspose, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 1, 3, 2))


# ---------------------------------------------------------------- device lowering: regroup
def _layout(op, qg, lays) -> None:
    op.verify(qg)


def _slot_words(th: int, X, Y) -> int:
    """SRAM words per block of a tile of th output rows: the input rows holding them."""
    return th * Y.W + 2 * X.W


def _tile_regroup(op: QRegroup, lays: dict, cfg) -> tiling.EltTiling:
    """kbg blocks x th output rows per tile (each block's slot: the whole input rows holding
    them), two slots; the fewest tiles."""
    X, Y = lays[op.inp], lays[op.out]
    best = None
    for kbg in range(1, X.nblocks + 1):
        th = min(Y.H, (cfg.sram_words // (2 * kbg) - 2 * X.W) // Y.W)
        nt = math.ceil(X.nblocks / kbg) * math.ceil(Y.H / max(th, 1))
        if th >= 1 and (best is None or nt < best[0]):
            best = (nt, kbg, th)
    if best is None:
        raise tiling.untileable(f"QRegroup {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    tl = tiling.EltTiling(best[2], Y.W, best[1])
    tiling.place_slot_groups(tl, {"x": tl.kbg * _slot_words(tl.th, X, Y)}, cfg)
    return tl


def _emit_regroup(P, op: QRegroup, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    """Per tile of output rows: LOAD the whole input rows holding them (dense), STORE the output
    rows from the word of their first pixel (an SRAM address needs no DDR alignment)."""
    X, Y = lays[op.inp], lays[op.out]
    W = P.cfg.word_bytes
    per_block = _slot_words(tl.th, X, Y)
    for t in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):
        s = tl.regions["x"][t.slot]
        p0, p1 = t.oy0 * Y.W, (t.oy0 + t.th) * Y.W               # pixels of the tile
        r0, r1 = p0 // X.W, -(-p1 // X.W)                         # input rows holding them
        P.dma("DMA_LOAD", X.iaddr(t.k0, r0, 0), s, X.W * W, r1 - r0, X.row_bytes, X.W * W, t.nk,
              X.block_bytes, per_block * W, buf=X.buf_id)
        P.dma("DMA_STORE", Y.iaddr(t.k0, t.oy0, 0), s + p0 - r0 * X.W, Y.W * W, t.th, Y.row_bytes, Y.W * W, t.nk,
              Y.block_bytes, per_block * W, buf=Y.buf_id)


def _describe(op, tl: tiling.EltTiling) -> dict:
    return dict(tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


# ---------------------------------------------------------------- device lowering: transpose
def _tile_transpose(op: QSpatialTranspose, lays: dict, cfg) -> tiling.EltTiling:
    """Two slot groups of (kbg blocks x tw input rows x (th + align_px - 1) words, kbg x th x tw
    outputs); th, tw in output pixels."""
    Y = lays[op.out]
    W, bw, ap = cfg.word_bytes, tiling.load_bw(cfg), align_px(cfg)

    def cost(th, tw, ih, iw, kbg, nt):
        n_in, n_out = kbg * tw * (th + ap - 1), kbg * th * tw
        fits = (np.maximum(th, tw) <= tiling.field_max("POOL", "out_h")) & (2 * (n_in + n_out) <= cfg.sram_words)
        return np.where(fits, nt * (n_in + n_out) * W / bw + 60 * nt * (2 + kbg), np.inf)

    tl = tiling.tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise tiling.untileable(f"QSpatialTranspose {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    tiling.place_slot_groups(tl, {"i": tl.kbg * tl.tw * (tl.th + ap - 1), "o": tl.kbg * tl.th * tl.tw}, cfg)
    return tl


def _emit_transpose(P, op: QSpatialTranspose, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    """Per tile: LOAD input rows ox0.. (columns from the granule before oy0), per block a POOL
    reading them transposed, STORE."""
    X, Y = lays[op.inp], lays[op.out]
    W, ap = P.cfg.word_bytes, align_px(P.cfg)
    row = tl.th + ap - 1                                  # SRAM words per input row
    for t in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):
        si, so = tl.regions["i"][t.slot], tl.regions["o"][t.slot]
        a0 = t.oy0 // ap * ap
        P.dma("DMA_LOAD", X.iaddr(t.k0, t.ox0, a0), si, (t.oy0 - a0 + t.th) * W, t.tw, X.row_bytes, row * W,
              t.nk, X.block_bytes, t.tw * row * W, buf=X.buf_id)
        for j in range(t.nk):
            src, dst = si + j * t.tw * row, so + j * t.th * t.tw
            P.add("POOL", rs=[(src, src + t.tw * row)], ws=[(dst, dst + t.th * t.tw)], mode=0,
                  src_addr=src + t.oy0 - a0, win_w=1, win_h=1, win_stride_x=1, win_stride_y=1, out_w=t.tw,
                  out_stride_x=row, out_h=t.th, out_stride_y=1, dst_addr=dst)
        P.tile_dma("DMA_STORE", Y, so, t)


def _device(kind, golden, tile, emit) -> DeviceOp:
    return DeviceOp(kind, golden=golden, input_transform=no_input_transform, remap_channels=lane_wise_channels,
                    plan_layout=_layout, constants=no_constants, tile=tile, emit=emit, describe=_describe,
                    macs=no_macs)


#: made by the Reshape / Transpose quantize hooks (reshape.py, transpose.py), never imported
OPS = (OpDef("Regroup", quantize=_quantize_regroup, calibrated=False,
             device=_device(QRegroup, _golden_regroup, _tile_regroup, _emit_regroup)),
       OpDef("SpatialTranspose", quantize=_quantize_transpose, calibrated=False,
             device=_device(QSpatialTranspose, _golden_transpose, _tile_transpose, _emit_transpose)))
