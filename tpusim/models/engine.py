"""The common in-order engine controller (LOAD, STORE, MXU, VPU): start, tokens, retire.

Rules (docs/architecture.md, "Engines and tokens"), all edges in the engine's own domain:
  * idle from its free edge ``f`` on; may start the next instruction at ``s >= f + 1`` (the first
    instruction at any edge). ``f = c`` (the completion edge) except on the MXU and the DMA
    channels, whose instructions free them before their completion (docs/architecture.md,
    "MXU", "DMA");
  * at most ``max_inflight`` instructions started and not completed: ``s >= c[k-max_inflight] + 1``;
    a NOP or an erroneous head starts only with none in flight (``s >= c[k-1] + 1``);
  * ``head_ready_ps``: an engine's own start rules for the head (the MXU's ports and weight
    planes), part of the edge ``r`` below;
  * ``wait_head_ready``: the same for a rule whose edge may not be known yet when the engine is
    free (the DMA channels' burst buffers): a generator returning the edge, 0 by default.
  * starts at the first edge ``s`` at which it is idle, the queue head is visible and a token from
    every engine in the head's ``wait`` mask is visible; at ``s`` it pops the head (visible to the
    decoder at ``cdc(s -> core)``) and consumes the tokens;
  * ``token_wait_cycles`` += ``s - r``, ``r`` = first edge idle with the head visible;
  * at ``c`` the instruction retires (retire pulse with its PC, visible to the decoder's HALT
    logic at ``cdc(c -> core)``) and a token goes to each engine in ``signal``;
  * ``busy_cycles`` += ``c - s``.
Subclasses implement ``execute(entry, s_ps)``: a generator that returns the completion edge
``c_ps`` with the simulation clock at the free edge (``c_ps`` itself without overlap), or, if
the completion is not known yet at the free edge (the DMA channels), a SimPy event whose value
is ``c_ps`` (completions still in order); it raises DeviceError for an erroneous
instruction at ``s``, before waiting for anything. NOP completes at ``s + 1`` on every engine,
and so does an erroneous instruction (docs/architecture.md, "Device errors").
"""
from __future__ import annotations

import abc

import simpy

from tpusim.arch.errors import DeviceError
from tpusim.arch.isa import ENGINE_KEYS
from tpusim.models.common import ENGINE_NAMES, Clocks, QueueEntry, Timeline


