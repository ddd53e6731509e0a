"""Static analysis of stress programs: per-instruction memory footprints, token matching, the
happens-before relation and races. Shared by the generator (stressgen.emit), ``validate`` and
coverage. Operand addresses (DMA runs, MATMUL words, POOL taps) are tpusim.arch.operands'.

Footprint: a list of ``(space, lo, hi, write)`` with ``hi`` exclusive; spaces ``"sram"`` and
``"ddr"`` in bytes, ``"acc"`` in accumulator rows. Weights (MXU) and quant registers (VPU) are
private to one in-order engine and never race, so they are not listed.

Token semantics: engine ``y``'s k-th wait on ``x`` consumes the k-th token ``x`` sends to ``y``
(counters are FIFO and fungible), so the pairing is fixed by the program alone. Stress programs
require every consumed token to be sent by an instruction *earlier in program order*: then no
queue-full or token wait can deadlock (the earliest unretired dispatched instruction can always
start), and ``happens_before`` is independent of timing.
"""
from __future__ import annotations

from tpusim.arch.isa import Engine
from tpusim.arch.operands import (
    dma_ddr_end,
    dma_runs,
    dma_sram_end,
    matmul_last_word,
    matmul_words,
    pool_last_tap,
    pool_taps,
)
from tpusim.arch.rowops import ROWOPS, rowop_accesses, rowop_ranges

ENGINES = tuple(Engine)
NAMES = tuple(e.name for e in Engine)
RUN_LIMIT = 4096   # above this many runs/words a footprint is summarised by its covering range


def _word_ranges(words: list[int], w: int) -> list[tuple[int, int]]:
    """Byte ranges of a set of words, merged."""
    out = []
    for k in sorted(set(words)):
        if out and out[-1][1] == k * w:
            out[-1] = (out[-1][0], (k + 1) * w)
        else:
            out.append((k * w, (k + 1) * w))
    return out


def footprint(ins, cfg) -> list[tuple[str, int, int, bool]]:
    """Memory accesses of one instruction (module docstring). Large strided patterns are
    summarised by their covering range (a safe over-approximation)."""
    op = ins.op
    a = getattr(ins, "args", {})
    w, c = cfg.word_bytes, cfg.array_cols
    acc = []
    if op in ("DMA_LOAD", "DMA_STORE"):
        load = op == "DMA_LOAD"
        if a["inner_bytes"] == 0 or a["count1"] == 0 or a["count2"] == 0:
            return []
        if a["count1"] * a["count2"] > RUN_LIMIT:
            return [("ddr", a["ddr_addr"], dma_ddr_end(a), not load),
                    ("sram", a["sram_addr"], dma_sram_end(a), load)]
        for d, s, n in dma_runs(a):
            acc.append(("ddr", d, d + n, not load))
            acc.append(("sram", s, s + n, load))
    elif op == "LOAD_WEIGHTS":
        acc.append(("sram", a["sram_addr"] * w, (a["sram_addr"] + c) * w, False))
    elif op == "MATMUL":
        m = a["count_x"] * a["count_y"]
        if m == 0:
            return []
        if m > RUN_LIMIT:
            acc.append(("sram", a["act_addr"] * w, (matmul_last_word(a) + 1) * w, False))
        else:
            acc += [("sram", lo, hi, False) for lo, hi in _word_ranges(matmul_words(a), w)]
        acc.append(("acc", a["acc_addr"], a["acc_addr"] + m, True))
    elif op in ("REQUANT", "REQUANT_ADD"):
        n = a["count"]
        acc.append(("sram", a["param_addr"] * w, (a["param_addr"] + cfg.param_words) * w, False))
        if n:
            acc.append(("acc", a["acc_addr"], a["acc_addr"] + n, False))
            for j in range(cfg.requant_planes):     # a lane group's write: the whole words
                d = a["dst_addr"] + j * a["dst_plane_stride"]
                acc.append(("sram", d * w, (d + n) * w, True))
                if op == "REQUANT_ADD":             # the skip: the destination's layout
                    k = a["skip_addr"] + j * a["dst_plane_stride"]
                    acc.append(("sram", k * w, (k + n) * w, False))
    elif op in ("POOL", "DWCONV"):
        outs = a["out_w"] * a["out_h"]
        if outs == 0:
            return []
        taps = outs * a["win_w"] * a["win_h"]
        if taps > RUN_LIMIT:
            acc.append(("sram", a["src_addr"] * w, (pool_last_tap(a) + 1) * w, False))
        elif taps:
            acc += [("sram", lo, hi, False) for lo, hi in _word_ranges(pool_taps(a), w)]
        if op == "DWCONV":
            acc.append(("sram", a["param_addr"] * w, (a["param_addr"] + cfg.dw_param_words) * w, False))
            if taps:
                acc.append(("sram", a["wt_addr"] * w, (a["wt_addr"] + a["win_w"] * a["win_h"]) * w, False))
        acc.append(("sram", a["dst_addr"] * w, (a["dst_addr"] + outs) * w, True))
    elif op == "ADD":
        n = a["count"]
        if n:
            acc += [("sram", a[f] * w, (a[f] + n) * w, False) for f in ("src_a", "src_b")]
            acc.append(("sram", a["dst_addr"] * w, (a["dst_addr"] + n) * w, True))
    elif op == "MUL":
        n = a["count"]
        if n:
            acc.append(("sram", a["src_a"] * w, (a["src_a"] + n) * w, False))
            acc.append(("sram", a["src_b"] * w, (a["src_b"] + (n if a["stride_b"] else 1)) * w, False))
            acc.append(("sram", a["dst_addr"] * w, (a["dst_addr"] + n) * w, True))
    elif op in ROWOPS:
        if rowop_accesses(op, a, w) == 0:
            return []
        for field, first, last in rowop_ranges(op, a, w):        # rows: the covering range
            acc.append(("sram", first * w, (last + 1) * w, field == "dst_addr"))
    elif op == "LUT":
        n = a["count"]
        acc.append(("sram", a["table_addr"] * w, (a["table_addr"] + cfg.lut_words) * w, False))
        if n:
            acc.append(("sram", a["src_addr"] * w, (a["src_addr"] + n) * w, False))
            acc.append(("sram", a["dst_addr"] * w, (a["dst_addr"] + n) * w, True))
    return acc


