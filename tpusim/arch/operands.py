"""Where each instruction's operands lie: the address generation of docs/isa.md, and the layout
of the REQUANT per-channel table.

Every function takes an instruction's ``args`` (field name -> int, ``Instruction.args``) and only
computes addresses; nothing is range-checked here (``tpusim.arch.device_checks`` does that with
the extents below). Units are in the names: ``_byte`` DDR/SRAM byte addresses, ``_word`` SRAM
word addresses (one word = ``cfg.word_bytes`` bytes), ``_end`` an exclusive bound.
"""
from __future__ import annotations

import numpy as np

#: Bytes per channel of the REQUANT table: bias int32, multiplier int32, shift int8.
REQUANT_TABLE_BYTES_PER_CHANNEL = 9

#: Entries (= bytes) of a LUT instruction's table: one int8 output per int8 input.
LUT_TABLE_BYTES = 256


def dma_runs(a: dict) -> list[tuple[int, int, int]]:
    """DMA_LOAD / DMA_STORE: (ddr_byte, sram_byte, bytes) of each run, run ``(o2, o1)`` in
    issue order (o2 outer, o1 inner): DDR ``ddr_addr + o2*ddr_stride2 + o1*ddr_stride1``, SRAM
    ``sram_addr + o2*sram_stride2 + o1*sram_stride1``, ``inner_bytes`` each."""
    return [(a["ddr_addr"] + o2 * a["ddr_stride2"] + o1 * a["ddr_stride1"],
             a["sram_addr"] + o2 * a["sram_stride2"] + o1 * a["sram_stride1"], a["inner_bytes"])
            for o2 in range(a["count2"]) for o1 in range(a["count1"])]


def dma_ddr_end(a: dict) -> int:
    """One past the last DDR byte of a DMA's last run (counts >= 1; strides are unsigned)."""
    return a["ddr_addr"] + (a["count2"] - 1) * a["ddr_stride2"] + (a["count1"] - 1) * a["ddr_stride1"] \
        + a["inner_bytes"]


def dma_sram_end(a: dict) -> int:
    """One past the last SRAM byte of a DMA's last run (counts >= 1; strides are unsigned)."""
    return a["sram_addr"] + (a["count2"] - 1) * a["sram_stride2"] + (a["count1"] - 1) * a["sram_stride1"] \
        + a["inner_bytes"]


def matmul_words(a: dict) -> list[int]:
    """MATMUL: SRAM word of vector ``i = y*count_x + x``: ``act_addr + x*stride_x + y*stride_y``,
    in ``i`` order (``count_x * count_y`` words; vector i goes to accumulator row acc_addr + i)."""
    return [a["act_addr"] + x * a["stride_x"] + y * a["stride_y"]
            for y in range(a["count_y"]) for x in range(a["count_x"])]


def matmul_last_word(a: dict) -> int:
    """The largest SRAM word a MATMUL reads (``count_x``, ``count_y`` >= 1)."""
    return a["act_addr"] + (a["count_x"] - 1) * a["stride_x"] + (a["count_y"] - 1) * a["stride_y"]


def pool_taps(a: dict) -> list[int]:
    """POOL: source word of every tap of every output, output-major ``(y, x, ty, tx)``:
    ``src_addr + y*out_stride_y + x*out_stride_x + ty*win_stride_y + tx*win_stride_x``
    (``out_h * out_w * win_h * win_w`` words)."""
    return [a["src_addr"] + y * a["out_stride_y"] + x * a["out_stride_x"]
            + ty * a["win_stride_y"] + tx * a["win_stride_x"]
            for y in range(a["out_h"]) for x in range(a["out_w"])
            for ty in range(a["win_h"]) for tx in range(a["win_w"])]


def pool_last_tap(a: dict) -> int:
    """The largest source word a POOL reads (every count >= 1)."""
    return (a["src_addr"] + (a["out_h"] - 1) * a["out_stride_y"] + (a["out_w"] - 1) * a["out_stride_x"]
            + (a["win_h"] - 1) * a["win_stride_y"] + (a["win_w"] - 1) * a["win_stride_x"])


