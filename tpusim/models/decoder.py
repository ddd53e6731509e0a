"""Decoder and dispatch (core clock), HALT and the decoder's errors (reserved opcode, unused bits).

Rules (docs/architecture.md, "Decoder and dispatch"):
  * at core edge ``e`` dispatch the instruction at PC if its line is valid (visible at <= e) and,
    for an engine instruction, that engine's queue is not full as seen by the decoder; at most one
    instruction per edge, in program order. NOP goes to the queue named by its ``engine`` field;
  * HALT dispatched at ``h0`` stops dispatch and fetch; the device halts at the first core edge
    ``h >= h0 + 1`` at which every dispatched instruction's retire is visible in the core domain;
    HALT retires at ``h``; ``cycles = h``;
  * a reserved opcode at PC, or a known opcode with a non-zero bit above its last field, is
    "dispatched" like HALT (error_code 1 reserved_opcode / 12 unused_bits, error_pc = PC) and the
    device halts the same way, with ``error`` set;
  * a device error registered at core edge ``e`` (error_unit.py) stops dispatch as if HALT were
    dispatched at ``e``: nothing is dispatched at ``e`` or later, and the device halts at the
    first ``h >= e + 1`` with every dispatched instruction's retire visible (HALT retire at ``h``
    with the PC of the first instruction not dispatched).
"""
from __future__ import annotations

import simpy

from tpusim.arch.device_checks import decode_fault
from tpusim.arch.errors import DeviceError
from tpusim.arch.isa import BY_CODE, DEVICE_ERRORS, INSTR_BYTES, decode_as_hardware

ERROR_RESERVED_OPCODE = DEVICE_ERRORS["reserved_opcode"]
#: the device errors the decoder itself raises at dispatch (the word does not decode)
DECODER_ERRORS = ("reserved_opcode", "unused_bits")


