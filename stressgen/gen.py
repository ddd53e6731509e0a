"""``generate(seed, cfg, invalid_rate)``: a random, valid, race-free stress program.

A program is a few *tasks* (stressgen.tasks: matrix problems with prime/odd K, M and partial N
tiles; POOL; ADD; MUL; LUT; quant-register aliasing; a whole-SRAM fill; a DDR round trip that reloads an
earlier output) whose load / compute / store phases are interleaved (sequential, software
pipelined or all-loads-first) so that DMA overlaps compute. The Emitter (stressgen.emit) adds
the tokens; random extra tokens make long dependency chains. Everything is drawn from
``random.Random(seed)`` / ``numpy.random.default_rng(seed)``: (seed, cfg, invalid_rate)
replays the program exactly. ``validate`` (stressgen.validate) and ``ALL_BINS``
(stressgen.coverage) are re-exported here.
"""
from __future__ import annotations

import random

import numpy as np

from stressgen.coverage import ALL_BINS, bins_of
from stressgen.ctx import Ctx
from stressgen.data import Ring
from stressgen.invalid import invalid_path_of, make_invalid
from stressgen.program import StressProgram
from stressgen.tasks import (
    PRIME_K,
    add_task,
    dwconv_task,
    fill_task,
    lut_task,
    matmul_task,
    mul_task,
    pick_m,
    pool_task,
    qreg_alias_task,
    rowop_task,
    upsample_task,
)
from stressgen.validate import validate
from tpusim.arch.isa import make

MAX_INSTRS = 60
#: Chance that an accumulator allocation is placed flush with the last row (drawn from a side
#: stream, so the rest of the program is drawn as before): a range check's valid boundary.
ACC_EDGE_P = 0.2
#: Chance that an SRAM allocation straddles a bank boundary by one word (its last word first in
#: the next bank, or its first word last in the previous one), drawn from a side stream: the
#: bank masks of the arbiters (tpu_sram_arbiter, each engine's mask) are off by one there.
BANK_EDGE_P = 0.25
BUDGET = 54          # instruction estimate per program (NOPs and splits add a few)
#: Chance that a program gets 1-3 plain NOPs (no tokens) on random engines at random places,
#: drawn from a side stream (the rest of the program is drawn as before): every engine's NOP
#: path (an MXU / VPU NOP completes at its start edge; a DMA NOP takes one DMA cycle).
NOP_P = 0.35
#: Chance that a program gets 1-2 LUT tasks, decided and drawn from side streams, so a program
#: without one is drawn exactly as before the LUT instruction existed.
LUT_P = 0.4
#: Chance that a program gets 1-2 MUL tasks, likewise from side streams of their own.
MUL_P = 0.4
#: Chance of an upsampling task (POOL with out_stride_x = 0, DMA_STORE with sram_stride1 = 0: the
#: compiler's Resize), from side streams of its own.
UPSAMPLE_P = 0.3
#: Chance of a depthwise-convolution task (DWCONV), from side streams of its own.
DWCONV_P = 0.5
#: Chance of 1-2 row-operation tasks (SOFTMAX, LAYERNORM), from side streams of their own: a seed
#: without them draws the program it drew before the row operations existed.
ROWOP_P = 0.5


