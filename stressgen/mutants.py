"""Mutation benchmark: does the stress flow catch known and random RTL bugs, and how fast?

    python -m stressgen.mutants --hw small --max-programs 200 [--bug NAME ...] [--no-bugs]
        [--random N --mseed S | --site KEY ...] [--invalid-rate R] [--no-waves] [--out DIR]

Programs: stress programs ``stressgen.gen.generate(seed, cfg, invalid_rate)`` for seeds 0, 1,
2, ... through ``stressgen.runner.run_one`` until the first failing one or ``--max-programs``.
The invalid rate defaults to MUTANT_INVALID_RATE (0.5, not the campaign's 0.05): an error
checker's path (device error x opcode x field, bins ``path_*``, stressgen.coverage.path_bin) is
one of about 60, each drawn about equally often (stressgen.invalid), and each needs a few
invalid programs to be seen within 200. Clean-compared: a failing seed counts
as a detection only if the same program passes on the clean RTL (run once per seed and cached);
a seed that fails on the clean RTL too is skipped and counted.

Hand-made bugs (``cocotb_tests.bugs.BUGS``, or the ``--bug`` ones; ``--no-bugs``: none): the
buggy RTL is built with its ``TPU_BUG_*`` define (cached). Printed table, one row per bug:
caught (yes/no), programs run to detection, seconds (program runs only; the build time is its
own column), the failing check and the first diverging architectural signal
(``Outcome.signal``, a model name), whether the bug's RTL signal (``Bug.signal``, mapped through
waves/arch_map.yaml) is among the signals that diverge at that first divergence time, and the
detecting seed. A JSON copy goes to ``<out>/mutants.json``.

Random operator mutants (``--random N``, drawn with ``--mseed``; or the ``--site`` keys):
stressgen.mutate_rtl picks the sites, stressgen.rtl_mutants builds each tree and hunts it.
Report: mutants built, not built, caught, programs to detection (median), every survivor's site
(file:line, original -> mutated text) and the score over the mutants not reviewed equivalent
(``--equivalents``, stressgen/equivalent_mutants.yaml), plus the error-path bins
(stressgen.coverage.ERROR_BINS, EDGE_BINS) of the seeds the longest hunt ran. JSON:
``<out>/random.json`` (rewritten after every mutant).

Exit status 1 if a bug is not caught or a random mutant survives without being reviewed
equivalent, 2 for a usage error.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from cocotb_tests.bugs import BUGS, check_bugs
from cocotb_tests.build import build, rtl_dir
from stressgen.coverage import EDGE_BINS, ERROR_BINS
from stressgen.gen import generate
from stressgen.mutate_rtl import Site, catalogue, load_equivalents, pick
from stressgen.rtl_mutants import (
    EQUIVALENTS,
    MutantRow,
    format_report,
    hunt_site,
    load_rows,
    rows_json,
    rtl_tree,
    summarise,
)
from stressgen.runner import ARCH_MAP, run_one
from stressgen.spec import DEFAULT_INVALID_RATE
from tpusim.arch.cliutil import user_errors
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import write_text_atomic
from waves.diff import diff_dumps, load_map
from waves.reader import read_dump

PROG = "python -m stressgen.mutants"
#: --invalid-rate default (module docstring)
MUTANT_INVALID_RATE = 0.5
DEFAULT_OUT = Path("stress_runs/mutants")
PATH_BINS = ERROR_BINS + EDGE_BINS


class MutantsError(TpuError):
    """Bad command-line input of the benchmark (the message names the value)."""


@dataclass
class Row:
    """Result for one bug. ``programs``: programs run on the buggy RTL (to detection, or all);
    ``seconds``: wall time of those runs (build excluded); ``build_s``: buggy build wall time
    (0 when cached); ``reason``/``signal``: the detecting Outcome's failed check and first
    diverging waveform signal (model name, None if the waves agreed or were not compared);
    ``first_group``: RTL names of every signal diverging at that same first time;
    ``names_bug``: the bug's signal (``Bug.signal``) is among them; ``clean_fail_seeds``: seeds
    skipped because they fail on the clean RTL too."""
    bug: str
    caught: bool
    programs: int
    seconds: float
    build_s: float
    seed: int | None = None
    reason: str = ""
    signal: str | None = None
    first_group: tuple = ()
    names_bug: bool = False
    clean_fail_seeds: tuple = ()


# ------------------------------------------------------------------------------- signal matching
def _below_tb(name: str) -> str:
    """'tb_top.u_tpu.u_mxu.x' -> 'u_tpu.u_mxu.x' (RTL arch-waveform names are below tb_top)."""
    return name[len("tb_top."):] if name.startswith("tb_top.") else name


def first_group(model_vcd, rtl_vcd, map_path) -> list[tuple[str, str]]:
    """[(model name, RTL name)] of every mapped signal that diverges at the first divergence
    time of the two architectural dumps ([] if they agree or a dump is missing)."""
    if not (model_vcd and rtl_vcd and Path(model_vcd).exists() and Path(rtl_vcd).exists()):
        return []
    res = diff_dumps(read_dump(model_vcd), read_dump(rtl_vcd), load_map(map_path))
    if res.first is None:
        return []
    return [(d.signal_a, d.signal_b) for d in res.divergences if d.time_ps == res.first.time_ps]


def names_bug_signal(group: list[tuple[str, str]], bug_signal: str) -> bool:
    """The bug's RTL signal (``Bug.signal``) is among the signals of the first divergence."""
    return any(_below_tb(rtl) == bug_signal for _, rtl in group)


