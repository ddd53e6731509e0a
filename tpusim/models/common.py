"""Shared SimPy plumbing of the block models: clocks, timelines of timestamped records, errors.

Modelling discipline (every block follows it, see docs/architecture.md):
  * all times are integer ps and are always clock edges of some domain;
  * a record that another block acts on carries the edge (ps) from which it is *visible* to that
    block, and that edge is strictly later than the simulation time at which it is posted. A block
    acting at edge ``e`` therefore only reads records with visibility ``<= e`` that already exist,
    and the order in which SimPy runs processes at the same ps never matters;
  * consumers that need "the k-th record" (k-th queue entry, k-th token, k-th pop) wait on a
    :class:`Timeline` index instead of polling.
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from tpusim.arch.device_checks import DeviceFault, where
from tpusim.arch.isa import ENGINE_NAMES, Engine, Instruction
from tpusim.arch.timebase import CDC_EDGES, ClockDomain, Timebase


class Clocks:
    """The three clock domains of a config plus the CDC rule, in ps (integers only)."""

    def __init__(self, cfg) -> None:
        self.tb = Timebase(cfg)
        self.core: ClockDomain = self.tb.core
        self.ddr: ClockDomain = self.tb.ddr
        self.dma: ClockDomain = self.tb.dma

    def cdc(self, t_ps: int, src: ClockDomain, dst: ClockDomain) -> int:
        """Edge (ps) at which ``dst`` acts on a value launched at ``src`` edge ``t_ps``:
        the 3rd ``dst`` edge strictly after ``t_ps`` across domains, the next edge within one."""
        period = dst.period_ps
        if src is dst:
            return t_ps + period
        # == Timebase.cdc(t_ps, dst): edge(index_after(t_ps) + CDC_EDGES - 1), inlined (hot path)
        phase = dst.phase_ps
        k = (t_ps - phase) // period + 1 if t_ps >= phase else 0
        return phase + (k + CDC_EDGES - 1) * period

    def engine_domain(self, engine: int) -> ClockDomain:
        """LOAD/STORE run on the DMA clock, MXU/VPU on the core clock."""
        return self.dma if engine in (Engine.LOAD, Engine.STORE) else self.core


class Timeline:
    """Append-only, ordered records with indexed waiting (the k-th push, token, pop, line...)."""
    __slots__ = ("env", "items", "_waiters")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: list = []
        self._waiters: dict[int, simpy.Event] = {}

    def __len__(self) -> int:
        return len(self.items)

    def append(self, rec) -> None:
        k = len(self.items)
        self.items.append(rec)
        ev = self._waiters.pop(k, None)
        if ev is not None:
            ev.succeed(rec)

    def wait(self, k: int) -> simpy.Event:
        """Event whose value is record k (already triggered if it exists)."""
        ev = self.env.event()
        if k < len(self.items):
            ev.succeed(self.items[k])
        else:
            assert k not in self._waiters, f"two waiters on record {k}"
            self._waiters[k] = ev
        return ev


@dataclass(frozen=True)
class QueueEntry:
    """One dispatched engine instruction: program index, PC (byte offset from code_addr),
    decoded instruction, and the engine-domain edge (ps) from which the engine sees it."""
    index: int
    pc: int
    instr: Instruction
    visible_ps: int

    def where(self) -> str:
        return where(self.index, self.instr.op, self.pc)


def raise_fault(entry: QueueEntry, fault: DeviceFault | None) -> None:
    """Raise the DeviceError of a failed device check (tpusim.arch.device_checks) for ``entry``,
    naming the instruction, the offending field and its value; nothing if ``fault`` is None. Its
    cycle is set when the engine reports it (models/error_unit.py)."""
    if fault is not None:
        raise fault.error(entry.where(), entry.pc)


def ranges_to_banks(ranges, bank_words: int) -> tuple[int, ...]:
    """Bank mask of a transaction: for each (first_word, last_word) range every bank from the
    first word's bank to the last word's bank inclusive. Returns the sorted bank indices."""
    if len(ranges) == 1:                       # fast path: one range (every DMA burst)
        first, last = ranges[0]
        return tuple(range(first // bank_words, last // bank_words + 1))
    banks: set[int] = set()
    for first, last in ranges:
        banks.update(range(first // bank_words, last // bank_words + 1))
    return tuple(sorted(banks))


__all__ = ["ENGINE_NAMES", "Clocks", "Timeline", "QueueEntry", "raise_fault", "ranges_to_banks"]


class EdgeScheduler:
    """Runs ``callback()`` at the earliest requested time; requesting an earlier time supersedes
    the pending one (stale timeouts are ignored by sequence number). One SimPy event per decision:
    arbiters use it to wake exactly at the next edge where a grant may happen, with no polling."""
    __slots__ = ("env", "callback", "at_ps", "_seq")

    def __init__(self, env: simpy.Environment, callback) -> None:
        self.env = env
        self.callback = callback
        self.at_ps: int | None = None
        self._seq = 0

    def request(self, t_ps: int) -> None:
        """Make sure ``callback`` runs at ``t_ps`` (> now) unless an earlier run is pending."""
        if self.at_ps is not None and self.at_ps <= t_ps:
            return
        assert t_ps > self.env.now, (t_ps, self.env.now)
        self._seq += 1
        seq = self._seq
        self.at_ps = t_ps
        self.env.timeout(t_ps - self.env.now).callbacks.append(lambda _ev: self._fire(seq))

    def _fire(self, seq: int) -> None:
        if seq != self._seq:
            return
        self.at_ps = None
        self.callback()
