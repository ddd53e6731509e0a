"""Architectural signal trace, written as a VCD (pyvcd) after the run.

Signals (timescale 1 ps): ``<engine>_busy`` (1 from start edge s to completion edge c),
``<engine>_retire_pc`` (40 bits, PC of the last retired instruction; HALT included),
``ddr_grant`` (2 bits, requester whose transaction holds the DDR command bus, from its grant edge
``g`` to ``g + B``: 0 fetch, 1 DMA read, 2 DMA write; 3 = bus idle; spec v2: transactions overlap
after their commands, so "in flight" is not one requester), ``sram_conflicts`` (16-bit running count of conflicting SRAM grants).
"""
from __future__ import annotations

from pathlib import Path

from vcd import VCDWriter

from tpusim.models.common import ENGINE_NAMES

RETIRERS = ENGINE_NAMES + ("HALT",)
DDR_IDLE = 3


class Trace:
    """Collects (time_ps, signal, value) changes; ``write(path)`` dumps them sorted by time."""

    def __init__(self) -> None:
        self.changes: list[tuple[int, int, str, int]] = []   # (t, seq, signal, value)

    def _add(self, t_ps: int, sig: str, val: int) -> None:
        self.changes.append((t_ps, len(self.changes), sig, val))

    def busy(self, engine: int, t_ps: int, val: int) -> None:
        self._add(t_ps, f"{ENGINE_NAMES[engine].lower()}_busy", val)

    def retire(self, engine: int, t_ps: int, pc: int) -> None:
        self._add(t_ps, f"{RETIRERS[engine].lower()}_retire_pc", pc)

    def ddr_grant(self, g_ps: int, bus_free_ps: int, requester: int) -> None:
        """A DDR transaction granted at ``g_ps`` holds the command bus until ``bus_free_ps``
        (``g + B``); a grant at that same edge overrides the idle value (see ``write``)."""
        self._add(g_ps, "ddr_grant", requester)
        self._add(bus_free_ps, "ddr_grant", DDR_IDLE)

    def sram_conflict(self, g_ps: int, requester: int) -> None:
        self._add(g_ps, "sram_conflicts", 1)    # summed into a running count on write

    def write(self, path: str | Path) -> None:
        with open(path, "w") as fh, VCDWriter(fh, timescale="1 ps", date="today") as w:
            var = {}
            for name in RETIRERS[:4]:
                var[f"{name.lower()}_busy"] = w.register_var("tpu", f"{name.lower()}_busy", "wire", size=1, init=0)
            for name in RETIRERS:
                var[f"{name.lower()}_retire_pc"] = w.register_var("tpu", f"{name.lower()}_retire_pc",
                                                                  "wire", size=40, init=0)
            var["ddr_grant"] = w.register_var("tpu", "ddr_grant", "wire", size=2, init=DDR_IDLE)
            var["sram_conflicts"] = w.register_var("tpu", "sram_conflicts", "integer", size=16, init=0)
            conflicts = 0
            final: dict[tuple[int, str], int] = {}     # last value per (time, signal)
            for t, _, sig, val in sorted(self.changes):
                if sig == "sram_conflicts":
                    conflicts += val
                    val = conflicts & 0xFFFF
                final[(t, sig)] = val
            for (t, sig), val in final.items():         # dict keeps the sorted time order
                w.change(var[sig], t, val)


__all__ = ["Trace"]
