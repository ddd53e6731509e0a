"""Pad (ONNX Pad, mode constant): folded on constants; on an activation when a Conv reads it and
it pads H and W only, with 0: the Conv reads the Pad's input with the pads added to its own
(``absorbed_pads``, used by conv.py's canonicalize), which is exact: a Conv's padding is real 0
(the input zero point on int8). Torch's ``F.pad`` before a conv and TensorFlow exports' explicit
``Pad`` -> ``Conv`` (padding VALID) become one padded Conv, no data moves.

Any other constant Pad of H and W (a value other than 0, e.g. TF's -inf before a max pool or
``F.pad(x, p, value=v)``; a zero Pad read by something other than a Conv) is a device copy
(``QPad``): ``y = pad(x)`` with x's scale and zero point (no calibration) and the value rounded
to that grid, ``clamp(floor(v / s_x + 1/2) + zp_x, -128, 127)`` (-inf saturates to -128, the
max pool's identity). Per tile of kbg channel blocks x th whole output rows (tiles follow the
output): a LUT whose 256 entries are all that code writes the pad value over the tile's slot
(skipped when the tile holds no padding), one DMA_LOAD puts the input rows inside it at word
offset ``left`` (SRAM is word addressed, so no DDR alignment constrains the shift), one
DMA_STORE writes the rows.

Modes edge and reflect (``EdgePad`` node, ``QEdgePad``): the pad pixels are input pixels, so the
copy is DMAs only. Per tile of whole output rows, per run of output rows whose source rows
repeat (edge) or walk down (the rows inside; a reflected pad row is a run of its own): one
DMA_LOAD of the input rows at word offset ``left`` and one per pad column, from column 0 of x
(edge's left pads) or of a one-column QSpatialSlice copy of the source column (its copy starts
on a DDR granule, which x's column j need not); one DMA_STORE. Refused by name: pads that are
not constants, negative (a crop), on the batch or channel axes; a reflect pad not smaller than
its axis (ONNX); mode wrap (at import).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend import tiling
from tpucompile.ir import Node
from tpucompile.ops.common import bad_attr, lane_wise_channels, no_constants, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.spatial_slice import QSpatialSlice
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError
from tpusim.arch.operands import LUT_TABLE_BYTES

__all__ = ["OPS", "QPad", "QEdgePad", "absorbed_pads", "pad_code", "edge_pad"]


def _import(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k == "mode":
            mode = v.decode() if isinstance(v, bytes) else v
            if mode not in ("constant", "edge", "reflect"):
                raise bad_attr(node, "mode", mode, "unsupported (only constant, edge and reflect)")
            if mode != "constant":
                out["mode"] = mode
        elif k in ("pads", "paddings") and opset < 11:
            out["pads"] = tuple(int(p) for p in v)
        elif k == "value" and opset < 11:
            out["value"] = float(v)
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _pads_value(graph, node):
    """(pads [begin..., end...], value) of ``node`` from its attributes (opset < 11) or constant
    inputs; None if they are not constants (or an ``axes`` input is given)."""
    if "pads" in node.attrs:
        return list(node.attrs["pads"]), float(node.attrs.get("value", 0.0))
    if len(node.inputs) > 3 and node.inputs[3]:
        return None
    pads = graph.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if pads is None:
        return None
    val = 0.0
    if len(node.inputs) > 2 and node.inputs[2]:
        c = graph.const(node.inputs[2])
        if c is None:
            return None
        val = float(np.asarray(c).reshape(-1)[0]) if np.asarray(c).size else 0.0
    return [int(p) for p in np.asarray(pads).reshape(-1)], val


def _fold(node, x, *rest):
    if "pads" in node.attrs:
        pads, val = list(node.attrs["pads"]), float(node.attrs.get("value", 0.0))
    else:
        pads = [int(p) for p in np.asarray(rest[0]).reshape(-1)]
        val = float(np.asarray(rest[1]).reshape(-1)[0]) if len(rest) > 1 and np.asarray(rest[1]).size else 0.0
    n = x.ndim
    if len(pads) != 2 * n or min(pads) < 0:
        raise CompileError(f"node {node.name!r} (Pad): pads {pads} for a {n}-D constant (2 x {n} values >= 0)")
    widths = [(pads[i], pads[i + n]) for i in range(n)]
    if node.attrs.get("mode", "constant") != "constant":
        return np.pad(x, widths, mode=node.attrs["mode"])
    return np.pad(x, widths, constant_values=val)


def absorbed_pads(graph, producers, name: str):
    """(source tensor, (top, left, bottom, right)) if ``name`` is the output of a Pad of a 4-D
    (N, C, H, W) tensor with constant non-negative pads on H and W only and value 0; None
    otherwise."""
    p = producers.get(name)
    if p is None or p.op != "Pad":
        return None
    pv = _pads_value(graph, p)
    if pv is None:
        return None
    pads, val = pv
    if val != 0.0 or p.attrs.get("mode", "constant") != "constant" or len(pads) != 8 or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
        return None
    return p.inputs[0], (pads[2], pads[3], pads[6], pads[7])


def pad_code(value: float, scale: float, zero_point: int) -> int:
    """The int8 code of pad value ``value`` on a tensor's grid: ``clamp(floor(v / s + 1/2) + zp)``
    (an infinity saturates)."""
    q = np.floor(np.float64(value) / scale + 0.5) + zero_point if np.isfinite(value) else np.sign(value) * 255
    return int(np.clip(q, -128, 127))


@dataclass(frozen=True, eq=False)
class QPad(QOp):
    """``y = x`` padded by ``pads`` (top, left, bottom, right) pixels of int8 ``value`` on H and W;
    x and y share one scale and zero point (module docstring)."""
    name: str
    inp: str
    out: str
    pads: tuple
    value: int

    def verify(self, qg) -> None:
        n, c, h, w = qg.tensors[self.inp].shape
        t, l, b, r = self.pads
        if tuple(qg.tensors[self.out].shape) != (n, c, h + t + b, w + l + r) or min(self.pads) < 0:
            raise CompileError(f"QPad {self.name!r}: input {qg.tensors[self.inp].shape} padded by {self.pads} is "
                               f"not the output {qg.tensors[self.out].shape}")


@dataclass(frozen=True, eq=False)
class QEdgePad(QOp):
    """``y = x`` padded by ``pads`` (top, left, bottom, right) on H and W with its own pixels
    (ONNX Pad ``mode`` edge: the edge pixel repeated; reflect: mirrored about it, the edge not
    repeated). ``cols[k]`` is the tensor whose column 0 is pad column k (the left ones, then the
    right ones): x itself for x's column 0, else a (1, C, H, 1) copy of one column of x whose
    column starts on a DDR granule. Every tensor shares one scale and zero point."""
    name: str
    inp: str
    cols: tuple
    out: str
    pads: tuple
    mode: str = "edge"

    @property
    def inputs(self) -> tuple:
        return tuple(dict.fromkeys((self.inp,) + tuple(self.cols)))

    def verify(self, qg) -> None:
        n, c, h, w = qg.tensors[self.inp].shape
        t, l, b, r = self.pads
        bad = [k for k in self.cols if k != self.inp and tuple(qg.tensors[k].shape) != (n, c, h, 1)]
        if tuple(qg.tensors[self.out].shape) != (n, c, h + t + b, w + l + r) or min(self.pads) < 0 or bad or \
                len(self.cols) != l + r:
            raise CompileError(f"QEdgePad {self.name!r}: input {qg.tensors[self.inp].shape} (columns {self.cols}) "
                               f"padded by {self.pads} is not the output {qg.tensors[self.out].shape}")


def _quantize(q, node) -> None:
    """A QPad, or CompileError naming the node and why its pads have no device copy."""
    pv = _pads_value(q.g, node)
    if pv is None:
        raise CompileError(f"node {node.name!r} (Pad): its pads are not constants; only a Pad of H and W by "
                           "constant non-negative amounts maps to the device")
    pads, val = pv
    if len(pads) != 8 or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
        raise CompileError(f"node {node.name!r} (Pad): pads {pads} are not non-negative pads of H and W of an "
                           "NCHW tensor; only a Pad of H and W maps to the device (a crop is a Slice)")
    if node.attrs.get("mode", "constant") != "constant":
        raise CompileError(f"internal: node {node.name!r} (Pad, {node.attrs['mode']}) not made an EdgePad")
    x = q.input(node)
    t, l, b, r = pads[2], pads[3], pads[6], pads[7]
    n, c, h, w = x.shape
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=(n, c, h + t + b, w + l + r))
    q.add_op(QPad(node.name, x.name, out.name, (t, l, b, r), pad_code(val, x.scale, x.zero_point)))


def _canonicalize(graph, node, producers) -> list:
    """A Pad of mode edge or reflect with constant non-negative pads of H and W -> an ``EdgePad``
    node (attributes ``pads``: top, left, bottom, right, and ``mode``); kept otherwise (the
    quantize hook names why)."""
    pv = _pads_value(graph, node)
    if node.attrs.get("mode", "constant") == "constant" or pv is None or len(pv[0]) != 8 or min(pv[0]) < 0 or \
            any(pv[0][i] for i in (0, 1, 4, 5)):
        return [node]
    p, (h, w) = pv[0], graph.tensors[node.inputs[0]].shape[2:]
    if node.attrs["mode"] == "reflect" and (max(p[2], p[6]) >= h or max(p[3], p[7]) >= w):
        raise CompileError(f"node {node.name!r} (Pad, reflect): pads {[p[2], p[3], p[6], p[7]]} (top, left, bottom, "
                           f"right) of a {h} x {w} map; a reflect pad must be smaller than its axis")
    return [Node("EdgePad", node.name, [node.inputs[0]], list(node.outputs),
                 {"pads": (p[2], p[3], p[6], p[7]), "mode": node.attrs["mode"]})]


def _quantize_edge(q, node) -> None:
    """An ``EdgePad`` node (``_canonicalize``)."""
    edge_pad(q, node.name, q.input(node), node.outputs[0], tuple(node.attrs["pads"]), node.attrs["mode"])


def _source_index(i: int, n: int, mode: str) -> int:
    """The input index that padded index ``i`` (of an axis of ``n``; -1 is the first pad before
    it) copies: edge clamps, reflect mirrors about the edge (ONNX Pad)."""
    if mode == "edge":
        return min(max(i, 0), n - 1)
    return -i if i < 0 else (2 * (n - 1) - i if i >= n else i)


def edge_pad(q, name: str, x, y: str, pads: tuple, mode: str = "edge"):
    """Add the ops of ``y`` = x padded by ``pads`` (top, left, bottom, right) with its own pixels
    (``mode`` edge or reflect, ONNX Pad) through quantizer ``q``: a QSpatialSlice of each input
    column other than 0 that a pad column copies (so its copy starts on a DDR granule) and a
    QEdgePad; returns y's QTensor (a reflect pad is smaller than its axis: ``_canonicalize``)."""
    t, l, b, r = pads
    n, c, h, w = x.shape
    cols, made = [], {0: x.name}
    for j in [_source_index(-1 - k, w, mode) for k in reversed(range(l))] + [_source_index(w + k, w, mode)
                                                                          for k in range(r)]:
        if j not in made:
            col = q.add_tensor(f"{y}__col{j}", x.scale, x.zero_point, shape=(n, c, h, 1))
            q.add_op(QSpatialSlice(f"{name}__col{j}", x.name, col.name, (0, 1, h), (j, 1, 1)))
            made[j] = col.name
        cols.append(made[j])
    out = q.add_tensor(y, x.scale, x.zero_point, shape=(n, c, h + t + b, w + l + r))
    q.add_op(QEdgePad(name, x.name, tuple(cols), out.name, pads, mode))
    return out


