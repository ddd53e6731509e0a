"""Resize / Upsample, nearest neighbour, by integer factors (FPN / YOLO necks, U-Nets).

ONNX Resize (opsets 10-19) and Upsample (7-9) with ``mode`` nearest: output pixel (y, x) takes
input pixel (src_y[y], src_x[x]), each index from the output coordinate by
``coordinate_transformation_mode`` (half_pixel, asymmetric, align_corners, pytorch_half_pixel,
tf_half_pixel_for_nn, half_pixel_symmetric) and ``nearest_mode`` (round_prefer_floor,
round_prefer_ceil, floor, ceil), clamped to the input (``nearest_indices``, the ONNX spec's
formulas). The device supports exactly the maps ``src = out // s`` for an integer factor s per
axis (what torch's ``interpolate(scale_factor=2)`` and the half_pixel default give for integer
factors); any other map (a fractional factor, align_corners, linear / cubic modes) is refused
naming the node. The scale of N and C must be 1.

Integer semantics (``QResize``): a copy, so the output has the input's scale and zero point
(no calibration). Device: per tile of th x tw input pixels x kbg channel blocks: LOAD, one POOL
(max, 1x1 window, ``out_stride_x = 0``) that writes each pixel ``sw`` times (output "rows" are the
input pixels, output "columns" the sw copies), then per channel block one DMA_STORE whose runs
repeat each widened row ``sh`` times (``sram_stride1 = 0``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import (
    EltTiling,
    elt_tiles,
    field_max,
    load_bw,
    place_slot_groups,
    tile_vector,
    untileable,
)
from tpucompile.ops.common import bad_attr, lane_wise_channels, no_constants, no_input_transform, no_macs
from tpucompile.ops.depthwise import dwconv_qop
from tpucompile.ops.pad import edge_pad
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.spatial_slice import QSpatialSlice
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError

__all__ = ["QResize", "OPS", "nearest_indices"]

_COORD = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn",
          "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
#: attributes that do not change a nearest resize
_IGNORED = ("cubic_coeff_a", "exclude_outside", "extrapolation_value", "antialias")


@dataclass(frozen=True)
class QResize(QOp):
    """Nearest-neighbour upsampling by integer factors ``factors`` = (sh, sw): out[y][x] =
    in[y // sh][x // sw]."""
    name: str
    inp: str
    out: str
    factors: tuple


def nearest_indices(n_in: int, n_out: int, scale: float, coord: str, nearest: str) -> np.ndarray:
    """Source index of each of ``n_out`` outputs of one axis (ONNX Resize, nearest)."""
    x = np.arange(n_out, dtype=np.float64)
    if coord == "asymmetric":
        xo = x / scale
    elif coord == "align_corners":
        xo = x * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    elif coord == "pytorch_half_pixel":
        xo = (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    elif coord == "tf_half_pixel_for_nn":
        xo = (x + 0.5) / scale
    elif coord == "half_pixel_symmetric":
        adj = n_out / (scale * n_in)
        xo = (n_in / 2) * (1 - adj) + (x + 0.5) / scale - 0.5
    else:                                                        # half_pixel
        xo = (x + 0.5) / scale - 0.5
    if nearest == "floor":
        idx = np.floor(xo)
    elif nearest == "ceil":
        idx = np.ceil(xo)
    elif nearest == "round_prefer_ceil":
        idx = np.floor(xo + 0.5)
    else:                                                        # round_prefer_floor
        idx = np.ceil(xo - 0.5)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _import(node, a: dict, opset: int) -> dict:
    out = {"coord": "asymmetric" if node.op_type == "Upsample" or opset < 11 else "half_pixel",
           "nearest": "round_prefer_floor" if node.op_type == "Resize" and opset >= 11 else "floor"}
    for k, v in a.items():
        v = v.decode() if isinstance(v, bytes) else v
        if k == "mode":
            if v not in ("nearest", "linear", "bilinear"):
                raise bad_attr(node, k, v, "unsupported (only 'nearest' and 'linear' map onto the device)")
            out["mode"] = "linear" if v == "bilinear" else v
        elif k == "coordinate_transformation_mode":
            if v not in _COORD:
                raise bad_attr(node, k, v, f"is not one of {', '.join(_COORD)}")
            out["coord"] = v
        elif k == "nearest_mode":
            if v not in _NEAREST:
                raise bad_attr(node, k, v, f"is not one of {', '.join(_NEAREST)}")
            out["nearest"] = v
        elif k in ("scales", "height_scale", "width_scale"):     # Upsample opset 7 / 1
            out[k] = v
        elif k == "keep_aspect_ratio_policy":
            if v != "stretch":
                raise bad_attr(node, k, v, "is not supported (only the default 'stretch' with explicit scales)")
        elif k == "axes":
            raise bad_attr(node, k, v, "is not supported")
        elif k not in _IGNORED:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _scales(q, node, x_shape, y_shape) -> tuple:
    """Per-axis scale factors of the node: the constant scales input (or attribute), else out / in."""
    cands = []
    if "scales" in node.attrs:
        cands.append(np.asarray(node.attrs["scales"], np.float64))
    for i in node.inputs[1:]:
        c = q.const(i) if i else None
        if c is not None and np.asarray(c).size == len(x_shape) and np.asarray(c).dtype.kind == "f":
            cands.append(np.asarray(c, np.float64).reshape(-1))
    if cands:
        return tuple(float(v) for v in cands[-1])
    return tuple(o / i for o, i in zip(y_shape, x_shape))


def _quantize(q, node) -> None:
    x = q.input(node)
    y_shape = tuple(q.g.tensors[node.outputs[0]].shape)
    where = f"node {node.name!r} ({node.op})"
    if len(x.shape) != 4 or len(y_shape) != 4:
        raise CompileError(f"{where}: input {x.shape} -> output {y_shape}: only NCHW resizes are supported")
    scales = _scales(q, node, x.shape, y_shape)
    if y_shape[:2] != x.shape[:2] or scales[0] != 1 or scales[1] != 1:
        raise CompileError(f"{where}: scales {list(scales)} resize N or C; only H and W may change")
    if node.attrs.get("mode") == "linear":
        _bilinear_x2(q, node, x, y_shape, where)
        return
    factors = []
    for axis in (2, 3):
        n_in, n_out = x.shape[axis], y_shape[axis]
        f = n_out // n_in
        idx = nearest_indices(n_in, n_out, scales[axis], node.attrs["coord"], node.attrs["nearest"])
        if f < 1 or n_out != f * n_in or not np.array_equal(idx, np.arange(n_out) // f):
            raise CompileError(f"{where}: axis {axis} {n_in} -> {n_out} (scale {scales[axis]:g}, "
                               f"{node.attrs['coord']}, {node.attrs['nearest']}) is not an integer-factor "
                               "nearest upsampling (out[i] = in[i // s]), the only resize the device does")
        factors.append(f)
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=y_shape)
    q.add_op(QResize(node.name, x.name, out.name, tuple(factors)))


#: coordinate modes whose linear x2 upsampling is the [1, 2, 1] / 4 blur of the nearest one
_BLUR_COORDS = ("half_pixel", "pytorch_half_pixel")


def _bilinear_x2(q, node, x, y_shape: tuple, where: str) -> None:
    """Linear Resize by 2 on H and W with half-pixel centres (torch's ``interpolate(scale_factor=2,
    mode='bilinear')``, align_corners False): ONNX's ``out[2i] = (in[i-1] + 3 in[i]) / 4``, ``out[2i+1]
    = (3 in[i] + in[i+1]) / 4`` per axis, indices clamped to the input, is exactly the nearest x2
    upsampling u of x with its edge pixels repeated once more, blurred by the separable kernel
    [1, 2, 1] / 4 (at an even output 2i the taps are u[2i-1] = in[i-1], u[2i] = u[2i+1] = in[i];
    at 2i+1, u[2i] = u[2i+1] = in[i], u[2i+2] = in[i+1]). Four device ops, all copies but the last:
    QEdgePad by 1 (with its last-column copy), QResize nearest x2, a QSpatialSlice dropping the
    outer row and column, a 3x3 QDwConv with integer weights 1 2 1 / 2 4 2 / 1 2 1 at scale 1/16
    (exact) and multiplier 1/16: one rounding, ``floor(sum / 16 + 1/2)``-like (gemmlowp's), on the
    input's grid (no calibration: a bilinear value lies between its inputs)."""
    h, w = x.shape[2:]
    coord = node.attrs["coord"]
    if tuple(y_shape[2:]) != (2 * h, 2 * w) or coord not in _BLUR_COORDS:
        raise CompileError(f"{where}: linear resize {x.shape} -> {y_shape} ({coord}) is unsupported: only x2 on "
                           f"both H and W with {' or '.join(_BLUR_COORDS)} coordinates maps onto the device")
    y = node.outputs[0]
    e = edge_pad(q, f"{node.name}__edge", x, f"{y}__edge", (1, 1, 1, 1))
    u = q.add_tensor(f"{y}__nearest", x.scale, x.zero_point, shape=(1, x.shape[1], 2 * h + 4, 2 * w + 4))
    q.add_op(QResize(f"{node.name}__nearest", e.name, u.name, (2, 2)))
    c = q.add_tensor(f"{y}__crop", x.scale, x.zero_point, shape=(1, x.shape[1], 2 * h + 2, 2 * w + 2))
    q.add_op(QSpatialSlice(f"{node.name}__crop", u.name, c.name, (1, 1, 2 * h + 2), (1, 1, 2 * w + 2)))
    out = q.add_tensor(y, x.scale, x.zero_point, shape=tuple(y_shape))
    k = np.outer([1, 2, 1], [1, 2, 1]).astype(np.float32) / 16
    ch = x.shape[1]
    q.add_op(dwconv_qop(node.name, c, np.broadcast_to(k, (ch, 1, 3, 3)).copy(), np.zeros(ch), out, (1, 1),
                        (0, 0, 0, 0), False, np.full(ch, 1 / 16)))


# ---------------------------------------------------------------- golden
def _golden(op: QResize, x: np.ndarray) -> np.ndarray:
    sh, sw = op.factors
    return np.repeat(np.repeat(x, sh, axis=2), sw, axis=3)


# ---------------------------------------------------------------- device lowering
def _layout(op: QResize, qg, lays) -> None:
    x, y = qg.tensors[op.inp].shape, qg.tensors[op.out].shape
    if (y[2], y[3]) != (x[2] * op.factors[0], x[3] * op.factors[1]):
        raise CompileError(f"QResize {op.name!r}: output {y} is not the input {x} times {op.factors}")


def _tile(op: QResize, lays: dict, cfg) -> EltTiling:
    """Two slot groups of (kbg blocks of th x tw input pixels, their th x tw*sw widened rows),
    th, tw in input pixels."""
    X = lays[op.inp]
    W, bw = cfg.word_bytes, load_bw(cfg)
    sh, sw = op.factors

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        fits = (n <= field_max("POOL", "out_h")) & (2 * n * (1 + sw) <= cfg.sram_words) & (sw <= field_max("POOL", "out_w"))
        return np.where(fits, nt * n * W * (1 + sw * sh) / bw + 60 * nt * (2 + kbg), np.inf)

    tl = tile_vector(X.nblocks, (1, 1), (1, 1), X.H, X.W, cfg, cost)
    if tl is None:
        raise untileable(f"QResize {op.name!r}", (1, 1), X.H, X.W, cfg)
    n = tl.kbg * tl.th * tl.tw
    place_slot_groups(tl, {"i": n, "o": n * sw}, cfg)
    return tl


def _describe(op: QResize, tl: EltTiling) -> dict:
    return dict(factors=list(op.factors), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit(P, op: QResize, lays: dict, tl: EltTiling, consts: dict) -> None:
    """Per tile: LOAD the input pixels, one POOL writing each pixel sw times, per channel block a
    DMA_STORE writing each widened row to sh output rows."""
    X, Y = lays[op.inp], lays[op.out]
    W = P.cfg.word_bytes
    sh, sw = op.factors
    _, _, Hi, Wi = X.shape
    reg = tl.regions
    for t in elt_tiles(X.nblocks, Hi, Wi, tl):
        si, so = reg["i"][t.slot], reg["o"][t.slot]
        n = t.words
        P.tile_dma("DMA_LOAD", X, si, t)
        P.add("POOL", rs=[(si, si + n)], ws=[(so, so + n * sw)], mode=0, src_addr=si, win_w=1, win_h=1,
              win_stride_x=1, win_stride_y=1, out_w=sw, out_stride_x=0, out_h=n, out_stride_y=1, dst_addr=so)
        row = t.tw * sw
        for j in range(t.nk):
            P.dma("DMA_STORE", Y.iaddr(t.k0 + j, t.oy0 * sh, t.ox0 * sw), so + j * t.th * row, row * W,
                  sh, Y.row_bytes, 0, t.th, sh * Y.row_bytes, row * W, buf=Y.buf_id)


DEVICE = DeviceOp(QResize, golden=_golden, input_transform=no_input_transform, remap_channels=lane_wise_channels,
                  plan_layout=_layout, constants=no_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs)
OPS = (OpDef("Resize", import_node=_import, quantize=_quantize, calibrated=False, device=DEVICE),
       OpDef("Upsample", import_node=_import, quantize=_quantize, calibrated=False, device=DEVICE))