# ------------------------------------------------------------------------------- the benchmark
class CleanCache:
    """Outcome of each seed on the clean RTL, run on demand (shared by all bugs)."""

    def __init__(self, cfg, out: Path, waves: bool):
        self.cfg, self.out, self.waves = cfg, out, waves
        self.src = rtl_dir()                  # the clean tree, whatever a mutant sets later
        self.passed: dict[int, bool] = {}

    def passes(self, seed: int, prog) -> bool:
        if seed not in self.passed:
            with rtl_tree(self.src):
                o = run_one(prog, self.cfg, self.out / "clean" / str(seed), rtl=True, bugs=(),
                            waves=self.waves)
            self.passed[seed] = o.passed
        return self.passed[seed]


def run_seeds(label: str, bugs, cfg, max_programs: int, out: Path, clean: CleanCache,
              waves: bool = True, invalid_rate: float = MUTANT_INVALID_RATE, log=print):
    """Run the programs of seeds 0, 1, ... (``generate(seed, cfg, invalid_rate)``) on the RTL
    as currently built (``bugs`` compiled in, the source folder of cocotb_tests.build) until the
    first one that fails there but passes on the clean RTL, at most ``max_programs``.
    Returns (programs run, their seconds, detecting seed or None, its Outcome or None,
    seeds skipped because they fail on the clean RTL too). Only the detecting run folder
    ``out/<label>/<seed>`` is kept."""
    skipped, secs = [], 0.0
    for n, seed in enumerate(range(max_programs), start=1):
        t = time.monotonic()
        prog = generate(seed, cfg, invalid_rate=invalid_rate)
        o = run_one(prog, cfg, out / label / str(seed), rtl=True, bugs=tuple(bugs), waves=waves)
        secs += time.monotonic() - t
        if o.passed:
            shutil.rmtree(out / label / str(seed), ignore_errors=True)   # keep only the detecting run
            continue
        if not clean.passes(seed, prog):
            skipped.append(seed)
            log(f"  {label}: seed {seed} fails on the clean RTL too ({o.reason}); skipped")
            continue
        return n, secs, seed, o, skipped
    return max_programs, secs, None, None, skipped


