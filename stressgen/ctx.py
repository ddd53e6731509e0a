"""Generator context: the Emitter plus DDR/SRAM/accumulator placement, DMA layouts, quant
registers and output regions. Task builders (stressgen.tasks) work through it."""
from __future__ import annotations

import random

import numpy as np

from stressgen.data import EXTREME_QREG_P, DdrSpace, Ring, extreme_shift, rand_i8
from stressgen.emit import Emitter
from stressgen.program import OutputRegion
from tpusim.arch.device_checks import ddr_align_bytes

LOAD, STORE, MXU, VPU = 0, 1, 2, 3


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


class Ctx:
    """State of one program under construction."""

    def __init__(self, seed: int, cfg, chain_p: float):
        self.cfg, self.seed = cfg, seed
        self.r = random.Random(seed)
        self.nrng = np.random.default_rng(seed)
        self.side = random.Random(f"tpusim-stress-extreme-shift:{seed}")   # only extreme shifts
        self.em = Emitter(cfg, self.r, chain_p)
        self.ddr = DdrSpace(cfg, self.r)
        self.sram = Ring(cfg.sram_words, self.r)
        self.acc = Ring(cfg.acc_depth_rows, self.r)
        self.ddr_init: list[tuple[int, bytes]] = []
        self.outputs: list[OutputRegion] = []
        self.qregs: dict[int, tuple] = {}      # value requested by the last load of each register
        self.W = cfg.word_bytes
        self.tasks_live: dict = {}             # insertion-ordered set: iteration order is the
                                               # program's, never memory addresses (replay)

    # ------------------------------------------------------------------ space
    def alloc(self, task, space: str, n: int, at: int | None = None) -> int:
        """``n`` SRAM words or accumulator rows for ``task`` (from word ``at`` if given, else where
        the ring puts them). Space still live in another task (started, store phase not yet
        emitted) is reclaimed by emitting that task's remaining phases first; the Emitter then
        orders the reuse with tokens."""
        ring = self.sram if space == "sram" else self.acc
        start = ring.take(n) if at is None else at
        for _ in range(8):
            own = [(lo, hi) for sp, lo, hi in task.live if sp == space and lo < start + n and start < hi]
            if not own:
                break
            start = max(hi for _, hi in own)
            if start + n > ring.total:
                start = 0
        else:
            raise RuntimeError(f"stressgen: task needs more {space} than there is")
        ring.pos = start + n
        for other in list(self.tasks_live):
            if other is not task and any(sp == space and lo < start + n and start < hi
                                         for sp, lo, hi in other.live):
                other.finish()
        task.live.append((space, start, start + n))
        self.tasks_live[task] = None
        return start

    # ------------------------------------------------------------------ DMA layouts
    def _layout(self, nbytes: int, allow_split: bool = True, min_inner: int = 0) -> list[dict]:
        """One or two DMA descriptors (relative: ddr offsets from 0, sram offsets from 0) that
        move ``nbytes`` (a multiple of W) densely in SRAM, in 1-D or strided 2-D runs in DDR."""
        r, W, al = self.r, self.W, ddr_align_bytes(self.cfg)
        words = nbytes // W
        if allow_split and words >= 2 and r.random() < 0.15:
            k = r.randint(1, words - 1)
            a = self._layout(k * W, False, min_inner)
            b = self._layout((words - k) * W, False, min_inner)
            b[0]["sram_off"] = k * W
            return a + b
        divs = [d for d in _divisors(words) if d * W >= min_inner] or [words]
        inner = W * r.choice(divs) if r.random() < 0.6 else nbytes
        runs = nbytes // inner
        c1 = r.choice(_divisors(runs))
        c2 = runs // c1
        gap = lambda: al * r.choice([0, 0, 1, r.randint(0, 6)])  # noqa: E731
        ds1 = -(-inner // al) * al + gap()
        ds2 = (c1 - 1) * ds1 + -(-inner // al) * al + gap()
        if c1 == 1:
            ds1 = r.choice([0, al * r.randint(0, 9)])          # unused stride: any value
        if c2 == 1:
            ds2 = r.choice([0, al * r.randint(0, 9)])
        d = dict(inner_bytes=inner, count1=c1, count2=c2, ddr_stride1=ds1, ddr_stride2=ds2,
                 sram_stride1=inner if c1 > 1 else W * r.randint(0, 3),
                 sram_stride2=c1 * inner if c2 > 1 else W * r.randint(0, 3), sram_off=0)
        return [d]

    @staticmethod
    def _extent(d: dict) -> int:
        return (d["count2"] - 1) * d["ddr_stride2"] + (d["count1"] - 1) * d["ddr_stride1"] + d["inner_bytes"]

    @staticmethod
    def _runs(d: dict):
        for o2 in range(d["count2"]):
            for o1 in range(d["count1"]):
                yield (o2 * d["ddr_stride2"] + o1 * d["ddr_stride1"],
                       o2 * d["count1"] * d["inner_bytes"] + o1 * d["inner_bytes"])

    def load(self, word: int, data: np.ndarray, kind: str | None = None, min_inner: int = 0,
             wait_on: tuple = ()) -> None:
        """DMA_LOAD int8 ``data`` (flat, multiple of W bytes) into SRAM from word ``word``;
        runs of at least ``min_inner`` bytes (if the size allows); each DMA also waits on the
        latest instruction of the ``wait_on`` engines."""
        raw = np.ascontiguousarray(data, dtype=np.int8).tobytes()
        for d in self._layout(len(raw), min_inner=min_inner):
            ext = self._extent(d)
            part = raw[d["sram_off"]:d["sram_off"] + d["count1"] * d["count2"] * d["inner_bytes"]]
            img = bytearray(rand_i8(self.nrng, ext).tobytes())           # junk in the gaps
            for doff, soff in self._runs(d):
                img[doff:doff + d["inner_bytes"]] = part[soff:soff + d["inner_bytes"]]
            base = self.ddr.place(ext, kind)
            self.ddr_init.append((base, bytes(img)))
            self._emit_dma("DMA_LOAD", base, word * self.W + d["sram_off"], d, wait_on)

    def load_raw(self, word: int, ddr_addr: int, nbytes: int) -> None:
        """DMA_LOAD ``nbytes`` contiguous DDR bytes (e.g. an earlier output) into SRAM."""
        d = dict(inner_bytes=nbytes, count1=1, count2=1, ddr_stride1=0, ddr_stride2=0,
                 sram_stride1=0, sram_stride2=0, sram_off=0)
        self._emit_dma("DMA_LOAD", ddr_addr, word * self.W, d)

    def store(self, word: int, nbytes: int, kind: str | None = None) -> OutputRegion:
        """DMA_STORE SRAM words [word, word + nbytes/W) to a new output region (one or two DMAs
        into one region). The region is pre-filled with junk half of the time."""
        lay = self._layout(nbytes)
        offs, total = [], 0
        for d in lay:
            offs.append(total)
            total += -(-self._extent(d) // ddr_align_bytes(self.cfg)) * ddr_align_bytes(self.cfg)
        size = -(-total // self.cfg.array_rows) * self.cfg.array_rows
        base = self.ddr.place(size, kind)
        if self.r.random() < 0.5:
            self.ddr_init.append((base, rand_i8(self.nrng, size).tobytes()))
        for d, off in zip(lay, offs):
            self._emit_dma("DMA_STORE", base + off, word * self.W + d["sram_off"], d)
        reg = OutputRegion(f"out{len(self.outputs)}", base, size)
        self.outputs.append(reg)
        return reg

    def store_repeat(self, word: int, inner_bytes: int, rows: int, repeat: int) -> OutputRegion:
        """One DMA_STORE writing each of ``rows`` SRAM rows of ``inner_bytes`` (from word ``word``,
        dense) to ``repeat`` consecutive DDR rows (``sram_stride1 = 0``: the compiler's nearest
        upsampling), into a new output region."""
        al = ddr_align_bytes(self.cfg)
        row = -(-inner_bytes // al) * al
        size = -(-(rows * repeat * row) // self.cfg.array_rows) * self.cfg.array_rows
        base = self.ddr.place(size, None)
        self.ddr_init.append((base, rand_i8(self.nrng, size).tobytes()))
        d = dict(inner_bytes=inner_bytes, count1=repeat, ddr_stride1=row, sram_stride1=0, count2=rows,
                 ddr_stride2=repeat * row, sram_stride2=inner_bytes, sram_off=0)
        self._emit_dma("DMA_STORE", base, word * self.W, d)
        reg = OutputRegion(f"out{len(self.outputs)}", base, size)
        self.outputs.append(reg)
        return reg

    def _emit_dma(self, op: str, ddr_addr: int, sram_addr: int, d: dict, wait_on: tuple = ()) -> None:
        args = {k: v for k, v in d.items() if k != "sram_off"}
        self.em.emit(op, wait_on, ddr_addr=ddr_addr, sram_addr=sram_addr, **args)

    # ------------------------------------------------------------------ quant registers
    def pick_qreg(self, avoid=()) -> int:
        n = self.cfg.qreg_count
        while True:
            q = self.r.randrange(n)
            if q not in avoid:
                return q

    def load_qreg(self, q: int, val: tuple) -> None:
        """LOAD_QREG ``q`` with ``val`` = (multiplier, shift, zero point); a few loads
        (data.EXTREME_QREG_P, from the side stream) get a shift from data.EXTREME_SHIFTS instead."""
        m, s, z = val
        s = extreme_shift(self.side, s, EXTREME_QREG_P)
        self.em.emit("LOAD_QREG", qreg=q, multiplier=m, shift=s, zero_point=z)
        self.qregs[q] = val

    def ensure_qreg(self, val: tuple, avoid=()) -> int:
        """A register holding ``val``'s zero point etc.: reuse a loaded one or load a new one."""
        for q, v in self.qregs.items():
            if v == val and q not in avoid and self.r.random() < 0.5:
                return q
        q = self.pick_qreg(avoid)
        self.load_qreg(q, val)
        return q


__all__ = ["Ctx", "LOAD", "STORE", "MXU", "VPU"]


class Task:
    """A task's three phases (load, compute, store), run in order by ``step``; the SRAM and
    accumulator space it takes with ``Ctx.alloc`` stays live until its store phase ran."""

    def __init__(self, ctx, est: int):
        self.ctx, self.est, self.pos = ctx, est, 0
        self.phases: list = [lambda: None] * 3
        self.live: list[tuple[str, int, int]] = []

    def step(self) -> None:
        f = self.phases[self.pos]
        self.pos += 1
        f()
        if self.pos == 3:
            self.live = []
            self.ctx.tasks_live.pop(self, None)

    def finish(self) -> None:
        while self.pos < 3:
            self.step()
