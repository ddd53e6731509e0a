"""``python -m stressgen run | replay | report``: random stress programs on golden, SimPy and RTL.

  run     --seed S --count N (0 <= S < 2**63, 1 <= N <= 10**9) [--hw small] [--jobs 2] [--db stress_runs/stress.db]
          [--scheduler tls://HOST:PORT [--tls-ca-file F --tls-cert F --tls-key F] [--connect-timeout 10]]
          [--no-rtl] [--bug NAME] [--bundles DIR] [--invalid-rate R=0.05] [--stop-after-fails K]
          [--timeout SECONDS] [--no-minimize] [--minimize-budget SECONDS] [--no-waves] [--quiet]
          Runs programs 0..N-1 of the campaign (program i has seed derive_seed(S, i), see
          stressgen/campaign.py) as Dask tasks: on a local cluster of --jobs worker processes
          (127.0.0.1 only) or on the cluster at --scheduler (stressgen/cluster.py); re-running
          the same command resumes it, two at once split the work. Prints the report.
  replay  --seed P [--hw small] [--bug NAME] [--invalid-rate R=0.05] [--no-rtl] [--out DIR]
          or --asm FILE (a saved program, e.g. a bundle's min/program.asm): runs one program,
          prints its outcome; --out keeps every file of the run (program.asm / .tpubin,
          model.vcd, rtl/arch.vcd, merged.vcd, triage.gtkw, divergence.txt, outcome.json).
  report  --db FILE [--campaign ID]: summary of the database (stressgen/report.py).

Exit status: 0 pass; 1 a program failed or (run, report) a coverage bin of
stressgen.coverage.ALL_BINS stayed empty; 2 a user error (one line on stderr); 130 Ctrl-C
(finished programs stay in the database: re-run to resume).
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import sys
from pathlib import Path

from cocotb_tests.bugs import check_bugs
from cocotb_tests.harness import run_rtl
from cocotb_tests.rtl_dump import SCOPED_VCD
from stressgen.campaign import (
    DEFAULT_INVALID_RATE,
    DEFAULT_MINIMIZE_BUDGET_S,
    DEFAULT_TIMEOUT_S,
    MAX_COUNT,
    MAX_SEED,
    RunSpec,
    prepare,
    run_campaign,
)
from stressgen.cluster import DEFAULT_CONNECT_TIMEOUT_S, ClusterSpec
from stressgen.db import DbError, ResultsDb
from stressgen.gen import generate
from stressgen.program import StressError, parse_asm
from stressgen.report import render, summarize
from stressgen.runner import prebuild, run_one
from stressgen.validate import validate
from tpusim.arch.cliutil import EXIT_INTERRUPTED, user_errors, writable_dir
from tpusim.arch.config import load_config
from tpusim.arch.errors import IsaError, TpuError
from tpusim.arch.fileio import write_text_atomic

PROG = "stressgen"
DEFAULT_HOME = Path("stress_runs")


class StressCliError(TpuError):
    """A bad command-line value."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run (or resume) a campaign")
    r.add_argument("--seed", type=int, required=True, help="campaign root seed")
    r.add_argument("--count", type=int, required=True, help="programs in the campaign")
    r.add_argument("--hw", default="small", help="hardware config name or YAML path (default small)")
    r.add_argument("--jobs", type=int, default=None,
                   help="worker processes of the local Dask cluster (default 2; not with --scheduler)")
    r.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on the Dask cluster at ADDRESS (tcp://HOST:PORT or tls://HOST:PORT) instead of "
                        "a local cluster")
    r.add_argument("--tls-ca-file", default=None, help="CA certificate of a tls:// cluster")
    r.add_argument("--tls-cert", default=None, help="client certificate (PEM) for a tls:// cluster")
    r.add_argument("--tls-key", default=None, help="client private key (PEM) for a tls:// cluster")
    r.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S,
                   help=f"seconds to reach --scheduler (default {DEFAULT_CONNECT_TIMEOUT_S:g})")
    r.add_argument("--db", type=Path, default=DEFAULT_HOME / "stress.db", help="results database")
    r.add_argument("--no-rtl", action="store_true", help="golden vs SimPy only")
    r.add_argument("--bug", default=None, help="compile an injected RTL bug in (cocotb_tests/bugs.py)")
    r.add_argument("--bundles", type=Path, default=None, help="failure bundles (default: beside the DB)")
    r.add_argument("--invalid-rate", type=float, default=DEFAULT_INVALID_RATE,
                   help=f"fraction of invalid programs (default {DEFAULT_INVALID_RATE})")
    r.add_argument("--stop-after-fails", type=int, default=None, metavar="K")
    r.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per program")
    r.add_argument("--no-minimize", action="store_true", help="bundle failures without minimising")
    r.add_argument("--minimize-budget", type=float, default=DEFAULT_MINIMIZE_BUDGET_S,
                   help="seconds the minimiser may spend per failing program")
    r.add_argument("--no-waves", action="store_true", help="skip the waveform dumps and comparison")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    q = sub.add_parser("replay", help="run one program from its seed (or a saved .asm)")
    q.add_argument("--seed", type=int, default=None)
    q.add_argument("--asm", type=Path, default=None, help="a program saved by stressgen (program.asm)")
    q.add_argument("--hw", default="small")
    q.add_argument("--bug", default=None)
    q.add_argument("--invalid-rate", type=float, default=DEFAULT_INVALID_RATE,
                   help=f"as the campaign's --invalid-rate (default {DEFAULT_INVALID_RATE})")
    q.add_argument("--no-rtl", action="store_true")
    q.add_argument("--no-waves", action="store_true")
    q.add_argument("--out", type=Path, default=None, help="run folder (default stress_runs/replay/<seed>)")
    q.add_argument("--dump-scope", action="append", default=[], metavar="SCOPE",
                   help="also dump every RTL signal under this hierarchical prefix (repeatable, e.g. "
                        "tb_top.u_tpu.u_ddr_arb) to <out>/rtl_full/waves.vcd, model time base")
    q.add_argument("--dump-window", default=None, metavar="T0:T1",
                   help="limit that dump to model time [T0, T1) in ps (e.g. 120000:130000)")
    s = sub.add_parser("report", help="summarise a results database")
    s.add_argument("--db", type=Path, default=DEFAULT_HOME / "stress.db")
    s.add_argument("--campaign", default=None, help="only this campaign id")
    return p


