"""The SimPy model's performance-counter bank; the counter names and their order are the
architecture's (tpusim.arch.perf.COUNTERS)."""
from __future__ import annotations

from tpusim.arch.perf import COUNTERS, ENGINE_KEYS


class PerfCounters:
    """Counter values by name (all start at 0); ``as_dict()`` lists them in COUNTERS order."""

    def __init__(self) -> None:
        self.values: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    def add(self, name: str, n: int = 1) -> None:
        self.values[name] += n

    def set(self, name: str, n: int) -> None:
        if name not in self.values:
            raise KeyError(f"unknown performance counter {name!r}")
        self.values[name] = n

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def as_dict(self) -> dict[str, int]:
        return {k: self.values[k] for k in COUNTERS}


__all__ = ["COUNTERS", "ENGINE_KEYS", "PerfCounters"]