def _matmul(ctx, big: bool):
    r, cfg = ctx.r, ctx.cfg
    R, C = cfg.array_rows, cfg.array_cols
    if big:
        k = r.choice(PRIME_K)
        n = r.choice([1, C - 1, C, r.randint(1, C)]) if -(-k // R) > 8 else r.randint(1, 2 * C + 3)
    else:
        k = r.choice([1, 1, 3, R - 1, R, R + 1, 2 * R + 3, r.randint(1, 3 * R)])
        n = r.choice([1, C - 1, C + 1, 2 * C + 3, r.randint(1, 2 * C)])
    m = pick_m(r)
    dmode = "small" if r.random() < 0.4 else "any"
    return matmul_task(ctx, k, m, n, dmode)


class EdgeRing(Ring):
    """``ring`` (stressgen.data.Ring) whose ``take`` ends at the top with probability ``p``
    (drawn from ``side``, not from the ring's own stream)."""

    def __init__(self, ring: Ring, side, p: float):
        self.total, self.rng, self.pos = ring.total, ring.rng, ring.pos
        self.side, self.p = side, p

    def take(self, n: int, align: int = 1) -> int:
        start = super().take(n, align)
        top = (self.total - n) // align * align
        if self.side.random() < self.p and top >= 0:
            start, self.pos = top, top + n
        return start


class BankEdgeRing(Ring):
    """``ring`` whose ``take`` straddles a bank boundary by one word with probability ``p``
    (drawn from ``side``) when the range spans at least two words."""

    def __init__(self, ring: Ring, side, p: float, bank_words: int):
        self.total, self.rng, self.pos = ring.total, ring.rng, ring.pos
        self.side, self.p, self.bank_words = side, p, bank_words

    def take(self, n: int, align: int = 1) -> int:
        start = super().take(n, align)
        if n < 2 or self.side.random() >= self.p:
            return start
        b = self.bank_words * self.side.randint(1, max(1, self.total // self.bank_words - 1))
        cand = b - n + 1 if self.side.random() < 0.5 else b - 1
        if 0 <= cand and cand + n <= self.total and cand % align == 0:
            start, self.pos = cand, cand + n
        return start


def _schedule(r, tasks) -> list:
    """Order of task steps (each task appears three times: load, compute, store); a task
    whose space is reclaimed early runs its remaining phases then (Ctx.alloc), so later steps
    of a finished task are skipped."""
    how = r.choice(["seq", "pipe", "pipe", "deep", "random"])
    if how == "seq":
        return [t for t in tasks for _ in range(3)]
    if how == "deep":
        return [t for _ in range(3) for t in tasks]
    if how == "pipe":
        out = [tasks[0]]
        for k, t in enumerate(tasks):
            if k + 1 < len(tasks):
                out.append(tasks[k + 1])
            out += [t, t]
        return out
    heads, out = [0] * len(tasks), []
    while any(h < 3 for h in heads):
        k = r.choice([i for i, h in enumerate(heads) if h < 3])
        out.append(tasks[k])
        heads[k] += 1
    return out


def _tasks(ctx) -> list:
    """Tasks until the instruction estimate reaches a random target (at most BUDGET)."""
    r = ctx.r
    target = r.choice([8, 15, 25, 35, 45, BUDGET, r.randint(5, BUDGET)])
    tasks = []

    def add(t) -> bool:
        if sum(x.est for x in tasks) + t.est > BUDGET:
            return False
        tasks.append(t)
        return True
    if r.random() < 0.25:
        add(fill_task(ctx))
    if r.random() < 0.45:
        add(_matmul(ctx, big=True))
    if r.random() < 0.4:
        add(qreg_alias_task(ctx))
    side = random.Random(f"tpusim-stress-lut:{ctx.seed}")
    if side.random() < LUT_P:
        nrng = np.random.default_rng([ctx.seed, 0x107])
        for _ in range(side.randint(1, 2)):
            add(lut_task(ctx, side, nrng))
    side = random.Random(f"tpusim-stress-mul:{ctx.seed}")
    if side.random() < MUL_P:
        nrng = np.random.default_rng([ctx.seed, 0x3A1])
        for _ in range(side.randint(1, 2)):
            add(mul_task(ctx, side, nrng))
    side = random.Random(f"tpusim-stress-dwconv:{ctx.seed}")
    if side.random() < DWCONV_P:
        add(dwconv_task(ctx, side, np.random.default_rng([ctx.seed, 0xD3C])))
    side = random.Random(f"tpusim-stress-rowop:{ctx.seed}")
    if side.random() < ROWOP_P:
        nrng = np.random.default_rng([ctx.seed, 0x50F])
        for _ in range(side.randint(1, 2)):
            add(rowop_task(ctx, side, nrng))
    side = random.Random(f"tpusim-stress-upsample:{ctx.seed}")
    if side.random() < UPSAMPLE_P:
        add(upsample_task(ctx, side, np.random.default_rng([ctx.seed, 0x5A4])))
    misses = 0
    while sum(t.est for t in tasks) < target and misses < 4:
        k = r.random()
        if k < 0.4:
            ok = add(_matmul(ctx, big=False))
        elif k < 0.6:
            ok = add(pool_task(ctx))
        elif k < 0.8 or not tasks:
            ok = add(add_task(ctx))
        else:
            ok = add(add_task(ctx, chain=True))
        misses += not ok
    tail = tasks[1:]
    r.shuffle(tail)
    return tasks[:1] + tail


def _plain_nops(instrs: list, seed: int) -> list:
    """``instrs`` (ending in HALT) with 1-3 token-free NOPs inserted before the HALT, with
    probability NOP_P, while the program stays within MAX_INSTRS. A NOP without tokens touches
    no data and orders nothing, so the program stays valid and race-free."""
    side = random.Random(f"tpusim-stress-nop:{seed}")
    if side.random() >= NOP_P:
        return instrs
    out = list(instrs)
    for _ in range(side.randint(1, 3)):
        if len(out) >= MAX_INSTRS:
            break
        out.insert(side.randint(0, len(out) - 1), make("NOP", engine=side.randrange(4)))
    return out


def generate(seed: int, cfg, invalid_rate: float = 0.0) -> StressProgram:
    """A deterministic random stress program for ``cfg`` (module docstring). For a fraction
    ``invalid_rate`` of the seeds it is made invalid along one checker path of one class of
    stressgen.invalid.INVALID_CLASSES (``invalid_path_of``; ``prog.invalid`` names the class). ``prog.bins`` = stressgen.coverage.bins_of(prog, cfg)."""
    chain_p = (seed * 2654435761 % 7) / 20.0        # 0 .. 0.3, fixed per seed
    ctx = Ctx(seed, cfg, chain_p)
    ctx.acc = EdgeRing(ctx.acc, random.Random(f"tpusim-stress-acc-edge:{seed}"), ACC_EDGE_P)
    ctx.sram = BankEdgeRing(ctx.sram, random.Random(f"tpusim-stress-bank-edge:{seed}"), BANK_EDGE_P,
                            cfg.bank_words)
    for task in _schedule(ctx.r, _tasks(ctx)):
        if task.pos < 3:
            task.step()
    prog = StressProgram(seed, cfg.name, _plain_nops(ctx.em.finish(), seed), ctx.ddr_init, ctx.outputs)
    bad = invalid_path_of(seed, invalid_rate)
    if bad is not None:
        make_invalid(prog, cfg, ctx.r, *bad)
    prog.bins = bins_of(prog, cfg)
    return prog


__all__ = ["generate", "validate", "ALL_BINS", "MAX_INSTRS"]
