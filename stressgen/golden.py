"""Functional ISA-level reference for stress programs: ``run_golden(prog, cfg)``.

Each engine's queue runs in program order with token semantics (an engine may start its head
only when every engine in its wait mask has sent it an unconsumed token); among the ready engines
one is picked round robin (or at random with ``sched_seed``), and its instruction executes
atomically. HALT or a reserved opcode stops dispatch. DDR is sparse (4 KiB pages in a dict,
40-bit addresses). Arithmetic comes only from tpusim.arch.arith (gemmlowp
SaturatingRoundingDoublingHighMul / RoundingDivideByPOT, TFLite quantized Add; ONNX
QLinearMatMul-style int8 x int8 -> int32 accumulation with wrap-around).

Errors: every ill-formed instruction raises the StressError that ``validate`` gives for it
(stressgen.validate.check_instruction, at execution), a deadlock raises StressError with kind
"deadlock", more than 255 unconsumed tokens kind "token_overflow". Races are not detected here
(``validate`` does that): a racy program runs in the chosen order.

``observe``: optional callable(event: str, index: int, **info) for coverage (ties, scales).
"""
from __future__ import annotations

import random

import numpy as np

from tpusim.arch import arith

from stressgen.analysis import NAMES, dma_runs, engine_of, matmul_words, pool_taps
from stressgen.program import StressError, stress_error
from stressgen.validate import check_instruction, normalise

PAGE = 4096


class SparseDdr:
    """Byte-addressed DDR of 2^40 bytes; untouched bytes read 0."""

    def __init__(self):
        self.pages: dict[int, bytearray] = {}

    def write(self, addr: int, data: bytes) -> None:
        pos = 0
        while pos < len(data):
            pg, off = divmod(addr + pos, PAGE)
            n = min(PAGE - off, len(data) - pos)
            buf = self.pages.setdefault(pg, bytearray(PAGE))
            buf[off:off + n] = data[pos:pos + n]
            pos += n

    def read(self, addr: int, n: int) -> bytes:
        out, pos = bytearray(), 0
        while pos < n:
            pg, off = divmod(addr + pos, PAGE)
            k = min(PAGE - off, n - pos)
            buf = self.pages.get(pg)
            out += buf[off:off + k] if buf is not None else bytes(k)
            pos += k
        return bytes(out)


class Machine:
    """Architectural state: SRAM words, accumulator, weights, quant registers, DDR."""

    def __init__(self, cfg, ddr: SparseDdr, observe=None):
        self.cfg = cfg
        self.W, self.C, self.R = cfg.word_bytes, cfg.array_cols, cfg.array_rows
        self.sram = np.zeros((cfg.sram_words, self.W), np.int8)
        self.acc = np.zeros((cfg.acc_depth_rows, self.C), np.int64)
        self.wts = np.zeros((self.R, self.C), np.int8)
        self.qr: dict[int, tuple[int, int, int]] = {}
        self.ddr = ddr
        self.observe = observe or (lambda *a, **k: None)

    def _sram_bytes(self):
        return self.sram.reshape(-1)

    def exe(self, i: int, ins) -> None:
        getattr(self, "_" + ins.op.lower())(i, ins.args)

    def _nop(self, i, a):
        pass

    def _dma_load(self, i, a):
        flat = self._sram_bytes()
        for d, s, n in dma_runs(a):
            flat[s:s + n] = np.frombuffer(self.ddr.read(d, n), np.int8)

    def _dma_store(self, i, a):
        flat = self._sram_bytes()
        for d, s, n in dma_runs(a):
            self.ddr.write(d, flat[s:s + n].tobytes())

    def _load_weights(self, i, a):
        self.wts = self.sram[a["sram_addr"]:a["sram_addr"] + self.C].T.copy()     # [k][n]
        self.observe("weights", i, wts=self.wts)

    def _matmul(self, i, a):
        idx = matmul_words(a)
        if not idx:
            return
        y = arith.matmul_acc(self.sram[idx], self.wts).astype(np.int64)
        rows = slice(a["acc_addr"], a["acc_addr"] + len(idx))
        self.acc[rows] = arith.wrap32(self.acc[rows] + y) if a["accumulate"] else y
        self.observe("matmul", i, args=a)

    def _load_qreg(self, i, a):
        self.qr[a["qreg"]] = (a["multiplier"], a["shift"], a["zero_point"])
        self.observe("qreg_load", i, qreg=a["qreg"], value=self.qr[a["qreg"]])

    def _q(self, i, field, idx):
        self.observe("qreg_read", i, qreg=idx, value=self.qr[idx], field=field)
        return self.qr[idx]

    def _requant(self, i, a):
        c, n = self.C, a["count"]
        raw = self._sram_bytes()[a["param_addr"] * self.W:a["param_addr"] * self.W + 9 * c].tobytes()
        bias = np.frombuffer(raw, "<i4", c, 0).astype(np.int64)
        mult = np.frombuffer(raw, "<i4", c, 4 * c).astype(np.int64)
        shift = np.frombuffer(raw, np.int8, c, 8 * c).astype(np.int64)
        zp = self._q(i, "qreg", a["qreg"])[2]
        if n == 0:
            return
        acc = self.acc[a["acc_addr"]:a["acc_addr"] + n]
        v = arith.sat32(acc + bias)
        self.observe("requant", i, x=v, mult=mult, shift=shift, zp=zp, relu=a["relu"])
        self.sram[a["dst_addr"]:a["dst_addr"] + n] = arith.requant_conv(acc, bias, mult, shift, zp,
                                                                        bool(a["relu"]))

    def _pool(self, i, a):
        outs = a["out_w"] * a["out_h"]
        if outs == 0:
            return
        taps = a["win_w"] * a["win_h"]
        vals = self.sram[pool_taps(a)].reshape(outs, taps, self.W).astype(np.int64)
        if a["mode"]:
            zi = self._q(i, "qreg_in", a["qreg_in"])[2]
            m, s, zo = self._q(i, "qreg_out", a["qreg_out"])
            sums = vals.sum(axis=1)
            self.observe("pool_avg", i, x=arith.sat32(sums - taps * zi), mult=m, shift=s, zp=zo)
            out = arith.pool_avg(sums, taps, zi, m, s, zo)
        else:
            out = vals.max(axis=1, initial=-128).astype(np.int8)
        self.sram[a["dst_addr"]:a["dst_addr"] + outs] = out

    def _add(self, i, a):
        n = a["count"]
        if n == 0:
            return
        za_m = self._q(i, "qreg_a", a["qreg_a"])
        zb_m = self._q(i, "qreg_b", a["qreg_b"])
        mo, so, zo = self._q(i, "qreg_out", a["qreg_out"])
        (ma, sa, za), (mb, sb, zb) = za_m, zb_m
        x_a = self.sram[a["src_a"]:a["src_a"] + n].astype(np.int64)
        x_b = self.sram[a["src_b"]:a["src_b"] + n].astype(np.int64)
        s = arith.sat32(arith.requant((x_a - za) << arith.ADD_LEFT_SHIFT, ma, sa)
                        + arith.requant((x_b - zb) << arith.ADD_LEFT_SHIFT, mb, sb))
        self.observe("add", i, x=s, mult=mo, shift=so, zp=zo, relu=a["relu"])
        self.sram[a["dst_addr"]:a["dst_addr"] + n] = arith.add_int8(
            x_a, x_b, za, ma, sa, zb, mb, sb, zo, mo, so, bool(a["relu"]))


