"""Helpers shared by the op modules: ONNX attribute checks, window geometry, quantization
parameters, the golden model's windows and the border an op reads.

Window arithmetic (ONNX Conv/MaxPool/AveragePool, dilation 1, ceil_mode 0): with pads
(top, left, bottom, right), ``OH = (H + top + bottom - kh) // sh + 1`` and likewise OW. A pool's
ceil_mode=1 becomes extra bottom / right pads at import (``resolve_ceil_mode``), so the formula
holds after it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tpucompile.backend.layout import align_px, window_rows
from tpucompile.qgraph import QOp, check_array
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["bad_attr", "no_attrs", "spatial_attrs", "per_channel", "affine_of_constant", "AUTO_PADS", "resolve_auto_pad", "resolve_ceil_mode", "one_line", "is_fc_view", "conv_out_hw", "border_reach",
           "windows", "activation_params", "weight_params", "requant_multiplier", "window_layout",
           "no_input_transform", "no_constants", "no_macs", "lane_wise_channels"]


# ---------------------------------------------------------------- ONNX attributes (import hooks)
def bad_attr(node, attr, value, why="unsupported") -> CompileError:
    """The importer's refusal of one attribute value, naming node and op."""
    return CompileError(f"node {node.name!r} ({node.op_type}): attribute {attr}={value!r} {why}")


def one_line(text) -> str:
    """An ONNX/protobuf message on one line."""
    return " ".join(line.strip() for line in str(text).strip().splitlines() if line.strip())


def no_attrs(node, a: dict, opset: int) -> dict:
    """Import hook of an op that takes no attributes: refuses any."""
    for k, v in a.items():
        raise bad_attr(node, k, v, "is not supported")
    return {}


def spatial_attrs(node, a: dict, allowed: set, dilations_ok: bool = False) -> dict:
    """Common Conv/pool attribute checks; returns kernel_shape, strides (sh, sw) and pads
    (top, left, bottom, right) (ONNX 2-D pads are [x1_begin, x2_begin, x1_end, x2_end]), and
    ``dilations`` (dh, dw) when not 1 (only if ``dilations_ok``; refused otherwise)."""
    for k, v in a.items():
        if k not in allowed:
            raise bad_attr(node, k, v, "is not supported")
    dil = tuple(int(d) for d in a.get("dilations", [1, 1]))
    if len(dil) != 2 or min(dil) < 1:
        raise bad_attr(node, "dilations", list(dil), "invalid (2 values >= 1 expected)")
    auto_pad = a.get("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        raise bad_attr(node, "auto_pad", auto_pad, f"invalid (ONNX allows {', '.join(AUTO_PADS)})")
    if auto_pad != "NOTSET" and "pads" in a:
        raise bad_attr(node, "pads", list(a["pads"]), f"given with auto_pad={auto_pad} (ONNX: pads must "
                       "not be used with auto_pad)")
    if dil != (1, 1) and not dilations_ok:
        raise bad_attr(node, "dilations", list(dil), "unsupported (only 1)")
    if a.get("ceil_mode", 0) not in (0, 1):
        raise bad_attr(node, "ceil_mode", a["ceil_mode"], "invalid (0 or 1)")
    if a.get("storage_order", 0) != 0:
        raise bad_attr(node, "storage_order", a["storage_order"], "unsupported (only 0)")
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) != 2:
        raise bad_attr(node, "kernel_shape", list(ks), "unsupported (only 2-D)")
    strides = tuple(a.get("strides", [1, 1]))
    pads = a.get("pads", [0, 0, 0, 0])
    if len(pads) != 4 or len(strides) != 2 or min(pads) < 0 or min(strides) < 1:
        raise bad_attr(node, "pads/strides", (list(pads), list(strides)), "invalid")
    out = {"kernel_shape": tuple(ks) if ks is not None else None, "strides": strides,
           "pads": tuple(int(p) for p in pads)}
    if auto_pad != "NOTSET":
        out["auto_pad"] = auto_pad          # resolved into pads once shapes are known
    if dil != (1, 1):
        out["dilations"] = dil
    if a.get("ceil_mode", 0) and auto_pad == "NOTSET":
        out["ceil_mode"] = 1                # resolved into end pads once shapes are known
    return out


