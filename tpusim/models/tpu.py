"""Top level: builds the SimPy environment and every block, runs until the device halts.

Wiring (docs/architecture.md, block diagram): fetch -> decoder -> 4 engine queues -> engines
(LOAD, STORE: DmaChannel on the DMA clock; MXU; VPU); DDR arbiter (fetch, DMA read, DMA write);
SRAM bank arbiter (LOAD, STORE, MXU, VPU); token matrix; quant registers; perf counters.
The run ends when the event queue is empty (the device is quiet). If the decoder has not halted
by then the program deadlocked: SimulationError lists every waiting engine, its PC and what it
waits for. A reserved opcode halts the device with ``error`` set: SimulationError after the run.
"""
from __future__ import annotations

import threading

from dataclasses import dataclass, field
from itertools import count as _count

import simpy

from tpusim.errors import SimulationError
from tpusim.isa import Engine
from tpusim.models.common import Clocks
from tpusim.models.ddr import DdrMemory
from tpusim.models.ddr_arbiter import DdrArbiter
from tpusim.models.decoder import Decoder
from tpusim.models.dma import DmaChannel
from tpusim.models.fetch import Fetch
from tpusim.models.perf import PerfCounters
from tpusim.models.quant_regs import QuantRegs
from tpusim.models.queues import EngineQueue
from tpusim.models.sram import Sram
from tpusim.models.systolic_array import AccumulatorBuffer, Mxu
from tpusim.models.tokens import Tokens
from tpusim.models.trace import RETIRERS, Trace
from tpusim.models.vector_unit import Vpu


@dataclass
class TpuRun:
    """Outcome of one run. ``retire``: [(pc_byte_offset, engine name, retire time ps)] in retire
    order (ties at the same ps: LOAD, STORE, MXU, VPU, HALT); ``cycles``: core cycles to halt."""
    cycles: int
    halt_ps: int
    retire: list
    counters: dict
    events: int
    error_code: int = 0
    error_pc: int | None = None
    extra: dict = field(default_factory=dict)


class Tpu:
    """The simulated chip around a DdrMemory (preloaded by the caller)."""

    def __init__(self, cfg, ddr_mem: DdrMemory, code_addr: int, trace: Trace | None = None) -> None:
        self.cfg = cfg
        self.env = env = simpy.Environment()
        self.clocks = clocks = Clocks(cfg)
        self.ddr_mem = ddr_mem
        self.trace = trace
        self.perf = PerfCounters()
        self.retire_log: list = []
        self.ddr_arb = DdrArbiter(env, clocks, cfg, self.perf, trace)
        self.sram = Sram(env, clocks, cfg, self.perf, trace)
        self.acc = AccumulatorBuffer(cfg.acc_depth_rows, cfg.array_cols)
        self.qregs = QuantRegs(cfg.qreg_count)
        self.tokens = Tokens(env, clocks)
        self.queues = [EngineQueue(env, clocks, e, cfg.queue_depth) for e in Engine]
        common = (env, clocks)
        shared = lambda e: (self.queues[e], self.tokens, self.perf, self.retire_log)  # noqa: E731
        self.engines = [
            DmaChannel(*common, Engine.LOAD, *shared(Engine.LOAD), cfg=cfg, ddr_arb=self.ddr_arb,
                       sram=self.sram, ddr_mem=ddr_mem, trace=trace),
            DmaChannel(*common, Engine.STORE, *shared(Engine.STORE), cfg=cfg, ddr_arb=self.ddr_arb,
                       sram=self.sram, ddr_mem=ddr_mem, trace=trace),
            Mxu(*common, Engine.MXU, *shared(Engine.MXU), cfg=cfg, sram=self.sram, acc=self.acc,
                trace=trace),
            Vpu(*common, Engine.VPU, *shared(Engine.VPU), cfg=cfg, sram=self.sram, acc=self.acc,
                qregs=self.qregs, trace=trace),
        ]
        self.fetch = Fetch(env, clocks, cfg, code_addr, self.ddr_arb, ddr_mem)
        self.decoder = Decoder(env, clocks, self.fetch, self.queues, self.engines, self.retire_log)
        for proc in [self.fetch, self.decoder] + self.engines:
            env.process(proc.run())

    def run(self, progress=None, period_s: float = 0.5) -> TpuRun:
        """Run to quiescence; SimulationError on deadlock or a device error.

        progress: optional callable(retired_instructions, now_ps), called from a helper thread
        every ``period_s`` seconds of wall time while the run goes on (it only reads).
        """
        stop = threading.Event()
        if progress is not None:
            def poll():
                while not stop.wait(period_s):
                    progress(len(self.retire_log), self.env.now)
            threading.Thread(target=poll, daemon=True).start()
        try:
            self.env.run()
        finally:
            stop.set()
        dec = self.decoder
        if dec.halt_ps is None:
            raise SimulationError(self._deadlock_report())
        self.perf.set("cycles", dec.cycles)
        if self.trace is not None:
            self.trace.retire(4, dec.halt_ps, dec.pc)
        retire = [(pc, RETIRERS[eng], t) for t, eng, pc in sorted(self.retire_log)]
        run = TpuRun(dec.cycles, dec.halt_ps, retire, self.perf.as_dict(), self.events(),
                     dec.error_code, dec.error_pc)
        if dec.error_code:
            err = SimulationError(
                f"reserved opcode {dec.error_word[0]:#04x} at instruction #{dec.index} "
                f"(pc {dec.error_pc:#x}): device halted with error_code {dec.error_code} "
                f"after {dec.cycles} cycles")
            err.run = run
            raise err
        return run

    def events(self) -> int:
        """SimPy events scheduled so far (reads the environment's event id counter)."""
        eid = getattr(self.env, "_eid", None)
        if eid is None:
            return -1
        n = next(eid)
        self.env._eid = _count(n + 1)
        return n

    def _deadlock_report(self) -> str:
        now = self.env.now
        parts = [e.describe_wait() for e in self.engines]
        parts = [p for p in parts if p]
        dec = self.decoder
        behind = [f"{e.name} ({dec.dispatched[i] - len(e.retired)} not retired)"
                  for i, e in enumerate(self.engines) if len(e.retired) < dec.dispatched[i]]
        what = dec.waiting_for or "?"
        if what.startswith("HALT"):
            what = "HALT: " + ", ".join(behind) + " to retire"
        parts.append(f"decoder at instruction #{dec.index} (pc {dec.pc:#x}) waits for {what}")
        return (f"deadlock: no event left at {now} ps (core cycle "
                f"{self.clocks.core.index_at_or_after(now)}) and the device has not halted; "
                + "; ".join(parts))


__all__ = ["Tpu", "TpuRun"]
