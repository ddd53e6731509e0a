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
DMA_STORE writes the rows. Refused by name: pads that are not constants, negative (a crop), on
the batch or channel axes; modes reflect and edge (at import: not one DMA or table each).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend import tiling
from tpucompile.ops.common import bad_attr, lane_wise_channels, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch.errors import CompileError
from tpusim.arch.operands import LUT_TABLE_BYTES

__all__ = ["OPS", "QPad", "absorbed_pads", "pad_code"]


def _import(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k == "mode":
            mode = v.decode() if isinstance(v, bytes) else v
            if mode != "constant":
                raise bad_attr(node, "mode", mode, "unsupported (only constant)")
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
    return np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], constant_values=val)


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
    if val != 0.0 or len(pads) != 8 or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
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
    x = q.input(node)
    t, l, b, r = pads[2], pads[3], pads[6], pads[7]
    n, c, h, w = x.shape
    out = q.add_tensor(node.outputs[0], x.scale, x.zero_point, shape=(n, c, h + t + b, w + l + r))
    q.add_op(QPad(node.name, x.name, out.name, (t, l, b, r), pad_code(val, x.scale, x.zero_point)))


# ---------------------------------------------------------------- golden
def _golden(op: QPad, x: np.ndarray) -> np.ndarray:
    t, l, b, r = op.pads
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=np.int8(op.value))


# ---------------------------------------------------------------- device lowering
def _layout(op: QPad, qg, lays) -> None:
    op.verify(qg)


def _constants(op: QPad, cfg) -> dict:
    """The LUT table mapping every input to the pad value."""
    return {"lut": np.full(LUT_TABLE_BYTES, op.value, np.int8).tobytes()
            + bytes(cfg.lut_words * cfg.word_bytes - LUT_TABLE_BYTES)}


def _tile(op: QPad, lays: dict, cfg) -> tiling.EltTiling:
    """Two slots of kbg blocks x th whole output rows, and the table."""
    Y = lays[op.out]
    W, bw = cfg.word_bytes, tiling.load_bw(cfg)

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        if tw != Y.W or n > tiling.field_max("LUT", "count") or 2 * n + cfg.lut_words > cfg.sram_words:
            return None
        return nt * n * W * 2 / bw + 60 * nt * 2

    tl = tiling.tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise tiling.untileable(f"QPad {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    tiling.place_slot_groups(tl, {"y": tl.kbg * tl.th * tl.tw, "t": cfg.lut_words}, cfg)
    return tl


def _describe(op: QPad, tl: tiling.EltTiling) -> dict:
    return dict(pads=list(op.pads), value=op.value, tiling={"th": tl.th, "kbg": tl.kbg})


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


DEVICE = DeviceOp(QPad, golden=_golden, input_transform=no_input_transform, remap_channels=lane_wise_channels,
                  plan_layout=_layout, constants=_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs)
OPS = (OpDef("Pad", import_node=_import, fold=_fold, quantize=_quantize, calibrated=False, device=DEVICE),)
