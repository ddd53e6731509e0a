"""Engine instruction queues (decoder -> engine), one per engine, ``Q`` entries each.

Rules (docs/architecture.md, "Decoder and dispatch"):
  * a push at core edge ``p`` is visible to the engine at ``cdc(p -> engine domain)``
    (MXU/VPU: ``p + 1``; LOAD/STORE: 3rd DMA edge strictly after ``p``);
  * a pop at engine edge ``s`` is visible to the decoder at ``cdc(s -> core)`` (MXU/VPU: ``s+1``);
  * the decoder's occupancy at edge ``e`` = pushes (all at edges < e) - pops visible at <= e;
    it may push while that is < Q, i.e. iff pop number ``pushes - Q`` is visible at ``<= e``.
"""
from __future__ import annotations

import simpy

from tpusim.arch.isa import Instruction
from tpusim.models.common import Clocks, QueueEntry, Timeline


class EngineQueue:
    """``entries``: Timeline of QueueEntry (visible_ps in the engine domain);
    ``pops``: Timeline of the core edges (ps) at which each pop becomes visible to the decoder."""

    def __init__(self, env: simpy.Environment, clocks: Clocks, engine: int, depth: int) -> None:
        self.clocks = clocks
        self.engine = engine
        self.dom = clocks.engine_domain(engine)
        self.depth = depth
        self.entries = Timeline(env)
        self.pops = Timeline(env)

    @property
    def pushes(self) -> int:
        return len(self.entries)

    def slot_pop_index(self) -> int | None:
        """Index of the pop that must be visible before the next push (None: room already)."""
        k = self.pushes - self.depth
        return k if k >= 0 else None

    def push(self, index: int, pc: int, instr: Instruction, p_ps: int) -> QueueEntry:
        """Decoder pushes at core edge ``p_ps``."""
        entry = QueueEntry(index, pc, instr, self.clocks.cdc(p_ps, self.clocks.core, self.dom))
        self.entries.append(entry)
        return entry

    def pop(self, s_ps: int) -> None:
        """Engine pops its head at its own edge ``s_ps``."""
        self.pops.append(self.clocks.cdc(s_ps, self.dom, self.clocks.core))


__all__ = ["EngineQueue"]
