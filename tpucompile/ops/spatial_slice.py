"""Slices of the spatial axes (H, W) of an activation, strided or not: a device copy.

ONNX semantics (Slice, Split on axis 2 or 3): ``y = x[:, :, r0 : r0 + oh * sh : sh, c0 : c0 + ow
* sw : sw]`` with positive steps ``sh``, ``sw``. ``ops/slice.py`` canonicalizes such a Slice (or
each output of a Split of H or W) into a ``SpatialSlice`` node (attributes ``rows`` and ``cols``:
(start, step, count) each), followed by a ``ChannelSlice`` view when
the channels are cut too.

Quantized graph (``QSpatialSlice``): the output shares the input's scale and zero point (the
same values, no calibration).

Device: per tile of kbg channel blocks x th output rows x tw output columns: one DMA_LOAD of the
th input rows the tile keeps (DDR stride ``sh`` rows: the skipped rows are never read), each
from the DDR granule at or before its first column (``c0 + ox0 sw`` rounded down to
``align_px``: a DMA's DDR address must be granule aligned, an SRAM address need not), then one
POOL with a 1x1 window and ``out_stride_x = sw`` (a copy: the max of one tap) that picks the kept
columns from the word after the granule's start into a dense slot, then one DMA_STORE. Exact (a
copy). Refused by name (``ops/slice.py``): a negative step on H or W (a reversal), bounds that
are not constants, an empty slice.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend import tiling
from tpucompile.backend.layout import align_px
from tpucompile.backend.work import elt_work
from tpucompile.ops.common import lane_wise_channels, no_constants, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError

__all__ = ["QSpatialSlice", "OPS"]


@dataclass(frozen=True)
class QSpatialSlice(QOp):
    """Rows ``rows[0] + i * rows[1]``, i < ``rows[2]``, and columns ``cols[0] + j * cols[1]``,
    j < ``cols[2]``, of ``inp`` (NCHW int8); every channel; same scale and zero point."""
    name: str
    inp: str
    out: str
    rows: tuple
    cols: tuple

    def needed_bytes(self, t: str, qg) -> int:
        """Its output's worth of its input (``QOp``)."""
        return min(super().needed_bytes(t, qg), qg.tensors[qg.resolve(self.out)].size_bytes)

    def verify(self, qg) -> None:
        x, y = qg.tensors[self.inp], qg.tensors[self.out]
        bad = tuple(x.shape[:2]) != tuple(y.shape[:2]) or min(self.rows[1], self.cols[1]) < 1
        for (start, step, n), m, d in zip((self.rows, self.cols), y.shape[2:], x.shape[2:]):
            bad = bad or n != m or n < 1 or start < 0 or start + (n - 1) * step >= d
        if bad:
            raise CompileError(f"QSpatialSlice {self.name!r}: output {y.shape} is not rows {self.rows} and "
                               f"columns {self.cols} (start, step) of {x.shape}")
        if (x.scale, x.zero_point) != (y.scale, y.zero_point):
            raise CompileError(f"QSpatialSlice {self.name!r}: output {self.out!r} does not share the scale and "
                               f"zero point of its input {self.inp!r}")


def _quantize(q, node) -> None:
    x = q.input(node)
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=q.shape(node.outputs[0]))
    q.add_op(QSpatialSlice(node.name, x.name, out.name, tuple(node.attrs["rows"]), tuple(node.attrs["cols"])))


def _golden(op: QSpatialSlice, x: np.ndarray) -> np.ndarray:
    (r0, sh, oh), (c0, sw, ow) = op.rows, op.cols
    return np.ascontiguousarray(x[:, :, r0:r0 + oh * sh:sh, c0:c0 + ow * sw:sw])


# ---------------------------------------------------------------- device lowering
def _layout(op: QSpatialSlice, qg, lays) -> None:
    op.verify(qg)


def _tile(op: QSpatialSlice, lays: dict, cfg) -> tiling.EltTiling:
    """Two slot groups of (kbg blocks x th rows x iw input words, kbg x th x tw outputs); iw
    has ``align_px - 1`` words of slack for the granule-aligned load."""
    Y = lays[op.out]
    W, bw = cfg.word_bytes, tiling.load_bw(cfg)
    sw = op.cols[1]

    def cost(th, tw, ih, iw, kbg, nt):
        n_in, n_out = kbg * th * iw, kbg * th * tw
        fits = (kbg * th <= tiling.field_max("POOL", "out_h")) & (2 * (n_in + n_out) <= cfg.sram_words)
        return np.where(fits, nt * (n_in + n_out) * W / bw + 60 * nt * 3, np.inf)

    tl = tiling.tile_vector(Y.nblocks, (1, 1), (1, sw), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise tiling.untileable(f"QSpatialSlice {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    tiling.place_slot_groups(tl, {"i": tl.kbg * tl.th * tl.iw, "o": tl.kbg * tl.th * tl.tw}, cfg)
    return tl


def _describe(op: QSpatialSlice, tl: tiling.EltTiling) -> dict:
    return dict(rows=list(op.rows), cols=list(op.cols), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit(P, op: QSpatialSlice, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    """Per tile: LOAD the kept rows from the granule before the first kept column, POOL 1x1
    picking every ``sw``-th word, STORE (module docstring)."""
    X, Y = lays[op.inp], lays[op.out]
    W, ap = P.cfg.word_bytes, align_px(P.cfg)
    (r0, sh, _), (c0, sw, _) = op.rows, op.cols
    for t in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):
        si, so = tl.regions["i"][t.slot], tl.regions["o"][t.slot]
        first = c0 + t.ox0 * sw
        a0 = first // ap * ap
        iw = first - a0 + (t.tw - 1) * sw + 1
        P.dma("DMA_LOAD", X.iaddr(t.k0, r0 + t.oy0 * sh, a0), si, iw * W, t.th, sh * X.row_bytes, tl.iw * W,
              t.nk, X.block_bytes, t.th * tl.iw * W, buf=X.buf_id)
        rows = t.nk * t.th
        P.add("POOL", rs=[(si, si + rows * tl.iw)], ws=[(so, so + t.words)], mode=0, src_addr=si + first - a0,
              win_w=1, win_h=1, win_stride_x=1, win_stride_y=1, out_w=t.tw, out_stride_x=sw, out_h=rows,
              out_stride_y=tl.iw, dst_addr=so)
        P.tile_dma("DMA_STORE", Y, so, t)


def _work(op: QSpatialSlice, lays: dict, tl: tiling.EltTiling, cfg):
    """The estimator's work of ``_emit``: per tile the kept rows' LOAD from the granule before
    the first kept column, one POOL 1x1 (2 accesses per output word), the STORE."""
    Y, ap = lays[op.out], align_px(cfg)
    (_, _, _), (c0, sw, _) = op.rows, op.cols

    def window(oy0, th, ox0, tw):
        first = c0 + ox0 * sw
        return th, first - first // ap * ap + (tw - 1) * sw + 1
    return elt_work(tl, Y.nblocks, Y.H, Y.W, cfg, window=window, vpu_per_output=2, block_instrs=False)


DEVICE = DeviceOp(QSpatialSlice, golden=_golden, input_transform=no_input_transform,
                  remap_channels=lane_wise_channels, plan_layout=_layout, constants=no_constants, tile=_tile,
                  emit=_emit, describe=_describe, macs=no_macs, work=_work)
OPS = (OpDef("SpatialSlice", quantize=_quantize, calibrated=False, device=DEVICE),)   # made by ops/slice.py only
