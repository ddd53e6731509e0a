"""ConvPool: a Conv whose output only a MaxPool reads, fused with that pool (back end only).

Integer semantics (``QConvPool``): exactly the two ops it replaces, ``y = max_pool_int8(pool,
conv_int8(conv))`` (the pool's windows over the Conv's own int8 output ``conv_out`` padded with
-128): bit-identical to the unfused pair, so the golden model runs the QGraph unfused and the
fused layer's output (``out``, the pool's) compares with it.

Made by ``backend.fuse_residual`` after layout (``pool.MAXPOOL.fuse_producer``); never imported
or quantized. A pool fuses when each of its pads is smaller than its window on that axis (every
window holds a conv output) and its window fits POOL's fields.

Device: the conv's loop nest (ops/conv.py) over tiles of ``pool_th x pool_tw`` pooled outputs
(``tiling.tile_conv(pool=...)``): each tile computes the conv outputs its pooling windows read
(clipped to the conv's output; the rows and columns that overlap the next tile's windows are
computed again there), REQUANTs them (+ relu) into one output slot (dense, the tile's row
pitch), then per output block and plane the POOLs of ``pool_runs`` write the pooled tile into
one of two pooled slots "q", which one STORE moves to DDR. A window reaching into the pool's
padding reads the taps inside the conv output only (max with -128 padding is the max of those
taps): the pooled outputs of a tile fall into runs of equal clipping per axis, one POOL per run
(or per row and column run when a tile has several column runs: POOL writes its outputs
densely). The conv output never goes to DDR.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import field_max, tile_conv
from tpucompile.ops.common import border_reach, conv_out_hw, max_pool_int8
from tpucompile.ops.conv import DEVICE as CONV_DEVICE
from tpucompile.ops.conv import QConv, conv_int8
from tpucompile.ops.conv import _emit as conv_emit
from tpucompile.ops.conv import _work as conv_work
from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch.errors import CompileError

__all__ = ["QConvPool", "fused_conv_pool", "pool_runs", "OPS"]


@dataclass(frozen=True)
class QConvPool(QConv):
    """QConv (its fields; ``out`` the pool's output, ``y_zp`` the zero point of the conv's own
    int8 output ``conv_out``, which the max pool's output shares) + the max pool reading it
    (``pool``, the ``pool.QMaxPool`` itself: kernel, strides, pads, name)."""
    conv_name: str = ""
    conv_out: str = ""
    pool: object = None

    def verify(self, qg) -> None:
        if self.x_zp != qg.tensors[self.inp].zero_point or self.y_zp != qg.tensors[self.out].zero_point:
            raise CompileError(f"QConvPool {self.name!r}: zero points disagree with its tensors")

    def conv_hw(self, x_shape: tuple) -> tuple:
        """(OH, OW) of the conv's output (the pool's input) on an input of shape ``x_shape``."""
        return conv_out_hw(x_shape[2], x_shape[3], self.kernel, self.strides, self.pads)


#: (id(conv), id(pool)) -> (conv, pool, ``fused_conv_pool``'s result): the fusion hook asks again
#: on every configuration whose DDR timing it has not weighed yet (the ops held: the ids stay theirs)
_FUSED: dict = {}
_FUSED_MAX = 256


def fused_conv_pool(conv: QConv, pool) -> QConvPool | None:
    """The QConvPool of ``conv`` (exactly a QConv) and the ``pool.QMaxPool`` reading its output,
    or None if the pool does not fuse (a pad as large as its window on that axis, a window
    wider than POOL's fields). The same object for the same two ops (frozen: shared)."""
    hit = _FUSED.get((id(conv), id(pool)))
    if hit is not None and hit[0] is conv and hit[1] is pool:
        return hit[2]
    (kh, kw), (t, l, b, r) = pool.kernel, pool.pads
    if max(t, b) >= kh or max(l, r) >= kw or kh > field_max("POOL", "win_h") or kw > field_max("POOL", "win_w"):
        out = None
    else:
        fields = {f.name: getattr(conv, f.name) for f in dataclasses.fields(QConv)}
        fields.update(name=f"{conv.name}+{pool.name}", out=pool.out)
        out = QConvPool(**fields, conv_name=conv.name, conv_out=conv.out, pool=pool)
    if len(_FUSED) >= _FUSED_MAX:
        _FUSED.clear()
    _FUSED[(id(conv), id(pool))] = (conv, pool, out)
    return out


@functools.lru_cache(maxsize=1 << 12)
def _axis_runs(o0: int, o1: int, k: int, s: int, pad: int, n: int, c0: int) -> tuple:
    """Pooled outputs o0 .. o1 - 1 along one axis (window ``k``, stride ``s``, leading ``pad``)
    over a conv axis of ``n`` outputs of which the tile holds ``c0`` on: ((first, end, first
    tap relative to c0, taps), ...) runs of equal clipping to [0, n) (cached: the tiles of a row
    or a column of the grid share theirs)."""
    runs: list = []
    for o in range(o0, o1):
        lo = o * s - pad
        a, e = max(lo, 0), min(lo + k, n)
        if runs and runs[-1][3] == e - a and runs[-1][2] + (o - runs[-1][0]) * s == a - c0:
            runs[-1] = (runs[-1][0], o + 1, runs[-1][2], runs[-1][3])
        else:
            runs.append((o, o + 1, a - c0, e - a))
    return tuple(runs)


def conv_rows(p0: int, p1: int, k: int, s: int, pad: int, n: int) -> tuple:
    """(first, count) of the conv outputs along one axis that pooled outputs p0 .. p1 - 1 read."""
    a, e = max(0, p0 * s - pad), min(n, (p1 - 1) * s - pad + k)
    return a, e - a


def pool_tiles(op: QConvPool, conv_hw: tuple, out_hw: tuple, tl) -> list:
    """The fused layer's tiles in emission order (rows outer): (cy0, ch, cx0, cw, py0, pth, px0,
    ptw): the conv outputs (``conv_rows`` of each axis) the pooled tile py0.., px0.. reads."""
    (kh, kw), (sh, sw), (t, l, _, _) = op.pool.kernel, op.pool.strides, op.pool.pads
    (H, W), (PH, PW) = conv_hw, out_hw
    out = []
    for py0 in range(0, PH, tl.pool_th):
        pth = min(tl.pool_th, PH - py0)
        for px0 in range(0, PW, tl.pool_tw):
            ptw = min(tl.pool_tw, PW - px0)
            out.append((*conv_rows(py0, py0 + pth, kh, sh, t, H), *conv_rows(px0, px0 + ptw, kw, sw, l, W),
                        py0, pth, px0, ptw))
    return out


def pool_runs(op: QConvPool, conv_hw: tuple, tile: tuple) -> list:
    """The POOLs of one plane of a tile (``pool_tiles``): (src, win_h, win_w, out_h, out_w, dst)
    with ``src`` the word offset of the first tap in the tile's dense conv outputs (row pitch
    cw), ``dst`` of the first output in its dense pooled tile (row pitch ptw)."""
    (kh, kw), (sh, sw), (t, l, _, _) = op.pool.kernel, op.pool.strides, op.pool.pads
    cy0, _, cx0, cw, py0, pth, px0, ptw = tile
    rows = _axis_runs(py0, py0 + pth, kh, sh, t, conv_hw[0], cy0)
    cols = _axis_runs(px0, px0 + ptw, kw, sw, l, conv_hw[1], cx0)
    if len(cols) == 1:
        (c0, c1, cs, ck), = cols
        return [(rs * cw + cs, rk, ck, r1 - r0, c1 - c0, (r0 - py0) * ptw) for r0, r1, rs, rk in rows]
    return [((rs + (o - r0) * sh) * cw + cs, rk, ck, 1, c1 - c0, (o - py0) * ptw + c0 - px0)
            for r0, r1, rs, rk in rows for o in range(r0, r1) for c0, c1, cs, ck in cols]


# ---------------------------------------------------------------- golden
def _golden(op: QConvPool, x: np.ndarray) -> np.ndarray:
    return max_pool_int8(op.pool, conv_int8(op, x))


# ---------------------------------------------------------------- device lowering
def _conv_shape(op: QConvPool, lays: dict) -> tuple:
    cout, cin = op.weight.shape[:2]
    X, Y = lays[op.inp], lays[op.out]
    oh, ow = op.conv_hw(X.shape)
    return op.kernel, op.strides, cin, cout, oh, ow, False, (op.pool.kernel, op.pool.strides, op.pool.pads, (Y.H, Y.W))


def _tile(op: QConvPool, lays: dict, cfg):
    kernel, strides, cin, cout, oh, ow, _, pool = _conv_shape(op, lays)
    return tile_conv(op.name, kernel, strides, cin, cout, oh, ow, cfg, pool=pool)


def _emit(P, op: QConvPool, lays: dict, tl, consts: dict) -> None:
    """The conv's loop nest over ``pool_tiles``; per tile and output block (``store``): the
    POOLs of each plane from the output slot into the next pooled slot, one STORE of it."""
    X, Y, W = lays[op.inp], lays[op.out], P.cfg.word_bytes
    hw = op.conv_hw(X.shape)
    slots, ring = tl.regions["q"], [0]
    sy, sx = op.pool.strides

    def store(P, os_: int, blk: int, planes: int, tile: tuple) -> None:
        _, ch, _, cw, py0, pth, px0, ptw = tile
        qs = slots[ring[0]]
        ring[0] ^= 1
        for j in range(planes):
            src0, dst0 = os_ + j * ch * cw, qs + j * pth * ptw
            for src, wh, ww, oh, ow, dst in pool_runs(op, hw, tile):
                a, d = src0 + src, dst0 + dst
                last = a + (oh - 1) * sy * cw + (ow - 1) * sx + (wh - 1) * cw + ww
                P.add("POOL", rs=[(a, last)], ws=[(d, d + oh * ow)], mode=0, src_addr=a, win_w=ww, win_h=wh,
                      win_stride_x=1, win_stride_y=cw, out_w=ow, out_stride_x=sx, out_h=oh, out_stride_y=sy * cw,
                      dst_addr=d, qreg_in=0, qreg_out=0)
        more = (planes, Y.block_bytes, pth * ptw * W) if planes > 1 else ()
        P.dma("DMA_STORE", Y.iaddr(blk, py0, px0), qs, ptw * W, pth, Y.row_bytes, ptw * W, *more, buf=Y.buf_id)

    conv_emit(P, op, lays, tl, consts, tiles=pool_tiles(op, hw, (Y.H, Y.W), tl), store=store)


def _work(op: QConvPool, lays: dict, tl, cfg):
    hw = op.conv_hw(lays[op.inp].shape)

    def pooled(tile):
        runs = pool_runs(op, hw, tile)
        return tile[5], tile[7], sum(oh * ow * (wh * ww + 1) for _, wh, ww, oh, ow, _ in runs), len(runs)
    return conv_work(op, lays, tl, cfg, tiles=pool_tiles(op, hw, (lays[op.out].H, lays[op.out].W), tl),
                     pooled=pooled)


def _layout(op: QConvPool, qg, lays) -> None:
    """The conv's input border (what its windows read); the output is the pool's."""
    x = qg.tensors[op.inp]
    need = border_reach(op, x.shape, (1, 1, *op.conv_hw(x.shape)))
    if any(need):
        lays[op.inp].require_border(op.x_zp, need, op.name)


def _macs(op: QConvPool, qg) -> int:
    oh, ow = op.conv_hw(qg.tensors[op.inp].shape)
    return int(oh * ow * op.weight.size)


def _describe(op: QConvPool, tl) -> dict:
    d = CONV_DEVICE.describe(op, tl)
    d["tiling"].update(pool_th=tl.pool_th, pool_tw=tl.pool_tw)
    return {**d, "fused": [op.conv_name, op.pool.name], "pool": {"kernel": list(op.pool.kernel),
            "strides": list(op.pool.strides), "pads": list(op.pool.pads)}}


@refusal
def _quantize(q, node) -> None:
    raise CompileError(f"node {node.name!r} (ConvPool): made by the back end (fuse_residual) from a quantized "
                       "Conv and MaxPool, never quantized itself")


DEVICE = dataclasses.replace(CONV_DEVICE, qop=QConvPool, golden=_golden, plan_layout=_layout, tile=_tile, emit=_emit,
                             describe=_describe, macs=_macs, work=_work, remap_output=None, conv_shape=_conv_shape)
OPS = (OpDef("ConvPool", quantize=_quantize, device=DEVICE),)
