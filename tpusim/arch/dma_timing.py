"""Closed-form timing of one DMA instruction on an otherwise idle chip (docs/architecture.md,
"DMA" and "DDR arbiter and memory"): the burst recurrences of the architecture evaluated with the
configuration's clock edges, no other DDR requester and no SRAM bank conflict.

This is what the fast estimator (tpucompile.backend.estimate) charges per DMA instruction; the
SimPy model and the RTL are the cycle-accurate reference (a LOAD and a STORE running together
share the DDR bus, which the estimator accounts for separately).

``DmaTiming(cfg).load_ps(n)`` / ``store_ps(n)``: picoseconds from the instruction's start edge to
its completion for ``n`` whole bursts of ``dma.burst_bytes`` (n >= 1), exact up to
``EXACT_BURSTS`` bursts and extrapolated at the steady-state rate beyond. The recurrences run
burst by burst until they repeat themselves (``DmaTiming._repeat``), then the period fills in
the rest exactly.
"""
from __future__ import annotations

import math

import numpy as np

from tpusim.arch.errors import ConfigError
from tpusim.arch.timebase import Timebase

#: bursts evaluated exactly; longer instructions continue at the rate of the last STEADY_BURSTS
EXACT_BURSTS = 256
STEADY_BURSTS = 64
#: longest period (bursts) after which the recurrences are checked for repeating themselves
MAX_PERIOD_BURSTS = 32
_START_EDGE = 1000       # a DMA edge well after reset, so every phase relation has settled


