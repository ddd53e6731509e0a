"""SOFTMAX and LAYERNORM over SRAM rows, in the instructions' access order (docs/isa.md).

A row op works on ``rows`` rows of ``row_len`` int8 elements; a row is ``n = ceil(row_len / W)``
consecutive SRAM words (element ``e`` = lane ``e % W`` of word ``e // W``; the lanes past
``row_len`` in the last word are not part of the row). Row ``r`` reads words
``src_addr + r*src_stride + j`` and writes words ``dst_addr + r*dst_stride + j``, ``j < n``.

Access order (one SRAM transaction, one access per cycle; the golden executor, the SimPy VPU and
the RTL follow it, so overlapping source, destination and table give the same words everywhere):
  SOFTMAX, per row: pass 1 reads the n words (max), pass 2 reads them again (exponentials and
    their sum), pass 3 per word j reads word j and writes its output: D = rows * 4n.
  LAYERNORM, per row: pass 1 reads the n words (sum, sum of squares), pass 2 per word j reads
    the 6 table words ``param_addr + 6j + t`` (t = 0, 1: gamma int16 bytes 0, 1; t = 2..5: beta
    int32 bytes 0..3; lane l of these words is channel ``j*W + l``), reads word j and writes its
    output: D = rows * 9n.
The row statistics come from the words as read in the first pass(es); the last pass re-reads each
word (it sees the instruction's own earlier writes when the destination overlaps the source).
Arithmetic: ``tpusim.arch.arith`` (softmax_stats / softmax_out, layernorm_stats / layernorm_out).
"""
from __future__ import annotations

import numpy as np

from tpusim.arch import arith

ROWOPS = ("SOFTMAX", "LAYERNORM")


