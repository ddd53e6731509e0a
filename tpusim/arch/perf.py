"""Performance counters of the chip (docs/architecture.md, "Performance counters").

``COUNTERS`` is the ordered tuple of counter names; its index is the RTL's ``perf_sel_i``
selector and the ``PERF_<NAME>`` localparams of the generated ``tpu_isa_pkg`` (tpusim.arch.svgen).
Units: ``*_cycles`` in the cycles of the block's own clock domain (engines: their domain; SRAM:
core; DDR: DDR), ``*_bytes`` in bytes, ``*_retired`` and ``sram_conflicts`` are counts.
"""
from __future__ import annotations

from tpusim.arch.isa import ENGINE_KEYS

#: Per-engine counters, in this order for each engine of ENGINE_KEYS.
ENGINE_COUNTERS = ("busy_cycles", "token_wait_cycles", "retired", "queue_full_cycles")

COUNTERS: tuple[str, ...] = (
    ("cycles",)
    + tuple(f"{e}_{k}" for e in ENGINE_KEYS for k in ENGINE_COUNTERS)
    + ("sram_conflicts", "sram_conflict_cycles",
       "ddr_read_bytes", "ddr_write_bytes", "fetch_bytes", "ddr_busy_cycles", "ddr_arb_wait_cycles")
)

#: name -> perf_sel_i index
COUNTER_INDEX = {name: i for i, name in enumerate(COUNTERS)}

__all__ = ["COUNTERS", "COUNTER_INDEX", "ENGINE_COUNTERS", "ENGINE_KEYS"]
