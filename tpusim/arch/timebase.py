"""The one time unit of the model (1 SimPy time unit = 1 ps) and clock-edge arithmetic.

The three clock domains (core, DDR, DMA) are rational multiples of each other and start at fixed
phases chosen so that no two domains ever have a rising edge at the same picosecond. That makes
every clock-domain crossing deterministic, identically in the SimPy model and in the RTL simulation.

Edge k of a domain is at ``phase_ps + k * period_ps`` (k >= 0). Every conversion into ps goes
through :func:`period_ps`, which refuses frequencies whose period is not a whole number of ps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tpusim.arch.errors import TimebaseError

PS_PER_US = 1_000_000

#: Synchroniser depth: a value launched at a source edge is acted on by the destination at the
#: CDC_EDGES-th destination edge strictly after the launch (2 flops, then the logic's own edge).
CDC_EDGES = 3


def period_ps(freq_mhz: int) -> int:
    """Clock period in ps for a frequency in MHz; TimebaseError if not a whole number of ps."""
    if not isinstance(freq_mhz, int) or freq_mhz <= 0:
        raise TimebaseError(f"clock frequency must be a positive integer of MHz, got {freq_mhz!r}")
    if PS_PER_US % freq_mhz:
        raise TimebaseError(f"{freq_mhz} MHz has a period of {PS_PER_US / freq_mhz} ps, "
                            "not a whole number of ps")
    return PS_PER_US // freq_mhz


@dataclass(frozen=True)
class ClockDomain:
    """A clock domain: rising edge k at ``phase_ps + k * period_ps``."""
    name: str
    period_ps: int
    phase_ps: int

    def edge(self, k: int) -> int:
        """Time in ps of rising edge k (k >= 0)."""
        return self.phase_ps + k * self.period_ps

    def index_at_or_after(self, t_ps: int) -> int:
        """Index of the first edge at or after t_ps."""
        if t_ps <= self.phase_ps:
            return 0
        return -((self.phase_ps - t_ps) // self.period_ps)

    def index_after(self, t_ps: int) -> int:
        """Index of the first edge strictly after t_ps."""
        if t_ps < self.phase_ps:
            return 0
        return (t_ps - self.phase_ps) // self.period_ps + 1

    def next_edge_after(self, t_ps: int, n: int = 1) -> int:
        """Time of the n-th edge strictly after t_ps (n >= 1)."""
        return self.edge(self.index_after(t_ps) + n - 1)

    def edge_at_or_after(self, t_ps: int) -> int:
        return self.edge(self.index_at_or_after(t_ps))

    def cycle_of(self, t_ps: int) -> int:
        """Index of the edge at exactly t_ps; TimebaseError if t_ps is not an edge of this domain."""
        k, r = divmod(t_ps - self.phase_ps, self.period_ps)
        if r or k < 0:
            raise TimebaseError(f"{t_ps} ps is not a rising edge of the {self.name} clock "
                                f"(period {self.period_ps} ps, phase {self.phase_ps} ps)")
        return k

    def is_edge(self, t_ps: int) -> bool:
        return t_ps >= self.phase_ps and (t_ps - self.phase_ps) % self.period_ps == 0


class Timebase:
    """The three clock domains of a configuration, checked for exact periods and distinct edges.

    Raises TimebaseError if a period is not whole ps, a phase is negative or not below the period,
    or two domains ever share a rising edge.
    """

    def __init__(self, cfg) -> None:
        self.core = self._domain("core", cfg.clk_core)
        self.ddr = self._domain("ddr", cfg.clk_ddr)
        self.dma = self._domain("dma", cfg.clk_dma)
        self.domains = {d.name: d for d in (self.core, self.ddr, self.dma)}
        doms = list(self.domains.values())
        for i, a in enumerate(doms):
            for b in doms[i + 1:]:
                if self._coincide(a, b):
                    raise TimebaseError(f"clocks {a.name} and {b.name} share rising edges "
                                        f"(phases {a.phase_ps} and {b.phase_ps} ps): "
                                        "choose phases so that no edges coincide")

    @staticmethod
    def _domain(name: str, clk) -> ClockDomain:
        try:
            p = period_ps(clk.freq_mhz)
        except TimebaseError as e:
            raise TimebaseError(f"clocks.{name}.freq_mhz: {e}") from None
        if not (0 <= clk.phase_ps < p):
            raise TimebaseError(f"clocks.{name}.phase_ps must be in [0, {p}) ps, got {clk.phase_ps}")
        return ClockDomain(name, p, clk.phase_ps)

    @staticmethod
    def _coincide(a: ClockDomain, b: ClockDomain) -> bool:
        # a.phase + i*a.period == b.phase + j*b.period has a solution iff gcd divides the difference
        return (b.phase_ps - a.phase_ps) % math.gcd(a.period_ps, b.period_ps) == 0

    def cdc(self, t_launch_ps: int, dst: ClockDomain, src: ClockDomain | None = None) -> int:
        """Time at which destination logic acts on a value launched at t_launch_ps.

        Across domains: the CDC_EDGES-th destination edge strictly after the launch (two
        synchroniser flops, then the consuming register). Within one domain (src is dst): the
        next edge.
        """
        if src is not None and src.name == dst.name:
            return dst.next_edge_after(t_launch_ps, 1)
        return dst.next_edge_after(t_launch_ps, CDC_EDGES)


__all__ = ["period_ps", "ClockDomain", "Timebase", "CDC_EDGES"]
