"""Lowering shared by the row ops of the vector unit (SOFTMAX, LAYERNORM: ``ops/softmax.py``,
``ops/layernorm.py``): a row is one pixel's channels (the normalised axis is the channel axis of
the (1, C, H, W) device tensor; a transformer's tokens are pixels, its hidden features channels).

Dataflow per tile of ``th x tw`` pixels with all ``nb = ceil(C / W)`` channel blocks (P = th*tw):

1. DMA_LOAD of the tile in the blocked layout (block outer, pixel inner: word ``k*P + p``).
2. nb > 1 only: a max POOL with a 1x1 window as a transposing copy into the row layout (word
   ``p*nb + k``: one row's nb words consecutive, as the row instructions read them;
   ``out_stride_y = 1``, ``out_stride_x = P``). A DMA cannot gather this on a chip whose word is
   under 32 bytes: a pixel's word in DDR is not at a 32-byte boundary (docs/isa.md, DMA
   alignment). nb = 1 (C <= W): the blocked layout is already the row layout, no copy.
3. The row instruction in place (``rows = P``, ``src_stride = dst_stride = nb``).
4. nb > 1 only: a second POOL copy back to the blocked layout.
5. DMA_STORE.

Two slot groups (double buffering) of (x: P*nb words, t: P*nb words when nb > 1); a constant
table (LAYERNORM's gamma/beta) is loaded once. VPU cost per word: the row instruction's
accesses per word (SOFTMAX 4, LAYERNORM 9) plus 4 for the two copies when nb > 1.
"""
from __future__ import annotations

import numpy as np

from tpucompile.backend import tiling
from tpucompile.backend.work import LayerWork, elt_work
from tpusim.arch.errors import CompileError

__all__ = ["tile_rows", "emit_rows", "work_rows", "no_channel_map", "SRAM_LEN_MAX"]

#: the SRAM transaction length D of one VPU instruction is 17 bits (docs/isa.md)
SRAM_LEN_MAX = (1 << 17) - 1


def no_channel_map(op, maps: dict, blk: int) -> tuple:
    """remap_channels of a row op: the row is the channels in order, so an input with gap lanes
    (a Concat's, a channel Slice's view) is refused naming the op; the output has no map."""
    if maps.get(op.inp) is not None:
        raise CompileError(f"{type(op).__name__} {op.name!r}: input {op.inp!r} has its channels in lanes "
                           f"{maps[op.inp].as_json()} ([logical, lane, count]: a Concat's gap lanes or a "
                           "channel Slice's view); a row op reads the channels in order")
    return op, None


def tile_rows(op, lays: dict, cfg, opcode: str, per_word: int, table_words: int = 0) -> tiling.EltTiling:
    """The tiling of row op ``op`` (``opcode`` SOFTMAX / LAYERNORM, ``per_word`` SRAM accesses per
    row word) over its output's pixels, all channel blocks per tile; ``table_words``: a constant
    table loaded once. CompileError naming the op if no tile fits the SRAM."""
    Y = lays[op.out]
    nb = Y.nblocks
    W, bw = cfg.word_bytes, tiling.load_bw(cfg)
    copies = nb > 1

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        fits = ((kbg == nb) & (th * tw <= tiling.field_max(opcode, "rows")) & (n * per_word <= SRAM_LEN_MAX)
                & (2 * n * (2 if copies else 1) + table_words <= cfg.sram_words))
        if copies:
            fits &= (th * tw <= tiling.field_max("POOL", "out_h")) & (n * 2 <= SRAM_LEN_MAX)
        return np.where(fits, nt * n * W * 2 / bw + 60 * nt * (4 if copies else 2), np.inf)

    tl = tiling.tile_vector(nb, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise tiling.untileable(f"{type(op).__name__} {op.name!r} ({nb} channel blocks per row)", (1, 1), Y.H, Y.W, cfg)
    n = tl.kbg * tl.th * tl.tw
    sizes = {"x": n}
    if copies:
        sizes["t"] = n
    if table_words:
        sizes["p"] = table_words
    tiling.place_slot_groups(tl, sizes, cfg)
    return tl


def emit_rows(P, op, lays: dict, tl: tiling.EltTiling, opcode: str, fields: dict, table=None) -> None:
    """Per tile: LOAD, [POOL copy to rows], ``opcode`` in place with ``fields`` (the op's own
    operands; addresses, rows, strides and row_len are set here), [POOL copy back], STORE.
    ``table``: (DDR address, words) of a constant loaded once to region "p" (``param_addr``)."""
    X, Y = lays[op.inp], lays[op.out]
    C, Ho, Wo = Y.shape[1], Y.shape[2], Y.shape[3]
    nb = Y.nblocks
    reg = tl.regions
    extra_rs = []
    if table is not None:
        addr, words = table
        pa = reg["p"][0]
        P.dma("DMA_LOAD", addr, pa, words * P.cfg.word_bytes)
        fields = dict(fields, param_addr=pa)
        extra_rs = [(pa, pa + words)]
    for t in tiling.elt_tiles(nb, Ho, Wo, tl):
        n, px = t.words, t.th * t.tw
        sx = reg["x"][t.slot]
        P.tile_dma("DMA_LOAD", X, sx, t)
        r = sx
        if nb > 1:
            r = reg["t"][t.slot]
            P.add("POOL", rs=[(sx, sx + n)], ws=[(r, r + n)], mode=0, src_addr=sx, win_w=1, win_h=1,
                  win_stride_x=1, win_stride_y=1, out_w=nb, out_stride_x=px, out_h=px, out_stride_y=1,
                  dst_addr=r, qreg_in=0, qreg_out=0)
        P.add(opcode, rs=[(r, r + n)] + extra_rs, ws=[(r, r + n)], src_addr=r, dst_addr=r, row_len=C,
              rows=px, src_stride=nb, dst_stride=nb, **fields)
        if nb > 1:
            P.add("POOL", rs=[(r, r + n)], ws=[(sx, sx + n)], mode=0, src_addr=r, win_w=1, win_h=1,
                  win_stride_x=1, win_stride_y=1, out_w=px, out_stride_x=nb, out_h=nb, out_stride_y=1,
                  dst_addr=sx, qreg_in=0, qreg_out=0)
        P.tile_dma("DMA_STORE", Y, sx, t)


def work_rows(op, lays: dict, tl: tiling.EltTiling, cfg, per_word: int, table_words: int = 0) -> LayerWork:
    """The estimator's ``work`` of ``emit_rows`` (backend/estimate.py): the table (``table_words``)
    loaded once, then per tile of all channel blocks its LOAD, the row instruction
    (``per_word`` VPU accesses per word) and, with more than one block, the two transposing POOL
    copies (2 accesses per word each: 3 VPU instructions a tile), its STORE."""
    Y = lays[op.out]
    copies = Y.nblocks > 1
    w = elt_work(tl, Y.nblocks, Y.H, Y.W, cfg, vpu_per_output=per_word + (4 if copies else 0), block_instrs=False)
    if copies:
        w.vpu_instrs *= 3
    if table_words:
        w.fill_bursts.append(w.load(1, table_words * cfg.word_bytes, cfg.dma_burst_bytes))
    return w