def engine_of(ins) -> int | None:
    """Engine index of an instruction; None for HALT and raw words."""
    if ins.op in ("HALT", "RAW"):
        return None
    return int(ins.engine)


def match_tokens(instrs) -> tuple[list[dict], list]:
    """Pair every wait with its send. Returns (senders, problems): ``senders[i]`` maps each
    engine ``x`` in instruction i's wait mask to the index of the instruction whose token it
    consumes (None if no earlier instruction sends it); ``problems`` lists
    (index, x, 'unsent') for those. Stops at the first HALT or raw word."""
    sends: dict[tuple[int, int], list[int]] = {}
    used: dict[tuple[int, int], int] = {}
    senders, problems = [], []
    for i, ins in enumerate(instrs):
        e = engine_of(ins)
        if e is None:
            senders.append({})
            if ins.op in ("HALT", "RAW"):
                break
            continue
        got = {}
        for x in range(4):
            if ins.wait >> x & 1:
                k = used.get((x, e), 0)
                lst = sends.get((x, e), [])
                got[x] = lst[k] if k < len(lst) else None
                used[(x, e)] = k + 1
                if got[x] is None:
                    problems.append((i, x, "unsent"))
        senders.append(got)
        for y in range(4):
            if ins.signal >> y & 1:
                sends.setdefault((e, y), []).append(i)
    return senders, problems


def max_outstanding(instrs, queue_depth: int) -> tuple[int, tuple[int, int] | None, int]:
    """Upper bound on unconsumed tokens per (sender, receiver) counter over any timing:
    after the decoder dispatched up to instruction i, the receiver has started every one of its
    instructions before i except at most ``queue_depth`` still queued (plus the sends of
    dispatched instructions may all have completed). Returns (bound, pair, index) of the worst."""
    best, pair, at = 0, None, -1
    sent = [[0] * 4 for _ in range(4)]
    cum = [[[0] for _ in range(4)] for _ in range(4)]   # cum[y][x][k]: waits on x in y's first k
    for i, ins in enumerate(instrs):
        e = engine_of(ins)
        if e is None:
            if ins.op in ("HALT", "RAW"):
                break
            continue
        for x in range(4):
            cum[e][x].append(cum[e][x][-1] + (ins.wait >> x & 1))
        for y in range(4):
            if ins.signal >> y & 1:
                sent[e][y] += 1
        for x in range(4):
            for y in range(4):
                if sent[x][y] > best:
                    c = cum[y][x]
                    out = sent[x][y] - c[max(0, len(c) - 1 - queue_depth)]
                    if out > best:
                        best, pair, at = out, (x, y), i
    return best, pair, at


def vector_clocks(instrs, senders) -> tuple[list, list]:
    """(seq, vc_start): ``seq[i]`` is instruction i's position in its engine's queue;
    ``vc_start[i][x]`` the number of engine-x instructions guaranteed complete when i starts."""
    last_done = [None] * 4
    seq, vcs, done = [], [], {}
    count = [0] * 4
    for i, ins in enumerate(instrs[:len(senders)]):
        e = engine_of(ins)
        if e is None:
            seq.append(-1)
            vcs.append(None)
            continue
        vc = list(last_done[e]) if last_done[e] is not None else [0] * 4
        for x, j in senders[i].items():
            if j is not None:
                vc = [max(p, q) for p, q in zip(vc, done[j])]
        seq.append(count[e])
        vcs.append(vc)
        d = list(vc)
        d[e] = count[e] + 1
        done[i] = d
        last_done[e] = d
        count[e] += 1
    return seq, vcs


def ordered(j: int, i: int, instrs, seq, vcs) -> bool:
    """True if instruction j (earlier) completes before instruction i starts, on every timing."""
    ej = engine_of(instrs[j])
    return vcs[i] is not None and vcs[i][ej] > seq[j]


def overlaps(fa, fb) -> tuple | None:
    """First conflicting pair of accesses (same space, overlapping, one a write), or None."""
    for sa, la, ha, wa in fa:
        for sb, lb, hb, wb in fb:
            if sa == sb and (wa or wb) and la < hb and lb < ha:
                return (sa, max(la, lb), min(ha, hb))
    return None


def find_race(instrs, cfg, feet=None, senders=None) -> tuple | None:
    """First (j, i, (space, lo, hi)) with j < i on different engines, conflicting footprints
    and no happens-before order; None if the program is race-free."""
    if senders is None:
        senders, _ = match_tokens(instrs)
    if feet is None:
        feet = [footprint(ins, cfg) for ins in instrs]
    seq, vcs = vector_clocks(instrs, senders)
    n = len(senders)
    for i in range(n):
        ei = engine_of(instrs[i])
        if ei is None or not feet[i]:
            continue
        for j in range(i):
            ej = engine_of(instrs[j])
            if ej is None or ej == ei or not feet[j]:
                continue
            hit = overlaps(feet[j], feet[i])
            if hit and not ordered(j, i, instrs, seq, vcs):
                return j, i, hit
    return None


__all__ = ["footprint", "dma_runs", "matmul_words", "pool_taps", "engine_of", "match_tokens",
           "max_outstanding", "vector_clocks", "ordered", "overlaps", "find_race", "NAMES"]