class Decoder:
    """Dispatch process; after HALT, computes the halt edge. Results: ``halt_ps``, ``cycles``,
    ``error_code``/``error_pc`` (reserved opcode, unused bits), ``dispatched`` per engine."""

    def __init__(self, env: simpy.Environment, clocks, fetch, queues, engines, retire_log) -> None:
        self.env, self.clocks = env, clocks
        self.dom = clocks.core
        self.fetch = fetch
        self.queues = queues
        self.engines = engines
        self.retire_log = retire_log
        self.per_line = fetch.line_bytes // INSTR_BYTES
        self.dispatched = [0] * len(queues)
        #: per engine: core edges at which the instruction at PC was ready (line valid, after the
        #: previous dispatch) but that engine's queue was full as the decoder sees it
        self.queue_full_cycles = [0] * len(queues)
        self.index = 0                        # program index of the instruction at PC
        self.halt_ps: int | None = None
        self.cycles: int | None = None
        self.error_code = 0
        self.error_pc: int | None = None
        self.error_word: bytes | None = None
        self.waiting_for: str | None = None
        self.errors = None                    # ErrorUnit (set by the top level)
        self.proc: simpy.Process | None = None  # this process (set by the top level)
        self._plain_wait = False
        self.trace = None                     # models/trace.py Trace (set by the top level)

    @property
    def pc(self) -> int:
        return self.index * INSTR_BYTES

    def run(self):
        """SimPy process: dispatch in order until HALT, a word that does not decode or a device error
        registered by the error unit, then halt."""
        env, period = self.env, self.dom.period_ps
        last_ps: int | None = None
        fetch = self.fetch
        while True:
            line, slot = divmod(self.index, self.per_line)
            if line < len(fetch.lines):
                valid_ps, raw = fetch.lines.items[line]
            else:
                self.waiting_for = f"instruction fetch of line {line}"
                stopped, rec = yield from self._wait(fetch.lines.wait(line))
                if stopped:
                    break
                valid_ps, raw = rec
            word = raw[slot * INSTR_BYTES:(slot + 1) * INSTR_BYTES]
            e_ps = valid_ps if last_ps is None else max(valid_ps, last_ps + period)
            ins = decode_as_hardware(word)
            q = None if ins is None or ins.op == "HALT" else self.queues[ins.engine]
            k = None if q is None else q.slot_pop_index()
            ready_ps = e_ps                        # from here on only a full queue holds it back
            if k is not None:
                if k < len(q.pops):
                    pop_ps = q.pops.items[k]
                else:
                    self.waiting_for = f"room in the {ins.engine.name} queue"
                    stopped, pop_ps = yield from self._wait(q.pops.wait(k))
                    if stopped:
                        self._count_full(ins.engine, ready_ps, self.errors.stop_ps)
                        break
                e_ps = max(e_ps, pop_ps)
            self.waiting_for = None
            if e_ps > env.now:
                stopped, _ = yield from self._wait(env.timeout(e_ps - env.now))
                if stopped:
                    if k is not None:
                        self._count_full(ins.engine, ready_ps, min(e_ps, self.errors.stop_ps))
                    break
            if self.errors is not None and self.errors.stopped_at(e_ps):
                if k is not None:                  # an engine error registers at e: no dispatch
                    self._count_full(ins.engine, ready_ps, self.errors.stop_ps)
                break
            if k is not None:
                self._count_full(ins.engine, ready_ps, e_ps)
            if q is None:
                if ins is None:
                    self._rejected(word, e_ps)
                if self.trace is not None:
                    self.trace.halt_dispatch(e_ps, self.pc, self.error_code)
                yield from self._halt(e_ps)
                return
            q.push(self.index, self.pc, ins, e_ps)
            if self.trace is not None:
                self.trace.dispatch(e_ps, self.pc)
            self.dispatched[ins.engine] += 1
            if slot == self.per_line - 1:
                fetch.free_line(line, e_ps)
            last_ps = e_ps
            self.index += 1
        self.waiting_for = None
        if self.trace is not None:
            self.trace.error_stop(self.errors.stop_ps, self.pc)
        yield from self._halt(self.errors.stop_ps)     # stopped by a device error at e

    def _count_full(self, engine: int, ready_ps: int, end_ps: int) -> None:
        """Queue-full stall: the core edges in ``[ready_ps, end_ps)`` (both core edges) at which the
        instruction was ready but ``engine``'s queue full (end: the pop seen, or the error stop)."""
        if end_ps > ready_ps:
            self.queue_full_cycles[engine] += (end_ps - ready_ps) // self.dom.period_ps

    def _wait(self, ev):
        """Wait for ``ev`` unless a device error stops dispatch first: (stopped, ev's value).
        While no error is known it waits for ``ev`` alone (one SimPy event less per wait); an
        error reported meanwhile interrupts it (``poke``) and it waits for ``ev`` or the stop."""
        errors = self.errors
        if errors is None or errors.stop_ps is None:
            self._plain_wait = True
            try:
                value = yield ev
                return False, value
            except simpy.Interrupt:
                pass
            finally:
                self._plain_wait = False
        yield self.env.any_of([ev, errors.wake])
        if errors.stopped_at(self.env.now):
            return True, None
        return False, ev.value

    def poke(self) -> None:
        """The error unit registered a new first error: stop a plain wait (see ``_wait``)."""
        if self._plain_wait and self.proc is not None:
            self._plain_wait = False           # one interrupt only (two errors at one ps)
            self.proc.interrupt("device error")

    def _rejected(self, word: bytes, h0_ps: int) -> None:
        """A word that does not decode "dispatched" at ``h0``: error_code 1 (reserved opcode) or
        12 (unused bits), error_pc = PC. The message gets the cycle count once the device has
        halted (models/tpu.py)."""
        fault = decode_fault(word)
        self.error_code, self.error_pc, self.error_word = DEVICE_ERRORS[fault.code], self.pc, word
        if self.errors is not None:
            if fault.code == "reserved_opcode":
                text = f"reserved opcode {word[0]:#04x} at instruction #{self.index} (pc {self.pc:#x})"
            else:
                text = (f"{BY_CODE[word[0]].name} at instruction #{self.index} (pc {self.pc:#x}): "
                        f"{fault}")
            err = DeviceError(text, fault.code, self.pc, field=fault.field, value=fault.value)
            self.errors.report_decoder(err, h0_ps)

    def _halt(self, h0_ps: int):
        """HALT dispatched at ``h0``: h = max(h0 + 1, every retire visible in the core domain)."""
        self.fetch.stop(h0_ps)
        h_ps = h0_ps + self.dom.period_ps
        for eng, n in enumerate(self.dispatched):
            if n == 0:
                continue
            tl = self.engines[eng].retired
            if n - 1 < len(tl):
                t = tl.items[n - 1]
            else:
                self.waiting_for = (f"HALT: {self.engines[eng].name} to retire its "
                                    f"{n - len(tl)} outstanding instruction(s)")
                t = yield tl.wait(n - 1)
            h_ps = max(h_ps, t)
        self.waiting_for = None
        if h_ps > self.env.now:
            yield self.env.timeout(h_ps - self.env.now)
        self.halt_ps = h_ps
        if self.trace is not None:
            self.trace.halt_retire(h_ps)
        self.cycles = self.dom.cycle_of(h_ps)
        self.retire_log.append((h_ps, 4, self.pc))


__all__ = ["Decoder", "ERROR_RESERVED_OPCODE", "DECODER_ERRORS"]