def resolve_ceil_mode(node, tensors) -> dict:
    """``node.attrs`` (a pool with ``ceil_mode`` 1, no auto_pad) with ceil_mode replaced by extra
    bottom / right pads ``ceil_extra`` (rows, columns) added to ``pads``. ONNX: per axis
    ``O = ceil((I + begin + end - k) / s) + 1``, less one if that last window would start at or
    after ``I + begin`` (in the end padding); the extra pad is ``(O - 1) * s + k - (I + begin + end)``
    (0 where ceil_mode changes nothing). A max pool pads with its lowest value, so the extra pad
    changes nothing else; an average pool never counts it in a window's divisor (ops/pool.py).
    CompileError naming the node if the inferred output shape differs from the spec's (ONNX shape
    inference keeps a last window that would start in the end pads, onnxruntime drops it)."""
    a = dict(node.attrs)
    a.pop("ceil_mode")
    kernel, strides, pads = a["kernel_shape"], a["strides"], a["pads"]
    ins, outs = tensors[node.inputs[0]].shape[2:], tensors[node.outputs[0]].shape[2:]
    extra, want = [], []
    for ax in (0, 1):
        i, k, st, b, e = ins[ax], kernel[ax], strides[ax], pads[ax], pads[ax + 2]
        o = -(-(i + b + e - k) // st) + 1
        if (o - 1) * st >= i + b:
            o -= 1
        want.append(o)
        extra.append(max(0, (o - 1) * st + k - (i + b + e)))
    if tuple(want) != tuple(outs):
        raise CompileError(f"node {node.name!r} ({node.op}): ceil_mode=1 output {node.outputs[0]!r} is "
                           f"{tuple(want)} (ONNX spec, onnxruntime: a last window that would start in the end "
                           f"pads {tuple(pads[2:])} is dropped) but {tuple(outs)} after ONNX shape inference; "
                           "unsupported (use ceil_mode=0 or smaller end pads)")
    a["pads"] = (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])
    a["ceil_extra"] = tuple(extra)
    return a


#: values of the ONNX ``auto_pad`` attribute (Conv, MaxPool, AveragePool)
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def resolve_auto_pad(node, tensors) -> dict:
    """``node.attrs`` with ``auto_pad`` replaced by explicit pads (top, left, bottom, right), from
    the inferred input and output shapes (ONNX Conv/pool spec): VALID pads nothing; SAME_* pads
    ``total = max(0, (O - 1) * s + (k - 1) * d + 1 - I)`` per axis (``d`` the dilation), the odd
    element at the end for SAME_UPPER and at the beginning for SAME_LOWER. The kernel of a Conv
    without kernel_shape is its weight's (dims 2 and 3)."""
    a = dict(node.attrs)
    mode = a.pop("auto_pad")
    dil = a.get("dilations", (1, 1))
    kernel = [(k - 1) * d + 1 for k, d in zip(a["kernel_shape"] or tensors[node.inputs[1]].shape[2:], dil)]
    (h, w), (oh, ow) = tensors[node.inputs[0]].shape[2:], tensors[node.outputs[0]].shape[2:]
    if mode == "VALID":
        a["pads"] = (0, 0, 0, 0)
        return a
    begin, end = [], []
    for i, o, k, s in ((h, oh, kernel[0], a["strides"][0]), (w, ow, kernel[1], a["strides"][1])):
        total = max(0, (o - 1) * s + k - i)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    a["pads"] = (begin[0], begin[1], end[0], end[1])
    return a


def per_channel(c, cout: int, rank: int = 4):
    """A constant operand of an element-wise op on a (1, cout, H, W) tensor as float64 [cout], if
    it is a scalar or varies along the channel axis only (numpy broadcasting: shapes (), (1,),
    (cout, 1, 1), (1, cout, 1, 1)); None otherwise (a (cout,) vector broadcasts along W). On a
    rank-2 (1, cout) tensor (``rank`` 2): shapes (), (1,), (cout,), (1, cout)."""
    c = np.asarray(c, np.float64)
    if c.size == 1:
        return np.full(cout, float(c.reshape(-1)[0]))
    if rank == 2:
        return c.reshape(cout).copy() if c.ndim in (1, 2) and c.shape[-1] == cout and c.size == cout else None
    if c.ndim not in (3, 4) or c.shape[-2:] != (1, 1) or c.shape[-3] != cout or (c.ndim == 4 and c.shape[0] != 1):
        return None
    return c.reshape(cout).copy()


