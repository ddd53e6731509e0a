"""Which instruction each engine runs at a given time, from a dump's architectural signals.

Uses ``tpu.<eng>.busy`` / ``tpu.<eng>.issue_pc`` and ``tpu.dec.pc`` (tpusim/models/trace.py),
renamed through the map for the RTL side. PCs are byte offsets from ``code_addr``; instruction
index = PC / 32.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

from waves.reader import Dump

ENGINES = ("load", "store", "mxu", "vpu")
INSTR_BYTES = 32


def value_before(changes: list, t_ps) -> object:
    """Value strictly before ``t_ps`` (None if unset)."""
    i = bisect_left([c[0] for c in changes], t_ps)
    return changes[i - 1][1] if i else None


def value_at(changes: list, t_ps) -> object:
    """Value at ``t_ps`` after the changes at ``t_ps`` (None if unset)."""
    i = bisect_right([c[0] for c in changes], t_ps)
    return changes[i - 1][1] if i else None


def _last_rise_before(changes: list, t_ps):
    rise = None
    for t, v in changes:
        if t >= t_ps:
            break
        if v == 1:
            rise = t
    return rise


def _pc(v) -> str:
    return f"pc {v:#x} (#{v // INSTR_BYTES})" if isinstance(v, int) else f"pc {v}"


def engine_state(dump: Dump, engine: str, t_ps, rename=lambda n: n) -> str | None:
    """'MXU pc 0x100 (#8) since 73000 ps, retires here' / '... starts here' / 'MXU idle';
    None if the dump lacks the engine's signals."""
    busy, issue = rename(f"tpu.{engine}.busy"), rename(f"tpu.{engine}.issue_pc")
    if busy not in dump or issue not in dump:
        return None
    bc, ic = dump.changes(busy), dump.changes(issue)
    before, after = value_before(bc, t_ps), value_at(bc, t_ps)
    name = engine.upper()
    if before == 1:
        text = f"{name} {_pc(value_before(ic, t_ps))} since {_last_rise_before(bc, t_ps)} ps"
        return text + (", retires here" if after == 0 else "")
    if after == 1:
        return f"{name} {_pc(value_at(ic, t_ps))} starts here"
    return f"{name} idle"


def in_flight(dump: Dump, t_ps, rename=lambda n: n) -> str | None:
    """One line: every engine's state at ``t_ps`` and the decoder's next PC; None if the dump
    has no architectural engine signals."""
    parts = [p for p in (engine_state(dump, e, t_ps, rename) for e in ENGINES) if p]
    if not parts:
        return None
    dec = rename("tpu.dec.pc")
    if dec in dump:
        nxt = value_before(dump.changes(dec), t_ps)
        if isinstance(nxt, int):
            parts.append(f"decoder next {_pc(nxt)}")
    return "; ".join(parts)


__all__ = ["in_flight", "engine_state", "value_at", "value_before"]
