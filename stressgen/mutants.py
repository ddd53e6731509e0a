"""Injected-bug benchmark: does the stress flow catch each known RTL bug, and how fast?

    python -m stressgen.mutants --hw small --max-programs 200 [--bug NAME ...] [--out DIR]

For each bug of ``cocotb_tests.bugs.BUGS`` (or the ``--bug`` ones): build the buggy RTL (cached),
then run stress programs ``stressgen.gen.generate(seed, cfg)`` for seeds 0, 1, 2, ... through
``stressgen.runner.run_one(..., bugs=(bug,))`` until the first failing one or ``--max-programs``.
Clean-compared: a failing seed counts as a detection only if the same program passes on the
clean RTL (run once per seed and cached for the other bugs); a seed that fails on the clean RTL
too is skipped and counted.

Printed table, one row per bug: caught (yes/no), programs run to detection, seconds (program
runs only; the build time is its own column), the failing check and the first diverging
architectural signal (``Outcome.signal``, a model name), whether the bug's RTL signal
(``Bug.signal``, mapped through waves/arch_map.yaml) is among the signals that diverge at that
first divergence time, and the detecting seed. A JSON copy
goes to ``<out>/mutants.json``. Exit status 1 if a bug is not caught, 2 for a usage error.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cocotb_tests.bugs import BUGS, check_bugs
from cocotb_tests.build import build
from stressgen.gen import generate
from stressgen.runner import ARCH_MAP, run_one
from tpusim.arch.cliutil import user_errors
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import write_text_atomic
from waves.diff import diff_dumps, load_map
from waves.reader import read_dump

PROG = "python -m stressgen.mutants"
DEFAULT_OUT = Path("stress_runs/mutants")


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
        self.passed: dict[int, bool] = {}

    def passes(self, seed: int, prog) -> bool:
        if seed not in self.passed:
            o = run_one(prog, self.cfg, self.out / "clean" / str(seed), rtl=True, bugs=(), waves=self.waves)
            self.passed[seed] = o.passed
        return self.passed[seed]


def hunt(bug: str, cfg, max_programs: int, out: Path, clean: CleanCache, waves: bool = True,
         log=print) -> Row:
    """Run seeds 0.. on the RTL with ``bug`` until a clean-compared failure; return its Row."""
    info = build(cfg, waves="" if waves else None, bugs=(bug,))   # the arch dump needs no tracing
    skipped, secs = [], 0.0
    for n, seed in enumerate(range(max_programs), start=1):
        t = time.monotonic()
        prog = generate(seed, cfg)
        o = run_one(prog, cfg, out / bug / str(seed), rtl=True, bugs=(bug,), waves=waves)
        secs += time.monotonic() - t
        if o.passed:
            shutil.rmtree(out / bug / str(seed), ignore_errors=True)   # keep only the detecting run
            continue
        if not clean.passes(seed, prog):
            skipped.append(seed)
            log(f"  {bug}: seed {seed} fails on the clean RTL too ({o.reason}); skipped")
            continue
        group = first_group(o.files.get("model_vcd"), o.files.get("rtl_vcd"), ARCH_MAP) if waves else []
        return Row(bug, True, n, round(secs, 1), round(info.seconds, 1), seed, o.reason, o.signal,
                   tuple(_below_tb(r) for _, r in group), names_bug_signal(group, BUGS[bug].signal),
                   tuple(skipped))
    return Row(bug, False, max_programs, round(secs, 1), round(info.seconds, 1),
               clean_fail_seeds=tuple(skipped))


def format_table(rows: list[Row]) -> str:
    head = ("bug", "caught", "programs", "seconds", "build_s", "check", "first signal",
            "names bug signal", "seed")
    body = [(r.bug, "yes" if r.caught else "no", str(r.programs), f"{r.seconds:.1f}", f"{r.build_s:.1f}",
             r.reason or "-", r.signal or "-", ("yes" if r.names_bug else "no") if r.caught else "-",
             "-" if r.seed is None else str(r.seed)) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(b) for b in body])


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--hw", default="small", help="hardware config (default small)")
    ap.add_argument("--max-programs", type=int, default=200, help="programs per bug (default 200)")
    ap.add_argument("--bug", action="append", default=[], metavar="NAME",
                    help="only this bug (repeatable; default: every bug in cocotb_tests/bugs.py)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"run folders (default {DEFAULT_OUT})")
    ap.add_argument("--no-waves", action="store_true", help="skip the waveform comparison")
    return ap


@user_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if a.max_programs < 1:
        raise MutantsError(f"--max-programs must be >= 1, got {a.max_programs}")
    bugs = [b for b in BUGS if b in check_bugs(a.bug)] if a.bug else list(BUGS)
    cfg = load_config(a.hw)
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    clean = CleanCache(cfg, out, not a.no_waves)
    rows = []
    for bug in bugs:
        print(f"[mutants] {bug}: up to {a.max_programs} programs on {cfg.name}", file=sys.stderr, flush=True)
        row = hunt(bug, cfg, a.max_programs, out, clean, waves=not a.no_waves,
                   log=lambda s: print(s, file=sys.stderr, flush=True))
        print(f"[mutants] {bug}: {'caught' if row.caught else 'NOT caught'} after {row.programs} "
              f"program(s), {row.seconds:.1f} s", file=sys.stderr, flush=True)
        rows.append(row)
    print(format_table(rows))
    write_text_atomic(out / "mutants.json", json.dumps([asdict(r) for r in rows], indent=1))
    missed = [r.bug for r in rows if not r.caught]
    if missed:
        print(f"not caught within {a.max_programs} programs: {', '.join(missed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