def affine_of_constant(graph, node, cout: int, bias, form):
    """The ``affine`` hook of a binary element-wise op with one constant operand: ``form(c, x_first)``
    gives (s, t) for the per-channel constant c (``per_channel``), x_first telling whether the
    activation is the first operand; None if neither or both operands are constants or c is not
    per channel. Folded bias b' = b * s + t."""
    consts = [graph.const(i) for i in node.inputs]
    if len(node.inputs) != 2 or (consts[0] is None) == (consts[1] is None):
        return None
    x_first = consts[0] is None
    rank = len(graph.tensors[node.inputs[0 if x_first else 1]].shape)
    c = per_channel(consts[1] if x_first else consts[0], cout, rank)
    if c is None:
        return None
    s, t = form(c, x_first)
    s = np.broadcast_to(np.asarray(s, np.float64), (cout,))
    b = np.zeros(cout) if bias is None else bias
    return s, b * s + t


# ---------------------------------------------------------------- shapes and window geometry
def is_fc_view(a: tuple, b: tuple) -> bool:
    """``a`` is (1, C, 1, 1) and ``b`` is (1, C): the same bytes (a fully-connected activation)."""
    return len(a) == 4 and len(b) == 2 and a[0] == b[0] == 1 and a[2] == a[3] == 1 and a[1] == b[1]


def conv_out_hw(h: int, w: int, kernel, strides, pads) -> tuple:
    """Output (OH, OW) of a window op on an (h, w) input (module docstring)."""
    kh, kw = kernel
    sh, sw = strides
    t, l, b, r = pads
    return (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1


def border_reach(op, x_shape: tuple, y_shape: tuple) -> tuple:
    """Border (top, left, bottom, right) of the input a window op reads: top/left as padded,
    bottom/right only as far as its last window reaches (which can be less than the pads)."""
    kh, kw = op.kernel
    sh, sw = op.strides
    t, l, _, _ = op.pads
    _, _, h, w = x_shape
    _, _, oh, ow = y_shape
    b = max(0, (oh - 1) * sh + kh - t - h)
    r = max(0, (ow - 1) * sw + kw - l - w)
    return (t, l, b, r)


def windows(x: np.ndarray, kernel, strides, pads, pad_value: int) -> np.ndarray:
    """int8 [C, H, W] -> view [C, OH, OW, kh, kw] of the input padded with ``pad_value``."""
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (l, r)), constant_values=pad_value)
    kh, kw = kernel
    sh, sw = strides
    oh, ow = conv_out_hw(x.shape[1], x.shape[2], kernel, strides, pads)
    return sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]


#: value of the max pool's padded border (int8 minimum: never the maximum of a window)
MAXPOOL_PAD = -128


def max_pool_int8(op, x: np.ndarray) -> np.ndarray:
    """Max pool ``op`` (kernel, strides, pads) on int8 [N, C, H, W]: the max over each window of
    ``x`` padded with ``MAXPOOL_PAD``."""
    return np.stack([windows(xn, op.kernel, op.strides, op.pads, MAXPOOL_PAD).max(axis=(3, 4)) for xn in x])


def window_layout(op, qg, lays, pad_value: int) -> None:
    """plan_layout of a window op (conv, max pool): its output shape must follow the window
    arithmetic, and its input's buffer gets the border it reads, filled with ``pad_value``."""
    x, y = qg.tensors[op.inp], qg.tensors[op.out]
    oh, ow = conv_out_hw(x.shape[2], x.shape[3], op.kernel, op.strides, op.pads)
    if (oh, ow) != tuple(y.shape[2:]):
        raise CompileError(f"{type(op).__name__} {op.name!r}: output {y.shape[2:]} does not match "
                           f"the window arithmetic {(oh, ow)}")
    need = border_reach(op, x.shape, y.shape)
    if any(need):
        lays[op.inp].require_border(pad_value, need, op.name)


# ---------------------------------------------------------------- quantization parameters
_TINY = float(np.finfo(np.float32).tiny)


