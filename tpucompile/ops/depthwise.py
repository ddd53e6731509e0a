"""Depthwise Conv (ONNX Conv with group = C = M: one kh x kw filter per channel) on the vector
unit (DWCONV), not on the systolic array: as a dense conv its weight would be all zeros but the
diagonal (a depthwise layer would use 1/C of the array, MobileNet's most numerous layers).

Integer semantics (``QDwConv``; TFLite int8 ``DepthwiseConv`` with depth multiplier 1, per-channel
weight scales, weight zero point 0): ``acc[c, oy, ox] = sum over (ky, kx) of w[c, ky, kx] *
(xp[c, oy*sh+ky, ox*sw+kx] - x_zp)`` in int32 (``arith.depthwise_acc``), ``xp`` the input padded
with ``x_zp`` (padded taps add 0), then ``arith.requant_conv(acc, bias, mult, shift, y_zp, relu)``.
``bias = round_half_even(b / (s_x * s_w[c]))`` (the zero point is subtracted by the device, not
folded into the bias), ``mult``/``shift`` = ``quantize_multiplier(s_x * s_w[c] / s_y)``: the same
integers as the dense QConv of the same layer, so the outputs are bit-identical to it.

Device: lane = channel, as POOL. Per group of kbg channel blocks: LOAD their weight words (one
word per tap: lane c = the weight of channel c) and requant tables; per output tile: LOAD the
input window (border ``x_zp``), one DWCONV per block, STORE. A DWCONV reads a source tap and its
weight word per tap (2 SRAM accesses per tap and output word): W lanes do W multiply-accumulates
every two cycles, W/2 MACs per cycle; the systolic array is left free (docs/architecture.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.layout import align_px, ceil_div, ddr_granule, param_tables, requant_table_stride, round_up
from tpucompile.backend.tiling import EltTiling, field_max, load_bw, tile_vector_buffered, untileable
from tpucompile.backend.work import elt_work, tile_sizes
from tpucompile.ops.common import (
    QFilter,
    input_window,
    no_input_transform,
    requant_multiplier,
    weight_params,
    window_layout,
    window_tiles,
    windows,
)
from tpucompile.ops.registry import DeviceOp, OpDef
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["QDwConv", "dwconv_qop", "is_depthwise", "OPS"]


@dataclass(frozen=True)
class QDwConv(QFilter):
    """Depthwise convolution (int8 -> int32 -> int8), lane-wise.

    weight: int8 [C, kh, kw] (per-channel symmetric, zero point 0). bias: int32 [C] (no
    zero-point correction). mult: int32 [C] Q31 multipliers, shift: int32 [C] (positive = left).
    strides (sh, sw); pads (top, left, bottom, right) in elements, padding value x_zp; relu:
    clamp low end at y_zp; x_zp, y_zp: zero points of inp and out.
    """

    def __post_init__(self):
        self.check_filter(3, "[C, kh, kw]")

    @property
    def kernel(self) -> tuple:
        return tuple(self.weight.shape[1:])

    def verify(self, qg) -> None:
        if self.x_zp != qg.tensors[self.inp].zero_point or self.y_zp != qg.tensors[self.out].zero_point:
            raise CompileError(f"QDwConv {self.name!r}: zero points disagree with its tensors")
        c = qg.tensors[self.inp].shape[1]
        if self.weight.shape[0] != c or qg.tensors[self.out].shape[1] != c:
            raise CompileError(f"QDwConv {self.name!r}: {self.weight.shape[0]} filters for {c} input channels")


def is_depthwise(w: np.ndarray, x_shape: tuple, group: int, dil: tuple) -> bool:
    """A Conv of weight ``w`` (M, C/group, kH, kW) on an NCHW input of ``x_shape`` is depthwise
    with depth multiplier 1 and no dilation: group = C = M and one input channel per filter."""
    return (len(x_shape) == 4 and w.ndim == 4 and group == x_shape[1] == w.shape[0] > 1 and w.shape[1] == 1
            and tuple(dil) == (1, 1))


# ---------------------------------------------------------------- quantization
def dwconv_qop(name: str, qt, w: np.ndarray, b: np.ndarray, out, strides, pads, relu: bool,
               weight_scale: np.ndarray | None = None) -> QDwConv:
    """The QDwConv of float weight ``w`` [C, 1, kh, kw] and bias ``b`` [C] from int8 input ``qt``
    to ``out`` (QTensors): per-channel symmetric int8 weights (``weight_params``; with
    ``weight_scale``, a pre-quantized model's), bias in the accumulator's scale; CompileError
    naming ``name`` if the bias does not fit int32 or a multiplier is unsupported."""
    qw, sw = weight_params(w, weight_scale)
    bq = np.round(b.astype(np.float64) / (qt.scale * sw))
    if np.abs(bq).max(initial=0) > arith.INT32_MAX:
        raise CompileError(f"node {name!r} (Conv, depthwise): bias {bq[np.argmax(np.abs(bq))]:.0f} "
                           "does not fit int32")
    ms = [requant_multiplier(name, qt.scale * s / out.scale) for s in sw]
    return QDwConv(name, qt.name, out.name, np.ascontiguousarray(qw[:, 0]), bq.astype(np.int32),
                   np.array([m for m, _ in ms], np.int32), np.array([s for _, s in ms], np.int32),
                   tuple(strides), tuple(pads), relu, qt.zero_point, out.zero_point)


def _quantize(q, node) -> None:
    qt = q.input(node)
    w = q.const(node.inputs[1])
    b = q.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(w.shape[0])
    sy, zy = q.out_params(node)
    out = q.add_tensor(node.outputs[0], sy, zy)
    q.add_op(dwconv_qop(node.name, qt, w, b, out, tuple(node.attrs["strides"]), tuple(node.attrs["pads"]),
                        bool(node.attrs.get("relu")), q.g.tensors[node.inputs[1]].weight_scale))


# ---------------------------------------------------------------- golden
def dwconv_int8(op: QDwConv, x: np.ndarray) -> np.ndarray:
    """QDwConv on int8 [N, C, H, W] -> int8 [N, C, OH, OW]: the windows of the input padded with
    x_zp, ``arith.depthwise_acc`` per channel, ``arith.requant_conv``."""
    c, kh, kw = op.weight.shape
    wts = op.weight.reshape(c, kh * kw).T                       # [taps, C]
    outs = []
    for xn in x:
        win = windows(xn, op.kernel, op.strides, op.pads, op.x_zp)     # [C, OH, OW, kh, kw]
        _, oh, ow = win.shape[:3]
        taps = win.reshape(c, oh * ow, kh * kw).transpose(1, 2, 0)     # [OH*OW, taps, C]
        acc = arith.depthwise_acc(taps, wts, op.x_zp)
        y = arith.requant_conv(acc, op.bias, op.mult, op.shift, op.y_zp, op.relu)
        outs.append(y.T.reshape(c, oh, ow))
    return np.stack(outs)


# ---------------------------------------------------------------- device lowering
def _remap_channels(op: QDwConv, maps: dict, blk: int):
    """Lane-wise: on an input with a channel map, the filters, biases and multipliers widen to its
    lanes (gap lanes: zero weight and multiplier, so they hold y_zp) and the output has the map."""
    m = maps.get(op.inp)
    if m is None:
        return op, None
    return dataclasses.replace(op, weight=m.widen(op.weight, 0), bias=m.widen(op.bias, 0),
                               mult=m.widen(op.mult, 0), shift=m.widen(op.shift, 0)), m


def _layout(op: QDwConv, qg, lays) -> None:
    window_layout(op, qg, lays, op.x_zp)


def weight_stride(op: QDwConv, cfg) -> int:
    """DDR bytes from one channel block's weight words to the next (padded to the granule)."""
    return round_up(op.kernel[0] * op.kernel[1] * cfg.word_bytes, ddr_granule(cfg))


def _constants(op: QDwConv, cfg) -> dict:
    """weights: per channel block of W channels, one word per tap (ky outer, kx inner), lane c =
    the weight of channel block*W + c (zero beyond C), each block ``weight_stride`` bytes;
    requant: the per-block tables (``param_tables``)."""
    W = cfg.word_bytes
    c, kh, kw = op.weight.shape
    nb = ceil_div(c, W)
    w = np.zeros((nb * W, kh * kw), np.int8)
    w[:c] = op.weight.reshape(c, kh * kw)
    blocks = w.reshape(nb, W, kh * kw).transpose(0, 2, 1).reshape(nb, -1)     # [nb][tap][lane]
    stride = weight_stride(op, cfg)
    raw = np.zeros((nb, stride), np.int8)
    raw[:, :blocks.shape[1]] = blocks
    return {"weights": raw.tobytes(), "requant": param_tables(op.bias, op.mult, op.shift, cfg, depthwise=True)}


def _tile(op: QDwConv, lays: dict, cfg) -> EltTiling:
    """Two slot groups (one if two do not fit: a large window) of (kbg blocks of an ih x iw
    window, kbg blocks of th x tw outputs, kbg blocks of weight words and of requant tables)."""
    X, Y = lays[op.inp], lays[op.out]
    kh, kw = op.kernel
    taps, pw = kh * kw, cfg.dw_param_words
    W, bw = cfg.word_bytes, load_bw(cfg)

    def cost(th, tw, ih, iw, kbg, nt, groups):
        fits = groups * kbg * (ih * iw + th * tw + taps + pw) <= cfg.sram_words
        if kh > field_max("DWCONV", "win_h") or kw > field_max("DWCONV", "win_w"):
            fits = False
        load, compute = kbg * ih * iw * W / bw, kbg * (pw + th * tw * (2 * taps + 1))
        est = nt * (np.maximum(load, compute) if groups == 2 else load + compute) + 60 * nt * (2 + kbg)
        return np.where(fits, est, np.inf)

    tl = tile_vector_buffered(X.nblocks, op.kernel, op.strides, Y.H, Y.W, cfg, cost,
                              lambda t: {"i": t.kbg * t.ih * t.iw, "o": t.kbg * t.th * t.tw, "w": t.kbg * taps,
                                         "p": t.kbg * pw})
    if tl is None:
        raise untileable(f"depthwise conv {op.name!r}", op.kernel, Y.H, Y.W, cfg)
    return tl


def _emit(P, op: QDwConv, lays: dict, tl: EltTiling, consts: dict) -> None:
    """Per group of kbg channel blocks: LOAD weights and tables; per tile: LOAD the input window,
    one DWCONV per block, STORE."""
    cfg = P.cfg
    X, Y = lays[op.inp], lays[op.out]
    W, pw = cfg.word_bytes, cfg.dw_param_words
    kh, kw = op.kernel
    sh, sw = op.strides
    taps = kh * kw
    _, _, Ho, Wo = Y.shape
    reg = tl.regions
    wstride, pstride = weight_stride(op, cfg), requant_table_stride(cfg, pw)
    qin = P.qregs.get(0, 0, op.x_zp)
    qout = P.qregs.get(0, 0, op.y_zp, pinned=(qin,))
    slots, cslot = {"i": 0, "o": 0}, 0
    for k0 in range(0, X.nblocks, tl.kbg):
        kbs = range(k0, min(X.nblocks, k0 + tl.kbg))
        wb, pb = reg["w"][cslot], reg["p"][cslot]
        cslot ^= 1
        P.dma("DMA_LOAD", consts["weights"] + k0 * wstride, wb, taps * W, len(kbs), wstride, taps * W)
        P.dma("DMA_LOAD", consts["requant"] + k0 * pstride, pb, pw * W, len(kbs), pstride, pw * W)
        for t in window_tiles(P, op, X, Y, tl, k0, len(kbs), (0, Ho), (0, Wo), slots):
            for j, (src, last, dst) in enumerate(t.blocks):
                wt, ps = wb + j * taps, pb + j * pw
                P.add("DWCONV", rs=[(src, last), (wt, wt + taps), (ps, ps + pw)], ws=[(dst, dst + t.th * t.tw)],
                      relu=int(op.relu), src_addr=src, win_w=kw, win_h=kh, win_stride_x=1,
                      win_stride_y=t.ncols, out_w=t.tw, out_stride_x=sw, out_h=t.th, out_stride_y=sh * t.ncols,
                      dst_addr=dst, qreg_in=qin, qreg_out=qout, wt_addr=wt, param_addr=ps)


def _work(op: QDwConv, lays: dict, tl: EltTiling, cfg):
    """Per group of kbg blocks its weights and tables, per tile the window, one DWCONV per block
    (the table, then 2 accesses per tap and one write per output), the store."""
    X, Y = lays[op.inp], lays[op.out]
    kh, kw = op.kernel
    W, bb, pw = cfg.word_bytes, cfg.dma_burst_bytes, cfg.dw_param_words
    ap = align_px(cfg)

    def window(oy0, th, ox0, tw):
        win = input_window(op, X, oy0, th, ox0, tw, ap)
        return win.nrows, win.ncols
    w = elt_work(tl, X.nblocks, Y.H, Y.W, cfg, window=window, vpu_per_output=2 * kh * kw + 1, vpu_per_block=pw)
    for nk, groups in tile_sizes(X.nblocks, tl.kbg):
        w.load(groups, kh * kw * W, bb, runs=nk)
        w.load(groups, pw * W, bb, runs=nk)
    return w


def _describe(op: QDwConv, tl: EltTiling) -> dict:
    return dict(kernel=list(op.kernel), strides=list(op.strides), channels=int(op.weight.shape[0]),
                relu=bool(op.relu), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg,
                                            "est_cycles": int(tl.est_cycles)})


def _macs(op: QDwConv, qg) -> int:
    y = qg.tensors[op.out]
    return int(y.shape[2] * y.shape[3] * op.weight.size)


DEVICE = DeviceOp(QDwConv, golden=dwconv_int8, input_transform=no_input_transform,
                  remap_channels=_remap_channels, plan_layout=_layout, constants=_constants, tile=_tile,
                  emit=_emit, describe=_describe, macs=_macs, work=_work)
#: DepthwiseConv: the IR op Conv's canonicalize makes of a depthwise Conv (after fold_affine has
#: folded BatchNormalization and scales into its weights); a Relu / Clip(0, x) fuses into it
OPS = (OpDef("DepthwiseConv", fuses_relu=True, quantize=_quantize, device=DEVICE, layer=True),)
