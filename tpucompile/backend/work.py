"""What one layer asks of each engine, for the fast cost model (tpucompile.backend.estimate): the
``LayerWork`` record the ops' ``work`` hooks return, and the helpers they share (a lane-wise op's
tiles, an op without a hook). Bytes are DDR bytes, cycles core cycles."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpucompile.backend.layout import ceil_div
from tpusim.arch.config import HwConfig


@dataclass
class LayerWork:
    """What one layer asks of each engine. ``loads`` / ``stores``: bursts per instruction ->
    instructions of that size;
    ``mxu_cycles`` / ``vpu_cycles``: busy core cycles (``*_instrs`` instructions); ``tiles``: tiles
    the layer is cut into; ``*_bytes``: DDR bytes moved. The pipeline's ends, which do not
    overlap the rest: ``fill_bursts`` (bursts of each LOAD before the first compute can start),
    ``drain_cycles`` (MXU + VPU cycles after the last LOAD) and ``drain_bursts`` (bursts of each
    STORE after the last compute). What lies on the MXU's path besides its own work (a tiling
    without double buffering): ``exposed_loads`` / ``exposed_stores`` (bursts -> instructions)
    and ``exposed_cycles`` (VPU cycles)."""
    loads: dict = field(default_factory=dict)
    stores: dict = field(default_factory=dict)
    mxu_cycles: float = 0.0
    vpu_cycles: float = 0.0
    mxu_instrs: int = 0
    vpu_instrs: int = 0
    tiles: int = 1
    load_bytes: int = 0
    store_bytes: int = 0
    fill_bursts: list = field(default_factory=list)
    drain_cycles: float = 0.0
    drain_bursts: list = field(default_factory=list)
    serial: bool = False            # one slot group: a tile's load, compute and store in turn
    sram_words: float = 0.0         # SRAM word accesses of the MXU and VPU (DMA ones: from the bytes)
    acc_accesses: float = 0.0       # int32 accumulator elements read or written
    exposed_loads: dict = field(default_factory=dict)
    exposed_stores: dict = field(default_factory=dict)
    exposed_cycles: float = 0.0

    def expose_loads(self, count: int, bursts: int) -> None:
        """``count`` LOADs of ``bursts`` that the MXU waits for (no double buffer)."""
        _add(self.exposed_loads, bursts, count)

    def expose_stores(self, count: int, bursts: int) -> None:
        """``count`` STOREs of ``bursts`` that the MXU waits for (no second accumulator half)."""
        _add(self.exposed_stores, bursts, count)

    def totals(self) -> tuple[int, int]:
        """(LOAD bursts, STORE bursts) of the layer."""
        return sum(n * b for b, n in self.loads.items()), sum(n * b for b, n in self.stores.items())

    def load(self, count: int, nbytes: int, burst_bytes: int, runs: int = 1) -> int:
        """``count`` DMA_LOADs of ``runs`` runs of ``nbytes`` bytes each; returns the bursts of one."""
        b = runs * ceil_div(nbytes, burst_bytes)
        if count > 0 and nbytes > 0:
            _add(self.loads, b, count)
            self.load_bytes += count * runs * nbytes
        return b

    def store(self, count: int, nbytes: int, burst_bytes: int, runs: int = 1) -> int:
        """``count`` DMA_STOREs of ``runs`` runs of ``nbytes`` bytes each; returns the bursts of one."""
        b = runs * ceil_div(nbytes, burst_bytes)
        if count > 0 and nbytes > 0:
            _add(self.stores, b, count)
            self.store_bytes += count * runs * nbytes
        return b


def mxu_pair_cycles(M, R: int, C: int):
    """Core cycles one LOAD_WEIGHTS + MATMUL pair of ``M`` vectors (int or int64 array) takes in a
    stream of them with double-buffered weights (docs/architecture.md, "MXU"), issue gaps
    included, no bank conflict: the period ``T`` of MATMUL starts is the largest of
    ``M + 2`` (the activation port: next MATMUL at A + 1, granted a cycle after its start),
    ``C + 5`` (the next LOAD_WEIGHTS starts two cycles after the MATMUL's grant, loads ``C``
    words a cycle after its start; the MATMUL after it starts at L + 1) and
    ``(M + R + C + 4) / 2`` (a LOAD_WEIGHTS writes the plane of the MATMUL two pairs back, once
    its last vector has passed the ``R`` rows: two periods cover ``M + R + C + 4``). The last
    MATMUL of a stream drains in full (``drain_cycles``). An int ``M`` gives an int (no numpy
    scalar: the conv work hook and the tiler's batch test call it per tile shape)."""
    if type(M) is int:
        return max(M + 2, C + 5, (M + R + C + 5) // 2)
    return np.maximum(np.maximum(M + 2, C + 5), (M + R + C + 5) // 2)


def _add(instrs: dict, bursts: int, count: int) -> None:
    """``count`` more DMA instructions of ``bursts`` bursts in a bursts -> instructions map."""
    instrs[bursts] = instrs.get(bursts, 0) + count


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


def no_work(op, lays: dict, tiling, cfg: HwConfig) -> None:
    """The ``work`` hook of a view (Concat, Slice): no instruction, nothing moved."""
    return None


def tile_sizes(n: int, t: int) -> list:
    """(size, how many) of the tiles ``range(0, n, t)`` cuts: the full ones and the remainder."""
    out = [(t, n // t)] if n >= t else []
    return out + [(n % t, 1)] if n % t else out


def elt_work(tl, nblocks: int, oh: int, ow: int, cfg: HwConfig, *, window=None, regions=None,
             inputs: int = 1, vpu_per_output: float = 2.0, vpu_per_block: float = 0.0,
             block_instrs: bool = True) -> LayerWork:
    """A lane-wise op tiled by ``backend.tiling.tile_vector`` (EltTiling ``tl``): per tile of kbg
    channel blocks x th x tw outputs, each of ``inputs`` operands loaded (a window op's
    ``window(oy0, th, ox0, tw) -> (rows, columns)`` of input it loads, over each of its
    ``regions`` (ry0, ry1, rx0, rx1) of the output, default the whole; else the tile itself),
    VPU work of ``vpu_per_output`` accesses per output word plus ``vpu_per_block`` per block (one
    instruction per block when ``block_instrs``, else one per tile), the output stored. A tiling
    with one slot group (``tl.regions`` slots equal) runs each tile's load, compute and store in
    turn."""
    W, bb = cfg.word_bytes, cfg.dma_burst_bytes
    regs = tl.regions.get("i") or tl.regions.get("a") or [0, 1]
    w = LayerWork(tiles=0, serial=len(regs) > 1 and regs[0] == regs[1])
    tiles = []                       # (tiles of this shape, nk, th, tw, input rows, input columns)
    for nk, nn in tile_sizes(nblocks, tl.kbg):
        if window is None:
            tiles += [(nn * nh * nw, nk, th, tw, th, tw) for th, nh in tile_sizes(oh, tl.th)
                      for tw, nw in tile_sizes(ow, tl.tw)]
            continue
        for ry0, ry1, rx0, rx1 in regions or ((0, oh, 0, ow),):
            for oy0 in range(ry0, ry1, tl.th):
                th = min(tl.th, ry1 - oy0)
                for ox0 in range(rx0, rx1, tl.tw):
                    tw = min(tl.tw, rx1 - ox0)
                    tiles.append((nn, nk, th, tw, *window(oy0, th, ox0, tw)))
    for n, nk, th, tw, ih, iw in tiles:
        w.tiles += n
        fill = [w.load(n, iw * W, bb, runs=nk * ih) for _ in range(inputs)]
        out = w.store(n, tw * W, bb, runs=nk * th)
        vpu = nk * (th * tw * vpu_per_output + vpu_per_block)
        w.vpu_cycles += n * vpu
        w.vpu_instrs += n * (nk if block_instrs else 1)
        if not w.fill_bursts:
            w.fill_bursts = fill
        w.drain_cycles, w.drain_bursts = vpu, [out]
    w.sram_words = w.vpu_cycles
    return w


__all__ = ["LayerWork", "elt_work", "generic_work", "mxu_pair_cycles", "no_work", "tile_sizes"]
