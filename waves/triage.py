"""GTKWave triage of a model dump against an RTL dump.

``triage(model_vcd, rtl_vcd, map_path, out_dir) -> TriageResult`` writes into ``out_dir``:
  * ``merged.vcd``: both dumps in one file, the model's signals under ``model.`` and the RTL's
    under ``rtl.`` (same time base: ps);
  * ``triage.gtkw``: a GTKWave save file on ``merged.vcd``: the diverging signals at the top, each
    model signal with its RTL counterpart right after it, then (closed) the engines' busy /
    issue PC signals and the other compared signals; the primary marker at the first divergence;
  * ``divergence.txt``: the report (first divergence in ps and core cycles, signal, both values,
    the instruction in flight on each side, how many signals differ).
A dump cut short (killed run) is compared up to its last complete step (``TriageResult.cut_ps``;
``identical`` is then False); with no divergence before it the marker is at the cut.
CLI: ``python -m waves triage MODEL.vcd RTL.vcd --map waves/arch_map.yaml --out DIR``.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from vcd import VCDWriter

from tpusim.arch.fileio import write_text_atomic
from waves.diff import DiffResult, Divergence, diff_dumps, load_map, report
from waves.gtkw import GTKW_WINDOW_CYCLES, write_triage
from waves.inflight import ENGINES
from waves.reader import Dump, WaveError, read_dump

MERGED, GTKW, REPORT = "merged.vcd", "triage.gtkw", "divergence.txt"


@dataclass
class TriageResult:
    identical: bool
    report: str
    merged_vcd: Path | None        # None: identical and not written (``write_identical``)
    gtkw: Path | None
    report_path: Path | None
    first: Divergence | None = None
    divergences: list = field(default_factory=list)
    compared: int = 0
    cut_ps: int | None = None     # a dump was cut short: compared only up to here (ps)
    exit_code: int = 0            # 0 identical, 1 different, 3 no divergence up to cut_ps only


def _var_args(dump: Dump, name: str) -> tuple[str, int | None]:
    info = dump.info(name)
    kind = info.var_type.lower()
    if "real" in kind:
        return "real", None
    if "string" in kind:
        return "string", None
    return "wire", info.width


def write_merged(a: Dump, b: Dump, pairs: list[tuple[str, str]], path: Path,
                 extra_a=(), extra_b=()) -> None:
    """Write ``path``: every signal of ``pairs`` (and the extra names) of ``a`` under ``model.``
    and of ``b`` under ``rtl.``; all changes in time order (1 ps timescale)."""
    events = []
    fh = io.StringIO()            # built in memory, then written atomically (tpusim.arch.fileio)
    w = VCDWriter(fh, timescale="1 ps", date=None, comment="waves triage: model.* vs rtl.*")
    seen = set()
    names = [("model", a, n) for n, _ in pairs] + [("rtl", b, m) for _, m in pairs]
    names += [("model", a, n) for n in extra_a] + [("rtl", b, n) for n in extra_b]
    for side, dump, n in names:
        if (side, n) in seen:
            continue
        seen.add((side, n))
        scope, leaf = f"{side}.{n}".rsplit(".", 1)
        kind, size = _var_args(dump, n)
        var = w.register_var(scope, leaf, kind, size=size)
        events += [(int(t), len(events), var, v) for t, v in dump.changes(n)]
    events.sort(key=lambda e: (e[0], e[1]))
    end = 0
    for t, _, var, v in events:
        w.change(var, t, v)
        end = t
    w.close(timestamp=end)
    write_text_atomic(path, fh.getvalue())     # OSError names ``path`` (disk full, size limit)


def _context(pairs: list[tuple[str, str]], res: DiffResult) -> list[tuple[str, str]]:
    """Compared pairs that did not diverge: engine busy / issue PC first, then the rest."""
    bad = {d.signal_a for d in res.divergences}
    rest = [p for p in pairs if p[0] not in bad]
    key = {f"tpu.{e}.{s}": i for i, (e, s) in enumerate(
        (e, s) for e in ENGINES for s in ("busy", "issue_pc", "retire_pc"))}
    return sorted(rest, key=lambda p: key.get(p[0], len(key)))


def triage(model_vcd: str | Path, rtl_vcd: str | Path, map_path: str | Path | None,
           out_dir: str | Path, core_period_ps: int = 1000, write_identical: bool = True) -> TriageResult:
    """Compare the dumps (through the map file, model name -> RTL name, if given) and write the
    merged VCD, the GTKWave save file and the report into ``out_dir`` (created). With
    ``write_identical`` False, dumps that compare identical write nothing (``merged_vcd``,
    ``gtkw`` and ``report_path`` are None): a stress run that passed needs no triage files.
    WaveError on an unreadable dump or map, or a map naming a signal a dump does not have."""
    if core_period_ps <= 0:
        raise WaveError(f"core_period_ps must be positive, got {core_period_ps}")
    a, b = read_dump(model_vcd), read_dump(rtl_vcd)
    mapping = load_map(map_path) if map_path else None
    res = diff_dumps(a, b, mapping)
    text = report(res, core_period_ps, a=a, b=b, mapping=mapping, labels=("model", "rtl"))
    identical = res.identical and res.cut_ps is None   # a dump cut short is not a clean comparison
    if identical and not write_identical:
        return TriageResult(True, text, None, None, None, None, [], res.compared, None, res.exit_code)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if mapping is None:
        common = set(b.names())
        pairs = [(n, n) for n in a.names() if n in common]
    else:
        pairs = list(mapping.items())
    merged, gtkw, rpt = out / MERGED, out / GTKW, out / REPORT
    write_merged(a, b, pairs, merged, res.only_in_a, res.only_in_b)
    diverging = []
    for d in res.divergences:
        diverging += [f"model.{d.signal_a}", f"rtl.{d.signal_b}"]
    context = []
    for na, nb in _context(pairs, res):
        context += [f"model.{na}", f"rtl.{nb}"]
    first = res.first
    marker_ps = first.time_ps if first else (res.cut_ps or 0)
    write_triage(merged, diverging, marker_ps, gtkw, other_signals=context,
                 dump=read_dump(merged), window_ps=GTKW_WINDOW_CYCLES * core_period_ps)
    write_text_atomic(rpt, text + "\n")
    return TriageResult(identical, text, merged, gtkw, rpt, first,
                        res.divergences, res.compared, res.cut_ps, res.exit_code)


__all__ = ["TriageResult", "triage", "write_merged", "MERGED", "GTKW", "REPORT"]
