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
from heapq import heappop, heappush
from itertools import count as _count

import simpy
from simpy.core import Infinity

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


__all__ = ["ENGINE_NAMES", "ArbiterLoop", "Clocks", "EdgeScheduler", "Timeline", "QueueEntry", "raise_fault",
           "ranges_to_banks"]


class ArbiterLoop:
    """The arbiters' decision edges, run ahead of SimPy without one SimPy event each.

    A decision at edge ``e`` only reads requests visible at ``<= e``, and every request is visible
    strictly after the simulation time at which it is posted. So once SimPy's next event is at
    ``H``, no request that a decision at ``e <= H`` reads is still to come: the loop runs every
    pending decision up to ``H`` in time order (a decision's callbacks post further requests,
    pushed here too), then arms one SimPy timeout at its next decision. ``now_ps`` is the edge
    being decided (ps). Grants reported by an event (a waiting SimPy process) are delivered at
    their edge by :meth:`deliver`, which makes that edge SimPy's next event and so stops the loop
    there: the process then sees the state of that edge, as when every decision was an event.
    Several arbiters may share one loop (their edges never coincide: distinct clock phases).
    A ``train`` (a DMA burst train, models/dma_train.py), if set, is offered every decision
    first: called with the decision's edge's horizon (SimPy's next event time) it either runs
    every decision up to that horizon itself (returns True; the decision is then done) or declines
    (returns False; the arbiter decides as usual)."""
    __slots__ = ("env", "now_ps", "train", "_heap", "_order", "_driver_ps")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.now_ps = 0
        self.train = None                  # callable(horizon_ps) -> bool, offered each decision first
        self._heap: list = []              # (edge ps, push order, EdgeScheduler, its sequence number)
        self._order = _count()
        self._driver_ps: int | None = None  # time of the SimPy timeout that runs the loop next

    def push(self, t_ps: int, sched: EdgeScheduler, seq: int) -> None:
        """Run ``sched``'s decision number ``seq`` at ``t_ps`` (ps) unless superseded."""
        heappush(self._heap, (t_ps, next(self._order), sched, seq))
        if self._driver_ps is None or t_ps < self._driver_ps:
            self._driver_ps = t_ps
            self.env.timeout(t_ps - self.env.now).callbacks.append(self._drive)

    def deliver(self, event: simpy.Event, value, t_ps: int) -> None:
        """Succeed ``event`` with ``value`` at ``t_ps`` (ps, >= SimPy's now)."""
        env = self.env
        if t_ps == env.now:
            event.succeed(value)
        else:
            env.timeout(t_ps - env.now).callbacks.append(lambda _ev: event.succeed(value))

    def _drive(self, ev) -> None:
        env, heap = self.env, self._heap
        if env.now != self._driver_ps:     # superseded by an earlier timeout, which ran the loop
            return
        self._driver_ps = -1                # running: pushes do not arm timeouts, the end does
        queue = env._queue                  # SimPy's event heap: (time, priority, id, event)
        while heap:
            t_ps = heap[0][0]
            if queue and queue[0][0] < t_ps:
                break
            _, _, sched, seq = heappop(heap)
            if seq == sched.seq:
                sched.at_ps = None
                self.now_ps = t_ps
                train = self.train
                if train is None or not train(queue[0][0] if queue else Infinity):
                    sched.callback()
        self._driver_ps = None
        if heap:
            t_ps = heap[0][0]
            self._driver_ps = t_ps
            env.timeout(t_ps - env.now).callbacks.append(self._drive)


class EdgeScheduler:
    """Runs ``callback()`` at the earliest requested time; requesting an earlier time supersedes
    the pending one (stale entries are ignored by sequence number). Arbiters use it to decide
    exactly at the next edge where a grant may happen, with no polling; the decisions run on an
    :class:`ArbiterLoop` (their own, or one shared with the other arbiter), whose ``now_ps`` is the
    edge being decided."""
    __slots__ = ("loop", "callback", "at_ps", "seq")

    def __init__(self, loop: ArbiterLoop, callback) -> None:
        self.loop = loop
        self.callback = callback
        self.at_ps: int | None = None
        self.seq = 0

    def request(self, t_ps: int) -> None:
        """Make sure ``callback`` runs at ``t_ps`` (after the current edge) unless an earlier run
        is pending."""
        if self.at_ps is not None and self.at_ps <= t_ps:
            return
        loop = self.loop
        assert t_ps > loop.now_ps and t_ps > loop.env.now, (t_ps, loop.now_ps, loop.env.now)
        self.seq += 1
        self.at_ps = t_ps
        loop.push(t_ps, self, self.seq)

    def retarget(self, t_ps: int | None) -> None:
        """Make the pending run exactly ``t_ps`` (None: no run), even if that is later."""
        if t_ps != self.at_ps:
            self.seq += 1                 # the pending loop entry, if any, becomes stale
            self.at_ps = None
            if t_ps is not None:
                self.request(t_ps)