def hunt(bug: str, cfg, max_programs: int, out: Path, clean: CleanCache, waves: bool = True,
         log=print, invalid_rate: float = MUTANT_INVALID_RATE) -> Row:
    """Run seeds 0.. on the RTL with ``bug`` until a clean-compared failure; return its Row."""
    info = build(cfg, waves="" if waves else None, bugs=(bug,))   # the arch dump needs no tracing
    n, secs, seed, o, skipped = run_seeds(bug, (bug,), cfg, max_programs, out, clean, waves,
                                          invalid_rate, log)
    if o is None:
        return Row(bug, False, n, round(secs, 1), round(info.seconds, 1), clean_fail_seeds=tuple(skipped))
    group = first_group(o.files.get("model_vcd"), o.files.get("rtl_vcd"), ARCH_MAP) if waves else []
    return Row(bug, True, n, round(secs, 1), round(info.seconds, 1), seed, o.reason, o.signal,
               tuple(_below_tb(r) for _, r in group), names_bug_signal(group, BUGS[bug].signal),
               tuple(skipped))


def path_bins(cfg, n: int, invalid_rate: float) -> dict[str, int]:
    """Programs among seeds 0 .. n-1 hitting each ERROR_BINS / EDGE_BINS bin and each checker
    path bin (``path_*``) hit at all (static bins only)."""
    hits = Counter()
    for seed in range(n):
        hits.update(b for b in generate(seed, cfg, invalid_rate=invalid_rate).bins
                    if b in PATH_BINS or b.startswith("path_"))
    return {b: hits[b] for b in PATH_BINS} | {b: hits[b] for b in sorted(hits) if b.startswith("path_")}


def format_path_bins(hits: dict[str, int], n: int, invalid_rate: float) -> str:
    cells = ", ".join(f"{b} {k}" for b, k in hits.items())
    paths = [k for b, k in hits.items() if b.startswith("path_")]
    least = f"; {len(paths)} checker paths, each hit {min(paths)} to {max(paths)} times" if paths else ""
    return f"error-path bins of seeds 0..{n - 1} (invalid rate {invalid_rate:g}): {cells}{least}"


def format_table(rows: list[Row]) -> str:
    head = ("bug", "caught", "programs", "seconds", "build_s", "check", "first signal",
            "names bug signal", "seed")
    body = [(r.bug, "yes" if r.caught else "no", str(r.programs), f"{r.seconds:.1f}", f"{r.build_s:.1f}",
             r.reason or "-", r.signal or "-", ("yes" if r.names_bug else "no") if r.caught and r.signal else "-",
             "-" if r.seed is None else str(r.seed)) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--hw", default="small", help="hardware config (default small)")
    ap.add_argument("--max-programs", type=int, default=200, help="programs per bug / mutant (default 200)")
    ap.add_argument("--bug", action="append", default=[], metavar="NAME",
                    help="only this bug (repeatable; default: every bug in cocotb_tests/bugs.py)")
    ap.add_argument("--no-bugs", action="store_true", help="skip the hand-made bugs")
    ap.add_argument("--random", type=int, default=0, metavar="N",
                    help="also N random RTL operator mutants (stressgen.mutate_rtl; default 0)")
    ap.add_argument("--mseed", type=int, default=1, help="seed of the random mutant draw (default 1)")
    ap.add_argument("--site", action="append", default=[], metavar="KEY",
                    help="this mutant site (Site.key, e.g. 'tpu_mxu_check.sv:38:62 rel'; repeatable) "
                         "instead of a random draw")
    ap.add_argument("--equivalents", type=Path, default=EQUIVALENTS,
                    help="reviewed equivalent mutants (YAML; default stressgen/equivalent_mutants.yaml)")
    ap.add_argument("--invalid-rate", type=float, default=MUTANT_INVALID_RATE,
                    help=f"share of invalid programs (default {MUTANT_INVALID_RATE}; a campaign's is "
                         f"{DEFAULT_INVALID_RATE})")
    ap.add_argument("--report", nargs="+", type=Path, metavar="JSON",
                    help="only print the report of earlier runs' random.json files (merged; "
                         "equivalents re-read)")
    ap.add_argument("--keep-builds", action="store_true", help="keep the mutants' Verilator builds")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"run folders (default {DEFAULT_OUT})")
    ap.add_argument("--no-waves", action="store_true", help="skip the waveform comparison")
    return ap


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _check_args(a) -> None:
    if a.max_programs < 1:
        raise MutantsError(f"--max-programs must be >= 1, got {a.max_programs}")
    if a.random < 0:
        raise MutantsError(f"--random must be >= 0, got {a.random}")
    if a.no_bugs and not a.random and not a.site and not a.report:
        raise MutantsError("--no-bugs leaves nothing to run: add --random N or --site KEY")
    if not 0.0 <= a.invalid_rate <= 1.0:
        raise MutantsError(f"--invalid-rate must be between 0 and 1, got {a.invalid_rate}")