def lut_words(word_bytes: int) -> int:
    """SRAM words of a LUT table: ceil(LUT_TABLE_BYTES / word_bytes); the table is the first
    LUT_TABLE_BYTES bytes of those words."""
    return -(-LUT_TABLE_BYTES // word_bytes)


def lut_table(raw: bytes) -> np.ndarray:
    """Parse a LUT table (the ``lut_words`` words at ``table_addr``): int8[256], entry ``k`` the
    output for the input byte ``k`` (input int8 value ``k - 256`` for ``k >= 128``). ValueError
    if ``raw`` is shorter than LUT_TABLE_BYTES."""
    if len(raw) < LUT_TABLE_BYTES:
        raise ValueError(f"LUT table of {len(raw)} bytes, need {LUT_TABLE_BYTES}")
    return np.frombuffer(raw, np.int8, LUT_TABLE_BYTES)


def requant_writes(a: dict, planes: int, groups: int, cols: int) -> tuple[np.ndarray, int, int]:
    """REQUANT's destination (``planes`` = cfg.requant_planes, ``groups`` = cfg.lane_groups,
    ``cols`` = C): (words int64[count * planes], lo, hi). Write ``t = i * planes + j`` (the
    access order: accumulator row i outer, plane j inner) puts channels ``j*(hi-lo) ..`` of row
    i into lanes ``lo .. hi-1`` of SRAM word ``words[t] = dst_addr + j*dst_plane_stride + i``
    (planes > 1: lo = 0, hi = W; groups > 1: one plane, lanes ``lane_group*C .. +C``; other
    lanes keep their bytes). Later writes of a word win (planes that overlap)."""
    i = np.arange(a["count"], dtype=np.int64)[:, None]
    j = np.arange(planes, dtype=np.int64)[None, :]
    words = (a["dst_addr"] + j * a["dst_plane_stride"] + i).reshape(-1)
    lo = a["lane_group"] * cols if groups > 1 else 0
    return words, lo, lo + cols // planes


def requant_last_word(a: dict, planes: int) -> int:
    """The largest SRAM word a REQUANT with ``count`` >= 1 writes: its last plane's last word."""
    return a["dst_addr"] + (planes - 1) * a["dst_plane_stride"] + a["count"] - 1


def requant_skip_words(a: dict, words: np.ndarray) -> np.ndarray:
    """REQUANT_ADD's skip word of each write ``words[t]`` (``requant_writes``): the word at the
    same offset from ``skip_addr`` as the destination word from ``dst_addr``."""
    return words - a["dst_addr"] + a["skip_addr"]


def requant_add_store(sram: np.ndarray, a: dict, out: np.ndarray, words: np.ndarray, lo: int, hi: int,
                      add) -> np.ndarray:
    """Apply REQUANT_ADD's writes to ``sram`` (int8 [words, W]) in access order: write ``t``
    reads skip word ``requant_skip_words(a, words)[t]`` (lanes ``lo .. hi-1``), then writes
    ``add(out[t], skip lanes)`` into lanes ``lo .. hi-1`` of ``words[t]``; ``out`` int8
    [len(words), hi - lo] (the requantized rows, ``requant_writes``' order). A skip word written
    by an earlier write of the same instruction is read as written (the sequence's order, as the
    RTL's read-then-write per word). Returns the values written, int8 [len(words), hi - lo]."""
    skip = requant_skip_words(a, words)
    if not _reads_an_earlier_write(skip, words):    # (in place: each write reads its own word first)
        vals = add(out, sram[skip, lo:hi])
        keep = last_writes(words)
        sram[words[keep], lo:hi] = vals[keep]
        return vals
    vals = np.empty_like(out)
    for t in range(len(words)):
        vals[t] = add(out[t], sram[skip[t], lo:hi])
        sram[words[t], lo:hi] = vals[t]
    return vals


def _reads_an_earlier_write(skip: np.ndarray, words: np.ndarray) -> bool:
    """Whether some write ``t`` reads a skip word that an earlier write ``s < t`` of the same
    instruction wrote (``skip[t] == words[s]``): only then does the order of the writes change
    what is read. In place (``skip == words``, each word written once) it does not."""
    uniq, first = np.unique(words, return_index=True)        # each word's first write
    pos = np.searchsorted(uniq, skip).clip(0, len(uniq) - 1)
    hit = uniq[pos] == skip
    return bool((hit & (first[pos] < np.arange(len(skip)))).any())


def requant_skip_last_word(a: dict, planes: int) -> int:
    """The largest skip word a REQUANT_ADD with ``count`` >= 1 reads (its last plane's last)."""
    return requant_last_word(a, planes) - a["dst_addr"] + a["skip_addr"]


def last_writes(words: np.ndarray) -> np.ndarray:
    """Indices into ``words`` of the last write of every distinct word (in increasing index
    order): a numpy assignment of those is the in-order result of all writes. Strictly
    increasing ``words`` (one plane, or planes that do not overlap) are all kept, without a sort."""
    if len(words) < 2 or (words[1:] > words[:-1]).all():
        return np.arange(len(words))
    _, first_rev = np.unique(words[::-1], return_index=True)
    return np.sort(len(words) - 1 - first_rev)


def requant_table(raw: bytes, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parse REQUANT's per-channel table (``REQUANT_TABLE_BYTES_PER_CHANNEL * cols`` bytes at
    word ``param_addr``): (bias int32[cols], multiplier int32[cols], shift int8[cols]), little
    endian, in that order. ValueError if ``raw`` is shorter."""
    need = REQUANT_TABLE_BYTES_PER_CHANNEL * cols
    if len(raw) < need:
        raise ValueError(f"requant table of {len(raw)} bytes, need {need} for {cols} channels")
    return (np.frombuffer(raw, "<i4", cols, 0), np.frombuffer(raw, "<i4", cols, 4 * cols),
            np.frombuffer(raw, np.int8, cols, 8 * cols))


__all__ = ["REQUANT_TABLE_BYTES_PER_CHANNEL", "LUT_TABLE_BYTES", "lut_words", "lut_table", "dma_runs", "dma_ddr_end", "dma_sram_end",
           "matmul_words", "matmul_last_word", "requant_skip_words", "requant_skip_last_word", "requant_add_store", "pool_taps", "pool_last_tap", "requant_table",
           "requant_writes", "requant_last_word", "last_writes"]
