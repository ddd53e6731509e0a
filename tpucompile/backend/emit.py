"""Instruction emission with dependency tokens derived from declared resource accesses.

Every emitted instruction declares the SRAM word ranges, accumulator row ranges and DDR buffers
it reads and writes. ``Program.add`` tracks, per SRAM word and accumulator row (and per DDR
buffer), the last writer and the last reader of each engine since that write, and turns every
cross-engine RAW / WAR / WAW hazard into a token: the producer gets ``signal |= consumer``, the
consumer ``wait |= producer``. Same-engine hazards need nothing (each engine runs its queue in
order, one instruction at a time). Per (producer engine X, consumer engine Y) the pairs are
created in program order with strictly increasing producers, so the k-th wait of Y on X is
matched by the k-th signal of X to Y; a consumer whose producer is already covered by an earlier
wait of the same engine gets no token. Every dependency points backwards in program order, so no
token wait can deadlock with the in-order dispatcher. ``max_outstanding`` gives the tokens that
can be outstanding per pair, which the token check bounds by ``token_limit`` (below the 8-bit
counter, less the queue depth).

The layer emitters are the ``emit`` hooks of the op modules (``tpucompile.ops``): they follow
their tiling: LOAD (inputs, weights, tables) -> MXU (LOAD_WEIGHTS, MATMUL accumulating over taps
and cin blocks) -> VPU (REQUANT with relu, POOL, ADD, LOAD_QREG) -> STORE, with buffer-free tokens
flowing back through the same tracking.
"""
from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np

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
        self._ddr: dict = {}
        self.covered = [[-1] * NENG for _ in range(NENG)]
        self.pairs: list = []
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

    def add(self, op: str, rs=(), ws=(), ra=(), wa=(), rd=(), wd=(), nin=0, nout=0, **args) -> int:
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
        for b in rd:
            st = self._ddr.get(b)
            if st and st[0] >= 0:
                dep[st[1]] = max(dep[st[1]], st[0])
        for b in wd:
            st = self._ddr.get(b)
            if st:
                if st[0] >= 0:
                    dep[st[1]] = max(dep[st[1]], st[0])
                for x, r in st[2].items():
                    dep[x] = max(dep[x], r)
        wait = 0
        for x in range(NENG):
            a = dep[x]
            if x == e or a < 0 or a <= self.covered[x][e]:
                continue
            self.signal[a] |= 1 << e
            wait |= 1 << x
            self.covered[x][e] = a
            self.pairs.append((x, e, a, idx))
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
        for b in rd:
            st = self._ddr.setdefault(b, [-1, -1, {}])
            st[2][e] = idx
        for b in wd:
            self._ddr[b] = [idx, e, {}]
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
        if op == "DMA_LOAD":
            return self.add(op, ws=[(lo, hi)], rd=[buf] if buf is not None else [], nin=nbytes, **kw)
        return self.add(op, rs=[(lo, hi)], wd=[buf] if buf is not None else [], nout=nbytes, **kw)

    def tile_dma(self, op, T, sram_word, t) -> int:
        """DMA_LOAD / DMA_STORE of tile ``t`` (``backend.tiling.EltTile``) of the blocked tensor
        layout ``T`` (``backend.layout.ActLayout``) to / from dense SRAM words from ``sram_word``
        (blocks outer, rows, pixels)."""
        W = self.cfg.word_bytes
        return self.dma(op, T.iaddr(t.k0, t.oy0, t.ox0), sram_word, t.tw * W, t.th, T.row_bytes, t.tw * W,
                        t.nk, T.block_bytes, t.th * t.tw * W, buf=T.buf_id)


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
