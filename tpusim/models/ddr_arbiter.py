"""DDR arbiter (DDR clock): one pipelined command/data bus, round robin (spec v2).

Rules (docs/architecture.md, "DDR arbiter and memory — pipelined channel"):
  * requesters 0 fetch, 1 DMA read (LOAD), 2 DMA write (STORE); each has an in-order request
    queue (fetch <= 1 entry, DMA read / write <= ``dma.outstanding`` entries);
  * a request launched at ``t`` is visible at ``v = cdc(t -> ddr)``;
  * at DDR edge ``e``, if the bus is free (``e >= g_prev + B_prev``), grant the oldest request of
    one requester (its queue head) if it is visible, round robin over requesters starting after
    the last granted requester (initially the search starts at requester 0);
  * a burst of ``n`` bytes at ``a`` moves ``B = (a+n-1)//BEAT - a//BEAT + 1`` beats; granted at
    ``g`` it sends commands at ``g+1 .. g+B`` and completes at ``done = g + L + B - 1``;
    transactions overlap and complete in grant order.
Counters: ddr_read_bytes (DMA reads), ddr_write_bytes, fetch_bytes, ddr_busy_cycles (sum of B),
ddr_arb_wait_cycles (g - v).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import simpy

from tpusim.arch.timebase import ClockDomain
from tpusim.models.common import ArbiterLoop, Clocks, EdgeScheduler

FETCH, DMA_READ, DMA_WRITE = 0, 1, 2
REQUESTER_NAMES = ("fetch", "dma_read", "dma_write")
_BYTES_COUNTER = ("fetch_bytes", "ddr_read_bytes", "ddr_write_bytes")


@dataclass(slots=True)
class DdrRequest:
    """One burst: requester id, byte address, bytes, visible edge (ps), and how to report the
    grant: ``on_grant(grant_ps, done_ps)`` called at the grant edge, or else ``event``
    succeeding with ``(grant_ps, done_ps)``."""
    requester: int
    addr: int
    nbytes: int
    visible_ps: int
    event: simpy.Event | None
    on_grant: object = None


class DdrArbiter:
    """Round-robin arbiter of the pipelined DDR bus (see module docstring)."""

    def __init__(self, env: simpy.Environment, clocks: Clocks, cfg, perf, trace=None,
                 loop: ArbiterLoop | None = None) -> None:
        self.env, self.clocks, self.perf, self.trace = env, clocks, perf, trace
        self.dom = clocks.ddr
        self.latency = cfg.ddr_latency_cycles
        self.beat = cfg.ddr_beat_bytes
        k = cfg.dma_outstanding
        self.capacity = (1, k, k)                         # request queue entries per requester
        self.queues: tuple[deque, ...] = tuple(deque() for _ in REQUESTER_NAMES)
        self.last_granted = len(REQUESTER_NAMES) - 1     # search starts at requester 0
        self.free_ps = self.dom.edge(0)                   # bus free for a grant at this edge
        self.loop = loop or ArbiterLoop(env)       # decisions run on it (shared with the other arbiter)
        self.sched = EdgeScheduler(self.loop, self._decide)

    def beats(self, addr: int, nbytes: int) -> int:
        """Beats moved by a burst: ``(a + n - 1)//BEAT - a//BEAT + 1``."""
        return (addr + nbytes - 1) // self.beat - addr // self.beat + 1

    def request(self, requester: int, launch_ps: int, src: ClockDomain, addr: int,
                nbytes: int, on_grant=None) -> simpy.Event | None:
        """Launch a burst request at ``launch_ps`` (an edge of ``src``; may be posted earlier in
        simulation time; a requester posts its requests in launch order). Returns the grant
        event, or None if ``on_grant`` is given."""
        req = self.enqueue(requester, launch_ps, src, addr, nbytes, on_grant)
        if len(self.queues[requester]) == 1:              # a new head: may be granted
            free_ps = self.free_ps
            self.sched.request(req.visible_ps if req.visible_ps > free_ps else free_ps)
        return req.event

    def enqueue(self, requester: int, launch_ps: int, src: ClockDomain, addr: int, nbytes: int,
                on_grant=None) -> DdrRequest:
        """:meth:`request` without waking the arbiter (a burst train wakes it when it ends)."""
        q = self.queues[requester]
        assert len(q) < self.capacity[requester], \
            f"{REQUESTER_NAMES[requester]} DDR request queue overflow ({self.capacity[requester]})"
        visible_ps = self.clocks.cdc(launch_ps, src, self.dom)
        req = DdrRequest(requester, addr, nbytes, visible_ps, None if on_grant else self.env.event(), on_grant)
        assert not q or q[-1].visible_ps <= visible_ps, "DDR requests posted out of order"
        q.append(req)
        if self.trace is not None:
            self.trace.ddr_request(requester, launch_ps, addr)
        return req

    def next_decision_ps(self) -> int | None:
        """The next edge (ps) at which the bus is free and a queue head is visible, or None."""
        next_ps = None
        for q in self.queues:
            if q:
                v = q[0].visible_ps
                if next_ps is None or v < next_ps:
                    next_ps = v
        if next_ps is None:
            return None
        return next_ps if next_ps > self.free_ps else self.free_ps

    def wake(self) -> None:
        """Decide at the next edge where a grant may happen (after a burst train)."""
        self.sched.retarget(self.next_decision_ps())

    def _decide(self) -> None:
        """At DDR edge ``e`` (bus free): grant one visible queue head, round robin; then wake at
        the next edge where the bus is free and a head is visible."""
        e = self.loop.now_ps
        queues = self.queues
        if e >= self.free_ps:
            rid = self.last_granted
            for _ in queues:
                rid = rid + 1 if rid < 2 else 0
                q = queues[rid]
                if q and q[0].visible_ps <= e:
                    self._grant(q.popleft(), e)   # may post new requests (callbacks)
                    break
        next_ps = self.next_decision_ps()
        if next_ps is not None:
            self.sched.request(next_ps)

    def _grant(self, req: DdrRequest, g_ps: int) -> None:
        done_ps = self.take(req, g_ps)
        if req.on_grant is not None:
            req.on_grant(g_ps, done_ps)
        else:
            self.loop.deliver(req.event, (g_ps, done_ps), g_ps)

    def take(self, req: DdrRequest, g_ps: int) -> int:
        """Grant ``req`` (already off its queue) at DDR edge ``g_ps``: bus, round-robin state,
        counters, trace. Returns its completion edge ``done = g + L + B - 1`` (ps); the caller
        reports the grant."""
        period = self.dom.period_ps
        beat, addr, nbytes = self.beat, req.addr, req.nbytes
        beats = (addr + nbytes - 1) // beat - addr // beat + 1        # self.beats(addr, nbytes)
        done_ps = g_ps + (self.latency + beats - 1) * period
        self.last_granted = req.requester
        self.free_ps = g_ps + beats * period              # next grant at g + B
        counters = self.perf.values
        counters[_BYTES_COUNTER[req.requester]] += nbytes
        counters["ddr_busy_cycles"] += beats
        counters["ddr_arb_wait_cycles"] += (g_ps - req.visible_ps) // period
        if self.trace is not None:
            self.trace.ddr_grant(g_ps, done_ps, beats, req.requester, addr, nbytes)
        return done_ps


__all__ = ["DdrArbiter", "DdrRequest", "FETCH", "DMA_READ", "DMA_WRITE", "REQUESTER_NAMES"]