def activation_params(lo: float, hi: float) -> tuple:
    """Float range -> (scale: float, zero_point: int) of a per-tensor asymmetric int8 activation.

    Range [min(lo, 0), max(hi, 0)] (always contains 0), scale = (hi - lo) / 255,
    zp = round_half_even(-128 - lo / scale) clipped to [-128, 127], so real 0 is exactly
    representable. A degenerate range (scale 0, non-finite, or below float32's smallest normal)
    gets scale 1.0, zp 0 (as onnxruntime's quantize_static does)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = (hi - lo) / 255.0
    if not np.isfinite(scale) or scale < _TINY:
        return 1.0, 0
    zp = int(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return float(scale), zp


#: elements per chunk of ``weight_params``' float64 arithmetic (512 KiB of float64: the chunk
#: stays in the cache between its divide, round, clip and cast; VGG-19's 102 M-element FC weight
#: 0.30 -> 0.24 s CPU against chunks of 1 M elements)
WEIGHT_CHUNK = 1 << 16


def weight_params(w: np.ndarray, scale: np.ndarray | None = None) -> tuple:
    """float weight [Cout, ...] -> (q int8 [Cout, ...], scale float64 [Cout]): per output channel
    symmetric, zp 0, scale = max|w[n]| / 127 (or the given ``scale``: a pre-quantized model's,
    whose integers then come back exactly), q = clip(round_half_even(w / scale), -127, 127);
    an all-zero channel gets scale 1.0. Computed in float64 in chunks of about WEIGHT_CHUNK
    elements (VGG-19's 102 M-element FC weight: 0.27 s instead of 1.3 s for one 0.8 GB float64
    temporary)."""
    flat = w.reshape(w.shape[0], -1)
    if scale is None:
        amax = np.maximum(flat.max(axis=1), -flat.min(axis=1)).astype(np.float64)   # = max |w|, no copy
        scale = np.where(amax / 127.0 >= _TINY, amax / 127.0, 1.0)
    scale = np.asarray(scale, np.float64)
    out = np.empty(flat.shape, np.int8)
    rows = max(1, WEIGHT_CHUNK // max(1, flat.shape[1]))
    for r0 in range(0, flat.shape[0], rows):
        q = np.divide(flat[r0:r0 + rows], scale[r0:r0 + rows, None], dtype=np.float64)
        np.rint(q, out=q)                 # round half to even
        np.clip(q, -127, 127, out=q)
        out[r0:r0 + rows] = q
    return out.reshape(w.shape), scale


def requant_multiplier(node: str, real: float) -> tuple:
    """(Q31 multiplier, shift) = ``arith.quantize_multiplier(real)``; CompileError naming the node
    if the real multiplier is unsupported."""
    try:
        return arith.quantize_multiplier(real)
    except ValueError as e:
        raise CompileError(f"node {node!r}: requantization multiplier {real!r} unsupported: {e}") from e


# ---------------------------------------------------------------- DeviceOp hooks that do nothing
def no_input_transform(op, qg, cfg):
    """input_transform of an op the host never rewrites."""
    return None


def no_constants(op, cfg) -> dict:
    """constants of an op without DDR constants."""
    return {}


def no_macs(op, qg) -> int:
    """macs of a vector-unit op."""
    return 0


@dataclass
class ViewTiling:
    """The tiling of an op that moves nothing (a view: Concat, Slice): no SRAM, no accumulator."""
    regions: dict = field(default_factory=dict)
    slot_words: dict = field(default_factory=dict)
    acc_rows = 0


def lane_wise_channels(op, maps: dict, blk: int) -> tuple:
    """remap_channels of an op that works on each lane alone (pools): unchanged, its output has
    its input's channel map."""
    return op, maps.get(op.inp)


@dataclass(frozen=True)
class InputWindow:
    """The part of a windowed op's blocked input (``backend.layout.ActLayout``) that one output
    tile reads: rows ``r0 .. r0 + nrows - 1`` and columns ``c0a .. c0a + ncols - 1`` of every
    channel block, ``c0a`` being the first column ``c0`` rounded down to the DMA alignment (``skip
    = c0 - c0a`` leading columns are loaded but not read). Units: pixels. ``row_step`` > 1: the
    window's rows are every ``row_step``-th input row from ``r0`` (a one-row kernel with a row
    stride reads no other: ``input_window(skip_rows=True)``)."""
    r0: int
    nrows: int
    c0a: int
    ncols: int
    skip: int
    row_step: int = 1


def input_window(op, X, oy0: int, th: int, ox0: int, tw: int, align_px: int, skip_rows: bool = False) -> InputWindow:
    """The input window of output rows ``oy0 .. oy0 + th - 1``, columns ``ox0 .. ox0 + tw - 1``
    of ``op`` (kernel, strides, pads) reading layout ``X`` (whose border is ``X.pads``).
    ``skip_rows`` and a one-row kernel with row stride sh > 1: only the th rows read (``row_step``
    sh; ``window_rows``)."""
    (kh, kw), (sh, sw) = op.kernel, op.strides
    r0 = X.pads[0] - op.pads[0] + oy0 * sh
    c0 = X.pads[1] - op.pads[1] + ox0 * sw
    c0a = c0 - c0 % align_px
    step = sh if skip_rows and kh == 1 else 1
    return InputWindow(r0, window_rows(th, kh, sh) if skip_rows else (th - 1) * sh + kh, c0a,
                       c0 + (tw - 1) * sw + kw - c0a, c0 - c0a, step)


