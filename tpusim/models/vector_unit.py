"""VPU (core clock): LOAD_QREG, REQUANT, REQUANT_ADD, POOL, ADD, MUL, LUT, DWCONV, SOFTMAX, LAYERNORM; integer
arithmetic from tpusim.arch.arith (row operations: tpusim.arch.rowops).

Timing (docs/architecture.md, "VPU and quant registers"), start edge ``s``:
  LOAD_QREG: no SRAM, c = s + 1.
  REQUANT / POOL / ADD / MUL / LUT: SRAM request at ``s`` (visible s+1) of ``D`` accesses, grant g, c = g + D:
    REQUANT D = param_words + planes*count; ranges: table, each destination plane
    REQUANT_ADD D = param_words + 2*planes*count (per write: read the skip word, write); ranges:
            table, each destination plane, each skip plane
    POOL    D = out_w*out_h*(win_w*win_h + 1); ranges: source (first..last tap), destination
    ADD     D = 3*count;                  ranges: src_a, src_b, dst (count words each)
    MUL     D = 3*count;                  ranges: src_a, src_b (count words, 1 if stride_b = 0), dst
    LUT     D = lut_words + 2*count;      ranges: table, src, dst (count words each)
    DWCONV  D = dw_param_words + out_w*out_h*(2*win_w*win_h + 1); ranges: table, source (first..last
            tap), weights (win_w*win_h words), destination
    SOFTMAX D = rows*4n, LAYERNORM D = rows*9n (n = ceil(row_len/W)); ranges: source rows,
            destination rows, LAYERNORM's table (6n words) (tpusim.arch.rowops)
  D = 0 (POOL/ADD/MUL/DWCONV with no output, SOFTMAX/LAYERNORM with rows*row_len = 0): no SRAM request, c = s + 1 (docs/rtl_interfaces.md, tpu_vpu).
  Zero-word ranges are left out of the bank mask. POOL with a 0-tap window: max gives -128 in
  every lane, average gives pool_avg(0, 0, ...).
Data: SRAM words are int8[W] (W = R lanes); the accumulator rows int32[C]. The REQUANT table
at word ``param_addr`` is bias int32[C], multiplier int32[C], shift int8[C], little endian
(``param_words`` = ceil(9C/W) words); DWCONV's is the same for W channels (9 words). REQUANT with
C > R writes ``planes`` = C/R words per accumulator row (at dst_addr + j*dst_plane_stride + i),
with R > C the lanes of group ``lane_group`` of word dst_addr + i
(``tpusim.arch.operands.requant_writes``).
Every int8 shift (table or LOAD_QREG) is defined: tpusim.arch.arith.requant (left shift > 31
saturates, right shift > 31 gives 0), as the RTL.
Effects are applied at the grant edge (inside [s, c]). Device errors (vpu_acc_range,
vpu_sram_range, qreg_unloaded: tpusim.arch.device_checks) are raised at ``s``, before the SRAM
request.
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.arith import add_int8, depthwise_acc, lut_int8, mul_int8, pool_avg, requant_conv
from tpusim.arch.device_checks import (
    add_fault,
    dwconv_fault,
    layernorm_fault,
    lut_fault,
    mul_fault,
    pool_fault,
    requant_add_fault,
    requant_fault,
    softmax_fault,
)
from tpusim.arch.errors import SimulationError
from tpusim.arch.operands import (
    LUT_TABLE_BYTES,
    REQUANT_TABLE_BYTES_PER_CHANNEL,
    last_writes,
    lut_table,
    requant_add_store,
    requant_table,
    requant_writes,
)
from tpusim.arch.rowops import rowop_accesses, rowop_ranges, run_rowop
from tpusim.models import sram as sram_mod
from tpusim.models.common import QueueEntry, raise_fault
from tpusim.models.engine import EngineBase


class Vpu(EngineBase):
    """The vector unit; reads the MXU's accumulator buffer and the quant registers."""

    def __init__(self, env, clocks, engine, queue, tokens, perf, retire_log, *, cfg, sram, acc,
                 qregs, trace=None) -> None:
        super().__init__(env, clocks, engine, queue, tokens, perf, retire_log, trace)
        self.cfg = cfg
        self.sram = sram
        self.acc = acc
        self.qregs = qregs

    def execute(self, entry: QueueEntry, s_ps: int):
        op = entry.instr.op
        if op == "LOAD_QREG":
            a = entry.instr.args
            self.qregs.load(a["qreg"], a["multiplier"], a["shift"], a["zero_point"])
            if self.trace is not None:
                self.trace.vpu_start(s_ps + self.period, entry.instr)
            c_ps = s_ps + self.period
        elif op in ("REQUANT", "REQUANT_ADD", "POOL", "ADD", "MUL", "LUT", "DWCONV", "SOFTMAX", "LAYERNORM"):
            ranges, accesses, effect = getattr(self, f"_plan_{op.lower()}")(entry)
            if self.trace is not None:
                self.trace.vpu_start(s_ps + self.period, entry.instr)
            if accesses == 0:         # POOL/ADD with no output: no SRAM request, c = s + 1
                c_ps = s_ps + self.period
            else:
                g_ps = yield self.sram.request(sram_mod.VPU, s_ps, self.dom, ranges, accesses)
                try:
                    effect()
                except ValueError as e:       # arith refuses a value outside its domain (none today)
                    raise SimulationError(f"{entry.where()}: {e}") from None
                if self.trace is not None and op not in ("REQUANT", "REQUANT_ADD", "SOFTMAX", "LAYERNORM"):
                    self.trace.wrote_vpu(self.engine, entry.instr, self.sram)
                c_ps = g_ps + accesses * self.period
        else:
            raise SimulationError(f"{entry.where()}: cannot run on the VPU")
        yield self.env.timeout(c_ps - self.env.now)
        return c_ps

    # ------------------------------------------------------------------ checks
    def _check(self, entry: QueueEntry, fault_of) -> None:
        """Raise the DeviceError of ``fault_of(args, cfg, loaded quant registers)``
        (tpusim.arch.device_checks), at the start edge."""
        raise_fault(entry, fault_of(entry.instr.args, self.cfg, self.qregs))

    def _table(self, a: dict, cols: int):
        """(bias, mult, shift) of the per-channel table of ``cols`` channels at word ``param_addr``."""
        raw = self.sram.read_bytes(a["param_addr"] * self.sram.word_bytes, REQUANT_TABLE_BYTES_PER_CHANNEL * cols)
        return requant_table(raw, cols)

    @staticmethod
    def _span(first: int, n: int) -> tuple[int, int] | None:
        """(first, last) word range of ``n`` words; None if n == 0 (not in the bank mask)."""
        return (first, first + n - 1) if n else None

    def _plane_spans(self, a: dict, field: str) -> list:
        """REQUANT / REQUANT_ADD: the ``count``-word range of each plane from word ``a[field]``
        (``dst_addr``, ``skip_addr``), planes ``dst_plane_stride`` words apart."""
        return [self._span(a[field] + j * a["dst_plane_stride"], a["count"]) for j in range(self.cfg.requant_planes)]

    # ------------------------------------------------------------------ REQUANT
    def _plan_requant(self, entry: QueueEntry):
        a = entry.instr.args
        n, pw, planes = a["count"], self.cfg.param_words, self.cfg.requant_planes
        self._check(entry, requant_fault)
        table = self._span(a["param_addr"], pw)
        dst = self._plane_spans(a, "dst_addr")
        zp = self.qregs.get(a["qreg"]).zero_point

        def effect():
            vals, words, lo, hi = self._requant_rows(a, zp)
            keep = last_writes(words)
            self.sram.words[words[keep], lo:hi] = vals[keep]
            if self.trace is not None:
                self.trace.wrote_requant(self.engine, words, lo, vals, self.sram.word_bytes)
        return [r for r in (table, *dst) if r], pw + planes * n, effect

    def _requant_rows(self, a: dict, zp: int):
        """REQUANT's values in write order (``requant_writes``): (int8 [writes, lanes], words, lo, hi)."""
        cols = self.cfg.array_cols
        bias, mult, shift = self._table(a, cols)
        acc = self.acc.rows[a["acc_addr"]:a["acc_addr"] + a["count"]]
        out = requant_conv(acc, bias, mult, shift, zp, bool(a["relu"]))
        words, lo, hi = requant_writes(a, self.cfg.requant_planes, self.cfg.lane_groups, cols)
        return out.reshape(len(words), hi - lo), words, lo, hi

    # ------------------------------------------------------------------ REQUANT_ADD
    def _plan_requant_add(self, entry: QueueEntry):
        a = entry.instr.args
        n, pw, planes = a["count"], self.cfg.param_words, self.cfg.requant_planes
        self._check(entry, requant_add_fault)
        table = self._span(a["param_addr"], pw)
        dst, skip = self._plane_spans(a, "dst_addr"), self._plane_spans(a, "skip_addr")
        qa, qb, qo = (self.qregs.get(a[f]) for f in ("qreg", "qreg_b", "qreg_out"))

        def effect():
            out, words, lo, hi = self._requant_rows(a, qa.zero_point)

            def add(x_a, x_b):
                return add_int8(x_a, x_b, qa.zero_point, qa.multiplier, qa.shift,
                                qb.zero_point, qb.multiplier, qb.shift,
                                qo.zero_point, qo.multiplier, qo.shift, bool(a["add_relu"]))
            if n:
                vals = requant_add_store(self.sram.words, a, out, words, lo, hi, add)
                if self.trace is not None:
                    self.trace.wrote_requant(self.engine, words, lo, vals, self.sram.word_bytes)
        return [r for r in (table, *dst, *skip) if r], pw + 2 * planes * n, effect

    # ------------------------------------------------------------------ POOL
    @staticmethod
    def _window(a: dict):
        """POOL / DWCONV: the source word of every tap, int [out_h, out_w, win_h, win_w], and
        the source range (first..last tap; None without taps)."""
        ow, oh, ww, wh = a["out_w"], a["out_h"], a["win_w"], a["win_h"]
        idx = (a["src_addr"]
               + np.arange(oh)[:, None, None, None] * a["out_stride_y"]
               + np.arange(ow)[None, :, None, None] * a["out_stride_x"]
               + np.arange(wh)[None, None, :, None] * a["win_stride_y"]
               + np.arange(ww)[None, None, None, :] * a["win_stride_x"])
        return idx, Vpu._span(a["src_addr"], int(idx.max()) - a["src_addr"] + 1 if ww * wh else 0)

    def _plan_pool(self, entry: QueueEntry):
        a = entry.instr.args
        taps, outs = a["win_w"] * a["win_h"], a["out_w"] * a["out_h"]
        if outs == 0:
            return [], 0, None
        self._check(entry, pool_fault)
        idx, src = self._window(a)
        dst = self._span(a["dst_addr"], outs)
        if a["mode"]:
            zp_in = self.qregs.get(a["qreg_in"]).zero_point
            q_out = self.qregs.get(a["qreg_out"])

        def effect():
            vals = self.sram.words[idx.reshape(outs, taps)]             # [outputs, taps, W]
            if a["mode"]:
                sums = vals.astype(np.int32).sum(axis=1)
                out = pool_avg(sums, taps, zp_in, q_out.multiplier, q_out.shift, q_out.zero_point)
            else:
                out = vals.max(axis=1, initial=-128)
            self.sram.words[a["dst_addr"]:a["dst_addr"] + outs] = out
        return [r for r in (src, dst) if r], outs * (taps + 1), effect

    # ------------------------------------------------------------------ DWCONV
    def _plan_dwconv(self, entry: QueueEntry):
        a = entry.instr.args
        taps, outs = a["win_w"] * a["win_h"], a["out_w"] * a["out_h"]
        if outs == 0:
            return [], 0, None
        self._check(entry, dwconv_fault)
        cols, pw = self.cfg.word_bytes, self.cfg.dw_param_words      # one channel per lane
        idx, src = self._window(a)
        ranges = [self._span(a["param_addr"], pw), src, self._span(a["wt_addr"], taps),
                  self._span(a["dst_addr"], outs)]
        zp_in = self.qregs.get(a["qreg_in"]).zero_point
        zp_out = self.qregs.get(a["qreg_out"]).zero_point

        def effect():
            bias, mult, shift = self._table(a, cols)
            vals = self.sram.words[idx.reshape(outs, taps)]             # [outputs, taps, W]
            acc = depthwise_acc(vals, self.sram.words[a["wt_addr"]:a["wt_addr"] + taps], zp_in)
            out = requant_conv(acc, bias, mult, shift, zp_out, bool(a["relu"]))
            self.sram.words[a["dst_addr"]:a["dst_addr"] + outs] = out
        return [r for r in ranges if r], pw + outs * (2 * taps + 1), effect

    # ------------------------------------------------------------------ ADD
    def _plan_add(self, entry: QueueEntry):
        a = entry.instr.args
        n = a["count"]
        if n == 0:
            return [], 0, None
        self._check(entry, add_fault)
        ranges = [self._span(a[f], n) for f in ("src_a", "src_b", "dst_addr")]
        qa, qb, qo = (self.qregs.get(a[f]) for f in ("qreg_a", "qreg_b", "qreg_out"))

        def effect():
            w = self.sram.words
            out = add_int8(w[a["src_a"]:a["src_a"] + n], w[a["src_b"]:a["src_b"] + n],
                           qa.zero_point, qa.multiplier, qa.shift,
                           qb.zero_point, qb.multiplier, qb.shift,
                           qo.zero_point, qo.multiplier, qo.shift, bool(a["relu"]))
            w[a["dst_addr"]:a["dst_addr"] + n] = out
        return ranges, 3 * n, effect

    # ------------------------------------------------------------------ MUL
    def _plan_mul(self, entry: QueueEntry):
        a = entry.instr.args
        n = a["count"]
        if n == 0:
            return [], 0, None
        self._check(entry, mul_fault)
        nb = n if a["stride_b"] else 1
        ranges = [self._span(a["src_a"], n), self._span(a["src_b"], nb), self._span(a["dst_addr"], n)]
        qa, qb, qo = (self.qregs.get(a[f]) for f in ("qreg_a", "qreg_b", "qreg_out"))

        def effect():
            w = self.sram.words
            out = mul_int8(w[a["src_a"]:a["src_a"] + n], w[a["src_b"]:a["src_b"] + nb], qa.zero_point,
                           qb.zero_point, qo.zero_point, qo.multiplier, qo.shift, bool(a["relu"]))
            w[a["dst_addr"]:a["dst_addr"] + n] = out
        return ranges, 3 * n, effect

    # ------------------------------------------------------------------ LUT
    def _plan_lut(self, entry: QueueEntry):
        a = entry.instr.args
        n, t = a["count"], self.cfg.lut_words
        self._check(entry, lut_fault)
        ranges = [self._span(a["table_addr"], t), self._span(a["src_addr"], n), self._span(a["dst_addr"], n)]

        def effect():
            table = lut_table(self.sram.read_bytes(a["table_addr"] * self.sram.word_bytes, LUT_TABLE_BYTES))
            w = self.sram.words
            w[a["dst_addr"]:a["dst_addr"] + n] = lut_int8(w[a["src_addr"]:a["src_addr"] + n], table)
        return [r for r in ranges if r], t + 2 * n, effect

    # ------------------------------------------------------------------ SOFTMAX, LAYERNORM
    def _plan_rowop(self, entry: QueueEntry, op: str, fault_of):
        a = entry.instr.args
        d = rowop_accesses(op, a, self.cfg.word_bytes)
        if d == 0:
            return [], 0, None
        self._check(entry, fault_of)
        q = self.qregs.get(a["qreg_out"])
        qout = (q.multiplier, q.shift, q.zero_point)
        ranges = [(first, last) for _, first, last in rowop_ranges(op, a, self.cfg.word_bytes)]
        on_write = None
        if self.trace is not None:
            def on_write(words, vals):
                self.trace.wrote_words(self.engine, words, vals, self.sram.word_bytes)

        def effect():
            run_rowop(op, self.sram.words, a, qout, on_write=on_write)
        return ranges, d, effect

    def _plan_softmax(self, entry: QueueEntry):
        return self._plan_rowop(entry, "SOFTMAX", softmax_fault)

    def _plan_layernorm(self, entry: QueueEntry):
        return self._plan_rowop(entry, "LAYERNORM", layernorm_fault)


__all__ = ["Vpu"]
