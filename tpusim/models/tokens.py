"""Dependency tokens: one 8-bit counter per (sender, receiver) engine pair.

Rules (docs/architecture.md, "Engines and tokens"):
  * at its completion edge ``c`` an engine sends one token to each engine in its ``signal`` mask;
    a token sent at ``c`` is visible to engine ``y`` at ``cdc(c -> y)`` (same domain: ``c + 1``);
  * an engine starts only when, for every ``x`` in its ``wait`` mask, a token from ``x`` is
    visible (count >= 1), and consumes one from each at its start edge.
Tokens are fungible and visible in send order, so consumption number ``k`` of the pair (x, y)
needs send number ``k`` to be visible. More than 255 unconsumed tokens overflow the 8-bit
counter: a device error.
"""
from __future__ import annotations

import simpy

from tpusim.errors import SimulationError
from tpusim.models.common import ENGINE_NAMES, Clocks, Timeline

TOKEN_MAX = 255


class Tokens:
    """``sent[x][y]``: Timeline of the ``y``-domain edges (ps) at which x's tokens become
    visible to y; ``consumed[x][y]``: tokens y has taken from x."""

    def __init__(self, env: simpy.Environment, clocks: Clocks) -> None:
        self.env = env
        self.clocks = clocks
        n = len(ENGINE_NAMES)
        self.doms = [clocks.engine_domain(e) for e in range(n)]
        self.sent = [[Timeline(env) for _ in range(n)] for _ in range(n)]
        self.consumed = [[0] * n for _ in range(n)]

    def send(self, sender: int, mask: int, c_ps: int, where: str) -> None:
        """``sender`` completes at its edge ``c_ps`` and signals every engine in ``mask``."""
        for y in range(len(ENGINE_NAMES)):
            if mask >> y & 1:
                tl = self.sent[sender][y]
                if len(tl) - self.consumed[sender][y] >= TOKEN_MAX:
                    raise SimulationError(
                        f"{where}: token counter {ENGINE_NAMES[sender]}->{ENGINE_NAMES[y]} "
                        f"overflows ({TOKEN_MAX} tokens not yet consumed)")
                tl.append(self.clocks.cdc(c_ps, self.doms[sender], self.doms[y]))

    def next_index(self, sender: int, receiver: int) -> int:
        """Send number whose visibility the receiver's next consumption from ``sender`` needs."""
        return self.consumed[sender][receiver]

    def consume(self, receiver: int, mask: int) -> None:
        """``receiver`` takes one token from each engine in ``mask`` (at its start edge)."""
        for x in range(len(ENGINE_NAMES)):
            if mask >> x & 1:
                self.consumed[x][receiver] += 1


__all__ = ["Tokens", "TOKEN_MAX"]
