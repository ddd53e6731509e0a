"""Instruction emission with dependency tokens derived from declared resource accesses.

Every emitted instruction declares the SRAM word ranges, accumulator row ranges and DDR byte
ranges (of activation buffers) it reads and writes. ``Program.add`` tracks, per SRAM word,
accumulator row and DDR granule (``ddr_granule`` bytes), the last writer and the last reader of
each engine since that write, and turns every
cross-engine RAW / WAR / WAW hazard into a token: the producer gets ``signal |= consumer``, the
consumer ``wait |= producer``. Same-engine hazards need nothing (each engine runs its queue in
order, one instruction at a time). Per (producer engine X, consumer engine Y) the pairs are
created in program order with strictly increasing producers, so the k-th wait of Y on X is
matched by the k-th signal of X to Y; a consumer whose producer is already covered by an earlier
wait of the same engine gets no token. Every dependency points backwards in program order, so no
token wait can deadlock with the in-order dispatcher. A token that would leave half the counter (``token_limit``)
outstanding between its producer and its consumer waits for the producer engine's latest
instruction instead (it completes after the producer; DDR byte ranges can otherwise make one
long-lived token per STORE of a layer). ``max_outstanding`` gives the tokens that
can be outstanding per pair, which the token check bounds by ``token_limit`` (below the 8-bit
counter, less the queue depth).

The layer emitters are the ``emit`` hooks of the op modules (``tpucompile.ops``): they follow
their tiling: LOAD (inputs, weights, tables) -> MXU (LOAD_WEIGHTS, MATMUL accumulating over taps
and cin blocks) -> VPU (REQUANT with relu, REQUANT_ADD, POOL, ADD, LOAD_QREG) -> STORE, with buffer-free tokens
flowing back through the same tracking.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from functools import lru_cache

import numpy as np

from tpucompile.backend.layout import ddr_granule
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import OPCODES, Instruction, check_ranges
from tpusim.arch.limits import TOKEN_MAX

NENG = 4


@lru_cache(maxsize=None)
def _op_fields(op: str) -> tuple:
    """(engine number, field names in field order, the same as a frozenset) of opcode ``op``."""
    spec = OPCODES[op]
    names = tuple(f.name for f in spec.fields)
    return int(spec.engine), names, frozenset(names)


class Program:
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.ops: list = []       # [op, args]
        self.eng: list = []
        self.wait: list = []
        self.signal: list = []
        self.nbytes_in: list = []
        self.nbytes_out: list = []
        # per space: [0, engine, word] index of the last write by that engine if it is the word's
        # last write (else -1), and [1, engine, word] index of the engine's last read since that write
        self._mem = {k: np.full((2, NENG, n), -1, np.int64) for k, n in (("s", cfg.sram_words), ("a", cfg.acc_depth_rows))}
        # DDR activation bytes in granules of ``ddr_granule``, grown on demand (constants are
        # never written: their reads are not tracked)
        self._gran = ddr_granule(cfg)
        self._mem["d"] = np.full((2, NENG, 0), -1, np.int64)
        self.covered = [[-1] * NENG for _ in range(NENG)]
        self.pairs: list = []
        self._consumers = [[[] for _ in range(NENG)] for _ in range(NENG)]   # [x][y]: waits of y on x
        self._last = [-1] * NENG          # each engine's latest instruction
        self.qregs = QregAlloc(self)

    def __len__(self):
        return len(self.ops)

    # ------------------------------------------------------------------ hazards
    def _deps_range(self, kind, lo, hi, write, dep):
        if hi <= lo:
            return
        m = self._mem[kind]             # [0]: last writes, [1]: last reads (NENG x words)
        n = m.shape[2]
        if lo < 0 or hi > n:
            raise CompileError(f"internal: {kind} range [{lo}, {hi}) outside [0, {n})")
        last = m[:, :, lo:hi].max(axis=(0, 2)) if write else m[0, :, lo:hi].max(axis=1)
        for x, v in enumerate(last.tolist()):
            if v > dep[x]:
                dep[x] = v

    def _update_range(self, kind, lo, hi, write, idx, e):
        if hi <= lo:
            return
        m = self._mem[kind]
        if write:
            m[:, :, lo:hi] = -1
            m[0, e, lo:hi] = idx
        else:
            m[1, e, lo:hi] = idx

    def _ddr_granules(self, ranges) -> list:
        """DDR byte ranges [lo, hi) -> granule ranges covering them (the tracked space grown to
        hold them)."""
        g = self._gran
        out = [(lo // g, -(-hi // g)) for lo, hi in ranges if hi > lo]
        top = max((hi for _, hi in out), default=0)
        m = self._mem["d"]
        if top > m.shape[2]:
            grow = np.full((2, NENG, max(top, 2 * m.shape[2]) - m.shape[2]), -1, np.int64)
            self._mem["d"] = np.concatenate([m, grow], axis=2)
        return out

    def oldest_slot(self, bases, words: int) -> int:
        """Index into ``bases`` (SRAM word addresses of ``words``-word slots) of the slot whose
        last access (any engine, read or write) is the earliest in program order: a ring started
        there lets a layer's first LOAD go where the previous layer has finished soonest (the
        first of equals; 0 for an empty SRAM)."""
        m = self._mem["s"]
        last = [int(m[:, :, b:b + words].max()) for b in bases]
        return last.index(min(last))

    def add(self, op: str, rs=(), ws=(), ra=(), wa=(), rd=(), wd=(), nin=0, nout=0, **args) -> int:
        """Append instruction ``op`` with fields ``args``; rs/ws: SRAM word ranges read/written,
        ra/wa: accumulator row ranges, rd/wd: DDR byte ranges (activation buffers), each
        [lo, hi). Returns its index."""
        e, names, known = _op_fields(op)
        if not known.issuperset(args):
            raise CompileError(f"internal: {op} unknown fields {set(args) - known}")
        full = {f: int(args.get(f, 0)) for f in names}
        ins = Instruction(op, full)
        try:
            check_ranges(ins)
        except Exception as ex:
            raise CompileError(f"internal: {ex}") from None
        idx = len(self.ops)
        dep = [-1] * NENG
        for lo, hi in rs:
            self._deps_range("s", lo, hi, False, dep)
        for lo, hi in ws:
            self._deps_range("s", lo, hi, True, dep)
        for lo, hi in ra:
            self._deps_range("a", lo, hi, False, dep)
        for lo, hi in wa:
            self._deps_range("a", lo, hi, True, dep)
        rd = self._ddr_granules(rd) if rd else ()      # most instructions touch no DDR buffer
        wd = self._ddr_granules(wd) if wd else ()
        for lo, hi in rd:
            self._deps_range("d", lo, hi, False, dep)
        for lo, hi in wd:
            self._deps_range("d", lo, hi, True, dep)
        wait = 0
        for x in range(NENG):
            a = dep[x]
            if x == e or a < 0 or a <= self.covered[x][e]:
                continue
            cons = self._consumers[x][e]
            if len(cons) - bisect_right(cons, a) >= self.token_limit() // 2:
                # half the counter already outstanding after a (earlier pairs waited on later):
                # wait for x's latest instruction instead (x runs in order, so it completes
                # after a); it covers every producer up to it, so the pairs after a bump are
                # those of later x instructions and the count stays near half the limit
                a = self._last[x]
                if a <= self.covered[x][e]:
                    continue
            cons.append(idx)
            self.signal[a] |= 1 << e
            wait |= 1 << x
            self.covered[x][e] = a
            self.pairs.append((x, e, a, idx))
        self._last[e] = idx
        self.ops.append((op, full))
        self.eng.append(e)
        self.wait.append(wait)
        self.signal.append(0)
        self.nbytes_in.append(nin)
        self.nbytes_out.append(nout)
        for lo, hi in rs:
            self._update_range("s", lo, hi, False, idx, e)
        for lo, hi in ws:
            self._update_range("s", lo, hi, True, idx, e)
        for lo, hi in ra:
            self._update_range("a", lo, hi, False, idx, e)
        for lo, hi in wa:
            self._update_range("a", lo, hi, True, idx, e)
        for lo, hi in rd:
            self._update_range("d", lo, hi, False, idx, e)
        for lo, hi in wd:
            self._update_range("d", lo, hi, True, idx, e)
        return idx

    def halt(self):
        self.ops.append(("HALT", {}))
        self.eng.append(-1)
        self.wait.append(0)
        self.signal.append(0)
        self.nbytes_in.append(0)
        self.nbytes_out.append(0)

    def instructions(self) -> list:
        return [Instruction(op, args, w, s) for (op, args), w, s in zip(self.ops, self.wait, self.signal)]

    def token_limit(self) -> int:
        """Most tokens that may be outstanding per (sender, receiver): the counter's maximum
        minus what the receiver's queue can hold (its waits may be issued before the producer
        runs)."""
        return TOKEN_MAX - self.cfg.queue_depth - 1

    def max_outstanding(self) -> dict:
        """(sender engine, receiver engine) -> most tokens that can be outstanding at once: a
        token is outstanding from its producer's signal to its consumer's wait, in program order."""
        n = len(self.ops) + 2
        out = {}
        for x in range(NENG):
            for y in range(NENG):
                ps = [(a, b) for (xx, yy, a, b) in self.pairs if xx == x and yy == y]
                if not ps:
                    continue
                d = np.zeros(n, np.int64)
                for a, b in ps:
                    d[a + 1] += 1
                    d[b + 1] -= 1
                out[(x, y)] = int(np.cumsum(d).max())
        return out

    # ------------------------------------------------------------------ DMA helpers
    def dma(self, op, ddr_addr, sram_word, inner_bytes, count1=1, ddr_stride1=0, sram_stride1=0,
            count2=1, ddr_stride2=0, sram_stride2=0, buf=None):
        W = self.cfg.word_bytes
        nbytes = inner_bytes * count1 * count2
        lo = sram_word
        hi = sram_word + ((count2 - 1) * sram_stride2 + (count1 - 1) * sram_stride1 + inner_bytes) // W
        kw = dict(ddr_addr=ddr_addr, sram_addr=sram_word * W, inner_bytes=inner_bytes, count1=count1,
                  ddr_stride1=ddr_stride1, sram_stride1=sram_stride1, count2=count2,
                  ddr_stride2=ddr_stride2, sram_stride2=sram_stride2)
        ddr = [] if buf is None else ddr_runs(ddr_addr, inner_bytes, count1, ddr_stride1, count2, ddr_stride2)
        if op == "DMA_LOAD":
            return self.add(op, ws=[(lo, hi)], rd=ddr, nin=nbytes, **kw)
        return self.add(op, rs=[(lo, hi)], wd=ddr, nout=nbytes, **kw)

    def dma_gather(self, op, items, buf=None) -> int:
        """DMAs moving each of ``items`` ((DDR byte address, SRAM word, bytes), in order, bytes a
        multiple of the word, SRAM ranges disjoint and ascending) with as few instructions as
        ``strided_runs`` finds (one when the items are evenly spaced in DDR and SRAM, or form a
        grid of such rows); ``buf``: the DDR buffer all of them read or write (None: constants).
        Returns the number of instructions."""
        runs = strided_runs(items, self.cfg.word_bytes)
        for d, s, n, c1, d1, s1, c2, d2, s2 in runs:
            self.dma(op, d, s, n, c1, d1, s1, c2, d2, s2, buf=buf)
        return len(runs)

    def tile_dma(self, op, T, sram_word, t) -> int:
        """DMA_LOAD / DMA_STORE of tile ``t`` (``backend.tiling.EltTile``) of the blocked tensor
        layout ``T`` (``backend.layout.ActLayout``) to / from dense SRAM words from ``sram_word``
        (blocks outer, rows, pixels)."""
        W = self.cfg.word_bytes
        return self.dma(op, T.iaddr(t.k0, t.oy0, t.ox0), sram_word, t.tw * W, t.th, T.row_bytes, t.tw * W,
                        t.nk, T.block_bytes, t.th * t.tw * W, buf=T.buf_id)


def strided_runs(items, word_bytes: int) -> list:
    """DMA field tuples (ddr_addr, sram_word, inner_bytes, count1, ddr_stride1, sram_stride1,
    count2, ddr_stride2, sram_stride2; strides in bytes) moving ``items`` ((DDR byte address,
    SRAM word, bytes) in order, SRAM ascending): consecutive items of equal size whose DDR and
    SRAM addresses step by the same non-negative amounts are one row of runs (``count1``), and
    consecutive rows of the same shape whose starts step evenly are one DMA (``count2``). The
    runs are the items in their order, so each DMA moves exactly the items it covers."""
    rows: list = []         # [ddr, sram byte, bytes, count, ddr step, sram step]
    for d, s, n in items:
        sb = s * word_bytes
        if rows:
            r = rows[-1]
            if r[2] == n and r[3] == 1 and d >= r[0] and sb >= r[1] + n:
                r[3], r[4], r[5] = 2, d - r[0], sb - r[1]
                continue
            if r[2] == n and r[3] > 1 and d == r[0] + r[3] * r[4] and sb == r[1] + r[3] * r[5]:
                r[3] += 1
                continue
        rows.append([d, sb, n, 1, 0, 0])
    out: list = []          # [ddr, sram byte, bytes, c1, d1, s1, c2, d2, s2]
    for d, sb, n, c1, d1, s1 in rows:
        if out:
            o = out[-1]
            same = o[2:6] == [n, c1, d1, s1]
            span = (c1 - 1) * s1 + n            # SRAM bytes one row covers
            if same and o[6] == 1 and d >= o[0] and sb >= o[1] + span:
                o[6], o[7], o[8] = 2, d - o[0], sb - o[1]
                continue
            if same and o[6] > 1 and d == o[0] + o[6] * o[7] and sb == o[1] + o[6] * o[8]:
                o[6] += 1
                continue
        out.append([d, sb, n, c1, d1, s1, 1, 0, 0])
    return [(d, sb // word_bytes, n, c1, d1, s1, c2, d2, s2) for d, sb, n, c1, d1, s1, c2, d2, s2 in out]


def ddr_runs(ddr_addr: int, inner_bytes: int, count1: int, ddr_stride1: int, count2: int,
             ddr_stride2: int) -> list:
    """DDR byte ranges [lo, hi) a DMA touches: per outer run ``o2`` the span of its ``count1``
    inner runs (gaps between them included, so a superset), merged where they touch."""
    span = (count1 - 1) * ddr_stride1
    lo0 = ddr_addr + min(0, span)
    n = max(0, span) - min(0, span) + inner_bytes
    out: list = []
    for o2 in sorted(range(count2), key=lambda o: o * ddr_stride2):
        lo = lo0 + o2 * ddr_stride2
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], lo + n)
        else:
            out.append([lo, lo + n])
    return [tuple(r) for r in out]


class QregAlloc:
    """Quant-register cache over the 64 entries: (mult, shift, zp) -> entry, LRU replacement.
    The VPU runs in order, so an entry can be reloaded as soon as a later instruction needs the
    slot: every earlier reader has been issued before the LOAD_QREG to the same engine."""

    def __init__(self, prog: Program):
        self.p = prog
        self.n = prog.cfg.qreg_count
        self.by_key: dict = {}
        self.lru: OrderedDict = OrderedDict()   # entry -> key
        self.loads = 0

    def get(self, mult: int, shift: int, zp: int, pinned=()) -> int:
        key = (int(mult), int(shift), int(zp))
        if key in self.by_key:
            e = self.by_key[key]
            self.lru.move_to_end(e)
            return e
        if len(self.lru) < self.n:
            e = len(self.lru)
        else:
            e = next(k for k in self.lru if k not in pinned)
            del self.by_key[self.lru[e]]
            del self.lru[e]
        self.p.add("LOAD_QREG", qreg=e, multiplier=key[0], shift=key[1], zero_point=key[2])
        self.loads += 1
        self.by_key[key] = e
        self.lru[e] = key
        return e