# ---------------------------------------------------------------- golden
def _golden(op: QPad, x: np.ndarray) -> np.ndarray:
    t, l, b, r = op.pads
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=np.int8(op.value))


def _golden_edge(op: QEdgePad, x: np.ndarray, *cols: np.ndarray) -> np.ndarray:
    t, l, b, r = op.pads
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), mode=op.mode)


# ---------------------------------------------------------------- device lowering
def _layout(op: QPad, qg, lays) -> None:
    op.verify(qg)


def _constants(op: QPad, cfg) -> dict:
    """The LUT table mapping every input to the pad value."""
    return {"lut": np.full(LUT_TABLE_BYTES, op.value, np.int8).tobytes()
            + bytes(cfg.lut_words * cfg.word_bytes - LUT_TABLE_BYTES)}


def _tile(op, lays: dict, cfg) -> tiling.EltTiling:
    """Two slots of kbg blocks x th whole output rows, and the table (QPad only)."""
    Y = lays[op.out]
    W, bw = cfg.word_bytes, tiling.load_bw(cfg)
    table = cfg.lut_words if isinstance(op, QPad) else 0

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        fits = (tw == Y.W) & (n <= tiling.field_max("LUT", "count")) & (2 * n + table <= cfg.sram_words)
        return np.where(fits, nt * n * W * 2 / bw + 60 * nt * 2, np.inf)

    tl = tiling.tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise tiling.untileable(f"{type(op).__name__} {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    tiling.place_slot_groups(tl, {"y": tl.kbg * tl.th * tl.tw, **({"t": table} if table else {})}, cfg)
    return tl


def _describe(op: QPad, tl: tiling.EltTiling) -> dict:
    return dict(pads=list(op.pads), value=op.value, tiling={"th": tl.th, "kbg": tl.kbg})


def _describe_edge(op: QEdgePad, tl: tiling.EltTiling) -> dict:
    return dict(pads=list(op.pads), mode=op.mode, tiling={"th": tl.th, "kbg": tl.kbg})


def _edge_channels(op: QEdgePad, maps: dict, blk: int):
    """Lane-wise; x and its column copies have one channel map."""
    if any(maps.get(k) != maps.get(op.inp) for k in op.cols):
        raise CompileError(f"internal: QEdgePad {op.name!r}: {op.inp!r} and its column copies have different lanes")
    return op, maps.get(op.inp)


def _emit(P, op: QPad, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    """The table once; per tile of whole output rows: LUT (pad value over the slot) when the tile
    holds padding, LOAD of the input rows it holds at column ``left``, STORE."""
    X, Y = lays[op.inp], lays[op.out]
    W = P.cfg.word_bytes
    top, left, _, right = op.pads
    reg, tab = tl.regions, tl.regions["t"][0]
    P.dma("DMA_LOAD", consts["lut"], tab, P.cfg.lut_words * W)
    for tile in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):        # tl.tw = Y.W: whole rows
        s, n = reg["y"][tile.slot], tile.words
        r0, r1 = max(tile.oy0 - top, 0), min(tile.oy0 + tile.th - top, X.H)     # input rows in the tile
        if left or right or r1 - r0 < tile.th:
            P.add("LUT", rs=[(s, s + n), (tab, tab + P.cfg.lut_words)], ws=[(s, s + n)], src_addr=s, dst_addr=s,
                  count=n, table_addr=tab)
        if r1 > r0:
            P.dma("DMA_LOAD", X.iaddr(tile.k0, r0, 0), s + (r0 + top - tile.oy0) * Y.W + left, X.W * W, r1 - r0,
                  X.row_bytes, Y.W * W, tile.nk, X.block_bytes, tile.th * Y.W * W, buf=X.buf_id)
        P.tile_dma("DMA_STORE", Y, s, tile)


def _emit_edge(P, op: QEdgePad, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    """Per tile of whole output rows, for each run of output rows whose source rows step by 0
    (edge pad rows) or 1 (the rows inside): one DMA_LOAD of the input rows at column ``left``,
    one per pad column (column 0 of ``cols[k]``), then one DMA_STORE."""
    X, Y = lays[op.inp], lays[op.out]
    W = P.cfg.word_bytes
    top, left, _, _ = op.pads
    words = list(range(left)) + [left + X.W + k for k in range(len(op.cols) - left)]
    for tile in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):        # tl.tw = Y.W: whole rows
        s = tl.regions["y"][tile.slot]
        for oy, n, src, step in _row_runs(tile.oy0, tile.th, top, X.H, op.mode):
            base = s + (oy - tile.oy0) * Y.W

            def load(T, word, nbytes):
                P.dma("DMA_LOAD", T.iaddr(tile.k0, src, 0), base + word, nbytes, n, step * T.row_bytes,
                      Y.W * W, tile.nk, T.block_bytes, tile.th * Y.W * W, buf=T.buf_id)
            load(X, left, X.W * W)
            for word, col in zip(words, op.cols):
                load(lays[col], word, W)
        P.tile_dma("DMA_STORE", Y, s, tile)


def _row_runs(oy0: int, th: int, top: int, h: int, mode: str):
    """[first output row, rows, source row, source step 0 or 1] runs of output rows oy0 .. oy0 +
    th - 1 of a pad of ``mode`` (``_source_index``): a DMA repeats a row (step 0) or walks down
    (step 1); a reflected pad row is a run of its own."""
    runs = []
    for oy in range(oy0, oy0 + th):
        src = _source_index(oy - top, h, mode)
        last = runs[-1] if runs else None
        if last is not None and last[1] == 1 and src - last[2] in (0, 1):
            last[1], last[3] = 2, src - last[2]
        elif last is not None and last[1] > 1 and src == last[2] + last[3] * last[1]:
            last[1] += 1
        else:
            runs.append([oy, 1, src, 1])
    return runs


DEVICE_EDGE = DeviceOp(QEdgePad, golden=_golden_edge, input_transform=no_input_transform,
                       remap_channels=_edge_channels, plan_layout=_layout,
                       constants=no_constants, tile=_tile, emit=_emit_edge, describe=_describe_edge, macs=no_macs)
DEVICE = DeviceOp(QPad, golden=_golden, input_transform=no_input_transform, remap_channels=lane_wise_channels,
                  plan_layout=_layout, constants=_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs)
OPS = (OpDef("Pad", import_node=_import, fold=_fold, canonicalize=_canonicalize, quantize=_quantize, calibrated=False,
             device=DEVICE),
       OpDef("EdgePad", quantize=_quantize_edge, calibrated=False, device=DEVICE_EDGE))   # made by _canonicalize only
