"""Mutation score of the stress flow on random RTL operator mutants (stressgen.mutate_rtl).

``hunt_site(site, ...)``: write the mutant tree (a copy of ``rtl/`` with the one edit) under
``<out>/trees/<id>``, build it with Verilator (``cocotb_tests.build`` through ``TPU_RTL_DIR``;
its own build folder ``<cfg>-<hash>-src-<id>``, deleted afterwards unless ``keep_build``), then
run the stress programs of seeds 0, 1, ... (``stressgen.mutants.run_seeds``, clean-compared)
until the first failing one or ``max_programs``. A tree that does not build is "not built" (the
first error line of the Verilator log is kept), never a survivor.

``summarise(rows, equivalents)``: mutants drawn, built, not built, caught, equivalent (survivors
in the reviewed list, stressgen/equivalent_mutants.yaml), the score caught / (built -
equivalent) and the median programs to detection; ``format_report`` prints it with every
survivor's site (file:line, original -> mutated text) for a human to judge equivalent or a gap.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cocotb_tests.build import BUILD_ROOT, build, rtl_dir, tree_suffix
from stressgen.mutate_rtl import MutateError, Site, is_equivalent, write_tree
from tpusim.arch.errors import SimulationError

REPO = Path(__file__).resolve().parent.parent
EQUIVALENTS = REPO / "stressgen" / "equivalent_mutants.yaml"


@dataclass
class MutantRow:
    """Result of one random mutant. ``status``: "caught", "survived" or "not_built";
    ``programs``: programs run to detection (or all); ``seconds``: their wall time;
    ``build_s``: the build's; ``seed``/``reason``: the detecting program and its failed check;
    ``error``: first error line of a failed build; ``equivalent``: in the reviewed list."""
    id: str
    site: str              # Site.describe()
    key: str               # Site.key
    orig: str
    new: str
    status: str
    programs: int = 0
    seconds: float = 0.0
    build_s: float = 0.0
    seed: int | None = None
    reason: str = ""
    error: str = ""
    equivalent: bool = False
    clean_fail_seeds: tuple = field(default_factory=tuple)


def mutant_id(site: Site) -> str:
    """Folder-safe name of a site: 'tpu_mxu_check-l38c30-rel'."""
    return f"{Path(site.file).stem}-l{site.line}c{site.col}-{site.op}"


@contextlib.contextmanager
def rtl_tree(path: Path):
    """``TPU_RTL_DIR`` = ``path`` inside the block (cocotb_tests.build's source folder)."""
    saved = os.environ.get("TPU_RTL_DIR")
    os.environ["TPU_RTL_DIR"] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TPU_RTL_DIR", None)
        else:
            os.environ["TPU_RTL_DIR"] = saved


def build_error_line(msg: str) -> str:
    """The first ``%Error`` line of a Verilator build failure message (else its first line)."""
    m = re.search(r"^%Error.*$", msg, re.M)
    return (m.group() if m else msg.splitlines()[0])[:300]


def hunt_site(site: Site, cfg, max_programs: int, out: Path, run_seeds, equivalents=None,
              keep_build: bool = False) -> MutantRow:
    """Build and hunt one mutant (module docstring). ``run_seeds(label, bugs, out)`` is
    stressgen.mutants' seed loop bound to the campaign: (n, seconds, seed, outcome, skipped)."""
    mid = mutant_id(site)
    row = MutantRow(mid, site.describe(), site.key, site.orig, site.new, "not_built",
                    equivalent=is_equivalent(site, equivalents or {}))
    tree = write_tree(site, rtl_dir(), out / "trees" / mid)
    with rtl_tree(tree):
        try:
            info = build(cfg, waves="")
        except SimulationError as e:
            row.error = build_error_line(str(e))
            for d in BUILD_ROOT.glob(f"{cfg.name}-*{tree_suffix(tree)}"):     # the failed build's folder
                shutil.rmtree(d, ignore_errors=True)
            return row
        try:
            n, secs, seed, o, skipped = run_seeds(mid, (), out / "runs")
        finally:
            if not keep_build:
                shutil.rmtree(info.build_dir, ignore_errors=True)
    row.build_s, row.programs, row.seconds = round(info.seconds, 1), n, round(secs, 1)
    row.clean_fail_seeds = tuple(skipped)
    if o is not None:
        row.status, row.seed, row.reason = "caught", seed, o.reason
    else:
        row.status = "survived"
    return row


def summarise(rows: list[MutantRow]) -> dict:
    """Counts, score over non-equivalent built mutants and median programs to detection."""
    built = [r for r in rows if r.status != "not_built"]
    caught = [r for r in built if r.status == "caught"]
    equiv = [r for r in built if r.status == "survived" and r.equivalent]
    gaps = [r for r in built if r.status == "survived" and not r.equivalent]
    denom = len(built) - len(equiv)
    return {"drawn": len(rows), "built": len(built), "not_built": len(rows) - len(built),
            "caught": len(caught), "survived": len(built) - len(caught), "equivalent": len(equiv),
            "gaps": len(gaps), "score": round(len(caught) / denom, 4) if denom else None,
            "median_programs": statistics.median([r.programs for r in caught]) if caught else None,
            "max_programs_caught": max((r.programs for r in caught), default=None)}


def format_report(rows: list[MutantRow], max_programs: int) -> str:
    s = summarise(rows)
    score = "-" if s["score"] is None else f"{100 * s['score']:.1f} %"
    lines = [f"random RTL mutants: {s['drawn']} drawn, {s['built']} built, {s['not_built']} not built; "
             f"{s['caught']} caught within {max_programs} programs, {s['survived']} survived "
             f"({s['equivalent']} reviewed equivalent, {s['gaps']} gaps)",
             f"mutation score (caught / non-equivalent built): {score}; programs to detection: "
             f"median {s['median_programs']}, max {s['max_programs_caught']}"]
    for title, want in (("survivors (gaps: no program told them apart)", lambda r: not r.equivalent),
                        ("survivors reviewed equivalent (stressgen/equivalent_mutants.yaml)",
                         lambda r: r.equivalent)):
        sel = [r for r in rows if r.status == "survived" and want(r)]
        if sel:
            lines.append(title + ":")
            lines += [f"  {r.site}  [{r.key}]" for r in sel]
    nb = [r for r in rows if r.status == "not_built"]
    if nb:
        lines.append("not built:")
        lines += [f"  {r.site}: {r.error}" for r in nb]
    caught = [r for r in rows if r.status == "caught"]
    if caught:
        lines.append("caught (programs, seed, check):")
        lines += [f"  {r.site}: {r.programs}, seed {r.seed}, {r.reason}" for r in caught]
    return "\n".join(lines)


def rows_json(rows: list[MutantRow], max_programs: int) -> dict:
    """The random.json record: the program budget of the run and one dict per mutant."""
    return {"max_programs": int(max_programs), "mutants": [asdict(r) for r in rows]}


def load_rows(paths, equivalents) -> tuple:
    """(rows, program budget) of earlier runs' random.json files, the ``equivalent`` flags re-read
    from ``equivalents`` (a survivor reviewed since counts as equivalent; a later duplicate of a
    site replaces the earlier row); the budget is the largest recorded (None: files of before it
    was recorded, a bare list). Raises MutateError naming a file that is not such a record."""
    rows: dict[str, MutantRow] = {}
    budget = None
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
            if isinstance(data, dict):
                budget = max(budget or 0, int(data["max_programs"]))
                data = data["mutants"]
            got = [MutantRow(**{**d, "clean_fail_seeds": tuple(d.get("clean_fail_seeds", ()))}) for d in data]
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise MutateError(f"{p}: not a random.json of python -m stressgen.mutants "
                              f"({type(e).__name__}: {e})") from None
        for r in got:
            e = equivalents.get(r.key)
            r.equivalent = e is not None and e.orig == r.orig and e.new == r.new
            rows[r.key] = r
    return list(rows.values()), budget


__all__ = ["MutantRow", "hunt_site", "summarise", "format_report", "rows_json", "load_rows", "mutant_id",
           "rtl_tree", "EQUIVALENTS"]