def _sites(a) -> list[Site]:
    if a.site:
        cat = {s.key: s for s in catalogue(rtl_dir())}
        bad = [k for k in a.site if k not in cat]
        if bad:
            raise MutantsError(f"--site {bad[0]!r} is not a mutant site of {rtl_dir()} "
                               f"(keys look like {next(iter(cat))!r})")
        return [cat[k] for k in a.site]
    return pick(rtl_dir(), a.random, a.mseed) if a.random else []


def _bug_rows(a, bugs, cfg, out, clean) -> list[Row]:
    rows = []
    for bug in bugs:
        _err(f"[mutants] {bug}: up to {a.max_programs} programs on {cfg.name}")
        row = hunt(bug, cfg, a.max_programs, out, clean, waves=not a.no_waves, log=_err,
                   invalid_rate=a.invalid_rate)
        _err(f"[mutants] {bug}: {'caught' if row.caught else 'NOT caught'} after {row.programs} "
             f"program(s), {row.seconds:.1f} s")
        rows.append(row)
    return rows


def _random_rows(a, sites, cfg, out, clean) -> list[MutantRow]:
    eqs = load_equivalents(a.equivalents)
    rows = []

    def seeds(label, bugs, where):
        return run_seeds(label, bugs, cfg, a.max_programs, where, clean, not a.no_waves,
                         a.invalid_rate, _err)
    for k, site in enumerate(sites, start=1):
        _err(f"[mutants] random {k}/{len(sites)}: {site.describe()}")
        row = hunt_site(site, cfg, a.max_programs, out / "random", seeds, eqs, a.keep_builds)
        _err(f"[mutants]   {row.status} after {row.programs} program(s) ({row.reason or row.error or '-'})")
        rows.append(row)
        write_text_atomic(out / "random.json", json.dumps(rows_json(rows, a.max_programs), indent=1))
    return rows


@user_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    _check_args(a)
    if a.report:
        rows, budget = load_rows(a.report, load_equivalents(a.equivalents))
        print(format_report(rows, budget or a.max_programs))
        return 1 if summarise(rows)["gaps"] else 0
    bugs = [] if a.no_bugs else [b for b in BUGS if b in check_bugs(a.bug)] if a.bug else list(BUGS)
    sites = _sites(a)
    cfg = load_config(a.hw)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    clean = CleanCache(cfg, out, not a.no_waves)
    rows = _bug_rows(a, bugs, cfg, out, clean)
    if rows:
        print(format_table(rows))
        write_text_atomic(out / "mutants.json", json.dumps([asdict(r) for r in rows], indent=1))
    mrows = _random_rows(a, sites, cfg, out, clean)
    if mrows:
        print(format_report(mrows, a.max_programs))
        n = max(r.programs for r in mrows)
        print(format_path_bins(path_bins(cfg, n, a.invalid_rate), n, a.invalid_rate))
    missed = [r.bug for r in rows if not r.caught]
    if missed:
        _err(f"not caught within {a.max_programs} programs: {', '.join(missed)}")
    gaps = [r for r in mrows if r.status == "survived" and not r.equivalent]
    if gaps:
        _err(f"{len(gaps)} random mutant(s) survived {a.max_programs} programs and are not "
             f"reviewed equivalent (list: {a.equivalents})")
    return 1 if missed or gaps else 0


if __name__ == "__main__":
    sys.exit(main())
