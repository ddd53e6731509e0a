"""Instruction fetch (core clock): lines of ``BB`` bytes through the DDR arbiter (requester 0).

Rules (docs/architecture.md, "Instruction fetch"):
  * lines are fetched sequentially from ``code_addr`` (``BB``-aligned); at most one fetch is
    outstanding; ``fetch.line_buffers`` line buffers;
  * at core edge ``e`` fetch launches the next line if a buffer is free, no fetch is outstanding
    and fetching has not been stopped; core edge 0 launches the first line;
  * the line is valid to the decoder at ``v = cdc(done -> core)``; fetch acts on the completion at
    ``v`` and may launch the next line at ``v`` (as the DMA does with ``r_{j+1} = f_j``);
  * a buffer is freed at the edge ``e`` that dispatches its line's last instruction and is usable
    from ``e + 1``;
  * fetching stops at the edge ``h0`` where HALT (or a reserved opcode) is dispatched, or where
    the decoder registers a device error (error_unit.py): launches at edges ``> h0`` are
    suppressed; the decision at ``h0`` itself sees values from before ``h0`` (a launch at ``h0``
    still happens, completes and is counted).
``lines``: Timeline of (valid_ps, line bytes); ``freed``: Timeline of the free edges (ps).
"""
from __future__ import annotations

import simpy

from tpusim.arch.errors import SimulationError
from tpusim.arch.limits import DDR_ADDR_LIMIT
from tpusim.models import ddr_arbiter
from tpusim.models.common import Clocks, Timeline


class Fetch:
    def __init__(self, env: simpy.Environment, clocks: Clocks, cfg, code_addr: int, ddr_arb,
                 ddr_mem) -> None:
        if code_addr % cfg.dma_burst_bytes or not 0 <= code_addr < DDR_ADDR_LIMIT:
            raise SimulationError(f"code_addr {code_addr:#x} is not a {cfg.dma_burst_bytes}-byte "
                                  "aligned 40-bit DDR address")
        self.env, self.clocks = env, clocks
        self.dom = clocks.core
        self.line_bytes = cfg.dma_burst_bytes
        self.buffers = cfg.fetch_line_buffers
        self.code_addr = code_addr
        self.ddr_arb, self.ddr_mem = ddr_arb, ddr_mem
        self.lines = Timeline(env)
        self.freed = Timeline(env)
        self.stop_ps: int | None = None      # edge h0 where HALT / reserved opcode was dispatched
        self.waiting_for: str | None = None

    def free_line(self, line: int, e_ps: int) -> None:
        """The decoder dispatched the last instruction of ``line`` at core edge ``e_ps``."""
        assert line == len(self.freed), (line, len(self.freed))
        self.freed.append(e_ps)

    def stop(self, h0_ps: int) -> None:
        """Stop launching after core edge ``h0_ps`` (HALT, or a device error registered there);
        the earliest stop wins."""
        self.stop_ps = h0_ps if self.stop_ps is None else min(self.stop_ps, h0_ps)

    def run(self):
        """SimPy process: launch line j at the first allowed core edge, forever until stopped."""
        env, period = self.env, self.dom.period_ps
        e_ps = self.dom.edge(0)
        j = 0
        while True:
            if j >= self.buffers:                      # needs the buffer of line j - buffers
                k = j - self.buffers
                if k < len(self.freed):
                    f = self.freed.items[k]
                else:
                    self.waiting_for = f"a free line buffer (line {k} not yet dispatched)"
                    f = yield self.freed.wait(k)
                    self.waiting_for = None
                e_ps = max(e_ps, f + period)
            if e_ps > env.now:
                yield env.timeout(e_ps - env.now)
            if self.stop_ps is not None and self.stop_ps < e_ps:
                return
            addr = self.code_addr + j * self.line_bytes
            if addr + self.line_bytes > DDR_ADDR_LIMIT:
                raise SimulationError(f"instruction fetch of line {j} at DDR {addr:#x} passes 2^40 "
                                      "(the program has no HALT)")
            g_ps, done_ps = yield self.ddr_arb.request(ddr_arbiter.FETCH, e_ps, self.dom, addr,
                                                       self.line_bytes)
            v_ps = self.clocks.cdc(done_ps, self.clocks.ddr, self.dom)
            self.lines.append((v_ps, self.ddr_mem.read(addr, self.line_bytes)))
            e_ps = v_ps
            j += 1


__all__ = ["Fetch"]