def load_window(P, X, k0: int, nblocks: int, win: InputWindow, base: int) -> None:
    """DMA_LOAD of ``win`` for channel blocks ``k0 .. k0 + nblocks - 1`` of ``X`` into SRAM words
    from ``base``: block after block, each ``nrows * ncols`` words, row after row."""
    W = P.cfg.word_bytes
    P.dma("DMA_LOAD", X.addr(k0, win.r0, win.c0a), base, win.ncols * W, win.nrows, X.row_bytes * win.row_step,
          win.ncols * W, nblocks, X.block_bytes, win.nrows * win.ncols * W, buf=X.buf_id)


@dataclass(frozen=True)
class QFilter(QOp):
    """The fields of a weighted window op (QConv, QDwConv): int8 ``weight`` (its first axis the
    output channels), per-output-channel int32 ``bias``, ``mult``, ``shift``; ``strides`` (sh,
    sw), ``pads`` (top, left, bottom, right) in elements with padding value ``x_zp``; ``relu``;
    ``x_zp``, ``y_zp`` the zero points of ``inp`` and ``out``."""
    name: str
    inp: str
    out: str
    weight: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    strides: tuple
    pads: tuple
    relu: bool
    x_zp: int
    y_zp: int

    def check_filter(self, ndim: int, layout: str) -> None:
        """CompileError naming the op unless ``weight`` is int8 of ``ndim`` axes (``layout``
        says which) and bias, mult, shift are int32 of one value per output channel."""
        kind = type(self).__name__
        if not isinstance(self.weight, np.ndarray) or self.weight.dtype != np.int8 or self.weight.ndim != ndim:
            raise CompileError(f"{kind} {self.name!r}: weight must be int8 {layout}, got "
                               f"{getattr(self.weight, 'dtype', None)} {getattr(self.weight, 'shape', None)}")
        for nm in ("bias", "mult", "shift"):
            check_array(f"{kind} {self.name!r}", nm, getattr(self, nm), np.int32, (self.weight.shape[0],))


class WindowTile(NamedTuple):
    """One output tile of a window op on the vector unit: th x tw outputs, the input window's
    row pitch ``ncols`` (words), and per channel block its (first, last + 1) source words and its
    first output word."""
    th: int
    tw: int
    ncols: int
    blocks: list


def window_tiles(P, op, X, Y, tl, k0: int, nk: int, rows: tuple, cols: tuple, slots: dict):
    """The output tiles of rows ``rows`` = [r0, r1) and columns ``cols`` = [c0, c1) of channel
    blocks k0 .. k0 + nk - 1 of a window op (pool, depthwise conv) with tiling ``tl``: for each,
    LOAD its input window into the next input slot, yield a WindowTile (the caller emits one
    instruction per block), then STORE the tile's output slot to ``Y``. ``slots`` ({"i": k,
    "o": k}) carries the alternating slot indices across calls."""
    W, ap = P.cfg.word_bytes, align_px(P.cfg)
    (kh, kw), (sh, sw) = op.kernel, op.strides
    reg = tl.regions
    for oy0 in range(rows[0], rows[1], tl.th):
        th = min(tl.th, rows[1] - oy0)
        for ox0 in range(cols[0], cols[1], tl.tw):
            tw = min(tl.tw, cols[1] - ox0)
            win = input_window(op, X, oy0, th, ox0, tw, ap)
            nrows, ncols = win.nrows, win.ncols
            base = reg["i"][slots["i"]]
            slots["i"] ^= 1
            load_window(P, X, k0, nk, win, base)
            ob = reg["o"][slots["o"]]
            slots["o"] ^= 1
            blocks = []
            for j in range(nk):
                src = base + j * nrows * ncols + win.skip
                blocks.append((src, src + (th - 1) * sh * ncols + (tw - 1) * sw + (kh - 1) * ncols + kw,
                               ob + j * th * tw))
            yield WindowTile(th, tw, ncols, blocks)
            P.dma("DMA_STORE", Y.iaddr(k0, oy0, ox0), ob, tw * W, th, Y.row_bytes, tw * W,
                  nk, Y.block_bytes, th * tw * W, buf=Y.buf_id)
