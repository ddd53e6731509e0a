"""Decoder and dispatch (core clock), HALT and the reserved-opcode error.

Rules (docs/architecture.md, "Decoder and dispatch"):
  * at core edge ``e`` dispatch the instruction at PC if its line is valid (visible at <= e) and,
    for an engine instruction, that engine's queue is not full as seen by the decoder; at most one
    instruction per edge, in program order. NOP goes to the queue named by its ``engine`` field;
  * HALT dispatched at ``h0`` stops dispatch and fetch; the device halts at the first core edge
    ``h >= h0 + 1`` at which every dispatched instruction's retire is visible in the core domain;
    HALT retires at ``h``; ``cycles = h``;
  * a reserved opcode at PC is "dispatched" like HALT (error_code 1, error_pc = PC) and the device
    halts the same way, with ``error`` set.
Unused instruction bits are ignored (the RTL decodes only the opcode's fields).
"""
from __future__ import annotations

from functools import lru_cache

import simpy

from tpusim.isa import BY_CODE, HEADER_BITS, INSTR_BYTES, Instruction, decode

ERROR_RESERVED_OPCODE = 1


@lru_cache(maxsize=65536)
def decode_word(raw: bytes) -> Instruction | None:
    """Decode 32 bytes as the hardware does: None for a reserved opcode; bits above the opcode's
    last field are ignored."""
    spec = BY_CODE.get(raw[0])
    if spec is None:
        return None
    top = HEADER_BITS + sum(f.bits for f in spec.fields)
    word = int.from_bytes(raw, "little") & ((1 << top) - 1)
    return decode(word.to_bytes(INSTR_BYTES, "little"))


class Decoder:
    """Dispatch process; after HALT, computes the halt edge. Results: ``halt_ps``, ``cycles``,
    ``error_code``/``error_pc`` (reserved opcode), ``dispatched`` per engine."""

    def __init__(self, env: simpy.Environment, clocks, fetch, queues, engines, retire_log) -> None:
        self.env, self.clocks = env, clocks
        self.dom = clocks.core
        self.fetch = fetch
        self.queues = queues
        self.engines = engines
        self.retire_log = retire_log
        self.per_line = fetch.line_bytes // INSTR_BYTES
        self.dispatched = [0] * len(queues)
        self.index = 0                        # program index of the instruction at PC
        self.halt_ps: int | None = None
        self.cycles: int | None = None
        self.error_code = 0
        self.error_pc: int | None = None
        self.error_word: bytes | None = None
        self.waiting_for: str | None = None

    @property
    def pc(self) -> int:
        return self.index * INSTR_BYTES

    def run(self):
        """SimPy process: dispatch in order until HALT or a reserved opcode, then halt."""
        env, period = self.env, self.dom.period_ps
        last_ps: int | None = None
        fetch = self.fetch
        while True:
            line, slot = divmod(self.index, self.per_line)
            if line < len(fetch.lines):
                valid_ps, raw = fetch.lines.items[line]
            else:
                self.waiting_for = f"instruction fetch of line {line}"
                valid_ps, raw = yield fetch.lines.wait(line)
            word = raw[slot * INSTR_BYTES:(slot + 1) * INSTR_BYTES]
            e_ps = valid_ps if last_ps is None else max(valid_ps, last_ps + period)
            ins = decode_word(word)
            if ins is None or ins.op == "HALT":
                if e_ps > env.now:
                    yield env.timeout(e_ps - env.now)
                if ins is None:
                    self.error_code, self.error_pc, self.error_word = ERROR_RESERVED_OPCODE, self.pc, word
                yield from self._halt(e_ps)
                return
            q = self.queues[ins.engine]
            k = q.slot_pop_index()
            if k is not None:
                if k < len(q.pops):
                    pop_ps = q.pops.items[k]
                else:
                    self.waiting_for = f"room in the {ins.engine.name} queue"
                    pop_ps = yield q.pops.wait(k)
                e_ps = max(e_ps, pop_ps)
            self.waiting_for = None
            if e_ps > env.now:
                yield env.timeout(e_ps - env.now)
            q.push(self.index, self.pc, ins, e_ps)
            self.dispatched[ins.engine] += 1
            if slot == self.per_line - 1:
                fetch.free_line(line, e_ps)
            last_ps = e_ps
            self.index += 1

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
        self.cycles = self.dom.cycle_of(h_ps)
        self.retire_log.append((h_ps, 4, self.pc))


__all__ = ["Decoder", "decode_word", "ERROR_RESERVED_OPCODE"]
