"""SRAM scratchpad (numpy storage) and its bank arbiter (core clock).

Rules (docs/architecture.md, "SRAM and the bank arbiter"):
  * ``banks`` single-ported, address-partitioned banks (bank = word // bank_words), one word of
    ``W`` bytes per bank access;
  * requesters in fixed priority 0 DMA LOAD, 1 DMA STORE, 2 MXU (activations), 3 VPU, 4 MXU
    weights (LOAD_WEIGHTS); each has <= 1 request;
    a request carries its bank mask (ranges_to_banks) and its access count ``D``;
  * a request launched at ``t`` is visible at ``v = cdc(t -> core)`` (MXU/VPU: ``t + 1``); a DMA
    LOAD write queued behind the channel's previous one at ``max(v, w' + D' + 1)``;
  * at each core edge ``e`` the arbiter walks the visible, ungranted requests in priority order
    and grants each whose banks are all free, taking them for the rest of that edge;
  * granted at ``g`` with ``D`` accesses: banks busy at edges ``g+1 .. g+D``, free for a grant at
    ``g + D``; completion edge ``g + D``;
  * conflict: ``g > v``; counters sram_conflicts (+1) and sram_conflict_cycles (+ g - v).
Storage: ``data`` is a uint8 array of ``size_bytes``; ``words`` is the (sram_words, W) int8 view.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import simpy

from tpusim.arch.isa import SRAM_REQUESTERS
from tpusim.arch.timebase import ClockDomain
from tpusim.models.common import ArbiterLoop, Clocks, EdgeScheduler, ranges_to_banks

LOAD, STORE, MXU, VPU, MXU_W = 0, 1, 2, 3, 4     # requester ids = priority order (0 highest)


@dataclass(slots=True)
class SramRequest:
    """One SRAM transaction request; the grant edge (ps) is reported by ``on_grant(grant_ps)``
    at the grant edge, or else as the value of ``event``."""
    requester: int
    banks: tuple
    accesses: int
    visible_ps: int
    event: simpy.Event | None
    on_grant: object = None


def grant_edge_ps(req: SramRequest, bank_free_ps: list) -> int:
    """The earliest edge (ps) at which ``req`` is visible and all its banks are free (where the
    arbiter grants it unless a higher-priority request takes one of its banks at that edge)."""
    t_ps = req.visible_ps
    for b in req.banks:
        if bank_free_ps[b] > t_ps:
            t_ps = bank_free_ps[b]
    return t_ps


class Sram:
    """Banked scratchpad storage plus the fixed-priority bank arbiter (see module docstring)."""

    def __init__(self, env: simpy.Environment, clocks: Clocks, cfg, perf, trace=None,
                 loop: ArbiterLoop | None = None) -> None:
        self.env, self.clocks, self.perf, self.trace = env, clocks, perf, trace
        self.dom = clocks.core
        self.word_bytes = cfg.word_bytes
        self.size_bytes = cfg.sram_size_bytes
        self.n_words = cfg.sram_words
        self.bank_words = cfg.bank_words
        self.data = np.zeros(cfg.sram_size_bytes, dtype=np.uint8)
        self.words = self.data.view(np.int8).reshape(self.n_words, self.word_bytes)
        self._bytes = memoryview(self.data)      # the same bytes, for cheap slice writes
        self.bank_free_ps = [0] * cfg.sram_banks       # bank free for a grant at this edge
        self.pending: list[SramRequest | None] = [None] * len(SRAM_REQUESTERS)
        self.loop = loop or ArbiterLoop(env)       # decisions run on it (shared with the other arbiter)
        self.sched = EdgeScheduler(self.loop, self._decide)
        self.grants: list | None = None        # [(requester, grant ps, word accesses)] when the top level asks

    # ------------------------------------------------------------------ arbiter
    def request(self, requester: int, launch_ps: int, src: ClockDomain, ranges,
                accesses: int, on_grant=None) -> simpy.Event | None:
        """Launch a transaction of ``accesses`` word accesses over the word ``ranges``
        [(first, last), ...] at ``launch_ps`` (an edge of ``src``; may be posted earlier in
        simulation time). Returns the grant event, or None if ``on_grant`` is given."""
        return self.request_banks(requester, launch_ps, src, ranges_to_banks(ranges, self.bank_words),
                                  accesses, on_grant)

    def request_banks(self, requester: int, launch_ps: int, src: ClockDomain, banks: tuple,
                      accesses: int, on_grant=None, port_free_ps: int = 0) -> simpy.Event | None:
        """:meth:`request` with the bank mask already computed (``ranges_to_banks``).
        ``port_free_ps``: the first edge the requester's port can be granted again (a DMA LOAD
        write queued behind the previous one, docs/architecture.md "DMA"); the request is visible
        at the later of that and ``cdc(launch_ps)``."""
        req = self.enqueue(requester, launch_ps, src, banks, accesses, on_grant, port_free_ps)
        free = self.bank_free_ps
        t_ps = req.visible_ps
        for b in banks:
            if free[b] > t_ps:
                t_ps = free[b]
        self.sched.request(t_ps)
        return req.event

    def enqueue(self, requester: int, launch_ps: int, src: ClockDomain, banks: tuple, accesses: int,
                on_grant=None, port_free_ps: int = 0) -> SramRequest:
        """:meth:`request_banks` without waking the arbiter (a burst train wakes it when it ends)."""
        assert self.pending[requester] is None, f"SRAM requester {requester} has two requests"
        assert accesses >= 1
        visible_ps = max(self.clocks.cdc(launch_ps, src, self.dom), port_free_ps)
        req = SramRequest(requester, banks, accesses, visible_ps, None if on_grant else self.env.event(), on_grant)
        self.pending[requester] = req
        if self.trace is not None:
            self.trace.sram_request(requester, launch_ps)
        return req

    def next_decision_ps(self) -> int | None:
        """The earliest edge (ps) at which a pending request is visible and its banks are free,
        or None."""
        free = self.bank_free_ps
        next_ps = None
        for req in self.pending:
            if req is not None:
                t_ps = grant_edge_ps(req, free)
                if next_ps is None or t_ps < next_ps:
                    next_ps = t_ps
        return next_ps

    def wake(self) -> None:
        """Decide at the next edge where a grant may happen (after a burst train)."""
        self.sched.retarget(self.next_decision_ps())

    def _decide(self) -> None:
        """At core edge ``e``: grant, in priority order, every visible request whose banks are
        all free (a grant takes its banks for the rest of the edge); then wake at the earliest
        edge where a pending request is visible and its banks are free."""
        e = self.loop.now_ps
        free = self.bank_free_ps
        granted = None
        for req in self.pending:
            if req is not None and req.visible_ps <= e:
                for b in req.banks:
                    if free[b] > e:
                        break
                else:
                    self.take(req, e)
                    if granted is None:
                        granted = [req]
                    else:
                        granted.append(req)
        next_ps = self.next_decision_ps()
        if next_ps is not None:
            self.sched.request(next_ps)
        if granted is None:
            return
        for req in granted:            # report after the walk: callbacks may post new requests
            if req.on_grant is not None:
                req.on_grant(e)
            else:
                self.loop.deliver(req.event, e, e)

    def take(self, req: SramRequest, g_ps: int) -> None:
        """Grant ``req`` at core edge ``g_ps``: its banks are busy until ``g + D``, it leaves
        ``pending``; grant log, trace, conflict counters. The caller reports the grant."""
        period = self.dom.period_ps
        end_ps = g_ps + req.accesses * period
        free = self.bank_free_ps
        for b in req.banks:
            free[b] = end_ps
        self.pending[req.requester] = None
        if self.grants is not None:
            self.grants.append((req.requester, g_ps, req.accesses))
        if self.trace is not None:
            self.trace.sram_grant(g_ps, req.requester, req.banks, req.accesses, req.visible_ps)
        if g_ps > req.visible_ps:
            counters = self.perf.values
            counters["sram_conflicts"] += 1
            counters["sram_conflict_cycles"] += (g_ps - req.visible_ps) // period

    # ------------------------------------------------------------------ storage
    def read_bytes(self, byte_addr: int, n: int) -> bytes:
        return self.data[byte_addr:byte_addr + n].tobytes()

    def write_bytes(self, byte_addr: int, data: bytes) -> None:
        self._bytes[byte_addr:byte_addr + len(data)] = data


__all__ = ["Sram", "SramRequest", "LOAD", "STORE", "MXU", "VPU", "MXU_W", "grant_edge_ps"]