class DmaTiming:
    """Completion times of an isolated DMA LOAD / STORE instruction of ``n`` bursts (ps)."""

    def __init__(self, cfg) -> None:
        tb = Timebase(cfg)
        self.core, self.ddr, self.dma = tb.core, tb.ddr, tb.dma
        self._cdc = tb.cdc
        self.beats = cfg.dma_burst_bytes // cfg.ddr_beat_bytes
        self.words = cfg.dma_burst_bytes // cfg.word_bytes
        self.latency = cfg.ddr_latency_cycles
        self.k = cfg.dma_outstanding
        self._lcm_ps = math.lcm(self.core.period_ps, self.ddr.period_ps, self.dma.period_ps)
        if self.k < 1:
            raise ConfigError(f"config '{cfg.name}': dma.outstanding must be >= 1, got {self.k}")
        self._load = self._curve(self._load_completions())
        self._store = self._curve(self._store_completions())

    # ---- the recurrences of docs/architecture.md, bursts 0 .. EXACT_BURSTS-1 -------------
    def _ddr_done(self, launch_ps: int, g_prev: int | None) -> tuple[int, int]:
        """(grant, done) of a DDR burst request launched at ``launch_ps`` (ps)."""
        v = self._cdc(launch_ps, self.ddr)
        g = v if g_prev is None else max(v, g_prev + self.beats * self.ddr.period_ps)
        return g, g + (self.latency + self.beats - 1) * self.ddr.period_ps

    def _sram_done(self, launch_ps: int) -> int:
        """Completion seen by the DMA of an SRAM transaction launched at ``launch_ps`` (granted
        as soon as it is visible: no bank conflict)."""
        w = self._cdc(launch_ps, self.core)
        return self._cdc(w + self.words * self.core.period_ps, self.dma)

    def _start(self) -> int:
        return self.dma.edge(_START_EDGE)

    def _load_completions(self) -> list[int]:
        s = self._start()
        f: list[int] = []
        regs: list[tuple] = []
        r = g = e = w = None
        core = self.core.period_ps
        for j in range(EXACT_BURSTS):
            free = f[j - self.k] if j >= self.k else s
            r = s if j == 0 else max(r + self.dma.period_ps, free)
            g, done = self._ddr_done(r, g)
            d = self._cdc(done, self.dma)
            # SRAM writes queue in the core domain: launch e_j = max(d_j, e_{j-1} + 1), grant
            # w_j = max(cdc(e_j), w_{j-1} + D + 1) (no bank conflict)
            e = d if j == 0 else max(d, e + self.dma.period_ps)
            v = self._cdc(e, self.core)
            w = v if j == 0 else max(v, w + (self.words + 1) * core)
            f.append(self._cdc(w + self.words * core, self.dma))
            regs.append((r, g, e, w))
            if self._repeat(f, regs):
                break
        return [t - s for t in f]

    def _store_completions(self) -> list[int]:
        s = self._start()
        f: list[int] = []
        regs: list[tuple] = []
        d = g = None
        for j in range(EXACT_BURSTS):
            free = f[j - self.k] if j >= self.k else s
            r = s if j == 0 else max(d, free)
            d = self._sram_done(r)
            g, done = self._ddr_done(d, g)
            f.append(self._cdc(done, self.dma))
            regs.append((d, g))
            if self._repeat(f, regs):
                break
        return [t - s for t in f]

    def _repeat(self, f: list[int], regs: list[tuple]) -> bool:
        """If the recurrence has become periodic, extend ``f`` to EXACT_BURSTS and return True.

        The next burst depends only on the last ``k`` completions ``f`` and the registers
        ``regs`` (request, grant) of the last burst, once every burst waits for one k back. If
        that state equals the one ``P`` bursts earlier shifted by ``delta`` ps, a multiple of
        every clock period (so every clock edge shifts with it), every later burst repeats the
        one ``P`` earlier ``delta`` later: exact, not an extrapolation."""
        j = len(f) - 1
        for p in range(1, min(MAX_PERIOD_BURSTS, j - self.k + 1) + 1):
            delta = f[j] - f[j - p]
            if delta % self._lcm_ps or any(a - b != delta for a, b in zip(regs[j], regs[j - p])):
                continue
            if all(f[j - i] - f[j - p - i] == delta for i in range(1, self.k)):
                for m in range(j + 1, EXACT_BURSTS):
                    f.append(f[m - p] + delta)
                return True
        return False

    @staticmethod
    def _curve(done_ps: list[int]) -> tuple[list[int], float, np.ndarray]:
        """(completion ps of bursts 1..EXACT_BURSTS, steady ps per burst beyond, the same
        completions as float64 with a leading 0.0 for no burst)."""
        slope = (done_ps[-1] - done_ps[-1 - STEADY_BURSTS]) / STEADY_BURSTS
        table = np.concatenate(([0.0], np.asarray(done_ps, dtype=np.float64)))
        table.flags.writeable = False           # (shared: ``load_ps_table``)
        return done_ps, slope, table

    @staticmethod
    def _at_array(curve, n: np.ndarray) -> np.ndarray:
        done_ps, slope, table = curve
        n = np.maximum(np.asarray(n, dtype=np.int64), 0)
        last = len(done_ps)
        return np.where(n <= last, table[np.minimum(n, last)], table[-1] + (n - last) * slope)

    def load_ps_array(self, n_bursts: np.ndarray) -> np.ndarray:
        """``load_ps`` of each element (float64 ps)."""
        return self._at_array(self._load, n_bursts)

    def store_ps_array(self, n_bursts: np.ndarray) -> np.ndarray:
        """``store_ps`` of each element (float64 ps)."""
        return self._at_array(self._store, n_bursts)

    def load_ps_table(self) -> tuple[np.ndarray, float]:
        """(``load_ps`` of 0 .. EXACT_BURSTS bursts, float64, read-only; the steady ps per burst
        beyond): a longer instruction of ``n`` bursts takes the table's last + (n - EXACT_BURSTS)
        x that (``load_ps_array``'s very operations)."""
        return self._load[2], self._load[1]

    def store_ps_table(self) -> tuple[np.ndarray, float]:
        """``load_ps_table`` of ``store_ps``."""
        return self._store[2], self._store[1]

    @staticmethod
    def _at(curve, n: int) -> float:
        done_ps, slope, _ = curve
        if n <= 0:
            return 0.0
        if n <= len(done_ps):
            return float(done_ps[n - 1])
        return done_ps[-1] + (n - len(done_ps)) * slope

    def load_ps(self, n_bursts: int) -> float:
        """ps from start to completion of a DMA_LOAD of ``n_bursts`` bursts (0 for none)."""
        return self._at(self._load, n_bursts)

    def store_ps(self, n_bursts: int) -> float:
        """ps from start to completion of a DMA_STORE of ``n_bursts`` bursts (0 for none)."""
        return self._at(self._store, n_bursts)

    @property
    def load_burst_ps(self) -> float:
        """Steady-state ps per burst of a long LOAD (its bandwidth: burst_bytes / this)."""
        return self._load[1]

    @property
    def store_burst_ps(self) -> float:
        return self._store[1]

    @property
    def bus_burst_ps(self) -> int:
        """ps one burst holds the DDR command bus (LOAD and STORE share it)."""
        return self.beats * self.ddr.period_ps


__all__ = ["DmaTiming", "EXACT_BURSTS"]
