"""What one layer asks of each engine, for the fast cost model (tpucompile.backend.estimate): the
``LayerWork`` record the ops' ``work`` hooks return, and the helpers they share (a lane-wise op's
tiles, an op without a hook). Bytes are DDR bytes, cycles core cycles."""
from __future__ import annotations

from dataclasses import dataclass, field

from tpucompile.backend.layout import ceil_div
from tpusim.arch.config import HwConfig


@dataclass
class LayerWork:
    """What one layer asks of each engine. ``loads`` / ``stores``: (instructions, bursts each);
    ``mxu_cycles`` / ``vpu_cycles``: busy core cycles (``*_instrs`` instructions); ``tiles``: tiles
    the layer is cut into; ``*_bytes``: DDR bytes moved. The pipeline's ends, which do not
    overlap the rest: ``fill_bursts`` (bursts of each LOAD before the first compute can start),
    ``drain_cycles`` (MXU + VPU cycles after the last LOAD) and ``drain_bursts`` (bursts of each
    STORE after the last compute)."""
    loads: list = field(default_factory=list)
    stores: list = field(default_factory=list)
    mxu_cycles: float = 0.0
    vpu_cycles: float = 0.0
    mxu_instrs: int = 0
    vpu_instrs: int = 0
    tiles: int = 1
    load_bytes: int = 0
    store_bytes: int = 0
    fill_bursts: list = field(default_factory=list)
    drain_cycles: float = 0.0
    serial: bool = False            # one slot group: a tile's load, compute and store in turn
    sram_words: float = 0.0         # SRAM word accesses of the MXU and VPU (DMA ones: from the bytes)
    acc_accesses: float = 0.0       # int32 accumulator elements read or written
    drain_bursts: list = field(default_factory=list)

    def load(self, count: int, nbytes: int, burst_bytes: int, runs: int = 1) -> int:
        """``count`` DMA_LOADs of ``runs`` runs of ``nbytes`` bytes each; returns the bursts of one."""
        b = runs * ceil_div(nbytes, burst_bytes)
        if count > 0 and nbytes > 0:
            self.loads.append((count, b))
            self.load_bytes += count * runs * nbytes
        return b

    def store(self, count: int, nbytes: int, burst_bytes: int, runs: int = 1) -> int:
        """``count`` DMA_STOREs of ``runs`` runs of ``nbytes`` bytes each; returns the bursts of one."""
        b = runs * ceil_div(nbytes, burst_bytes)
        if count > 0 and nbytes > 0:
            self.stores.append((count, b))
            self.store_bytes += count * runs * nbytes
        return b


def generic_work(op, lays: dict, tiling, cfg: HwConfig) -> LayerWork:
    """An op without a ``work`` hook: every input read once and the output written once in
    tiles of an eighth of the SRAM, two VPU accesses per output word."""
    W, bb = cfg.word_bytes, cfg.dma_burst_bytes
    out = lays[op.out]
    out_words = out.nblocks * out.H * out.W
    chunk = max(1, cfg.sram_words // 8)
    tiles = max(1, ceil_div(out_words, chunk))
    w = LayerWork(tiles=tiles)
    for name in dict.fromkeys(op.inputs):
        if name in lays:
            lay = lays[name]
            w.fill_bursts.append(w.load(tiles, ceil_div(lay.nblocks * lay.H * lay.W, tiles) * W, bb))
    w.drain_bursts.append(w.store(tiles, ceil_div(out_words, tiles) * W, bb))
    w.vpu_cycles, w.vpu_instrs = 2.0 * out_words, tiles
    w.drain_cycles = w.vpu_cycles / tiles
    w.sram_words = w.vpu_cycles
    return w


def elt_work(tl, nblocks: int, oh: int, ow: int, cfg: HwConfig, *, inputs: int = 1,
             vpu_per_output: float = 2.0, vpu_per_tile: float = 0.0, window: bool = True,
             serial: bool = False) -> LayerWork:
    """A lane-wise op tiled by ``backend.tiling.tile_vector`` (EltTiling ``tl``): per tile, each of
    ``inputs`` operands loaded (the ih x iw window of kbg blocks when ``window``, else the th x tw
    tile), one VPU instruction per block of ``vpu_per_output`` accesses per output word plus
    ``vpu_per_tile``, the th x tw x kbg output stored; ``serial``: one slot group (no overlap)."""
    W, bb = cfg.word_bytes, cfg.dma_burst_bytes
    ntiles = ceil_div(oh, tl.th) * ceil_div(ow, tl.tw) * ceil_div(nblocks, tl.kbg)
    th, tw = min(tl.th, oh), min(tl.tw, ow)
    ih, iw = (tl.ih, tl.iw) if window and tl.ih else (th, tw)
    w = LayerWork(tiles=ntiles, serial=serial)
    for _ in range(inputs):
        w.fill_bursts.append(w.load(ntiles, iw * W, bb, runs=tl.kbg * ih))
    w.drain_bursts.append(w.store(ntiles, tw * W, bb, runs=tl.kbg * th))
    w.vpu_cycles = ntiles * (tl.kbg * (th * tw * vpu_per_output + vpu_per_tile))
    w.vpu_instrs = ntiles * tl.kbg
    w.drain_cycles = w.vpu_cycles / ntiles
    w.sram_words = w.vpu_cycles
    return w


__all__ = ["LayerWork", "elt_work", "generic_work"]