def run_golden(prog, cfg, sched_seed: int | None = None, observe=None) -> dict[str, bytes]:
    """Execute ``prog`` functionally; returns output region name -> bytes (module docstring).
    Raises StressError for an ill-formed program or a deadlock."""
    ddr = SparseDdr()
    for addr, data in prog.ddr_init:
        ddr.write(addr, bytes(data))
    m = Machine(cfg, ddr, observe)
    instrs = normalise(prog.instrs)
    queues: list[list[int]] = [[] for _ in range(4)]
    loaded: set = set()
    for i, ins in enumerate(instrs):
        check_instruction(i, ins, cfg, loaded)         # raises for a reserved opcode too
        if ins.op == "HALT":
            break
        queues[engine_of(ins)].append(i)
    else:
        raise StressError("program has no HALT: the decoder would run off the end of the code")
    _run_queues(m, instrs, queues, sched_seed)
    return {r.name: ddr.read(r.ddr_addr, r.size_bytes) for r in prog.outputs}


def _run_queues(m: Machine, instrs, queues, sched_seed) -> None:
    heads = [0] * 4
    tok = [[0] * 4 for _ in range(4)]
    rng = random.Random(sched_seed) if sched_seed is not None else None
    turn = 0
    while True:
        ready = []
        for e in range(4):
            if heads[e] < len(queues[e]):
                ins = instrs[queues[e][heads[e]]]
                if all(tok[x][e] > 0 for x in range(4) if ins.wait >> x & 1):
                    ready.append(e)
        if not ready:
            stuck = [(e, queues[e][heads[e]]) for e in range(4) if heads[e] < len(queues[e])]
            if not stuck:
                return
            e, i = stuck[0]
            ins = instrs[i]
            missing = "|".join(NAMES[x] for x in range(4) if ins.wait >> x & 1 and tok[x][e] == 0)
            raise stress_error(i, ins.op, "wait", ins.wait, f"deadlock: {NAMES[e]} waits forever for a "
                               f"token from {missing}; stuck heads: "
                               + ", ".join(f"{NAMES[q]} #{j}" for q, j in stuck), "deadlock")
        if rng is not None:
            e = rng.choice(ready)
        else:
            e = min(ready, key=lambda q: (q - turn) % 4)
            turn = (e + 1) % 4
        i = queues[e][heads[e]]
        ins = instrs[i]
        heads[e] += 1
        for x in range(4):
            if ins.wait >> x & 1:
                tok[x][e] -= 1
        m.exe(i, ins)
        for y in range(4):
            if ins.signal >> y & 1:
                if tok[e][y] >= 255:
                    raise stress_error(i, ins.op, "signal", ins.signal, f"overflows token counter "
                                       f"{NAMES[e]}->{NAMES[y]} (255 tokens not yet consumed)",
                                       "token_overflow")
                tok[e][y] += 1


__all__ = ["run_golden", "SparseDdr", "Machine"]