def _check_common(a) -> None:
    if not 0.0 <= a.invalid_rate <= 1.0:
        raise StressCliError(f"--invalid-rate must be between 0 and 1, got {a.invalid_rate}")
    load_config(a.hw)                          # ConfigError naming the bad --hw
    if a.bug is not None:
        check_bugs((a.bug,))                   # ConfigError naming the unknown bug
        if a.no_rtl:
            raise StressCliError(f"--bug {a.bug} injects an RTL bug: it needs the RTL (drop --no-rtl)")


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise StressCliError(f"--seed must be non-negative, got {seed}")
    if seed >= MAX_SEED:
        raise StressCliError(f"--seed must be below 2**63 = {MAX_SEED} (a 63-bit seed), got {seed}")


def _check_run(a) -> None:
    if a.count < 1:
        raise StressCliError(f"--count must be at least 1, got {a.count}")
    if a.count > MAX_COUNT:
        raise StressCliError(f"--count must be at most {MAX_COUNT} (10**9) per campaign, got {a.count}")
    _check_seed(a.seed)
    if a.jobs is not None and a.scheduler is not None:
        raise StressCliError(f"--jobs {a.jobs} sizes the local cluster: with --scheduler the cluster's "
                             "workers decide (drop --jobs)")
    _cluster(a).check()                        # --jobs, --connect-timeout, TLS files
    if a.timeout <= 0:
        raise StressCliError(f"--timeout must be positive seconds, got {a.timeout}")
    if a.minimize_budget <= 0:
        raise StressCliError(f"--minimize-budget must be positive seconds, got {a.minimize_budget}")
    if a.stop_after_fails is not None and a.stop_after_fails < 1:
        raise StressCliError(f"--stop-after-fails must be at least 1, got {a.stop_after_fails}")
    _check_common(a)


