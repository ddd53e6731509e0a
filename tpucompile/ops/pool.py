"""Pooling: MaxPool, AveragePool and GlobalAveragePool on the vector unit (POOL).

Integer semantics:

* ``QMaxPool``: max over the window of the input padded with -128 (ceil_mode=1's extra bottom /
  right pads too); the output shares the input's scale and zero point (so it needs no
  calibrated range).
* ``QAvgPool``: sum over the window of the input padded with its zero point (n = kh*kw taps,
  pads contribute 0 after the zero-point correction), then
  ``arith.pool_avg(sum, n, x_zp, mult, shift, y_zp)`` with mult/shift =
  ``quantize_multiplier(s_x / (c * s_y))``, c = n (no padding, or ONNX count_include_pad=1) or,
  with count_include_pad=0, the number of window taps inside the image: then the output is cut
  into rectangles of constant c (``avg_regions``: at most 3 row classes x 3 column classes for a
  window no larger than the image), each with its own multiplier (one quant register each).
  ceil_mode=1 is extra bottom / right padding (``common.resolve_ceil_mode``; ``ceil_extra`` in
  the attributes), never counted in c: with count_include_pad=1, c of the last partial windows
  is their number of taps inside the model's padded input. GlobalAveragePool is a QAvgPool whose kernel equals
  the input (H, W); an AveragePool whose kernel equals its input becomes one (canonicalize). A
global pool over a side longer than POOL's window fields (255: a long sequence) runs in two
stages, the first averaging windows of a factor of that side into a tensor of the input's scale
and zero point (one more rounding than the float mean). So does a global pool over a map too
large for the SRAM in one stage (``_one_stage_fits``: on the config the QGraph is quantized
for, or on every shipped config if none; a map that fits keeps its one-stage program): stage 1
averages each row (kh rows when H > 255), all windows of the same W*kh pixels, into partials
of the input's scale and zero point; stage 2 averages the partials. Equal windows make the mean
of the partial means the exact mean before rounding; each partial rounds to nearest (<= s_x/2,
averaged over the H partials: ~0.29 s_x/sqrt(H) rms), then the final requant (<= s_y/2); the
bound s_x/2 + s_y/2 from the exact mean of the int8 input is tested (tests/test_global_pool_tiles.py).

Device: per tile of th x tw outputs x kbg channel blocks, LOAD the input window, one POOL per
channel block, STORE (count_include_pad=0 regions one after another, each from a DDR granule:
``_store_regions``); two slot groups of an input window and an output tile
(``backend.tiling.tile_vector``). The max pool's input buffer has a -128 border.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tpucompile.backend.layout import align_px
from tpucompile.backend.tiling import (
    EltTiling,
    field_max,
    load_bw,
    rough_dma_price,
    tile_conv,
    tile_vector_buffered,
    untileable,
)
from tpucompile.backend.work import elt_work
from tpucompile.ir import Node, Tensor
from tpucompile.ops.common import (
    MAXPOOL_PAD,
    bad_attr,
    input_window,
    lane_wise_channels,
    max_pool_int8,
    no_attrs,
    no_constants,
    no_input_transform,
    no_macs,
    requant_multiplier,
    spatial_attrs,
    window_layout,
    window_tiles,
    windows,
)
from tpucompile.ops.conv import QConv
from tpucompile.ops.conv_pool import DEVICE as CONVPOOL_DEVICE
from tpucompile.ops.conv_pool import fused_conv_pool
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.config import CONFIG_DIR, load_config
from tpusim.arch.errors import CompileError

__all__ = ["QMaxPool", "QAvgPool", "OPS"]

@dataclass(frozen=True)
class QPool(QOp):
    """A pooling window: kernel (kh, kw), strides (sh, sw), pads (top, left, bottom, right)."""
    name: str
    inp: str
    out: str
    kernel: tuple
    strides: tuple
    pads: tuple


@dataclass(frozen=True)
class QMaxPool(QPool):
    """Max pooling, the input padded with -128. Input and output share scale and zero point."""

    def verify(self, qg) -> None:
        ti, to = qg.tensors[self.inp], qg.tensors[self.out]
        if (ti.scale, ti.zero_point) != (to.scale, to.zero_point):
            raise CompileError(f"QMaxPool {self.name!r}: output params differ from input's")


@dataclass(frozen=True)
class QAvgPool(QPool):
    """Average pooling over n = kh*kw taps (no padding): pool_avg(sum, n, x_zp, mult, shift, y_zp).

    mult (int, Q31) / shift (int) = quantize_multiplier(s_x / (n * s_y)).
    """
    mult: int
    shift: int
    x_zp: int
    y_zp: int
    regions: tuple = ()     # count_include_pad=0 with pads: ((oy0, oy1, ox0, ox1, mult, shift), ...)

    @property
    def n(self) -> int:
        return int(self.kernel[0] * self.kernel[1])


# ---------------------------------------------------------------- import, passes, quantization
def _import_max(node, a: dict, opset: int) -> dict:
    if len([o for o in node.output if o]) != 1:
        raise bad_attr(node, "outputs", list(node.output), "unsupported (Indices output)")
    return spatial_attrs(node, a, {"kernel_shape", "strides", "pads", "dilations", "auto_pad",
                                   "ceil_mode", "storage_order"})


def _import_avg(node, a: dict, opset: int) -> dict:
    out = spatial_attrs(node, {k: v for k, v in a.items() if k != "count_include_pad"},
                        {"kernel_shape", "strides", "pads", "auto_pad", "ceil_mode", "dilations"})
    if a.get("count_include_pad", 0) not in (0, 1):
        raise bad_attr(node, "count_include_pad", a["count_include_pad"], "invalid (0 or 1)")
    out["count_include_pad"] = int(a.get("count_include_pad", 0))
    return out


def _axis_classes(n_out: int, n_in: int, k: int, s: int, pad_begin: int) -> list:
    """[(o0, o1, taps inside the image)] runs of output positions along one axis."""
    runs: list = []
    for o in range(n_out):
        lo = o * s - pad_begin
        c = min(lo + k, n_in) - max(lo, 0)
        if runs and runs[-1][2] == c:
            runs[-1] = (runs[-1][0], o + 1, c)
        else:
            runs.append((o, o + 1, c))
    return runs


def avg_regions(name: str, x_hw, y_hw, kernel, strides, pads, s_ratio: float) -> tuple:
    """count_include_pad=0: ((oy0, oy1, ox0, ox1, mult, shift), ...) rectangles of the output with
    a constant number c of window taps inside the image, mult/shift = quantize_multiplier(
    s_ratio / c) (s_ratio = s_x / s_y). CompileError naming the op if a window holds no image tap."""
    rows = _axis_classes(y_hw[0], x_hw[0], kernel[0], strides[0], pads[0])
    cols = _axis_classes(y_hw[1], x_hw[1], kernel[1], strides[1], pads[1])
    if min(c for *_, c in rows + cols) <= 0:
        raise CompileError(f"AveragePool {name!r}: a window lies entirely in the padding {pads}")
    return tuple((r0, r1, c0, c1, *requant_multiplier(name, s_ratio / (rc * cc)))
                 for r0, r1, rc in rows for c0, c1, cc in cols)


def _canonicalize_avg(graph, node, producers) -> list:
    """An AveragePool whose kernel covers the whole input, without padding, is a GlobalAveragePool."""
    shp = graph.tensors[node.inputs[0]].shape
    if tuple(node.attrs["kernel_shape"]) == tuple(shp[2:]) and not any(node.attrs["pads"]):
        return [Node("GlobalAveragePool", node.name, node.inputs, node.outputs)]
    return [node]


def _import_reduce_mean(node, a: dict, opset: int) -> dict:
    out = {"keepdims": 1}
    for k, v in a.items():
        if k == "keepdims" and v in (0, 1):
            out[k] = int(v)
        elif k == "axes" and opset < 18:
            out[k] = tuple(int(x) for x in v)
        elif k == "noop_with_empty_axes" and v == 0:
            pass
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _canonicalize_reduce_mean(graph, node, producers) -> list:
    """ReduceMean over the spatial axes (2, 3) of a 4-D tensor (torch's adaptive_avg_pool2d(1)
    and mean(dim=(2, 3)) exports) is a GlobalAveragePool; with keepdims=0 its (1, C, 1, 1) result
    is viewed as (1, C) (an ``Alias``). Any other axes are refused, naming the node and the axes."""
    x, y = node.inputs[0], node.outputs[0]
    xs = graph.tensors[x].shape
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        c = graph.const(node.inputs[1])
        if c is None:
            raise CompileError(f"node {node.name!r} (ReduceMean): axes {node.inputs[1]!r} is not a constant")
        axes = tuple(int(v) for v in np.asarray(c).reshape(-1))
    if axes is None or len(xs) != 4 or sorted(a % 4 for a in axes) != [2, 3]:
        raise CompileError(f"node {node.name!r} (ReduceMean): axes {list(axes) if axes is not None else 'all'} "
                           f"of a {len(xs)}-D input {x!r} {tuple(xs)} unsupported (only the spatial axes "
                           "[2, 3] of an NCHW tensor: a global average pool)")
    if node.attrs["keepdims"]:
        return [Node("GlobalAveragePool", node.name, [x], [y])]
    y4 = f"{y}__nchw"
    graph.tensors[y4] = Tensor(y4, (xs[0], xs[1], 1, 1), onnx_name=graph.tensors[y].onnx_name or y)
    return [Node("GlobalAveragePool", node.name, [x], [y4]), Node("Alias", f"{node.name}__out", [y4], [y])]


def _quantize_max(q, node) -> None:
    qt = q.input(node)
    out = q.add_tensor(node.outputs[0], qt.scale, qt.zero_point)
    q.add_op(QMaxPool(node.name, qt.name, out.name, tuple(node.attrs["kernel_shape"]),
                      tuple(node.attrs["strides"]), tuple(node.attrs["pads"])))


def _split_window(node, dims: tuple) -> tuple | None:
    """For a global pool over ``dims`` (H, W) with a side longer than POOL's window fields: the
    first stage's window (fh, fw) (each side the largest factor of its length that leaves a
    second-stage side no longer than the field), None if no side needs it. CompileError naming
    the node and the field for a length with no such factor (a prime above the field)."""
    lim = (field_max("POOL", "win_h"), field_max("POOL", "win_w"))
    if all(d <= m for d, m in zip(dims, lim)):
        return None
    first = []
    for d, m, f in zip(dims, lim, ("win_h", "win_w")):
        k = next((k for k in range(min(d, m), 0, -1) if d % k == 0 and d // k <= m), None)
        if k is None:
            raise CompileError(f"node {node.name!r} ({node.op}): a global pool over {d} pixels exceeds POOL's "
                               f"{f} field ({m}) and {d} has no factor that splits it into two windows within it")
        first.append(k)
    return tuple(first)


#: most input pixels of one first-stage window of a row-split global pool (fits two slot groups
#: of the smallest SRAM with column alignment)
ROW_STAGE_MAX_PIXELS = 384


def _one_stage_fits(cfg, h: int, w: int) -> bool:
    """Whether a global pool over (h, w) tiles in one stage on ``cfg`` (its smallest tile: one
    channel block, one output, an h x (w + align_px - 1) window, one slot group), on every
    shipped config when ``cfg`` is None: a map that fits keeps its one-stage program."""
    if cfg is None:
        return all(_one_stage_fits(c, h, w) for c in _shipped_configs())
    return h * (w + align_px(cfg) - 1) + 1 <= cfg.sram_words


@lru_cache(maxsize=None)
def _shipped_configs() -> tuple:
    """Every config of tpusim/configs (a QGraph quantized without a config must compile on each)."""
    return tuple(load_config(p.stem) for p in sorted(CONFIG_DIR.glob("*.yaml")))


def _split_rows(node, dims: tuple) -> tuple:
    """For a global pool over a map (H, W) too large for the SRAM in one stage, W within
    POOL's win_w field: the first stage's window (kh, W), kh the smallest divisor of H leaving
    at most POOL's win_h partials (1 for H <= 255: one partial per row, a prime H included) with
    kh*W <= ROW_STAGE_MAX_PIXELS. Every window has the same kh*W pixels, so the mean of the
    partial means is the mean of the map before rounding (no average-of-averages weighting); the
    more partials, the more their roundings average out. CompileError naming the node if none."""
    h, w = dims
    lim = field_max("POOL", "win_h")
    k = next((k for k in range(1, h + 1) if h % k == 0 and h // k <= lim), None)
    if k is None or k * w > ROW_STAGE_MAX_PIXELS:
        raise CompileError(f"node {node.name!r} ({node.op}): a global pool over {h}x{w} pixels: its {h} rows do not "
                           f"split into at most {lim} equal windows of at most {ROW_STAGE_MAX_PIXELS} pixels")
    return (k, w)


def _quantize_avg(q, node) -> None:
    qt = q.input(node)
    if node.op == "GlobalAveragePool":
        hw = tuple(qt.shape[2:])
        first = _split_window(node, hw)
        if hw[1] <= field_max("POOL", "win_w") and not _one_stage_fits(q.cfg, *(first or hw)):
            first = _split_rows(node, hw)
        if first is not None:
            qt = _first_stage(q, node, qt, first)
        k, st = tuple(qt.shape[2:]), (1, 1)
    else:
        k, st = tuple(node.attrs["kernel_shape"]), tuple(node.attrs["strides"])
    pads = tuple(node.attrs.get("pads", (0, 0, 0, 0)))
    sy, zy = q.out_params(node)
    m, s = requant_multiplier(node.name, qt.scale / (k[0] * k[1] * sy))
    out = q.add_tensor(node.outputs[0], sy, zy)
    regions = ()
    eb, er = node.attrs.get("ceil_extra", (0, 0))
    if any(pads) and not node.attrs.get("count_include_pad", 0):
        regions = avg_regions(node.name, qt.shape[2:], out.shape[2:], k, st,
                              pads, qt.scale / sy)
    elif eb or er:      # count_include_pad=1 counts the model's pads, not ceil_mode's extra ones
        t, l, b, r = pads
        regions = avg_regions(node.name, (qt.shape[2] + t + b - eb, qt.shape[3] + l + r - er), out.shape[2:],
                              k, st, (0, 0, eb, er), qt.scale / sy)
    q.add_op(QAvgPool(node.name, qt.name, out.name, k, st, pads, m, s, qt.zero_point, zy, regions))


def _first_stage(q, node, qt, k: tuple):
    """The partial averages of a global pool over windows ``k`` (stride ``k``), in the input's own
    scale and zero point (an average lies within the range of what it averages)."""
    mid = q.qg.tensors[qt.name].__class__(f"{node.outputs[0]}__partial",
                                         (1, qt.shape[1], qt.shape[2] // k[0], qt.shape[3] // k[1]),
                                         qt.scale, qt.zero_point)
    q.qg.tensors[mid.name] = mid
    m, s = requant_multiplier(node.name, 1.0 / (k[0] * k[1]))
    q.add_op(QAvgPool(f"{node.name}__partial", qt.name, mid.name, k, k, (0, 0, 0, 0), m, s, qt.zero_point,
                      qt.zero_point, ()))
    return mid


# ---------------------------------------------------------------- golden
def _golden_avg(op: QAvgPool, x: np.ndarray) -> np.ndarray:
    sums = np.stack([windows(xn, op.kernel, op.strides, op.pads, op.x_zp).astype(np.int64).sum(axis=(3, 4))
                     for xn in x])
    if not op.regions:
        return arith.pool_avg(sums, op.n, op.x_zp, op.mult, op.shift, op.y_zp)
    y = np.empty(sums.shape, np.int8)
    for oy0, oy1, ox0, ox1, m, s in op.regions:
        y[..., oy0:oy1, ox0:ox1] = arith.pool_avg(sums[..., oy0:oy1, ox0:ox1], op.n, op.x_zp, m, s, op.y_zp)
    return y


# ---------------------------------------------------------------- device lowering
def _layout_max(op: QMaxPool, qg, lays) -> None:
    window_layout(op, qg, lays, MAXPOOL_PAD)


def _layout_avg(op: QAvgPool, qg, lays) -> None:
    window_layout(op, qg, lays, op.x_zp)


def _tile(op, lays: dict, cfg) -> EltTiling:
    """Two slot groups (one if two do not fit: a large window, a global pool) of (kbg blocks of
    an ih x iw window, kbg blocks of th x tw outputs)."""
    X, Y = lays[op.inp], lays[op.out]
    kh, kw = op.kernel
    W, bw = cfg.word_bytes, load_bw(cfg)

    if kh > field_max("POOL", "win_h") or kw > field_max("POOL", "win_w"):
        raise CompileError(f"pool {op.name!r}: window {kh}x{kw} exceeds POOL's win_h / win_w fields "
                           f"({field_max('POOL', 'win_h')} x {field_max('POOL', 'win_w')})")

    def cost(th, tw, ih, iw, kbg, nt, groups):
        load = kbg * ih * iw * W / bw
        est = nt * (load if groups == 2 else load + kbg * th * tw * (kh * kw + 1)) + 60 * nt * (2 + kbg)
        return np.where(groups * kbg * (ih * iw + th * tw) <= cfg.sram_words, est, np.inf)

    tl = tile_vector_buffered(X.nblocks, op.kernel, op.strides, Y.H, Y.W, cfg, cost,
                              lambda t: {"i": t.kbg * t.ih * t.iw, "o": t.kbg * t.th * t.tw})
    if tl is None:
        raise untileable(f"pool {op.name!r}", op.kernel, Y.H, Y.W, cfg)
    return tl


def _store_regions(op, Y, cfg) -> tuple:
    """The averaging regions (ry0, ry1, rx0, rx1, mult, shift) in emission order. A DMA_STORE
    starts on a DDR granule (``align_px`` pixels), so a region whose first column is not on one
    (count_include_pad=0 with column pads, ceil_mode=1's partial last column, on a config with
    words narrower than the granule: 'small') is computed and stored from the granule's first
    column: those few extra columns of the region to its left get this region's divisor, and
    are then overwritten by that region, emitted later (regions in decreasing first column;
    one STORE queue, in order). Regions already on granules keep their order (no change)."""
    regions = getattr(op, "regions", ()) or ()
    ap = align_px(cfg)
    if all((r[2] + Y.pads[1]) % ap == 0 for r in regions):
        return regions
    order = sorted(regions, key=lambda r: -r[2])       # by the first column before widening
    return tuple((r0, r1, c0 - (c0 + Y.pads[1]) % ap, c1, m, sh) for r0, r1, c0, c1, m, sh in order)


def _work(op, lays: dict, tl: EltTiling, cfg):
    """Per tile (of each averaging region): the input window, one POOL per block (taps + 1
    accesses per output), the store."""
    X, Y = lays[op.inp], lays[op.out]
    kh, kw = op.kernel
    ap = align_px(cfg)
    regions = [r[:4] for r in _store_regions(op, Y, cfg)] if isinstance(op, QAvgPool) and op.regions else None

    def window(oy0, th, ox0, tw):
        win = input_window(op, X, oy0, th, ox0, tw, ap)
        return win.nrows, win.ncols
    return elt_work(tl, X.nblocks, Y.H, Y.W, cfg, window=window, regions=regions, vpu_per_output=kh * kw + 1)


def _describe(op, tl: EltTiling) -> dict:
    return dict(kernel=list(op.kernel), strides=list(op.strides), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit_max(P, op: QMaxPool, lays: dict, tl: EltTiling, consts: dict) -> None:
    _emit(P, op, lays, tl, avg=False)


def _emit_avg(P, op: QAvgPool, lays: dict, tl: EltTiling, consts: dict) -> None:
    _emit(P, op, lays, tl, avg=True)


def _emit(P, op, lays: dict, tl: EltTiling, avg: bool) -> None:
    """Per tile: LOAD the input window, one POOL per channel block, STORE."""
    X, Y = lays[op.inp], lays[op.out]
    kh, kw = op.kernel
    sh, sw = op.strides
    _, _, Ho, Wo = Y.shape
    regions = (_store_regions(op, Y, P.cfg) or ((0, Ho, 0, Wo, op.mult, op.shift),)) if avg else ((0, Ho, 0, Wo, 0, 0),)
    slots = {"i": 0, "o": 0}
    for k0, (ry0, ry1, rx0, rx1, mult, shift) in ((k, r) for k in range(0, X.nblocks, tl.kbg) for r in regions):
        kbs = range(k0, min(X.nblocks, k0 + tl.kbg))
        if avg:
            qin = P.qregs.get(0, 0, op.x_zp)
            qout = P.qregs.get(mult, shift, op.y_zp, pinned=(qin,))
        else:
            qin = qout = 0
        for t in window_tiles(P, op, X, Y, tl, k0, len(kbs), (ry0, ry1), (rx0, rx1), slots):
            for src, last, dst in t.blocks:
                P.add("POOL", rs=[(src, last)], ws=[(dst, dst + t.th * t.tw)], mode=int(avg), src_addr=src,
                      win_w=kw, win_h=kh, win_stride_x=1, win_stride_y=t.ncols, out_w=t.tw, out_stride_x=sw,
                      out_h=t.th, out_stride_y=sh * t.ncols, dst_addr=dst, qreg_in=qin, qreg_out=qout)


def _fuse_producer(op: QMaxPool, producer, lays, cfg):
    """A Conv (exactly: not an ActMatMul or a fused one) whose output this max pool alone reads:
    the two fused into one ConvPool (ops/conv_pool.py: the pool on each conv tile in SRAM), if
    the pool's pads and window allow it (``fused_conv_pool``) and, given ``lays`` and ``cfg``,
    the fused tiling tiles and its estimate is at most the conv's and the pool's together (a
    fused tile holds the whole requantized conv tile: on a weight-heavy layer the smaller tiles
    can cost more weight reloads than the pool's DDR pass saves)."""
    fused = fused_conv_pool(producer, op) if type(producer) is QConv else None
    if fused is None or lays is None:
        return fused
    try:
        est = CONVPOOL_DEVICE.tile(fused, lays, cfg).est_cycles
    except CompileError:
        return None
    cout, cin = producer.weight.shape[:2]
    Y = lays[producer.out]
    conv = tile_conv(producer.name, producer.kernel, producer.strides, cin, cout, Y.H, Y.W, cfg,
                     price=rough_dma_price(cfg))        # the fused conv's and the pool's price
    apart = conv.est_cycles + _tile(op, lays, cfg).est_cycles
    return fused if est <= apart else None


MAXPOOL = DeviceOp(QMaxPool, golden=max_pool_int8, input_transform=no_input_transform,
                   remap_channels=lane_wise_channels,
                   plan_layout=_layout_max, constants=no_constants, tile=_tile, emit=_emit_max,
                   describe=_describe, macs=no_macs, work=_work, fuse_producer=_fuse_producer)
AVGPOOL = DeviceOp(QAvgPool, golden=_golden_avg, input_transform=no_input_transform,
                   remap_channels=lane_wise_channels,
                   plan_layout=_layout_avg, constants=no_constants, tile=_tile, emit=_emit_avg,
                   describe=_describe, macs=no_macs, work=_work)
OPS = (
    OpDef("MaxPool", import_node=_import_max, quantize=_quantize_max, calibrated=False, device=MAXPOOL),
    OpDef("AveragePool", import_node=_import_avg, canonicalize=_canonicalize_avg, quantize=_quantize_avg,
          device=AVGPOOL),
    OpDef("GlobalAveragePool", import_node=no_attrs, quantize=_quantize_avg, device=AVGPOOL),
    OpDef("ReduceMean", import_node=_import_reduce_mean, canonicalize=_canonicalize_reduce_mean),
)
