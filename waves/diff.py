"""Compare two dumps signal by signal and find the first divergence.

Signals are paired by name (identical hierarchical names), or by a YAML map file of
``name_in_A: name_in_B`` entries (top level, or under a ``signals:`` key); with a map only the
mapped pairs are compared. A signal's value before its first change is "unknown" (``None``):
a signal that one dump initialises at t=0 and the other first sets later diverges at t=0.

A dump cut short by a killed run (``Dump.truncated``) is compared only up to its last complete
time step (``DiffResult.cut_ps``): what follows is missing, not different.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from waves.inflight import in_flight
from waves.reader import Dump, WaveError


@dataclass(frozen=True)
class Divergence:
    time_ps: int
    signal_a: str
    signal_b: str
    value_a: object
    value_b: object


@dataclass
class DiffResult:
    compared: int = 0
    divergences: list[Divergence] = field(default_factory=list)   # first one per signal, by time
    only_in_a: list[str] = field(default_factory=list)             # unmapped names (no map only)
    only_in_b: list[str] = field(default_factory=list)
    cut_ps: int | None = None            # compared only up to here: a truncated dump ends here
    cut_sides: tuple[int, ...] = ()      # which dumps (0 = A, 1 = B) end at ``cut_ps``

    @property
    def first(self) -> Divergence | None:
        return self.divergences[0] if self.divergences else None

    @property
    def identical(self) -> bool:
        """No difference at all (up to ``cut_ps`` if a dump was cut short)."""
        return not (self.divergences or self.only_in_a or self.only_in_b)

    @property
    def exit_code(self) -> int:
        """CLI status: 0 identical, 1 different, 3 identical only up to a cut (``cut_ps``)."""
        if not self.identical:
            return 1
        return 3 if self.cut_ps is not None else 0


def load_map(path: str | Path) -> dict[str, str]:
    path = Path(path)
    if not path.is_file():
        raise WaveError(f"{path}: no such map file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise WaveError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(data, dict) and set(data) == {"signals"}:
        data = data["signals"]
    if not isinstance(data, dict) or not data:
        raise WaveError(f"{path}: expected a mapping 'name_in_A: name_in_B'")
    bad = [k for k, v in data.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise WaveError(f"{path}: entry {bad[0]!r}: both names must be strings")
    return dict(data)


def first_difference(ca: list, cb: list):
    """Earliest (time, value_a, value_b) where two change lists disagree, or None."""
    if ca == cb:
        return None
    va = vb = None
    ia = ib = 0
    while ia < len(ca) or ib < len(cb):
        t = min(ca[ia][0] if ia < len(ca) else float("inf"),
                cb[ib][0] if ib < len(cb) else float("inf"))
        while ia < len(ca) and ca[ia][0] == t:
            va = ca[ia][1]
            ia += 1
        while ib < len(cb) and cb[ib][0] == t:
            vb = cb[ib][1]
            ib += 1
        if va != vb:
            return t, va, vb
    return None       # equal after repeats collapse (the reader already drops them)


NO_COMMON = ("no signal names in common: pass --map (e.g. --map waves/arch_map.yaml for model "
             "vs RTL arch dumps)")


def cut_time(a: Dump, b: Dump) -> tuple[int | None, tuple[int, ...]]:
    """(end time in ps of the earlier-ending truncated dump, the sides ending there), or
    (None, ()) if neither dump was cut short."""
    ends = {i: d.end_ps for i, d in enumerate((a, b)) if d.truncated}
    if not ends:
        return None, ()
    cut = min(0 if e is None else e for e in ends.values())
    return cut, tuple(i for i, e in ends.items() if (0 if e is None else e) == cut)


def _upto(changes: list, cut_ps) -> list:
    return changes if cut_ps is None else [c for c in changes if c[0] <= cut_ps]


def diff_dumps(a: Dump, b: Dump, mapping: dict[str, str] | None = None) -> DiffResult:
    """Compare ``a`` and ``b`` (by name, or through ``mapping`` name_in_A -> name_in_B), up to
    the cut of a truncated dump if any. WaveError if a mapped name is missing, or if without a
    map the dumps have no signal name in common."""
    res = DiffResult()
    res.cut_ps, res.cut_sides = cut_time(a, b)
    if mapping is None:
        names_b = set(b.names())
        pairs = [(n, n) for n in a.names() if n in names_b]
        if not pairs:
            raise WaveError(f"{a.path}, {b.path}: {NO_COMMON}")
        res.only_in_a = [n for n in a.names() if n not in names_b]
        names_a = set(a.names())
        res.only_in_b = [n for n in b.names() if n not in names_a]
    else:
        for na, nb in mapping.items():
            if na not in a:
                raise WaveError(f"map: {na!r} is not a signal of {a.path}")
            if nb not in b:
                raise WaveError(f"map: {nb!r} is not a signal of {b.path}")
        pairs = list(mapping.items())
    found = []
    for na, nb in pairs:
        res.compared += 1
        d = first_difference(_upto(a.changes(na), res.cut_ps), _upto(b.changes(nb), res.cut_ps))
        if d is not None:
            found.append(Divergence(d[0], na, nb, d[1], d[2]))
    res.divergences = sorted(found, key=lambda d: (d.time_ps, d.signal_a))
    return res


def fmt_value(v, width: int | None = None) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v} (0x{v:x})" if v > 9 else str(v)
    return str(v)


def fmt_time(t_ps, core_period_ps: int) -> str:
    cyc, rem = divmod(t_ps, core_period_ps)
    cyc = int(cyc)
    return f"{t_ps} ps = core cycle {cyc}" + (f" + {rem} ps" if rem else "")


def report(res: DiffResult, core_period_ps: int = 1000, limit: int = 10,
           a: Dump | None = None, b: Dump | None = None,
           mapping: dict[str, str] | None = None, labels: tuple[str, str] = ("A", "B")) -> str:
    """Text report: first divergence (time in ps and core cycles, signal, both values), the
    instruction in flight on each side (if dumps ``a``/``b`` with architectural signals are given;
    ``mapping`` renames A's names to B's), the number of differing signals, the next ones.
    ``labels`` name the two sides in the text (e.g. ("model", "rtl"))."""
    la, lb = labels
    lines = []
    cut_note = ""
    if res.cut_ps is not None:
        who = " and ".join((la, lb)[i] for i in res.cut_sides)
        cut_note = (f"{res.cut_ps} ps, where {who} "
                    f"{'end' if len(res.cut_sides) > 1 else 'ends'} (cut short: killed run?)")
    if res.identical:
        if cut_note:
            return f"no divergence up to {cut_note}: {res.compared} signals compared"
        return f"identical: {res.compared} signals compared, no differences"
    if not res.divergences and cut_note:
        lines.append(f"no divergence up to {cut_note}")
    first = res.first
    if first is not None:
        name = first.signal_a if first.signal_a == first.signal_b else f"{first.signal_a} / {first.signal_b}"
        lines.append(f"first divergence at {fmt_time(first.time_ps, core_period_ps)}: {name}: "
                     f"{la}={fmt_value(first.value_a)} {lb}={fmt_value(first.value_b)}")
        rename_b = (lambda n: mapping.get(n, n)) if mapping else (lambda n: n)
        for label, dump, rename in ((la, a, lambda n: n), (lb, b, rename_b)):
            state = in_flight(dump, first.time_ps, rename) if dump is not None else None
            if state:
                lines.append(f"  in flight on {label}: {state}")
        if cut_note:
            lines.append(f"  note: compared only up to {cut_note}")
    lines.append(f"{len(res.divergences)} of {res.compared} compared signals differ")
    for d in res.divergences[1:limit]:
        lines.append(f"  {d.signal_a} at {fmt_time(d.time_ps, core_period_ps)}: "
                     f"{la}={fmt_value(d.value_a)} {lb}={fmt_value(d.value_b)}")
    if len(res.divergences) > limit:
        lines.append(f"  ... {len(res.divergences) - limit} more")
    for label, names in ((la, res.only_in_a), (lb, res.only_in_b)):
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            lines.append(f"{len(names)} signals only in {label}: {shown}")
    return "\n".join(lines)


__all__ = ["Divergence", "DiffResult", "NO_COMMON", "cut_time", "diff_dumps", "first_difference", "load_map", "report"]
