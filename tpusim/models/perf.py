"""Performance counters (docs/architecture.md, "Performance counters").

``COUNTERS`` is the ordered tuple of counter names; the RTL's ``perf_sel_i`` index follows it.
Units: ``*_cycles`` in the cycles of the block's own clock domain (engines: their domain; SRAM:
core; DDR: DDR), ``*_bytes`` in bytes, ``*_retired`` and ``sram_conflicts`` are counts.
"""
from __future__ import annotations

ENGINE_KEYS = ("load", "store", "mxu", "vpu")   # same order as tpusim.isa.Engine

COUNTERS: tuple[str, ...] = (
    ("cycles",)
    + tuple(f"{e}_{k}" for e in ENGINE_KEYS for k in ("busy_cycles", "token_wait_cycles", "retired"))
    + ("sram_conflicts", "sram_conflict_cycles",
       "ddr_read_bytes", "ddr_write_bytes", "fetch_bytes", "ddr_busy_cycles", "ddr_arb_wait_cycles")
)


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