class EngineBase(abc.ABC):
    """One engine: its queue, the token matrix, perf counters and retire trace are shared."""

    def __init__(self, env: simpy.Environment, clocks: Clocks, engine: int, queue, tokens, perf,
                 retire_log: list, trace=None) -> None:
        self.env, self.clocks = env, clocks
        self.engine = engine
        self.name = ENGINE_NAMES[engine]
        self.key = ENGINE_KEYS[engine]
        self._wait_counter, self._busy_counter, self._retired_counter = (
            f"{self.key}_{c}" for c in ("token_wait_cycles", "busy_cycles", "retired"))
        self.dom = clocks.engine_domain(engine)
        self.period = self.dom.period_ps
        self.queue = queue
        self.tokens = tokens
        self.perf = perf
        self.retire_log = retire_log
        self.trace = trace
        self.retired = Timeline(env)        # core edges (ps) at which each retire is visible
        self.current: QueueEntry | None = None
        self.waiting_for: str | None = None  # what the engine is blocked on (deadlock report)
        self.errors = None                   # ErrorUnit (set by the top level), see _execute_or_flag
        self.timeline: list | None = None    # [(engine, pc, ready_ps, start_ps, complete_ps)] (set by the top level)
        self.max_inflight = 1                # instructions started and not yet completed, at most

    def head_ready_ps(self, entry: QueueEntry) -> int:
        """The earliest edge (ps) at which ``entry`` may start by the engine's own resource rules
        (beyond the free edge and the in-flight limit): 0 unless a subclass says otherwise."""
        return 0

    def wait_head_ready(self, entry: QueueEntry):
        """Generator: the earliest edge (ps) at which ``entry`` may start by a rule whose edge the
        engine may have to wait to learn (after the free edge and the in-flight limit): 0 unless
        a subclass says otherwise."""
        return 0
        yield  # pragma: no cover (a generator)

    def starts_alone(self, entry: QueueEntry) -> bool:
        """True if ``entry`` runs as a NOP (a NOP, or a device error found at its start), which
        starts only once every earlier instruction of the engine has completed."""
        return entry.instr.op == "NOP"

    # ------------------------------------------------------------------ controller
    def run(self):
        """SimPy process: the engine controller loop."""
        env, q, tok = self.env, self.queue, self.tokens
        next_ps = self.dom.edge(0)           # earliest start edge (free since reset)
        done_ps = []                         # completion edges of the last max_inflight instructions
        k = 0
        while True:
            self.current = None
            if k < len(q.entries):
                entry = q.entries.items[k]
            else:
                self.waiting_for = "its next instruction (queue empty)"
                entry = yield q.entries.wait(k)
            self.current = entry
            r_ps = max(next_ps, entry.visible_ps, self.head_ready_ps(entry))
            if done_ps:
                if len(done_ps) >= self.max_inflight:
                    c = done_ps[-self.max_inflight]
                    if not isinstance(c, int):
                        self.waiting_for = "an instruction in flight to complete"
                        c = c.value if c.triggered else (yield c)
                    r_ps = max(r_ps, c + self.period)
                if self.max_inflight > 1 and self.starts_alone(entry):
                    c = done_ps[-1]
                    if not isinstance(c, int):
                        self.waiting_for = "the instructions in flight to complete"
                        c = c.value if c.triggered else (yield c)
                    r_ps = max(r_ps, c + self.period)
            if self.max_inflight > 1:
                r_ps = max(r_ps, (yield from self.wait_head_ready(entry)))
            s_ps = r_ps
            wait = entry.instr.wait
            for x in range(len(ENGINE_NAMES)):
                if wait >> x & 1:
                    tl, i = tok.sent[x][self.engine], tok.next_index(x, self.engine)
                    if i < len(tl):
                        t = tl.items[i]
                    else:
                        self.waiting_for = f"a token from {ENGINE_NAMES[x]}"
                        t = yield tl.wait(i)
                    s_ps = max(s_ps, t)
            self.waiting_for = None
            if s_ps > env.now:
                yield env.timeout(s_ps - env.now)
            q.pop(s_ps)
            tok.consume(self.engine, wait, s_ps)
            self.perf.values[self._wait_counter] += (s_ps - r_ps) // self.period
            if self.trace is not None:
                self.trace.start(self.engine, s_ps, entry.pc)
            if entry.instr.op == "NOP":
                c_ps = yield from self._nop(s_ps)
            else:
                c_ps = yield from self._execute_or_flag(entry, s_ps)
            if not isinstance(c_ps, int):   # completion not known yet (DMA): retires when it is
                env.process(self._retire_when(entry, r_ps, s_ps, c_ps))
            elif env.now == c_ps:
                self._retire(entry, s_ps, c_ps)
            else:       # freed before its completion (overlap): it retires at c_ps, in order
                assert s_ps < env.now < c_ps, (self.name, s_ps, env.now, c_ps)
                env.process(self._retire_at(entry, s_ps, c_ps))
            if self.timeline is not None and isinstance(c_ps, int):
                self.timeline.append((self.engine, entry.pc, r_ps, s_ps, c_ps))
            if done_ps and isinstance(c_ps, int) and isinstance(done_ps[-1], int):
                assert c_ps > done_ps[-1], (self.name, "completions out of order", done_ps[-1], c_ps)
            done_ps = (done_ps + [c_ps])[-self.max_inflight:]
            next_ps = env.now + self.period
            k += 1

    def _retire_when(self, entry: QueueEntry, r_ps: int, s_ps: int, done: simpy.Event):
        """SimPy process: retire ``entry`` at its completion edge, the value of ``done``."""
        c_ps = yield done
        if self.timeline is not None:
            self.timeline.append((self.engine, entry.pc, r_ps, s_ps, c_ps))
        if c_ps > self.env.now:
            yield self.env.timeout(c_ps - self.env.now)
        self._retire(entry, s_ps, c_ps)

    def _retire_at(self, entry: QueueEntry, s_ps: int, c_ps: int):
        """SimPy process: retire ``entry`` at its completion edge ``c_ps`` (after its free edge)."""
        yield self.env.timeout(c_ps - self.env.now)
        self._retire(entry, s_ps, c_ps)

    def _execute_or_flag(self, entry: QueueEntry, s_ps: int):
        """``execute``; a DeviceError (raised by its checks at ``s``, before any wait) is reported
        to the error unit and the instruction completes as a NOP at ``s + 1``, doing no work.
        Without an error unit (a block tested alone) the DeviceError propagates."""
        try:
            c_ps = yield from self.execute(entry, s_ps)
        except DeviceError as err:
            if self.errors is None:
                raise
            assert self.env.now == s_ps, (self.name, "device error after the start edge", err)
            self.errors.report(err, s_ps, self.dom)
            c_ps = yield from self._nop(s_ps)
        return c_ps

    def _nop(self, s_ps: int):
        """NOP: completes at ``s + 1``."""
        yield self.env.timeout(self.period)
        return s_ps + self.period

    def _retire(self, entry: QueueEntry, s_ps: int, c_ps: int) -> None:
        counters = self.perf.values
        counters[self._busy_counter] += (c_ps - s_ps) // self.period
        counters[self._retired_counter] += 1
        self.retire_log.append((c_ps, self.engine, entry.pc))
        if entry.instr.signal:
            self.tokens.send(self.engine, entry.instr.signal, c_ps, entry.where, entry.pc,
                             self.errors)
        self.retired.append(self.clocks.cdc(c_ps, self.dom, self.clocks.core))
        if self.trace is not None:
            self.trace.retire(self.engine, c_ps, entry.pc)

    @abc.abstractmethod
    def execute(self, entry: QueueEntry, s_ps: int):
        """Run one instruction started at ``s_ps``; return its completion edge (sim time there)."""

    def blocked_on(self) -> tuple | None:
        """(engine name, head pc, (senders whose token was never sent, in engine order)) if the
        engine waits for tokens, else None (deadlock report, DeadlockError.waiting)."""
        if self.current is None or not (self.waiting_for or "").startswith("a token"):
            return None
        tok, wait = self.tokens, self.current.instr.wait
        miss = tuple(ENGINE_NAMES[x] for x in range(len(ENGINE_NAMES))
                     if wait >> x & 1 and tok.next_index(x, self.engine) >= len(tok.sent[x][self.engine]))
        return (self.name, self.current.pc, miss)

    def describe_wait(self) -> str | None:
        """'LOAD at instruction #3 at pc 0x60 (DMA_LOAD) waits for a token from MXU', or None."""
        if self.waiting_for is None or self.current is None:
            return None
        return f"{self.name} at {self.current.where()} waits for {self.waiting_for}"


__all__ = ["EngineBase"]
