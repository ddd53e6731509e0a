"""MXU (core clock): R x C weight-stationary int8 systolic array with double-buffered weights
(two weight planes per PE) plus the accumulator buffer.

Timing (docs/architecture.md, "MXU"), start edge ``s``:
  LOAD_WEIGHTS: writes the plane the last MATMUL started did not use (``1 - mm_plane``); SRAM
          request on the weight requester (MXU_W) at s, visible s+1; D = C words at
          sram_addr .. sram_addr+C-1; grant g; loaded at L = g + C (its free edge); completion
          c = max(L, c_prev + 1) (in order after the MXU instruction before it).
  MATMUL: uses the plane the last LOAD_WEIGHTS wrote; request on the activation requester (MXU)
          at s; D = M = count_x*count_y words; bank mask over [act_addr, largest address read];
          grant g; completion c = g + M + R + C; free edge f = g + 1. M = 0: no SRAM request, no
          accumulator write, as if g = s + 1 (docs/rtl_interfaces.md, tpu_mxu).
Start rules beyond the free edge (``head_ready_ps``): a MATMUL starts at s >= A + 1, A = g + M of
the previous MATMUL (its last activation read; M = 0: s + 1); a LOAD_WEIGHTS starts at s >= P + 1,
P = g + M + R of the last MATMUL that used the plane it writes (that MATMUL's last vector has
passed every row). At most MXU_MAX_INFLIGHT (4, tpusim.arch.limits) MXU instructions in flight,
completing in order; a NOP or an erroneous instruction starts only when none is in flight.
Function: word n of a weight tile holds column n (W[0..R-1][n]), so a plane = words.T,
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
from tpusim.arch.limits import MXU_MAX_INFLIGHT
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
        zeros = np.zeros((cfg.array_rows, cfg.array_cols), dtype=np.int8)
        self.planes = [zeros, zeros.copy()]                 # the two weight planes, int8 [R, C]
        self._planes_f32 = [p.astype(np.float32) for p in self.planes]   # the same, for the BLAS
        self.lw_plane = 0              # plane the last LOAD_WEIGHTS wrote (MATMULs use it)
        self.mm_plane = 1              # plane the last MATMUL used (LOAD_WEIGHTS writes the other)
        self.act_free_ps = 0           # A: last activation read of the last MATMUL
        self.plane_free_ps = [0, 0]    # P per plane: its last MATMUL's last vector passed row R-1
        self.max_inflight = MXU_MAX_INFLIGHT
        self._prev_c_ps = 0            # completion edge of the last MXU instruction started
        self._open_c_ps = []           # completion edges of the started, unretired LW/MATMULs
        self._owned = {}               # trace: completion ps -> [(first_row, vals, keep)]

    @property
    def weights(self) -> np.ndarray:
        """The plane the next MATMUL uses (the last LOAD_WEIGHTS' weights), int8 [R, C]."""
        return self.planes[self.lw_plane]

    def head_ready_ps(self, entry: QueueEntry) -> int:
        """MATMUL: A + 1 (the activation port); LOAD_WEIGHTS: P + 1 of the plane it writes."""
        op = entry.instr.op
        if op == "MATMUL":
            return self.act_free_ps + self.period
        if op == "LOAD_WEIGHTS":
            return self.plane_free_ps[1 - self.mm_plane] + self.period
        return 0

    def starts_alone(self, entry: QueueEntry) -> bool:
        """A NOP, an op the MXU cannot run, or a LOAD_WEIGHTS / MATMUL failing its device check."""
        op = entry.instr.op
        if op == "LOAD_WEIGHTS":
            return load_weights_fault(entry.instr.args, self.cfg) is not None
        if op == "MATMUL":
            return matmul_fault(entry.instr.args, self.cfg) is not None
        return True

    def execute(self, entry: QueueEntry, s_ps: int):
        """Run ``entry``; return its completion edge with the clock at its free edge."""
        op = entry.instr.op
        if op == "LOAD_WEIGHTS":
            c_ps, f_ps = yield from self._load_weights(entry, s_ps)
        elif op == "MATMUL":
            c_ps, f_ps = yield from self._matmul(entry, s_ps)
        else:
            raise SimulationError(f"{entry.where()}: cannot run on the MXU")
        self._prev_c_ps = c_ps
        self._open_c_ps.append(c_ps)
        yield self.env.timeout(f_ps - self.env.now)
        return c_ps

    def _matmul_int32(self, x: np.ndarray) -> np.ndarray:
        """int8 [M, R] @ weights int8 [R, C] -> int32 [M, C], exact. float32 BLAS when every
        partial sum is an integer of magnitude <= R * 2**14 <= 2**24 (exact in float32 in any
        summation order); otherwise tpusim.arch.arith.matmul_acc."""
        if self.cfg.array_rows <= 1024:
            return (x.astype(np.float32) @ self._planes_f32[self.lw_plane]).astype(np.int32)
        return matmul_acc(x, self.weights)

    def _load_weights(self, entry: QueueEntry, s_ps: int):
        """(completion, free edge) of a LOAD_WEIGHTS into plane ``1 - mm_plane``."""
        raise_fault(entry, load_weights_fault(entry.instr.args, self.cfg))
        cols = self.cfg.array_cols
        a = entry.instr["sram_addr"]
        plane = 1 - self.mm_plane
        self.lw_plane = plane
        g_ps = yield self.sram.request(sram_mod.MXU_W, s_ps, self.dom, [(a, a + cols - 1)], cols)
        self.planes[plane] = self.sram.words[a:a + cols].T.copy()
        self._planes_f32[plane] = self.planes[plane].astype(np.float32)
        loaded_ps = g_ps + cols * self.period
        return max(loaded_ps, self._prev_c_ps + self.period), loaded_ps

    def _trace_acc(self, first_row: int, vals: np.ndarray, g_ps: int, c_ps: int) -> None:
        """Digest a MATMUL's accumulator writes (int32 ``vals`` [M, C]) as the RTL probe does: the
        element of vector i, column n is written at edge g + i + R + n + 2 and counts in the digest
        of the first MXU instruction to complete at or after that edge (earlier ones still in
        flight, or this one), digested at its retire (``_retire``)."""
        m, cols = vals.shape
        edge = g_ps + (np.arange(m)[:, None] + np.arange(cols)[None, :]
                       + self.cfg.array_rows + 2) * self.period
        lower = None
        for c in self._open_c_ps + [c_ps]:
            upto = edge <= c
            keep = upto if lower is None else upto & ~lower
            if keep.any():
                self._owned.setdefault(c, []).append((first_row, vals.copy(), keep))
            lower = upto
            if upto.all():
                break

    def _retire(self, entry: QueueEntry, s_ps: int, c_ps: int) -> None:
        if self._open_c_ps and self._open_c_ps[0] == c_ps:
            self._open_c_ps.pop(0)
        for first_row, vals, keep in self._owned.pop(c_ps, ()):
            self.trace.wrote_acc(self.engine, first_row, vals, keep=keep)
        super()._retire(entry, s_ps, c_ps)

    def _matmul(self, entry: QueueEntry, s_ps: int):
        """(completion, free edge) of a MATMUL on plane ``lw_plane``."""
        ins = entry.instr
        cx, cy = ins["count_x"], ins["count_y"]
        m = cx * cy
        cfg = self.cfg
        rows_cols = cfg.array_rows + cfg.array_cols
        if m == 0:      # docs/rtl_interfaces.md: no SRAM request, as if granted at s + 1
            g_ps = s_ps + self.period
            self._stream(g_ps, 0)
            return g_ps + rows_cols * self.period, g_ps + self.period
        raise_fault(entry, matmul_fault(ins.args, cfg))
        idx = (ins["act_addr"] + np.arange(cy)[:, None] * ins["stride_y"]
               + np.arange(cx)[None, :] * ins["stride_x"]).ravel()
        last = int(idx.max())
        acc_addr = ins["acc_addr"]
        g_ps = yield self.sram.request(sram_mod.MXU, s_ps, self.dom, [(ins["act_addr"], last)], m)
        self._stream(g_ps, m)
        y = self._matmul_int32(self.sram.words[idx])
        rows = self.acc.rows
        if ins["accumulate"]:
            rows[acc_addr:acc_addr + m] += y        # int32 array add wraps around
        else:
            rows[acc_addr:acc_addr + m] = y
        c_ps = g_ps + (m + rows_cols) * self.period
        if self.trace is not None:
            self._trace_acc(acc_addr, rows[acc_addr:acc_addr + m], g_ps, c_ps)
        return c_ps, g_ps + self.period

    def _stream(self, g_ps: int, m: int) -> None:
        """A MATMUL granted at ``g_ps`` (M = 0: s + 1) with ``m`` vectors on plane ``lw_plane``:
        the activation port is free from A = g + M, the plane from P = g + M + R."""
        self.mm_plane = self.lw_plane
        self.act_free_ps = g_ps + m * self.period
        self.plane_free_ps[self.mm_plane] = g_ps + (m + self.cfg.array_rows) * self.period


__all__ = ["Mxu", "AccumulatorBuffer"]
