"""Dependency tokens: one 8-bit counter per (sender, receiver) engine pair.

Rules (docs/architecture.md, "Engines and tokens"):
  * at its completion edge ``c`` an engine sends one token to each engine in its ``signal`` mask;
    a token sent at ``c`` is visible to engine ``y`` at ``cdc(c -> y)`` (same domain: ``c + 1``);
  * an engine starts only when, for every ``x`` in its ``wait`` mask, a token from ``x`` is
    visible (count >= 1), and consumes one from each at its start edge.
Tokens are fungible and visible in send order, so consumption number ``k`` of the pair (x, y)
needs send number ``k`` to be visible.
Overflow (device error token_overflow, docs/architecture.md "Device errors"): the sender checks
at ``c`` against the consumptions it can see, those at receiver edges ``s`` with
``cdc(s -> sender) <= c`` (same domain: ``s < c``); if TOKEN_MAX (255) tokens sent are not seen consumed,
the new token is not sent and the error is reported at ``c``. So the receiver's 8-bit counter
never holds more than TOKEN_MAX.
"""
from __future__ import annotations

from collections.abc import Callable

import simpy

from tpusim.arch.device_checks import token_overflow_fault
from tpusim.arch.limits import TOKEN_MAX
from tpusim.models.common import ENGINE_NAMES, Clocks, Timeline


class Tokens:
    """``sent[x][y]``: Timeline of the ``y``-domain edges (ps) at which x's tokens become
    visible to y; ``consumed[x][y]``: tokens y has taken from x; ``taken_ps[x][y]``: the
    ``y``-domain start edges (ps) of those consumptions."""

    def __init__(self, env: simpy.Environment, clocks: Clocks) -> None:
        self.env = env
        self.clocks = clocks
        n = len(ENGINE_NAMES)
        self.doms = [clocks.engine_domain(e) for e in range(n)]
        self.sent = [[Timeline(env) for _ in range(n)] for _ in range(n)]
        self.consumed = [[0] * n for _ in range(n)]
        self.taken_ps: list[list[list[int]]] = [[[] for _ in range(n)] for _ in range(n)]
        self._seen = [[0] * n for _ in range(n)]     # consumptions visible to the sender so far

    def send(self, sender: int, mask: int, c_ps: int, where: Callable[[], str], pc: int = 0,
             errors=None) -> None:
        """``sender`` completes at its edge ``c_ps`` (the instruction at ``pc``, described by
        ``where()``, a callable returning the text, called only for an error) and signals every
        engine in ``mask``. An overflowing token is dropped and reported to ``errors`` (an
        ErrorUnit); without one the DeviceError is raised."""
        for y in range(len(ENGINE_NAMES)):
            if mask >> y & 1:
                tl = self.sent[sender][y]
                if len(tl) - self._seen_consumed(sender, y, c_ps) >= TOKEN_MAX:
                    err = token_overflow_fault(sender, y, mask).error(where(), pc)
                    if errors is None:
                        raise err
                    errors.report(err, c_ps, self.doms[sender])
                    continue
                tl.append(self.clocks.cdc(c_ps, self.doms[sender], self.doms[y]))

    def _seen_consumed(self, x: int, y: int, c_ps: int) -> int:
        """Consumptions by ``y`` of ``x``'s tokens visible to ``x`` at its edge ``c_ps``
        (``c_ps`` never decreases for one sender, so a pointer suffices)."""
        taken, k = self.taken_ps[x][y], self._seen[x][y]
        cdc, src, dst = self.clocks.cdc, self.doms[y], self.doms[x]
        while k < len(taken) and cdc(taken[k], src, dst) <= c_ps:
            k += 1
        self._seen[x][y] = k
        return k

    def next_index(self, sender: int, receiver: int) -> int:
        """Send number whose visibility the receiver's next consumption from ``sender`` needs."""
        return self.consumed[sender][receiver]

    def consume(self, receiver: int, mask: int, s_ps: int | None = None) -> None:
        """``receiver`` takes one token from each engine in ``mask`` at its start edge ``s_ps``
        (default: now)."""
        s_ps = self.env.now if s_ps is None else s_ps
        for x in range(len(ENGINE_NAMES)):
            if mask >> x & 1:
                self.consumed[x][receiver] += 1
                self.taken_ps[x][receiver].append(s_ps)


__all__ = ["Tokens"]
