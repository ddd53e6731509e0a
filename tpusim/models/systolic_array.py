"""MXU (core clock): R x C weight-stationary int8 systolic array plus the accumulator buffer.

Timing (docs/architecture.md, "MXU"), start edge ``s``, SRAM request at ``s`` (visible s+1):
  LOAD_WEIGHTS: D = C words at sram_addr .. sram_addr+C-1; grant g; completion c = g + C.
  MATMUL: D = M = count_x*count_y words; bank mask over [act_addr, largest address read];
          completion c = g + M + R + C (array fill and drain). M = 0: no SRAM request, no
          accumulator write, c = s + 1 + R + C (docs/rtl_interfaces.md, tpu_mxu).
Drain overlap: a MATMUL frees the MXU at f = c - C (= g + M + R; its results still leave the
bottom of the array for C cycles), so the next MXU instruction may start at s' >= f + 1 while
its accumulator writes finish; at most 2 MXU instructions are in
flight (started, not completed) and they complete in order. LOAD_WEIGHTS frees it at c. A NOP or
an erroneous instruction starts only when none is in flight.
Function: word n of a weight tile holds column n (W[0..R-1][n]), so ``weights`` = words.T,
int8 [R, C]. MATMUL vector i = y*count_x + x is word act_addr + x*stride_x + y*stride_y (int8[R]);
accumulator row acc_addr + i = (accumulate ? row : 0) + x_i @ weights, int32 with wrap-around.
``acc`` is int32 [acc_depth_rows, C]. Effects are applied at the grant edge (inside [s, c]).
Device errors (mxu_sram_range, mxu_acc_range: tpusim.arch.device_checks) are raised at ``s``,
before the SRAM request.
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.arith import matmul_acc
from tpusim.arch.device_checks import load_weights_fault, matmul_fault
from tpusim.arch.errors import SimulationError
from tpusim.models import sram as sram_mod
from tpusim.models.common import QueueEntry, raise_fault
from tpusim.models.engine import EngineBase


class AccumulatorBuffer:
    """``rows`` int32 [depth_rows, C], zero at reset."""

    def __init__(self, depth_rows: int, cols: int) -> None:
        self.rows = np.zeros((depth_rows, cols), dtype=np.int32)

    @property
    def depth(self) -> int:
        return self.rows.shape[0]


class Mxu(EngineBase):
    """The systolic-array engine (LOAD_WEIGHTS, MATMUL)."""

    def __init__(self, env, clocks, engine, queue, tokens, perf, retire_log, *, cfg, sram,
                 acc: AccumulatorBuffer, trace=None) -> None:
        super().__init__(env, clocks, engine, queue, tokens, perf, retire_log, trace)
        self.cfg = cfg
        self.sram = sram
        self.acc = acc
        self.weights = np.zeros((cfg.array_rows, cfg.array_cols), dtype=np.int8)
        self._weights_f32 = self.weights.astype(np.float32)   # the same values, for the BLAS
        self.max_inflight = 2          # a MATMUL's drain and the next instruction
        self._prev_c_ps = 0            # completion edge of the last MXU instruction started
        self._deferred = []            # trace: (first_row, rows, keep) digested after the next retire

    def overlap_cycles(self, entry: QueueEntry) -> int:
        """C for a MATMUL (its drain overlaps the next instruction), 0 for LOAD_WEIGHTS."""
        return self.cfg.array_cols if entry.instr.op == "MATMUL" else 0

    def starts_alone(self, entry: QueueEntry) -> bool:
        """A NOP, an op the MXU cannot run, or a LOAD_WEIGHTS / MATMUL failing its device check."""
        op = entry.instr.op
        if op == "LOAD_WEIGHTS":
            return load_weights_fault(entry.instr.args, self.cfg) is not None
        if op == "MATMUL":
            return matmul_fault(entry.instr.args, self.cfg) is not None
        return True

    def execute(self, entry: QueueEntry, s_ps: int):
        op = entry.instr.op
        if op == "LOAD_WEIGHTS":
            c_ps = yield from self._load_weights(entry, s_ps)
        elif op == "MATMUL":
            c_ps = yield from self._matmul(entry, s_ps)
        else:
            raise SimulationError(f"{entry.where()}: cannot run on the MXU")
        self._prev_c_ps = c_ps
        yield self.env.timeout(c_ps - self.overlap_cycles(entry) * self.period - self.env.now)
        return c_ps

    def _matmul_int32(self, x: np.ndarray) -> np.ndarray:
        """int8 [M, R] @ weights int8 [R, C] -> int32 [M, C], exact. float32 BLAS when every
        partial sum is an integer of magnitude <= R * 2**14 <= 2**24 (exact in float32 in any
        summation order); otherwise tpusim.arch.arith.matmul_acc."""
        if self.cfg.array_rows <= 1024:
            return (x.astype(np.float32) @ self._weights_f32).astype(np.int32)
        return matmul_acc(x, self.weights)

    def _load_weights(self, entry: QueueEntry, s_ps: int):
        raise_fault(entry, load_weights_fault(entry.instr.args, self.cfg))
        cols = self.cfg.array_cols
        a = entry.instr["sram_addr"]
        g_ps = yield self.sram.request(sram_mod.MXU, s_ps, self.dom, [(a, a + cols - 1)], cols)
        self.weights = self.sram.words[a:a + cols].T.copy()
        self._weights_f32 = self.weights.astype(np.float32)
        return g_ps + cols * self.period

    def _trace_acc(self, first_row: int, vals: np.ndarray, g_ps: int) -> None:
        """Digest a MATMUL's accumulator writes (int32 ``vals`` [M, C]) as the RTL probe does: the
        element of vector i, column n is written at edge g + i + R + n + 2; those at or before the
        completion of the previous MXU instruction (still draining) count in its digest, the rest
        in this one's (digested after that completion, ``_retire``)."""
        prev = self._prev_c_ps
        if prev <= g_ps:
            self.trace.wrote_acc(self.engine, first_row, vals)
            return
        m, cols = vals.shape
        edge = g_ps + (np.arange(m)[:, None] + np.arange(cols)[None, :]
                       + self.cfg.array_rows + 2) * self.period
        early = edge <= prev
        self.trace.wrote_acc(self.engine, first_row, vals, keep=early)
        self._deferred.append((first_row, vals.copy(), ~early))

    def _retire(self, entry: QueueEntry, s_ps: int, c_ps: int) -> None:
        super()._retire(entry, s_ps, c_ps)
        for first_row, vals, keep in self._deferred:
            self.trace.wrote_acc(self.engine, first_row, vals, keep=keep)
        self._deferred = []

    def _matmul(self, entry: QueueEntry, s_ps: int):
        ins = entry.instr
        cx, cy = ins["count_x"], ins["count_y"]
        m = cx * cy
        cfg = self.cfg
        if m == 0:      # docs/rtl_interfaces.md: no SRAM request, as if granted at s + 1
            return s_ps + (1 + cfg.array_rows + cfg.array_cols) * self.period
        raise_fault(entry, matmul_fault(ins.args, cfg))
        idx = (ins["act_addr"] + np.arange(cy)[:, None] * ins["stride_y"]
               + np.arange(cx)[None, :] * ins["stride_x"]).ravel()
        last = int(idx.max())
        acc_addr = ins["acc_addr"]
        g_ps = yield self.sram.request(sram_mod.MXU, s_ps, self.dom, [(ins["act_addr"], last)], m)
        y = self._matmul_int32(self.sram.words[idx])
        rows = self.acc.rows
        if ins["accumulate"]:
            rows[acc_addr:acc_addr + m] += y        # int32 array add wraps around
        else:
            rows[acc_addr:acc_addr + m] = y
        if self.trace is not None:
            self._trace_acc(acc_addr, rows[acc_addr:acc_addr + m], g_ps)
        return g_ps + (m + cfg.array_rows + cfg.array_cols) * self.period


__all__ = ["Mxu", "AccumulatorBuffer"]