def _cluster(a) -> ClusterSpec:
    return ClusterSpec(jobs=2 if a.jobs is None else a.jobs, scheduler=a.scheduler, tls_ca_file=a.tls_ca_file,
                       tls_cert=a.tls_cert, tls_key=a.tls_key, connect_timeout_s=a.connect_timeout)


def _writable_dir(p: Path, what: str) -> Path:
    return writable_dir(p, what, StressCliError)


def _sigterm_to_interrupt() -> None:
    def handler(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


def cmd_run(a) -> int:
    _check_run(a)
    db_path = a.db.resolve()
    _sigterm_to_interrupt()
    with ResultsDb(db_path) as db:
        bundles = _writable_dir(a.bundles or db_path.parent / "bundles", "bundle folder")
        spec = RunSpec(hw=a.hw, root_seed=a.seed, rtl=not a.no_rtl, bug=a.bug, invalid_rate=a.invalid_rate,
                       bundle_root=str(bundles), work_root=str(db_path.parent / "work"),
                       timeout_s=a.timeout, minimize=not a.no_minimize,
                       minimize_budget_s=a.minimize_budget, waves=not a.no_waves)
        # RTL build, before any program's timeout starts (a remote cluster's workers build their own)
        digest = prepare(spec, build=a.scheduler is None)
        cluster = _cluster(a)
        try:
            st = run_campaign(spec, a.count, cluster.jobs, db, a.stop_after_fails,
                              progress=not a.quiet, cfg_digest=digest, cluster=cluster)
        except KeyboardInterrupt:
            n = len(db.done_indices(spec.campaign(digest).id))
            print(f"{PROG}: interrupted: {n} of {a.count} programs are recorded in {db_path}; "
                  "run the same command again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
        summaries = summarize(db, st.campaign_id)
    print(f"this run: {st.finished} programs in {st.wall_s:.1f} s ({st.skipped_done} already done)"
          + ("; stopped after --stop-after-fails" if st.stopped_early else ""))
    for s in summaries:
        print(render(s))
    return 0 if summaries and summaries[0].passed and not st.stopped_early else 1


def _read_asm_text(path: Path) -> str:
    """The text of ``path``; StressCliError naming the file (and line) if unreadable or not UTF-8."""
    if not path.is_file():
        raise StressCliError(f"--asm {path}: no such file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise StressCliError(f"--asm {path}: cannot read it ({e.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise StressCliError(f"--asm {path}: line {line}: not a text program (byte {data[e.start]:#04x} "
                             f"at offset {e.start} is not UTF-8)") from None


def _load_asm(path: Path, hw: str):
    """Parse a saved program; StressCliError (one line naming the file and line) if it cannot be
    read or parsed, has no instruction or no HALT."""
    text = _read_asm_text(path)
    try:
        prog = parse_asm(text)
    except IsaError as e:
        raise StressCliError(f"--asm {path}: {e}") from None
    code_lines = [n for n, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.strip().startswith("#")]
    if not prog.instrs:
        raise StressCliError(f"--asm {path}: line {len(text.splitlines()) or 1}: no instructions "
                             "(a stress program is instruction lines ending with HALT)")
    if not any(getattr(i, "op", "") == "HALT" for i in prog.instrs):
        raise StressCliError(f"--asm {path}: line {code_lines[-1]}: the program has no HALT "
                             "(its last instruction must be HALT)")
    if prog.hw != hw and Path(hw).stem != prog.hw:
        raise StressCliError(f"--asm {path}: program is for hw {prog.hw!r}, not --hw {hw!r}")
    return prog


def _classify_user_program(prog, cfg, path: Path) -> None:
    """A hand-written program that parses but fails ``validate`` is run as an invalid program
    (``prog.invalid`` = the StressError's kind, "user" if it has none): the assembler must refuse
    it and SimPy and the RTL must flag it alike. Prints the refusal, or a warning when a valid
    program has no output region."""
    if prog.invalid:
        return
    try:
        validate(prog, cfg)
    except StressError as e:
        prog.invalid = e.kind or "user"
        print(f"--asm {path}: invalid program ({prog.invalid}), the assembler refuses it: {e}")
        return
    if not prog.outputs:
        print(f"{PROG}: warning: --asm {path}: no output regions: only retire times, counters and "
              "waves are compared", file=sys.stderr)


def cmd_replay(a) -> int:
    _check_common(a)
    _parse_window(a.dump_window)      # refuse a bad window before any run
    if (a.seed is None) == (a.asm is None):
        raise StressCliError("replay needs exactly one of --seed P or --asm FILE")
    cfg = load_config(a.hw)
    if a.asm is not None:
        prog = _load_asm(a.asm, a.hw)
        _classify_user_program(prog, cfg, a.asm)
    else:
        _check_seed(a.seed)
        prog = generate(a.seed, cfg, invalid_rate=a.invalid_rate)
    out = _writable_dir(a.out or DEFAULT_HOME / "replay" / str(prog.seed), "--out")
    bugs = (a.bug,) if a.bug else ()
    if not a.no_rtl:
        prebuild(cfg, bugs, not a.no_waves)
    o = run_one(prog, cfg, out, rtl=not a.no_rtl, bugs=bugs, waves=not a.no_waves,
                phase=lambda p: print(f"  {p} ...", file=sys.stderr))
    print(f"seed {prog.seed} on {a.hw}{' bug ' + a.bug if a.bug else ''}: {len(prog.instrs)} instructions"
          + (f", invalid ({prog.invalid})" if prog.invalid else ""))
    print("timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in o.timings_s.items()))
    print(f"verdict: {o.status.upper()}" + (f" ({o.reason}" + (f", signal {o.signal}" if o.signal else "") + ")"
                                             if not o.passed else ""))
    if o.first_divergence:
        print(o.first_divergence)
        write_text_atomic(out / "divergence.txt", o.first_divergence + "\n")
    if a.dump_scope or a.dump_window:
        print(_scoped_dump(a, cfg, out, bugs))
    print(f"files in {out}")
    return 0 if o.passed else 1


def _parse_window(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        t0, t1 = (int(v) for v in text.split(":"))
    except ValueError:
        raise StressCliError(f"--dump-window must be T0:T1 in ps (integers), got {text!r}") from None
    if not 0 <= t0 < t1:
        raise StressCliError(f"--dump-window needs 0 <= T0 < T1, got {text!r}")
    return t0, t1


def _scoped_dump(a, cfg, out: Path, bugs) -> str:
    """Run the replayed program once more on the RTL with a full dump of the requested scopes
    and window (tracing build); the line to print: the VCD's path, or why there is none (the
    run ended before the window). WaveError for a scope that matches no RTL scope."""
    if a.no_rtl:
        raise StressCliError("--dump-scope / --dump-window dump the RTL: drop --no-rtl")
    window = _parse_window(a.dump_window)
    res = run_rtl(out / "program.tpubin", cfg, {}, out / "rtl_full", waves="vcd", bugs=tuple(bugs),
                  dump_scopes=a.dump_scope or None, dump_window_ps=window)
    path = res.out_dir / SCOPED_VCD
    if path.exists():
        return f"scoped RTL dump: {path}"
    end = res.raw.get("halted_o_time_ps")
    ended = f"the run ended at {end} ps" if end is not None else f"the run ended ({res.status})"
    where = f", before the window [{window[0]}, {window[1]})" if window else ""
    return f"no dump: {ended}{where}"


def cmd_report(a) -> int:
    with ResultsDb(a.db, read_only=True) as db:
        sums = summarize(db, a.campaign)
    if not sums:
        raise DbError(f"{a.db}: no campaign" + (f" {a.campaign!r}" if a.campaign else "") + " in this database")
    print("\n\n".join(render(s) for s in sums))
    return 0 if all(s.passed for s in sums) else 1


@user_errors(PROG)
def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        return {"run": cmd_run, "replay": cmd_replay, "report": cmd_report}[a.cmd](a)
    except BrokenPipeError:            # e.g. `stressgen report | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except sqlite3.DatabaseError as e:  # damage past the pages the open-time checks read
        raise DbError(f"{getattr(a, 'db', None) or 'results database'}: not a readable stressgen results "
                      f"database ({e}); it is damaged: restore it or start a new one") from None


__all__ = ["main"]