def row_words(row_len: int, word_bytes: int) -> int:
    """Words per row: ceil(row_len / W)."""
    return -(-int(row_len) // int(word_bytes))


def accesses_per_word(op: str) -> int:
    """SRAM accesses per row word: SOFTMAX 4 (3 reads, 1 write), LAYERNORM 9 (2 reads, 6 table
    reads, 1 write)."""
    return 4 if op == "SOFTMAX" else 3 + arith.LAYERNORM_PARAM_PLANES


def rowop_accesses(op: str, a: dict, word_bytes: int) -> int:
    """D: the SRAM accesses of a SOFTMAX / LAYERNORM (0: no rows or row_len 0, no request)."""
    return a["rows"] * row_words(a["row_len"], word_bytes) * accesses_per_word(op)


def _row_addrs(base: int, stride: int, rows: int, n: int) -> np.ndarray:
    return base + np.arange(rows)[:, None] * stride + np.arange(n)[None, :]


def rowop_ranges(op: str, a: dict, word_bytes: int) -> list[tuple[str, int, int]]:
    """(field, first word, last word) of each operand (source rows, destination rows, LAYERNORM's
    table of 6n words); empty without accesses."""
    n, rows = row_words(a["row_len"], word_bytes), a["rows"]
    if n * rows == 0:
        return []
    out = [("src_addr", a["src_addr"], a["src_addr"] + (rows - 1) * a["src_stride"] + n - 1),
           ("dst_addr", a["dst_addr"], a["dst_addr"] + (rows - 1) * a["dst_stride"] + n - 1)]
    if op == "LAYERNORM":
        out.append(("param_addr", a["param_addr"], a["param_addr"] + arith.LAYERNORM_PARAM_PLANES * n - 1))
    return out


def _lanes_valid(row_len: int, n: int, w: int) -> np.ndarray:
    return (np.arange(n * w) < row_len).reshape(n, w)


def _ln_params(words: np.ndarray, param_addr: int, j) -> tuple[np.ndarray, np.ndarray]:
    """gamma int16 [.., W], beta int32 [.., W] of row word(s) j from the byte-plane table."""
    base = param_addr + arith.LAYERNORM_PARAM_PLANES * np.asarray(j)
    u = words[base[..., None] + np.arange(arith.LAYERNORM_PARAM_PLANES)].astype(np.int64) & 0xFF
    gamma = (u[..., 0, :] | u[..., 1, :] << 8).astype(np.uint16).astype(np.int16)
    beta = (u[..., 2, :] | u[..., 3, :] << 8 | u[..., 4, :] << 16 | u[..., 5, :] << 24).astype(np.uint32).astype(np.int32)
    return gamma.astype(np.int64), beta.astype(np.int64)


def ln_param_words(gamma, beta, word_bytes: int) -> np.ndarray:
    """The LAYERNORM table for per-channel gamma (int16 [N]) and beta (int32 [N]): int8
    [6n, W] (n = ceil(N/W) row words; channels past N are 0)."""
    gamma = np.asarray(gamma, dtype=np.int64)
    beta = np.asarray(beta, dtype=np.int64)
    n = row_words(len(gamma), word_bytes)
    g = np.zeros(n * word_bytes, np.int64)
    b = np.zeros(n * word_bytes, np.int64)
    g[:len(gamma)], b[:len(beta)] = gamma & 0xFFFF, beta & 0xFFFFFFFF
    planes = [g & 0xFF, g >> 8 & 0xFF, b & 0xFF, b >> 8 & 0xFF, b >> 16 & 0xFF, b >> 24 & 0xFF]
    out = np.stack([p.reshape(n, word_bytes) for p in planes], axis=1)    # [n, 6, W]
    return out.reshape(n * arith.LAYERNORM_PARAM_PLANES, word_bytes).astype(np.uint8).astype(np.int8)


def run_rowop(op: str, words: np.ndarray, a: dict, qout: tuple[int, int, int], observe=None,
              on_write=None) -> None:
    """Execute a SOFTMAX / LAYERNORM on ``words`` (int8 [sram_words, W], modified in place) with
    the output quant register ``qout`` = (multiplier, shift, zero_point). ``observe(event,
    **info)``: told each row's statistics (stressgen coverage): ``softmax`` (x: the rows as
    first read [rows, n*W], in_row: the lanes in the row [n*W], live: in the row and not masked
    [rows, n*W], total: the sums of exponentials [rows]) or ``layernorm`` (x: the word(s) of
    the last pass, valid: their lanes in the row, var: N*sumsq - sum**2 [rows], acc:
    sat32(xn*gamma + beta) of the valid lanes).
    ``on_write(word_indices, values)``: told the writes in access order (int [k], int8 [k, W]).
    Access-order
    exact (module docstring); rows are vectorised when no written word is read by the
    instruction."""
    w = words.shape[1]
    n, rows, row_len = row_words(a["row_len"], w), a["rows"], a["row_len"]
    if n * rows == 0:
        return
    mult, shift, zp = qout
    src = _row_addrs(a["src_addr"], a["src_stride"], rows, n)
    dst = _row_addrs(a["dst_addr"], a["dst_stride"], rows, n)
    reads = [src.ravel()]
    if op == "LAYERNORM":
        reads.append(a["param_addr"] + np.arange(arith.LAYERNORM_PARAM_PLANES * n))
    lanes = _lanes_valid(row_len, n, w)                  # (n, w): lanes of each row word in the row
    valid = lanes.reshape(-1)
    # in place (dst = src, equal strides, rows apart): each word is read for the last time just
    # before its own write, so the vectorised order gives the same words
    in_place = (a["dst_addr"] == a["src_addr"] and a["dst_stride"] == a["src_stride"]
                and (rows == 1 or a["src_stride"] >= n))
    checked = reads[1:] if in_place else reads          # in place: only the table can be hit
    exact = bool(checked) and bool(np.intersect1d(dst.ravel(), np.concatenate(checked)).size)
    if not exact:
        blocks = [(slice(None), src, dst)]      # no write is read: all rows at once
    else:
        blocks = [(slice(r, r + 1), src[r:r + 1], dst[r:r + 1]) for r in range(rows)]
    for _, s_rows, d_rows in blocks:
        x = words[s_rows].reshape(len(s_rows), n * w)
        if op == "SOFTMAX":
            xmax, total = arith.softmax_stats(x, valid, a["exp_mult"], bool(a["mask"]))
            if observe:
                observe("softmax", x=x, in_row=valid, live=arith.softmax_valid(x, valid, bool(a["mask"])),
                        total=total)
        else:
            total, sumsq = arith.layernorm_stats(x, valid)
        for j in (range(n) if exact else [slice(None)]):
            jj = np.arange(n)[j] if not exact else np.array([j])
            xj = words[s_rows[:, jj]].reshape(len(s_rows), -1)        # the word(s) as re-read now
            vj = lanes[jj].reshape(-1)
            if op == "SOFTMAX":
                out = arith.softmax_out(xj, vj, xmax, total, a["exp_mult"], bool(a["mask"]), mult, shift, zp)
            else:
                gamma, beta = _ln_params(words, a["param_addr"], jj)
                gamma, beta = gamma.reshape(-1), beta.reshape(-1)
                out = arith.layernorm_out(xj, vj, total, sumsq, row_len, a["eps"], gamma, beta, mult,
                                          shift, zp)
                if observe:
                    var = row_len * sumsq - total * total
                    acc = arith.layernorm_acc(xj, total, sumsq, row_len, a["eps"], gamma, beta)[:, vj]
                    observe("layernorm", x=xj, valid=vj, var=var, acc=acc)
            words[d_rows[:, jj]] = out.reshape(len(s_rows), len(jj), w)
            if on_write:
                on_write(d_rows[:, jj].ravel(), out.reshape(-1, w))


__all__ = ["ROWOPS", "row_words", "accesses_per_word", "rowop_accesses", "rowop_ranges", "ln_param_words",
           "run_rowop"]
