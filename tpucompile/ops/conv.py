"""Conv: 2-D convolution on the systolic array (a Gemm becomes one too, see gemm.py).

Integer semantics (``QConv``): ``acc[n, oy, ox] = sum over (ci, ky, kx) of w[n, ci, ky, kx] *
xp[ci, oy*sh+ky, ox*sw+kx]`` in int32, where ``xp`` is the input padded with ``x_zp`` (so padded
taps cancel against the bias correction exactly like real inputs); then
``y = arith.requant_conv(acc, bias, mult, shift, y_zp, relu)`` (gemmlowp rounding).
``bias`` already holds the zero-point correction ``bias = round(b / (s_x * s_w[n])) - x_zp * sum(w[n])``.

Quantization: weights per output channel symmetric (``common.weight_params``), bias int32
``round_half_even(b / (s_x * s_w[n]))`` then the zero-point correction (CompileError naming the
node if it leaves int32), requant multipliers ``quantize_multiplier(s_x * s_w[n] / s_y)`` (Q31,
rounded half away from zero; < 2**-32 flushes to 0).

Device: the input buffer's border holds ``x_zp``; weight tiles and requant tables are DDR
constants (``backend.layout.weight_tiles`` / ``param_tables``); ``backend.tiling.tile_conv``
picks the tiling; the loop nest (docs/backend.md)::

    for each output tile (th rows x tw cols, M = th*tw):            # acc rows: nbg*M <= depth
      for each group of nbg cout blocks:
        for each group of kbg cin blocks:   LOAD input window (skipped if all KB already resident)
          for kb, nb, (ky, kx):  LOAD weight tile -> LOAD_WEIGHTS -> MATMUL (accumulate)
        for nb: LOAD table; for chunks: REQUANT (relu fused) -> STORE      # deferred, below

The chunks of a group are emitted during the next group (docs/backend.md, "Deferred
requantization"): those reading accumulator rows its first MATMUL writes before that MATMUL, the
rest spread over its later MATMULs. Consecutive groups (of one tile or the next) alternate
between the two accumulator halves where two groups fit, else one-block groups between the bottom
and the top of the accumulator.

With weights resident (``tl.nres`` > 0, chosen by the tiler's cost model: weight tiles
``t < nres`` have their own SRAM slots, all of the layer's if they fit) each resident tile is
loaded by the first output tile only and the later output tiles' LOAD_WEIGHTS read the same slot
(weight-stationary over the spatial tiles: its DDR traffic once per layer instead of once per
output tile); the other tiles stream through the ring of ``nw`` slots after them, ``tl.wbatch`` at
a time when the tiler gave batches (merged weight DMAs: each batch fills one half of the ring
with as few strided DMAs as its DDR spacing allows, one batch ahead of the MATMULs;
docs/backend.md, "Merged weight DMAs").

Non-square arrays (docs/architecture.md, "Non-square arrays"): an N tile of C output channels is
C/R channel blocks (C > R: its REQUANT writes C/R planes of the output slot, one STORE moves them
to C/R blocks) or 1/m of one (R = m*C: the m tiles of a block are one group's neighbours; their m
tables load together, m REQUANTs fill the m lane groups of the slot, then one STORE).

Host im2col of the first conv: a graph input with Cin < R/2 read only by one conv with a kernel
larger than 1x1 becomes ``(1, Cin*kh*kw, OH, OW)`` with channel ``k = (c*kh + ky)*kw + kx`` =
``xpad[c, oy*sh+ky, ox*sw+kx]`` (``xpad`` padded with the input zero point), and the conv a 1x1
conv over K channels; ``meta["input_transforms"]`` records it and
``tpusim.arch.host_transforms.host_input_transform`` applies it.
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.layout import (
    align_px,
    ceil_div,
    out_tiles,
    param_tables,
    requant_table_stride,
    weight_tiles,
)
from tpucompile.backend.tiling import SKIP_SLOTS, tile_conv
from tpucompile.backend.work import LayerWork, mxu_pair_cycles, tile_sizes
from tpucompile.ir import Node, Tensor
from tpucompile.ops.common import (
    QFilter,
    bad_attr,
    input_window,
    load_window,
    requant_multiplier,
    spatial_attrs,
    weight_params,
    window_layout,
    windows,
)
from tpucompile.ops.depthwise import is_depthwise
from tpucompile.ops.pad import absorbed_pads
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.transpose import channel_permutation
from tpucompile.qgraph import QTensor
from tpusim.arch import arith
from tpusim.arch.errors import CompileError

__all__ = ["QConv", "conv_int8", "conv_qop", "OPS"]


@dataclass(frozen=True)
class QConv(QFilter):
    """Convolution / fully-connected layer (int8 x int8 -> int32 -> int8).

    weight: int8 [Cout, Cin, kh, kw] (per-output-channel symmetric, zero point 0).
    bias:   int32 [Cout], zero-point corrected (see module docstring).
    mult:   int32 [Cout] Q31 multipliers in [2**30, 2**31-1] or 0.  shift: int32 [Cout] in [-31, 30]
            (positive = left shift).  strides: (sh, sw).  pads: (top, left, bottom, right), in
            elements, padding value x_zp.  relu: clamp low end at y_zp.  x_zp, y_zp: zero points
            of inp and out.
    """

    def __post_init__(self):
        self.check_filter(4, "4-D")
        if len(self.strides) != 2 or min(self.strides) < 1:
            raise CompileError(f"QConv {self.name!r}: bad strides {self.strides}")
        if len(self.pads) != 4 or min(self.pads) < 0:
            raise CompileError(f"QConv {self.name!r}: bad pads {self.pads}")

    @property
    def kernel(self) -> tuple:
        return tuple(self.weight.shape[2:])

    def needed_bytes(self, t: str, qg) -> int:
        """Of its input, on an axis where the kernel is shorter than the stride (a strided 1x1
        conv), only output x kernel rows or columns are read; else all of it (``QOp``)."""
        shape = tuple(qg.tensors[t].shape)
        if t != qg.resolve(self.inputs[0]) or len(shape) != 4:
            return super().needed_bytes(t, qg)
        oh, ow = qg.tensors[qg.resolve(self.out)].shape[2:]
        (kh, kw), (sh, sw) = self.kernel, self.strides
        rows = shape[2] if kh >= sh else min(shape[2], oh * kh)
        cols = shape[3] if kw >= sw else min(shape[3], ow * kw)
        return shape[0] * shape[1] * rows * cols

    def verify(self, qg) -> None:
        if self.x_zp != qg.tensors[self.inp].zero_point or self.y_zp != qg.tensors[self.out].zero_point:
            raise CompileError(f"QConv {self.name!r}: zero points disagree with its tensors")
        cin = qg.tensors[self.inp].shape[1]
        if self.weight.shape[1] != cin:
            raise CompileError(f"QConv {self.name!r}: weight Cin {self.weight.shape[1]} != input C {cin}")


# ---------------------------------------------------------------- import, quantization
def _import(node, a: dict, opset: int) -> dict:
    group = a.get("group", 1)
    if not isinstance(group, int) or group < 1:
        raise bad_attr(node, "group", group, "invalid (a positive integer expected)")
    out = spatial_attrs(node, {k: v for k, v in a.items() if k != "group"},
                        {"kernel_shape", "strides", "pads", "dilations", "auto_pad"}, dilations_ok=True)
    if group != 1:
        out["group"] = group
    out["relu"] = False
    return out


#: a grouped or dilated Conv's dense weight may hold at most this many elements (int8 bytes)
MAX_DENSE_WEIGHT = 1 << 26


def _dense_weight(node, w: np.ndarray, cin: int, group: int, dil: tuple) -> np.ndarray:
    """The dense (M, C, (kH-1)*dH+1, (kW-1)*dW+1) weight equal to grouped weight ``w`` (M, C/group,
    kH, kW) with dilations ``dil`` (ONNX Conv spec): output channel block g (M/group channels)
    sees input channel block g only, kernel taps spread ``dil`` apart, zeros elsewhere, so the
    dense convolution computes exactly the grouped, dilated one (a zero weight adds nothing to the
    int32 accumulator, to the zero-point correction or to the per-channel weight scale)."""
    m, cg, kh, kw = w.shape
    if m % group or cin % group or cg * group != cin:
        raise CompileError(f"node {node.name!r} (Conv): group={group} does not divide the {m} outputs and "
                           f"{cin} input channels into weight blocks of {cg} (weight {tuple(w.shape)})")
    eh, ew = (kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1
    if m * cin * eh * ew > MAX_DENSE_WEIGHT:
        raise CompileError(f"node {node.name!r} (Conv): group={group}, dilations={list(dil)} expand to a "
                           f"dense weight of {m * cin * eh * ew} elements, over the compiler's limit "
                           f"{MAX_DENSE_WEIGHT}")
    dense = np.zeros((m, cin, eh, ew), np.float32)
    mg = m // group
    for g in range(group):
        dense[g * mg:(g + 1) * mg, g * cg:(g + 1) * cg, ::dil[0], ::dil[1]] = w[g * mg:(g + 1) * mg]
    return dense


def _quantize(q, node) -> None:
    qt = q.input(node)
    w = q.const(node.inputs[1])
    if w is None:
        raise CompileError(f"node {node.name!r} (Conv): weight {node.inputs[1]!r} is not a constant")
    b = q.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros(w.shape[0])
    if b is None:
        raise CompileError(f"node {node.name!r} (Conv): bias {node.inputs[2]!r} is not a constant")
    if w.ndim != 4 or b.shape != (w.shape[0],):
        raise CompileError(f"node {node.name!r} (Conv): weight of shape {w.shape} and bias of shape "
                           f"{b.shape} do not describe a 2-D convolution with {w.shape[0]} outputs")
    sy, zy = q.out_params(node)
    out = q.add_tensor(node.outputs[0], sy, zy)
    q.add_op(conv_qop(node.name, qt, w, b, out, tuple(node.attrs["strides"]), tuple(node.attrs["pads"]),
                      bool(node.attrs["relu"]), q.g.tensors[node.inputs[1]].weight_scale))


def conv_qop(name: str, qt, w: np.ndarray, b: np.ndarray, out, strides, pads, relu: bool,
             weight_scale: np.ndarray | None = None) -> "QConv":
    """The QConv of float weight ``w`` [Cout, Cin, kh, kw] and bias ``b`` [Cout] from int8 input
    ``qt`` to the device tensor ``out`` (QTensors): per-output-channel symmetric int8 weights
    (``weight_params``; with ``weight_scale``, a pre-quantized model's scales, its integers),
    bias in the accumulator's scale with the input zero point folded in; CompileError naming
    ``name`` if the bias does not fit int32 or a multiplier is unsupported."""
    qw, sw = weight_params(w, weight_scale)          # float64 arithmetic inside, no float64 copy of w
    bq = np.round(b.astype(np.float64) / (qt.scale * sw))
    beff = bq - qt.zero_point * qw.reshape(qw.shape[0], -1).sum(axis=1, dtype=np.int64)
    if np.abs(beff).max(initial=0) > arith.INT32_MAX:
        raise CompileError(f"node {name!r} (Conv): bias {beff[np.argmax(np.abs(beff))]:.0f} "
                           "does not fit int32")
    ms = [requant_multiplier(name, qt.scale * s / out.scale) for s in sw]
    return QConv(name, qt.name, out.name, qw, beff.astype(np.int32),
                 np.array([m for m, _ in ms], np.int32), np.array([s for _, s in ms], np.int32),
                 tuple(strides), tuple(pads), relu, qt.zero_point, out.zero_point)


def lane_copy_qop(name: str, x, out) -> "QConv":
    """An identity 1x1 QConv from QTensor ``x`` to ``out`` (same shape, scale and zero point): a
    copy on the array that can write any lane layout (``remap_output``; a channel map of ``x`` is
    read through ``remap_channels``). Exact: weight 127 at scale 1/127, multiplier 1/127 as a
    Q31 fixed point, so ``requant(127 (v - zp)) = v - zp`` for every int8 v (|error| < 2^-20)."""
    c = x.shape[1]
    return conv_qop(name, x, np.eye(c, dtype=np.float32)[:, :, None, None], np.zeros(c), out, (1, 1), (0, 0, 0, 0),
                    False)


# ---------------------------------------------------------------- golden
def conv_int8(op: QConv, x: np.ndarray) -> np.ndarray:
    """QConv on int8 [N, Cin, H, W] -> int8 [N, Cout, OH, OW]: im2col of the input padded with
    x_zp, ``arith.matmul_acc`` (int32), ``arith.requant_conv``."""
    cout = op.weight.shape[0]
    wmat = op.weight.reshape(cout, -1).T                    # [Cin*kh*kw, Cout]
    outs = []
    for xn in x:
        win = windows(xn, op.kernel, op.strides, op.pads, op.x_zp)
        c, oh, ow, kh, kw = win.shape
        cols = win.transpose(1, 2, 0, 3, 4).reshape(oh * ow, c * kh * kw)
        acc = arith.matmul_acc(cols, wmat)                   # int32 [OH*OW, Cout]
        y = arith.requant_conv(acc, op.bias, op.mult, op.shift, op.y_zp, op.relu)
        outs.append(y.T.reshape(cout, oh, ow))
    return np.stack(outs)


# ---------------------------------------------------------------- device lowering
def _input_transform(op: QConv, qg, cfg):
    """Host im2col of the graph input ``op.inp`` (module docstring) when Cin < R/2 and the kernel
    is larger than 1x1."""
    cout, cin, kh, kw = op.weight.shape
    if op.kernel == (1, 1) or 2 * cin >= cfg.array_rows:
        return None
    x = qg.tensors[op.inp]
    _, _, oh, ow = qg.tensors[op.out].shape
    k = cin * kh * kw
    dev = QTensor(x.name, (1, k, oh, ow), x.scale, x.zero_point)
    new = QConv(op.name, op.inp, op.out, np.ascontiguousarray(op.weight.reshape(cout, k, 1, 1)),
                op.bias, op.mult, op.shift, (1, 1), (0, 0, 0, 0), op.relu, op.x_zp, op.y_zp)
    meta = {"name": x.name, "kind": "im2col", "orig_shape": list(x.shape), "kernel": [kh, kw],
            "strides": list(op.strides), "pads": list(op.pads), "pad_value": int(op.x_zp),
            "device_shape": [1, k, int(oh), int(ow)]}
    return dev, new, meta


def conv_tiles(Ho: int, Wo: int, tl) -> list:
    """The output tiles of a conv's loop nest, in emission order: (oy0, th, ox0, tw) of the
    grid of ``tl.th`` x ``tl.tw`` tiles over the Ho x Wo output, rows outer."""
    return [(oy0, min(tl.th, Ho - oy0), ox0, min(tl.tw, Wo - ox0))
            for oy0 in range(0, Ho, tl.th) for ox0 in range(0, Wo, tl.tw)]


def weight_cols(cout: int, nb: int, C: int) -> int:
    """Columns (SRAM words) of N tile ``nb`` that hold some of the ``cout`` output channels: the
    rest of the tile is zero in DDR and not loaded (a 64-channel conv on a 128-column array loads
    half of each tile). The slot's other words keep whatever they held; the accumulator columns
    they feed are output lanes past ``cout``, whose requant multiplier is 0 (``param_tables``):
    REQUANT writes their zero point whatever they hold, so the outputs are those of a zero tile."""
    return max(0, min(C, cout - nb * C))


def tile_cols(op: QConv, nb: int, C: int) -> int:
    """``weight_cols`` of the conv's N tile ``nb`` less the tile's trailing output lanes of
    multiplier 0 (a remapped output's gap lanes, ``_remap_output``: a head of d < C channels,
    ``act_matmul.head_slice_maps``): their REQUANT writes the zero point whatever the
    accumulator holds, so their columns are not loaded either. At least one column."""
    n = weight_cols(len(op.mult), nb, C)
    live = np.flatnonzero(np.asarray(op.mult[nb * C:nb * C + n]))
    return int(live[-1]) + 1 if live.size else n


#: (id of a conv's multipliers, N tiles, array columns) -> (the multipliers, ``tile_col_runs``)
_TILE_COLS: dict = {}
_TILE_COLS_MAX = 4096


def tile_col_runs(op: QConv, NB: int, C: int) -> tuple:
    """``tile_cols`` of N tiles 0 .. NB - 1 as runs of equal values: ((columns, N tiles), ...) in
    order (one scan of the multipliers; kept per multiplier array, which the entry holds, so its
    id stays its own)."""
    hit = _TILE_COLS.get((id(op.mult), NB, C))
    if hit is not None and hit[0] is op.mult:
        return hit[1]
    live = np.flatnonzero(np.asarray(op.mult)).tolist()
    out: list = []
    for nb in range(NB):
        lo = nb * C
        n = weight_cols(len(op.mult), nb, C)
        k = bisect.bisect_left(live, lo + n) - 1          # the last live lane below the tile's end
        cols = live[k] - lo + 1 if k >= 0 and live[k] >= lo else n
        if out and out[-1][0] == cols:
            out[-1][1] += 1
        else:
            out.append([cols, 1])
    if len(_TILE_COLS) >= _TILE_COLS_MAX:
        _TILE_COLS.clear()
    runs = tuple(map(tuple, out))
    _TILE_COLS[(id(op.mult), NB, C)] = (op.mult, runs)
    return runs


def _emit(P, op: QConv, lays: dict, tl, consts: dict, weight_tile=None, tiles=None,
          store=None, table_load=None, skip=None) -> None:
    """The loop nest of the module docstring; tokens come from the declared accesses.
    ``weight_tile(t, nb, kb) -> (DDR address, DDR buffer id or None, bytes)`` of tile ``t`` (N
    tile ``nb``, cin block ``kb``): default the constant tiles, only their ``weight_cols``
    columns that hold output channels; ``ops/act_matmul.py`` reads an activation's buffer. ``tiles``: the output tiles
    (``conv_tiles``' tuples, each starting (oy0, th, ox0, tw); default that grid), any size up to
    tl.th x tl.tw, possibly overlapping. ``store(P, slot, blk, planes, tile)``: called instead of
    the chunk's STORE (``ops/conv_pool.py``: the fused pool; its tiles are one chunk each).
    ``table_load(P, ddr_addr, b0, slot)``: called instead of the DMA_LOAD of output block ``b0``'s
    requant tables (constant at ``ddr_addr``) into the SRAM slot at word ``slot``
    (``ops/act_matmul.py``: the key mask's bias row from a run-time input). ``skip(P, blk, oy, ox,
    rows, cols, planes) -> (slot, fields)``: called before a chunk's requantization with the
    chunk's place in the output (first block, row, column, rows x cols pixels, planes); it picks the chunk's output slot, brings the chunk's residual
    operand into SRAM and returns the slot and REQUANT_ADD's own fields (``skip_addr``, ``qreg``,
    ``qreg_b``, ``qreg_out``, ``add_relu``): the chunk is requantized with REQUANT_ADD instead of
    REQUANT (``ops/conv_add.py``: in place, the skip loaded into the output slot)."""
    cfg = P.cfg
    X, Y = lays[op.inp], lays[op.out]
    par_addr, par_stride = consts["requant"], requant_table_stride(cfg)
    R, C, W = cfg.array_rows, cfg.array_cols, cfg.word_bytes
    ap = align_px(cfg)
    kh, kw = op.kernel
    sh, sw = op.strides
    cout, cin = op.weight.shape[:2]
    KB, NB = ceil_div(cin, R), out_tiles(cout, cfg)
    mp, mg = cfg.requant_planes, cfg.lane_groups
    _, _, Ho, Wo = Y.shape
    tile_bytes = C * W
    if weight_tile is None:
        def weight_tile(t, nb, kb):
            return consts["weights"] + t * tile_bytes, None, tile_cols(op, nb, C) * W
    pw = cfg.param_words
    reg = tl.regions
    nkg = ceil_div(KB, tl.kbg)
    qreg = P.qregs.get(0, 0, op.y_zp)
    # rings start at their slot the previous layer left the soonest (Program.oldest_slot)
    islot = P.oldest_slot(reg["i"], tl.slot_words["i"])
    wslot = P.oldest_slot(reg["w"][tl.nres:], C) if tl.nw else 0
    gb = tl.wbatch
    tile_list = list(conv_tiles(Ho, Wo, tl) if tiles is None else tiles)
    # batches (gb > 1, docs/backend.md "Merged weight DMAs"): the layer's streaming weight tiles
    # in MATMUL order, gb at a time in alternate halves of the ring of 2 * gb slots (the first
    # in the half holding the slot the previous layer left the soonest); batch k + 1 is loaded
    # (as few DMAs as its DDR spacing allows) right after batch k's first LOAD_WEIGHTS
    stream = [] if gb == 1 else [
        (t, nb, kb) for _ in tile_list for g0 in range(0, NB, tl.nbg) for k0 in range(0, KB, tl.kbg)
        for kb in range(k0, min(KB, k0 + tl.kbg)) for nb in range(g0, min(NB, g0 + tl.nbg))
        for t in range((nb * KB + kb) * kh * kw, (nb * KB + kb + 1) * kh * kw) if t >= tl.nres]
    h0 = wslot // gb if gb > 1 else 0
    js = 0              # index in ``stream`` of the next streaming tile

    def batch_slot(j: int) -> int:
        """SRAM word of streaming tile ``j``'s slot."""
        return reg["w"][tl.nres + ((h0 + j // gb) % 2) * gb + j % gb]

    def load_batch(j0: int) -> None:
        """The DMA_LOADs of the batch of streaming tiles from ``j0`` (none past the last)."""
        by_buf: dict = {}
        for j in range(j0, min(j0 + gb, len(stream))):
            t, nb, kb = stream[j]
            src, buf, nbytes = weight_tile(t, nb, kb)
            if nbytes:          # a tile of no output channel: nothing to load
                by_buf.setdefault(buf, []).append((src, batch_slot(j), nbytes))
        for buf, items in by_buf.items():
            P.dma_gather("DMA_LOAD", items, buf=buf)
    pslot = oslot = half = 0
    mstride = tl.th * tl.tw
    depth = cfg.acc_depth_rows
    pending: deque = deque()   # the last group's requantization steps, emitted during the next group (FIFO)

    def load_table(b0: int) -> int:
        """DMA_LOAD of output block ``b0``'s requant tables into the next table slot; its word."""
        nonlocal pslot
        ps = reg["p"][pslot]
        pslot ^= 1
        if table_load is not None:
            table_load(P, par_addr + b0 * par_stride, b0, ps)
        else:
            P.dma("DMA_LOAD", par_addr + b0 * par_stride, ps, pw * W, *((mg, par_stride, pw * W) if mg > 1 else ()))
        return ps

    def requant_steps(tile, blocks: list, g0: int, acc0: int, rev: bool) -> list:
        """A group's REQUANT/STORE chunks, output blocks ``blocks`` in that order (the first one's
        tables already loaded, each later one's loaded before its first chunk), each block's
        chunks in reverse order if ``rev``: a list of (accumulator rows [lo, hi) the chunk
        reads, the function that emits it)."""
        oy0, th, ox0, tw = tile[:4]
        if tw <= tl.s_out:
            k = max(1, tl.s_out // tw)
            chunks = [(y, 0, min(k, th - y), tw) for y in range(0, th, k)]
        else:
            seg = max(ap, tl.s_out - tl.s_out % ap)
            chunks = [(y, x, 1, min(seg, tw - x)) for y in range(th) for x in range(0, tw, seg)]
        if rev:
            chunks = chunks[::-1]
        steps = []
        for j, b0 in enumerate(blocks):      # the N tiles of one output block (mg) each
            for i, (y, x, k, n) in enumerate(chunks):
                a = acc0 + (b0 - g0) * mstride + y * tw + x
                hi = a + (mg - 1) * mstride + k * n
                steps.append((a, hi, lambda b0=b0, y=y, x=x, k=k, n=n, a=a, table=(j > 0 and i == 0):
                              requant_chunk(tile, b0, y, x, k, n, a, table)))
        return steps

    def requant_chunk(tile, b0: int, y: int, x: int, k: int, n: int, a: int, table: bool) -> None:
        """One chunk: k x n pixels from (y, x) of the tile, output block ``b0``, accumulator row
        ``a``; ``table``: its block's tables are loaded first."""
        nonlocal oslot, ps_cur
        oy0, ox0 = tile[0], tile[2]
        if table:
            ps_cur = load_table(b0)
        blk = b0 * mp // mg                   # first output channel block written
        planes = min(mp, Y.nblocks - blk)     # of them in the tensor (the rest: padding)
        if skip is None:
            os_, fused = reg["o"][oslot], None
            oslot ^= 1
        else:
            os_, fused = skip(P, blk, oy0 + y, ox0 + x, k, n, planes)
        _requant_chunk(P, op, range(b0, b0 + mg), ps_cur, a, mstride, k * n, os_, qreg, fused)
        if store is not None:
            store(P, os_, blk, planes, tile)
            return
        more = (planes, Y.block_bytes, k * n * W) if planes > 1 else ()
        P.dma("DMA_STORE", Y.iaddr(blk, oy0 + y, ox0 + x), os_, n * W, k, Y.row_bytes,
              n * W, *more, buf=Y.buf_id)

    def flush(upto: int) -> None:
        """Emit the pending steps until ``upto`` of them are left."""
        while len(pending) > upto:
            pending.popleft()[2]()

    ps_cur = 0           # the table slot of the chunks being emitted
    for ti, tile in enumerate(tile_list):
        oy0, th, ox0, tw = tile[:4]
        M = th * tw
        win = input_window(op, X, oy0, th, ox0, tw, ap, skip_rows=True)
        nrows, ncols = win.nrows, win.ncols
        ystep = sh // win.row_step * ncols           # words between the window rows of two output rows
        resident = None
        for g0 in range(0, NB, tl.nbg):
            # each cout group (not each tile: a tile of several groups would have each one wait
            # for the REQUANTs of the one before) in the other accumulator half
            if tl.acc_halves:
                acc0 = half * (depth // 2)
            else:       # a one-block group alternately at the bottom and the top: only the rows
                # both use are shared (groups of several blocks stay at the bottom: alexnet was slower)
                acc0 = half * (depth - tl.acc_rows) if tl.nbg <= mg else 0
            half ^= 1
            gnb = range(g0, min(NB, g0 + tl.nbg))
            started = set()
            lo, hi = acc0, acc0 + len(gnb) * mstride       # this group's accumulator rows
            # the last group's chunks that read them go before the first MATMUL, the rest are
            # spread over the MATMULs (their STOREs overlap this group's compute)
            need = max((i + 1 for i, (a, b, _) in enumerate(pending) if a < hi and lo < b), default=0)
            rest = len(pending) - need
            nmm, mm = KB * len(gnb) * kh * kw, 0
            # from the MATMUL the dispatcher reaches once the first ones run (the MXU queue
            # holds LOAD_WEIGHTS + MATMUL pairs): earlier, their STOREs would compete with the
            # loads this group's first MATMUL waits for
            skew = min(nmm - 1, cfg.queue_depth // 2)
            for k0 in range(0, KB, tl.kbg):
                kbs = range(k0, min(KB, k0 + tl.kbg))
                if nkg == 1 and resident is not None:
                    base = resident
                else:
                    base = reg["i"][islot]
                    islot = (islot + 1) % tl.ni
                    load_window(P, X, k0, len(kbs), win, base)
                    resident = base
                for kb in kbs:
                    for nb in gnb:
                        acc = acc0 + (nb - g0) * mstride
                        for ky in range(kh):
                            for kx in range(kw):
                                t = ((nb * KB + kb) * kh + ky) * kw + kx
                                if t < tl.nres:
                                    ws = reg["w"][t]
                                elif gb > 1:
                                    if js == 0:
                                        load_batch(0)
                                    ws = batch_slot(js)
                                    js += 1
                                else:
                                    ws = reg["w"][tl.nres + wslot]
                                    wslot = (wslot + 1) % tl.nw
                                if (t >= tl.nres and gb == 1) or (t < tl.nres and ti == 0):
                                    src, buf, nbytes = weight_tile(t, nb, kb)
                                    if nbytes:          # a tile of no output channel: nothing to load
                                        P.dma("DMA_LOAD", src, ws, nbytes, buf=buf)
                                P.add("LOAD_WEIGHTS", rs=[(ws, ws + C)], sram_addr=ws)
                                if gb > 1 and t >= tl.nres and (js - 1) % gb == 0:
                                    load_batch(js - 1 + gb)     # the next batch, one batch ahead
                                if mm == 0:
                                    flush(rest)
                                act = base + (kb - k0) * nrows * ncols + ky * ncols + kx + win.skip
                                last = act + (th - 1) * ystep + (tw - 1) * sw + 1
                                P.add("MATMUL", rs=[(act, last)], wa=[(acc, acc + M)], act_addr=act,
                                      count_x=tw, stride_x=sw, count_y=th, stride_y=ystep,
                                      acc_addr=acc, accumulate=1 if nb in started else 0)
                                started.add(nb)
                                mm += 1
                                flush(rest - ceil_div(rest * max(0, mm - skew), nmm - skew))
            # this group's chunks: its first output block's tables loaded now, the chunks during
            # the next group. A one-block group at the bottom shares its last rows with the next
            # group (at the top): its chunks go last row first, so the next group's first MATMUL
            # waits for a few of them only (reversing a group of several blocks: slower, measured
            # on 'medium' and shufflenet)
            rev = not tl.acc_halves and acc0 == 0 and tl.acc_rows < depth and len(gnb) <= mg
            blocks = list(gnb[::mg])
            ps_cur = load_table(blocks[0])
            pending = deque(requant_steps(tile, blocks, g0, acc0, rev))
    flush(0)


def _requant_chunk(P, op: QConv, tiles: range, ps: int, a: int, mstride: int, count: int, os_: int,
                   qreg: int, fused: dict | None = None) -> None:
    """The REQUANTs of ``count`` accumulator rows from row ``a`` of the first of ``tiles`` (the
    next ones ``mstride`` rows apart) into the output slot at word ``os_``: one N tile (R <= C;
    C > R: its C/R planes ``count`` words apart), or the lane groups of one output block (R > C:
    tile g's table at ``ps + g*param_words``, lane group g). ``fused``: REQUANT_ADD's own fields
    (``_emit``'s ``skip``; its ``qreg`` replaces ``qreg``): REQUANT_ADDs reading the skip in the
    output slot's layout (``mp * count`` words from ``skip_addr``)."""
    cfg = P.cfg
    pw, mp, mg = cfg.param_words, cfg.requant_planes, cfg.lane_groups
    op_name, rs_skip, more = "REQUANT", [], {"qreg": qreg}
    if fused is not None:
        op_name, more = "REQUANT_ADD", dict(fused)
        rs_skip = [(fused["skip_addr"], fused["skip_addr"] + mp * count)]
    for g in range(len(tiles)):
        pa, ag = ps + g * pw, a + g * mstride
        extra = {"dst_plane_stride": count} if mp > 1 else {}
        if mg > 1:
            extra["lane_group"] = g
        P.add(op_name, rs=[(pa, pa + pw), *rs_skip], ra=[(ag, ag + count)], ws=[(os_, os_ + mp * count)],
              acc_addr=ag, count=count, param_addr=pa, dst_addr=os_, relu=int(op.relu), **more, **extra)


def _store_chunks(th: int, tw: int, s_out: int, ap: int) -> list:
    """(rows, columns) of each REQUANT/STORE chunk of a th x tw tile, as ``_emit`` cuts it."""
    if tw <= s_out:
        k = max(1, s_out // tw)
        return [(min(k, th - y), tw) for y in range(0, th, k)]
    seg = max(ap, s_out - s_out % ap)
    return [(1, min(seg, tw - x)) for _ in range(th) for x in range(0, tw, seg)]


def _work(op: QConv, lays: dict, tl, cfg, residual: bool = False, tiles=None, pooled=None,
          table_parts=None) -> LayerWork:
    """The DMA instructions and engine cycles of ``_emit``'s loop nest (backend/estimate.py):
    per tile the input window(s), per (N tile, cin block, tap) a weight tile, LOAD_WEIGHTS and
    MATMUL, per output block (``lane_groups`` N tiles) its requant tables and per chunk its
    REQUANTs (``param_words + requant_planes * rows`` accesses each) and one STORE of its
    ``requant_planes`` planes (each weight tile its ``tile_cols`` words; ``tl.wbatch`` > 1: the
    streaming tiles in batches of that many, ``_batch_loads``). ``residual`` (a fused residual Add, ``ops/conv_add.py``): per
    chunk and output block also the skip tile's LOAD (the STORE's shape), and its REQUANTs are
    REQUANT_ADDs (a skip read per word written: ``param_words + 2 * requant_planes * rows``
    accesses each); with more skip tiles per output tile than ``SKIP_SLOTS + 2`` the next
    tile's window is on the MXU's path (queued on the in-order LOAD channel behind skip LOADs
    that wait for this tile's STOREs), as with one input slot. ``tiles`` (``_emit``'s) and
    ``pooled(tile) -> (rows, cols, VPU cycles, instructions)`` (a fused pool,
    ``ops/conv_pool.py``): per tile and output block, instead of the chunk's STORE, the POOLs of
    each plane and the STORE of the rows x cols pooled tile. ``table_parts``: the bytes of each
    DMA_LOAD that brings one output block's tables (default one of ``param_words`` words)."""
    R, C, W, bb = cfg.array_rows, cfg.array_cols, cfg.word_bytes, cfg.dma_burst_bytes
    ap, pw, mp, mg = align_px(cfg), cfg.param_words, cfg.requant_planes, cfg.lane_groups
    kh, kw = op.kernel
    cout, cin = op.weight.shape[:2]
    KB, NB, T = ceil_div(cin, R), out_tiles(cout, cfg), kh * kw
    nkg = ceil_div(KB, tl.kbg)
    reloads = 1 if nkg == 1 else ceil_div(NB, tl.nbg)      # each cin group's window per N group
    X, Y = lays[op.inp], lays[op.out]
    _, _, Ho, Wo = Y.shape
    # output blocks (N tiles / lane groups, block i moving min(mp, Y.nblocks - i * mp) planes):
    # planes -> output blocks of that many, in order met
    nblk, nout = Y.nblocks, ceil_div(NB, mg)
    full = min(nout, max(0, nblk // mp))
    block_planes: dict = {mp: full} if full else {}
    for i in range(full, nout):
        block_planes[nblk - i * mp] = block_planes.get(nblk - i * mp, 0) + 1
    w = LayerWork(tiles=0)
    # per N tile: its weight tiles' loaded bytes (``tile_cols``), how many are resident; as runs
    # of N tiles alike, (resident, bytes, N tiles): a run's loads counted at once, the same map
    alike = _alike(_resident_runs(tl.nres, KB * T, NB), [(c * W, k) for c, k in tile_col_runs(op, NB, C)])
    for r, b, k in alike:
        w.load(k * r, b, bb)                    # resident weight tiles: loaded once
    kinds = _conv_kinds(op, X, Ho, Wo, tl, ap) if tiles is None else _tile_kinds(op, X, tiles, ap, pooled)
    groups = ceil_div(NB, tl.nbg)
    per_group = min(tl.nbg, NB) // mg           # output blocks of one group
    group_planes, last_planes = _group_planes(groups, per_group, nout, nblk, mp)
    multi = sum(kinds.values()) > 1
    if tl.wbatch > 1:       # batches of wbatch streaming tiles over the layer's MATMUL order
        streaming = {b for r, b, _ in alike if r < KB * T}
        if len(streaming) <= 1:         # all of one size: whole batches and the rest
            n = sum(kinds.values()) * sum(k * (KB * T - r) for r, _, k in alike)
            wt = _even_batch_loads(w, streaming.pop() if streaming else 0, n, tl.wbatch, bb)
        else:
            wt = _batch_loads(w, _streaming_sizes(alike, KB, T, tl), tl.wbatch, bb, sum(kinds.values()))
    for (th, tw, nrows, ncols, pool), n in kinds.items():
        M = th * tw
        w.tiles += n
        wins = [w.load(n * reloads * cnt, ncols * W, bb, runs=nk * nrows) for nk, cnt in tile_sizes(KB, tl.kbg)]
        win = wins[0]
        if tl.wbatch == 1:
            wt = [w.load(n * k * (KB * T - r), b, bb) for r, b, k in alike][0]
        for part in (pw * W,) if table_parts is None else table_parts:
            w.load(n * nout, part, bb, runs=mg)
        w.mxu_cycles += n * NB * KB * T * mxu_pair_cycles(M, R, C)
        w.mxu_instrs += 2 * n * NB * KB * T
        w.sram_words += n * NB * KB * T * (C + M)
        w.acc_accesses += n * NB * (2 * KB * T - 1) * M * C
        chunks = _store_chunks(th, tw, tl.s_out, ap)
        per_word = 2 if residual else 1         # REQUANT_ADD: read the skip word, write
        rq = [mg * (pw + per_word * mp * k * cols) for k, cols in chunks]   # one output block's REQUANT(_ADD)s
        for (k, cols), r in zip(chunks, rq):
            for planes, nbl in block_planes.items():       # nbl output blocks of ``planes`` planes
                nn = n * nbl
                if pool is not None:
                    prows, pcols, cyc, instrs = pool
                    w.store(nn, pcols * W, bb, runs=prows * planes)
                    w.vpu_cycles += nn * planes * cyc
                    w.vpu_instrs += nn * planes * instrs
                    w.sram_words += nn * planes * cyc
                    continue
                w.store(nn, cols * W, bb, runs=k * planes)
                if residual:
                    w.load(nn, cols * W, bb, runs=k * planes)
            w.vpu_cycles += n * nout * r
            w.vpu_instrs += n * nout * mg
            w.sram_words += n * nout * r
            w.acc_accesses += n * NB * k * cols * C
        if not w.fill_bursts:      # the first tile: its window and weight tile come first
            w.fill_bursts = [win, wt]
        # a group's STOREs in emission order (its output blocks', each its chunks'), as planes of
        # one output block -> how many groups; the last tile: its last MATMUL, then its last
        # group's REQUANTs and STOREs
        per_plane = [ceil_div(k * cols * W, bb) if pool is None else ceil_div(pool[1] * W, bb) * pool[0]
                     for k, cols in chunks]
        w.drain_cycles = C + M + R + C + per_group * sum(rq)
        w.drain_bursts = [b * p for p in last_planes for b in per_plane]
        if tl.ni == 1 or (residual and multi and groups * per_group * len(chunks) > SKIP_SLOTS + 2):
            # one input slot: the next window loads after the last MATMUL; a fused residual
            # with more skip tiles per output tile than slots in its ring (the output and skip
            # slots): the LOAD channel is in order, the next tile's window is queued behind
            # this tile's last skip LOADs, and those wait for a slot, freed by this tile's
            # STOREs, after its MATMULs
            for nk, cnt in tile_sizes(KB, tl.kbg):
                w.expose_loads(n * reloads * cnt, ceil_div(ncols * W, bb) * nk * nrows)
        if not tl.acc_halves:      # one accumulator half: a group's REQUANTs finish before the
            # next group's first MATMUL overwrites it, and a REQUANT waits for the STORE two
            # chunks back (two output slots): all but the last two STOREs are on the MXU's path
            for planes, ng in group_planes.items():
                for b in [b * p for p in planes for b in per_plane][:-2]:
                    w.expose_stores(n * ng, b)
            w.exposed_cycles += n * groups * sum(rq[-2:])
    return w


def _group_planes(groups: int, per_group: int, nout: int, nblk: int, mp: int) -> tuple:
    """The planes each output block of a cout group STOREs (``requant_planes`` ``mp``, fewer in
    the last blocks of a tensor of ``nblk`` channel blocks: ``_emit``'s ``min(mp, nblocks - blk)``;
    a wide array's 64-channel output is one plane of its four), per group of ``per_group`` blocks
    (a last group past the ``nout`` blocks repeats the last one), as (distinct tuples of planes
    in group order -> how many groups have them, the last group's)."""
    counts: dict = {}
    for g in range(groups):
        obs = (min(ob, nout - 1) for ob in range(g * per_group, (g + 1) * per_group))
        planes = tuple(min(mp, nblk - ob * mp) for ob in obs)
        counts[planes] = counts.get(planes, 0) + 1
    return counts, planes


def _streaming_sizes(alike: list, KB: int, T: int, tl) -> np.ndarray:
    """The bytes of one output tile's streaming weight tiles in MATMUL order (int64): per cout
    group of ``tl.nbg`` N tiles, per cin block (``tl.kbg`` at a time: in order), per N tile of
    the group, per tap; tile ``(nb * KB + kb) * T + tap`` streams if at least ``tl.nres``
    (``alike``: ``_work``'s runs of N tiles, their weight tiles' bytes second)."""
    wbytes = np.repeat(np.array([b for _, b, _ in alike], np.int64), [k for _, _, k in alike])
    NB, out = len(wbytes), []
    kb, tap = np.arange(KB)[:, None, None], np.arange(T)[None, None, :]
    for g0 in range(0, NB, tl.nbg):
        nb = np.arange(g0, min(NB, g0 + tl.nbg))[None, :, None]
        t = (nb * KB + kb) * T + tap
        out.append(np.broadcast_to(wbytes[nb], t.shape)[t >= tl.nres])
    return np.concatenate(out)


def _resident_runs(nres: int, per: int, NB: int) -> list:
    """Resident weight tiles of N tiles 0 .. NB - 1 of ``per`` weight tiles each, the first
    ``nres`` tiles resident (``min(max(0, nres - nb * per), per)``), as runs ((tiles, N tiles), ...)."""
    full = min(NB, nres // per)
    out = [(per, full)] if full else []
    if full < NB and nres % per:
        out.append((nres % per, 1))
    left = NB - sum(k for _, k in out)
    return out + [(0, left)] if left else out


def _alike(a: list, b: list) -> list:
    """The runs ((value, length), ...) ``a`` and ``b`` of two sequences of one length as runs of
    pairs: [a's value, b's value, length], in order."""
    out: list = []
    i = j = 0
    na, nb = a[0][1], b[0][1]
    while True:
        k = min(na, nb)
        out.append([a[i][0], b[j][0], k])
        na, nb = na - k, nb - k
        if na == 0:
            i += 1
            if i == len(a):
                return out
            na = a[i][1]
        if nb == 0:
            j += 1
            nb = b[j][1]


def _conv_kinds(op: QConv, X, Ho: int, Wo: int, tl, ap: int) -> dict:
    """{(th, tw, window rows, window columns, None): tiles} of ``conv_tiles`` in the order first
    met (rows outer): a window's rows depend on the tile's rows only, its columns on the tile's
    columns only (``input_window``), so per kind of row x kind of column."""
    full, rest = divmod(Ho, tl.th)
    rows: dict = {}                     # th -> (window rows of its first tile, row tiles)
    for oy0, th, n in ((0, tl.th, full), (full * tl.th, rest, 1)):
        if n and th:
            rows[th] = (input_window(op, X, oy0, th, 0, 1, ap, skip_rows=True).nrows, n)
    cols: dict = {}                     # (tw, window columns) -> column tiles
    for ox0 in range(0, Wo, tl.tw):
        tw = min(tl.tw, Wo - ox0)
        key = (tw, input_window(op, X, 0, 1, ox0, tw, ap, skip_rows=True).ncols)
        cols[key] = cols.get(key, 0) + 1
    return {(th, tw, nrows, ncols, None): nr * nc for th, (nrows, nr) in rows.items() for (tw, ncols), nc in cols.items()}


def _tile_kinds(op: QConv, X, tiles: list, ap: int, pooled) -> dict:
    """{(th, tw, window rows, window columns, ``pooled(tile)`` or None): tiles} of ``tiles``, in
    the order first met (a window's rows worked out once per th, its columns once per (ox0, tw):
    ``_conv_kinds``)."""
    kinds: dict = {}
    rows: dict = {}
    cols: dict = {}
    for tile in tiles:
        oy0, th, ox0, tw = tile[:4]
        nrows = rows.get(th)
        if nrows is None:
            nrows = rows[th] = input_window(op, X, oy0, th, 0, 1, ap, skip_rows=True).nrows
        ncols = cols.get((ox0, tw))
        if ncols is None:
            ncols = cols[(ox0, tw)] = input_window(op, X, 0, 1, ox0, tw, ap, skip_rows=True).ncols
        key = (th, tw, nrows, ncols, None if pooled is None else pooled(tile))
        kinds[key] = kinds.get(key, 0) + 1
    return kinds


def _even_batch_loads(w: LayerWork, nbytes: int, n: int, batch: int, bb: int) -> int:
    """``_batch_loads`` of ``n`` streaming weight tiles all of ``nbytes`` bytes: a DMA per whole
    batch, one of the rest; returns the bursts of the first (0 if none)."""
    out = w.load(n // batch, nbytes, bb, runs=batch) if n >= batch else None
    if n % batch:
        b = w.load(1, nbytes, bb, runs=n % batch)
        out = b if out is None else out
    return 0 if out is None else out


def _batch_loads(w: LayerWork, sizes: np.ndarray, batch: int, bb: int, repeat: int = 1) -> int:
    """The DMA_LOADs of streaming weight tiles of ``sizes`` bytes (int64, in MATMUL order) taken
    ``repeat`` times over, ``batch`` at a time, each batch one DMA per run of equal-sized tiles
    (``emit.strided_runs`` starts a new DMA at a tile of another size), counted per (bytes, run
    length) in the order first met; returns the bursts of the first. The DMAs repeat every
    ``lcm(len(sizes), batch)`` tiles (no run crosses such a boundary, a batch starts there): one
    such period is counted once, times the full periods, plus the tiles after the last."""
    n = len(sizes) * repeat
    if n == 0:
        return 0
    period = len(sizes) * batch // math.gcd(len(sizes), batch)
    full, rest = divmod(n, period)
    m = period if full else rest
    seq = np.tile(sizes, ceil_div(m, len(sizes)))[:m]
    start = np.arange(m) % batch == 0          # a DMA starts each batch and each change of size
    start[1:] |= seq[1:] != seq[:-1]
    first = np.flatnonzero(start)
    runs = np.diff(np.append(first, m))
    keys = seq[first] * (batch + 1) + runs
    if full:
        cut = first < rest                     # the runs of the tiles after the last period
        keys = np.concatenate((keys, seq[first[cut]] * (batch + 1) + np.minimum(runs[cut], rest - first[cut])))
    kinds, at, inv = np.unique(keys, return_index=True, return_inverse=True)
    counts = np.bincount(inv, weights=np.where(np.arange(len(keys)) < len(first), max(full, 1), 1)) \
        if full > 1 else np.bincount(inv)
    out = None
    for k in np.argsort(at, kind="stable"):
        b = w.load(int(counts[k]), int(kinds[k] // (batch + 1)), bb, runs=int(kinds[k] % (batch + 1)))
        out = b if out is None else out
    return out


def _remap_channels(op: QConv, maps: dict, blk: int):
    """On an input with a channel map, the weights widen to its lanes (zero on the gap lanes: the
    bias correction, a sum over the real weights, is unchanged). The output has no map."""
    m = maps.get(op.inp)
    if m is None:
        return op, None
    return dataclasses.replace(op, weight=m.widen(op.weight, 1)), None


def _remap_output(op: QConv, m) -> QConv:
    """The conv writing its output channels on the lanes of map ``m``: weight rows, bias,
    multiplier and shift widened (gap lanes: zero weights and multiplier, so they hold y_zp)."""
    return dataclasses.replace(op, weight=m.widen(op.weight, 0), bias=m.widen(op.bias, 0),
                               mult=m.widen(op.mult, 0), shift=m.widen(op.shift, 0))


def _layout(op: QConv, qg, lays) -> None:
    window_layout(op, qg, lays, op.x_zp)


def _constants(op: QConv, cfg) -> dict:
    return {"weights": weight_tiles(op.weight, cfg), "requant": param_tables(op.bias, op.mult, op.shift, cfg)}


def _conv_shape(op: QConv, lays: dict) -> tuple:
    cout, cin = op.weight.shape[:2]
    Y = lays[op.out]
    return op.kernel, op.strides, cin, cout, Y.H, Y.W, False, None


def _tile(op: QConv, lays: dict, cfg):
    kernel, strides, cin, cout, oh, ow, _, _ = _conv_shape(op, lays)
    return tile_conv(op.name, kernel, strides, cin, cout, oh, ow, cfg)


def _describe(op: QConv, tl) -> dict:
    cout, cin = op.weight.shape[:2]
    return dict(kernel=list(op.kernel), strides=list(op.strides), cin=int(cin), cout=int(cout),
                relu=bool(op.relu),
                tiling={"th": tl.th, "tw": tl.tw, "nbg": tl.nbg, "kbg": tl.kbg, "ni": tl.ni, "nw": tl.nw,
                        "acc_halves": tl.acc_halves, "bank_aligned": tl.aligned,
                        "est_cycles": int(tl.est_cycles), **({"weights_resident": tl.nres} if tl.nres else {})})


def _macs(op: QConv, qg) -> int:
    y = qg.tensors[op.out]
    return int(y.shape[2] * y.shape[3] * op.weight.size)


DEVICE = DeviceOp(QConv, golden=conv_int8, input_transform=_input_transform,
                  remap_channels=_remap_channels, plan_layout=_layout,
                  constants=_constants, tile=_tile, emit=_emit, describe=_describe, macs=_macs,
                  remap_output=_remap_output, work=_work, conv_shape=_conv_shape)
def _canonicalize(graph, node, producers) -> list:
    """Kept as it is, once its constants fit the ONNX Conv spec: weight W (M, C/group, kH, kW)
    constant and matching the input's channels, bias B (if given) a constant of M values. A
    Conv reading a zero Pad of H and W reads the Pad's input with the pads added to its own
    (``pad.absorbed_pads``). A depthwise Conv (group = C = M, no dilation, ``depthwise.is_depthwise``) becomes a
    DepthwiseConv (the vector unit's DWCONV). Another grouped (depth multiplier > 1) or dilated
    Conv becomes a dense one (``_dense_weight``): exact, but its MATMULs multiply the zeros too. A Conv
    reading a channel shuffle (``transpose.channel_permutation``) reads the shuffle's input with
    its weight's input channels permuted.
    CompileError naming the node and the tensor otherwise (before calibration runs the model)."""
    x, wn = node.inputs[0], node.inputs[1]
    w = graph.const(wn)
    if w is None:
        raise CompileError(f"node {node.name!r} (Conv): weight {wn!r} is not a constant")
    padded = absorbed_pads(graph, producers, x)
    if padded is not None and "pads" in node.attrs:
        x, extra = padded                  # a zero Pad before it: read its input, pad more
        attrs = {**node.attrs, "pads": tuple(int(a) + int(b) for a, b in zip(node.attrs["pads"], extra))}
        node = Node("Conv", node.name, [x, *node.inputs[1:]], list(node.outputs), attrs)
    xs = graph.tensors[x].shape
    group, dil = node.attrs.get("group", 1), tuple(node.attrs.get("dilations", (1, 1)))
    shuffle = channel_permutation(graph, producers, x) if w.ndim == 4 else None
    if shuffle is not None and is_depthwise(w, xs, group, dil) and _convs_read(graph, node.outputs[0]):
        return _depthwise_before_shuffle(graph, node, producers, w, *shuffle)
    if shuffle is None and is_depthwise(w, xs, group, dil):
        _check_bias(graph, node, w)
        attrs = {k: v for k, v in node.attrs.items() if k not in ("group", "dilations", "kernel_shape")}
        return [Node("DepthwiseConv", node.name, list(node.inputs), list(node.outputs), attrs)]
    if (group != 1 or dil != (1, 1) or shuffle) and w.ndim == 4 and len(xs) == 4:
        if group != 1 or dil != (1, 1):
            w = _dense_weight(node, w, xs[1], group, dil)
        if shuffle is not None and w.shape[1] == xs[1]:
            x, perm = shuffle                  # input channel j is x's channel perm[j]
            wp = np.zeros_like(w)
            wp[:, perm] = w
            w = wp
        attrs = {k: v for k, v in node.attrs.items() if k not in ("group", "dilations")}
        if attrs.get("kernel_shape") is not None:
            attrs["kernel_shape"] = tuple(w.shape[2:])
        wn = graph.add_const(f"{node.name}__dense_w", np.ascontiguousarray(w, np.float32))
        node = Node("Conv", node.name, [x, wn, *node.inputs[2:]], list(node.outputs), attrs)
    if w.ndim != 4 or len(xs) != 4 or w.shape[1] != xs[1]:
        raise CompileError(f"node {node.name!r} (Conv): weight {wn!r} of shape {tuple(w.shape)} does not "
                           f"fit input {x!r} of shape {tuple(xs)} (expected (M, {xs[1] if len(xs) == 4 else 'C'}, kH, kW))")
    _check_bias(graph, node, w)
    return [node]


def _convs_read(graph, name: str) -> bool:
    """Every reader of ``name`` is a Conv (and it is not a graph output)."""
    readers = [n for n in graph.nodes if name in n.inputs]
    return bool(readers) and name not in graph.outputs and all(n.op == "Conv" for n in readers)


def _depthwise_before_shuffle(graph, node, producers, w, src: str, perm) -> list:
    """A depthwise Conv on a channel shuffle of ``src`` (channel j = src channel perm[j]): the
    same DepthwiseConv on ``src`` itself, filter perm[j] being filter j (so its output z has
    z[perm[j]] = y[j]), then a ChannelPermute of z giving y, which the Convs reading y absorb
    (transpose.py). No dense fallback, no data moved."""
    _check_bias(graph, node, w)
    y = node.outputs[0]
    z = f"{y}__unshuffled"
    t = graph.tensors[y]
    graph.tensors[z] = Tensor(z, t.shape, t.dtype, onnx_name=t.onnx_name or y)    # y's range: same values
    wz = np.zeros_like(w)
    wz[perm] = w
    ins = [src, graph.add_const(f"{node.name}__w_unshuffled", np.ascontiguousarray(wz, np.float32))]
    if len(node.inputs) > 2 and node.inputs[2]:
        b = graph.const(node.inputs[2])
        bz = np.zeros_like(b)
        bz[perm] = b
        ins.append(graph.add_const(f"{node.name}__b_unshuffled", bz.astype(np.float32)))
    attrs = {k: v for k, v in node.attrs.items() if k not in ("group", "dilations", "kernel_shape")}
    return [Node("DepthwiseConv", node.name, ins, [z], attrs),
            Node("ChannelPermute", f"{node.name}__shuffle", [z], [y], {"perm": tuple(int(p) for p in perm)})]


def _check_bias(graph, node, w) -> None:
    if len(node.inputs) > 2 and node.inputs[2]:
        b = graph.const(node.inputs[2])
        if b is None or b.shape != (w.shape[0],):
            raise CompileError(f"node {node.name!r} (Conv): bias {node.inputs[2]!r} must be a constant of "
                               f"{w.shape[0]} values, got {None if b is None else tuple(b.shape)}")


OPS = (OpDef("Conv", import_node=_import, canonicalize=_canonicalize, fuses_relu=True, layer=True, quantize=_quantize,
             device=DEVICE),)
