"""Top level: builds the SimPy environment and every block, runs until the device halts.

Wiring (docs/architecture.md, block diagram): fetch -> decoder -> 4 engine queues -> engines
(LOAD, STORE: DmaChannel on the DMA clock; MXU; VPU); DDR arbiter (fetch, DMA read, DMA write);
SRAM bank arbiter (LOAD, STORE, MXU, VPU); token matrix; quant registers; perf counters.
The run ends when the event queue is empty (the device is quiet). If the decoder has not halted
by then and no device error was flagged, the program deadlocked: DeadlockError lists every
waiting engine, its PC and what it waits for (``.waiting``). A device error (reserved opcode,
bad DMA/MXU/VPU operands, unloaded quant register, token overflow; error_unit.py) stops
dispatch and the device halts as after HALT: DeviceError after the run, with ``.run`` set if the
device halted (``.waiting`` if it did not).
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count as _count

import simpy
from threadpoolctl import threadpool_limits

from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.errors import DeadlockError, SimulationError
from tpusim.arch.isa import ENGINE_KEYS, Engine
from tpusim.models.common import ArbiterLoop, Clocks
from tpusim.models.ddr_arbiter import DdrArbiter
from tpusim.models.decoder import DECODER_ERRORS, Decoder
from tpusim.models.dma import DmaChannel
from tpusim.models.dma_train import DmaTrain
from tpusim.models.error_unit import ErrorUnit
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
    timeline: list = field(default_factory=list)   # [(engine, pc, ready_ps, start_ps, complete_ps)] per instruction
    sram_grants: list = field(default_factory=list)  # [(requester = engine, grant ps, word accesses)]


class Tpu:
    """The simulated chip around a DdrMemory (preloaded by the caller)."""

    def __init__(self, cfg, ddr_mem: DdrMemory, code_addr: int, trace: Trace | None = None,
                 dma_trains: bool = True) -> None:
        """``dma_trains``: run the DMA channels' bursts in trains (models/dma_train.py) when no
        trace is written; False keeps every grant on the arbiters (the same results, slower)."""
        self.cfg = cfg
        self.env = env = simpy.Environment()
        self.clocks = clocks = Clocks(cfg)
        self.ddr_mem = ddr_mem
        self.trace = trace
        self.perf = PerfCounters()
        self.retire_log: list = []
        loop = ArbiterLoop(env)                  # both arbiters decide on it, ahead of SimPy
        self.ddr_arb = DdrArbiter(env, clocks, cfg, self.perf, trace, loop)
        self.sram = Sram(env, clocks, cfg, self.perf, trace, loop)
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
        if dma_trains and trace is None:         # the DMA burst trains (not traced: waveforms)
            DmaTrain(self.engines[Engine.LOAD], self.engines[Engine.STORE])   # offered to the loop
        self.fetch = Fetch(env, clocks, cfg, code_addr, self.ddr_arb, ddr_mem)
        self.decoder = Decoder(env, clocks, self.fetch, self.queues, self.engines, self.retire_log)
        self.errors = ErrorUnit(env, clocks, self.fetch, self.decoder)
        self.timeline: list = []
        for blk in [self.decoder] + self.engines:
            blk.errors = self.errors
        for eng in self.engines:
            eng.timeline = self.timeline
        self.sram.grants = []
        if trace is not None:
            trace.bind(cfg, clocks)
            self.decoder.trace = trace
        for blk in [self.fetch, self.decoder] + self.engines:
            proc = env.process(blk.run())
            if blk is self.decoder:
                self.decoder.proc = proc       # the error unit interrupts its waits

    def run(self, progress=None, period_s: float = 0.5) -> TpuRun:
        """Run to quiescence; DeviceError on a device error (after the device halted, or stopped
        making progress), DeadlockError on a deadlock without a device error.

        progress: optional callable(retired_instructions, now_ps), called from a helper thread
        every ``period_s`` seconds of wall time while the run goes on (it only reads).

        The MXU's BLAS runs on one thread for the run (threadpoolctl): its matrices are at most
        array-sized, so extra threads only add synchronisation, and on a busy machine (a stress
        campaign's other workers, a parallel RTL build) they made the run 2-3x slower. Python's
        cyclic garbage collector runs rarely during the run (``_rare_gc``).
        """
        stop = threading.Event()
        if progress is not None:
            def poll():
                while not stop.wait(period_s):
                    progress(len(self.retire_log), self.env.now)
            threading.Thread(target=poll, daemon=True).start()
        try:
            with threadpool_limits(limits=1, user_api="blas"), _rare_gc():
                self.env.run()
        except SimulationError:
            if self.errors.first is not None:     # a device error came first: report that one
                raise self.errors.first from None
            raise
        finally:
            stop.set()
        dec, first = self.decoder, self.errors.first
        if dec.halt_ps is None:
            waiting = [w for w in (e.blocked_on() for e in self.engines) if w]
            if first is None:
                raise DeadlockError(self._deadlock_report(), waiting)
            first.waiting = waiting
            if first.code in DECODER_ERRORS:
                first.args = (f"{first.args[0]}: device stopped with error_code "
                              f"{first.code_num} and did not halt ({self._deadlock_report()})",)
            raise first
        self.perf.set("cycles", dec.cycles)
        for e, n in enumerate(dec.queue_full_cycles):
            self.perf.set(f"{ENGINE_KEYS[e]}_queue_full_cycles", n)
        retire = [(pc, RETIRERS[eng], t) for t, eng, pc in sorted(self.retire_log)]
        run = TpuRun(dec.cycles, dec.halt_ps, retire, self.perf.as_dict(), self.events(),
                     first.code_num if first else 0, first.pc if first else None, timeline=self.timeline,
                     sram_grants=self.sram.grants)
        if first is not None:
            if first.code in DECODER_ERRORS:
                first.args = (f"{first.args[0]}: device halted with error_code {first.code_num} "
                              f"after {dec.cycles} cycles",)
            first.run = run
            raise first
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


@contextmanager
def _rare_gc(gen0_objects: int = 100_000):
    """Run the cyclic garbage collector's youngest generation every ``gen0_objects`` net
    allocations instead of Python's default 700 (restored on exit). A run allocates a few million
    short-lived objects (requests, events, byte strings), nearly all freed by reference counting;
    at the default threshold the collector's passes over the surviving logs took about 10 % of a
    ResNet-50 run."""
    old = gc.get_threshold()
    gc.set_threshold(gen0_objects, *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


__all__ = ["Tpu", "TpuRun"]
