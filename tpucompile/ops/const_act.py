"""A constant operand used as an activation (``QConstAct``): the streamed operand of a MatMul of
activations that is a constant (the identity that transposes Vᵀ on the array, ops/act_matmul.py).

The constant (int8 (1, C, H, W), quantized by its reader) is a DDR constant segment in the
blocked layout of a tensor with no border (rows aligned to the DMA granule); the op copies it into
its activation buffer: per tile of kbg channel blocks x th rows, one DMA_LOAD of the segment's
rows into SRAM and one DMA_STORE into the buffer's (whatever border its readers need). Exact; no
vector-unit work. Made by ``ops/act_matmul.py``'s quantize hook, never imported.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpucompile.backend import tiling
from tpucompile.backend.layout import ActLayout
from tpucompile.backend.work import LayerWork
from tpucompile.ops.common import no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef, refusal
from tpucompile.qgraph import QOp, QTensor
from tpusim.arch.errors import CompileError

__all__ = ["QConstAct", "OPS"]


@dataclass(frozen=True, eq=False)
class QConstAct(QOp):
    """``out = value``: int8 (1, C, H, W), the tensor's scale and zero point."""
    name: str
    out: str
    value: np.ndarray

    @property
    def inputs(self) -> tuple:
        return ()

    def verify(self, qg) -> None:
        y = qg.tensors[self.out]
        if tuple(y.shape) != tuple(self.value.shape) or self.value.dtype != np.int8:
            raise CompileError(f"QConstAct {self.name!r}: value {self.value.shape} {self.value.dtype} is not the "
                               f"int8 {tuple(y.shape)} of {self.out!r}")


def _source(op: QConstAct, cfg) -> ActLayout:
    """The segment's layout: the tensor without a border, rows on the granule."""
    lay = ActLayout.for_tensor(QTensor(op.out, tuple(op.value.shape), 1.0, 0), cfg)
    lay.align(cfg)
    return lay


def _golden(op: QConstAct) -> np.ndarray:
    return op.value


def _remap(op: QConstAct, maps: dict, blk: int):
    return op, None


def _layout(op: QConstAct, qg, lays) -> None:
    op.verify(qg)


def _constants(op: QConstAct, cfg) -> dict:
    return {"data": _source(op, cfg).desc().to_blocked(op.value, 0)}


def _tile(op: QConstAct, lays: dict, cfg) -> tiling.EltTiling:
    """Whole rows, as many blocks and rows as fit two slots."""
    Y = lays[op.out]
    rows = max(1, min(Y.H, cfg.sram_words // (2 * Y.Wp)))
    if 2 * rows * Y.Wp > cfg.sram_words:
        raise tiling.untileable(f"QConstAct {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    kbg = max(1, min(Y.nblocks, cfg.sram_words // (2 * rows * Y.Wp))) if rows == Y.H else 1
    tl = tiling.EltTiling(rows, Y.W, kbg)
    tiling.place_slot_groups(tl, {"x": kbg * rows * Y.Wp}, cfg)
    return tl


def _emit(P, op: QConstAct, lays: dict, tl: tiling.EltTiling, consts: dict) -> None:
    Y = lays[op.out]
    S = _source(op, P.cfg)
    S.ddr_addr, S.buf_id = consts["data"], None
    for t in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):
        s = tl.regions["x"][t.slot]
        P.tile_dma("DMA_LOAD", S, s, t)
        P.tile_dma("DMA_STORE", Y, s, t)


def _work(op: QConstAct, lays: dict, tl: tiling.EltTiling, cfg) -> LayerWork:
    """One LOAD and one STORE per tile (``_emit``), no engine cycles."""
    Y, W, bb = lays[op.out], cfg.word_bytes, cfg.dma_burst_bytes
    w = LayerWork(tiles=0)
    for t in tiling.elt_tiles(Y.nblocks, Y.H, Y.W, tl):
        w.tiles += 1
        w.load(1, t.tw * W, bb, runs=t.th * t.nk)
        w.store(1, t.tw * W, bb, runs=t.th * t.nk)
    return w


def _describe(op, tl: tiling.EltTiling) -> dict:
    return dict(tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


DEVICE = DeviceOp(QConstAct, golden=_golden, input_transform=no_input_transform, remap_channels=_remap,
                  plan_layout=_layout, constants=_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=_work)

@refusal
def _quantize(q, node) -> None:
    raise CompileError(f"node {node.name!r} (ConstAct): made by the quantizer (ops/act_matmul.py), never imported")


OPS = (OpDef("ConstAct", quantize=_quantize, calibrated=False, device=DEVICE),)
