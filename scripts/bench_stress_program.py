#!/usr/bin/env python3
"""Per-program cost of a stress campaign: where one program's time goes, and programs per hour.

    python scripts/bench_stress_program.py [--count 30] [--hw small] [--seed 1] [--jobs 1,2]
                                           [--campaign-count 100] [--modes fresh,server,server-nowaves]
                                           [--bug addr36] [--skip-campaign]

Modes: ``fresh`` = one simulator process per program (``STRESS_RTL_SERVER=0``, how campaigns ran
before the RTL server); ``server`` = the worker's RTL server (cocotb_tests/rtl_server.py, the
default); ``server-nowaves`` = the server without waveform dumps and comparison (``--no-waves``,
for scale only: it drops the waveform check).

Part 1, ``run_one`` directly in this process on the first --count programs of campaign --seed
(the campaign's own seeds): the mean milliseconds per program of each step:
  generate, assemble, golden, simpy (with its VCD when waves are on), simpy VCD (the part of
  simpy that writes the VCD: simpy again without it, subtracted), rtl start (fresh: process start
  and exit, the RTL step less the simulation; server: the server's start, divided over the
  programs), rtl run (reset to halt, rtl_result.json's sim_wall_s; the arch VCD is written here),
  rtl host (server: the RTL step less the simulation: fork, files in and out), waves (dump
  comparison), outcome (outcome.json), cleanup (the campaign removes a passing run folder), db
  (one ResultsDb.record), and the sum, with programs per hour of one worker from it.
Part 2 (unless --skip-campaign): ``python -m stressgen run --count N --jobs J --no-minimize``
(N = --campaign-count)
per mode and J, fresh database each: programs per hour over the session (the database's
sessions table: first program handed out to last recorded) and the command's wall time.
Part 3 (--bug NAME): 3 failing programs on that injected bug through the campaign's
``execute_program`` (no minimisation): run steps, bundle write, and what the bundle holds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cocotb_tests import rtl_server
from stressgen.bundle import remove_tree
from stressgen.campaign import execute_program
from stressgen.db import ProgramRow, ResultsDb
from stressgen.gen import generate
from stressgen.runner import RTL_SERVER_ENV, RTL_WAVES, prebuild, run_one
from stressgen.spec import RunSpec, derive_seed
from tpusim.arch.config import load_config
from tpusim.sim import run_binary

REPO = Path(__file__).resolve().parent.parent
STEPS = ("generate", "assemble", "golden", "simpy", "simpy VCD", "rtl start", "rtl run", "rtl host",
         "waves", "outcome", "cleanup", "db")


def _mode_env(mode: str) -> None:
    os.environ[RTL_SERVER_ENV] = "0" if mode == "fresh" else "1"


def _simpy_vcd_s(prog, cfg, out: Path, with_vcd_s: float) -> float:
    """The VCD's share of the simpy step: the same run again without the VCD, subtracted."""
    t = time.perf_counter()
    run_binary(prog.to_binary(cfg), cfg, {}, vcd=None, keep_ddr=True)
    return max(0.0, with_vcd_s - (time.perf_counter() - t))


def _record(db: ResultsDb, cid: str, session: int, idx: int, prog, o, hw: str) -> float:
    row = ProgramRow(idx=idx, seed=prog.seed, hw=hw, bug=None, status=o.status, reason=o.reason,
                     signal=o.signal, divergence=o.first_divergence, bins={**prog.bins, **o.bins},
                     timings=dict(o.timings_s), invalid=prog.invalid, n_instrs=len(prog.instrs))
    t = time.perf_counter()
    db.record(cid, session, row)
    return time.perf_counter() - t


def direct(mode: str, a, work: Path) -> dict:
    """Part 1 for one mode: step -> list of seconds per program."""
    _mode_env(mode)
    cfg = load_config(a.hw)
    waves = mode != "server-nowaves"
    prebuild(cfg, (), waves)
    steps = {s: [] for s in STEPS}
    start_s = 0.0
    if mode != "fresh":
        rtl_server.close_shared()
        t = time.perf_counter()
        rtl_server.shared(cfg, (), RTL_WAVES if waves else False).wait_ready()
        start_s = time.perf_counter() - t
    spec = RunSpec(hw=a.hw, root_seed=a.seed, invalid_rate=0.05, waves=waves)
    with ResultsDb(work / f"{mode}.db") as db:
        cid = db.ensure_campaign(spec.campaign("bench"))
        session = db.start_session(cid, 1)
        for i in range(a.count):
            seed = derive_seed(a.seed, i)
            t = time.perf_counter()
            prog = generate(seed, cfg, invalid_rate=spec.invalid_rate)
            steps["generate"].append(time.perf_counter() - t)
            run_dir = work / mode / str(seed)
            t = time.perf_counter()
            o = run_one(prog, cfg, run_dir, rtl=True, waves=waves)
            total = time.perf_counter() - t
            if not o.passed:
                print(f"  {mode}: program {i} seed {seed}: {o.status} {o.reason}", file=sys.stderr)
            ts = o.timings_s
            sim_s = json.loads((run_dir / "rtl" / "rtl_result.json").read_text()).get("sim_wall_s", 0.0)
            steps["assemble"].append(ts.get("assemble", 0.0) + ts.get("assembler", 0.0))
            steps["golden"].append(ts.get("golden", 0.0))
            steps["simpy"].append(ts.get("simpy", 0.0))
            vcd_s = _simpy_vcd_s(prog, cfg, run_dir, ts.get("simpy", 0.0)) if waves and not prog.invalid else 0.0
            steps["simpy VCD"].append(vcd_s)
            rtl_s = ts.get("rtl", 0.0)
            steps["rtl run"].append(sim_s)
            steps["rtl start"].append(rtl_s - sim_s if mode == "fresh" else start_s / a.count)
            steps["rtl host"].append(0.0 if mode == "fresh" else rtl_s - sim_s)
            steps["waves"].append(ts.get("waves", 0.0))
            steps["outcome"].append(max(0.0, total - sum(ts.values())))    # outcome.json and checks
            t = time.perf_counter()
            remove_tree(run_dir)
            steps["cleanup"].append(time.perf_counter() - t)
            steps["db"].append(_record(db, cid, session, i, prog, o, a.hw))
    rtl_server.close_shared()
    return steps


def _print_direct(results: dict, count: int) -> None:
    modes = list(results)
    print(f"\nPart 1: run_one directly, {count} programs, mean ms per program (simpy VCD is part of simpy)")
    print(f"{'step':<12}" + "".join(f"{m:>16}" for m in modes))
    for s in STEPS:
        print(f"{s:<12}" + "".join(f"{statistics.mean(results[m][s]) * 1000:16.1f}" for m in modes))
    totals = {m: sum(statistics.mean(v) for k, v in results[m].items() if k != "simpy VCD") for m in modes}
    print(f"{'total':<12}" + "".join(f"{totals[m] * 1000:16.1f}" for m in modes))
    print(f"{'programs/h':<12}" + "".join(f"{3600 / totals[m]:16,.0f}" for m in modes) + "   (1 worker)")


def campaign(mode: str, jobs: int, a, work: Path) -> tuple[float, float, int]:
    """Part 2: (programs per hour over the session, command wall seconds, failing programs)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env[RTL_SERVER_ENV] = "0" if mode == "fresh" else "1"
    db = work / f"c-{mode}-{jobs}.db"
    cmd = [sys.executable, "-m", "stressgen", "run", "--seed", str(a.seed), "--count", str(a.campaign_count),
           "--hw", a.hw, "--jobs", str(jobs), "--db", str(db), "--no-minimize", "--quiet"]
    if mode == "server-nowaves":
        cmd.append("--no-waves")
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    with ResultsDb(db) as d:
        (s,) = d.sessions()
        fails = sum(r["status"] != "pass" for r in d.programs())
    if p.returncode not in (0, 1):
        sys.exit(f"stressgen run failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return s["programs"] / (s["last"] - s["started"]) * 3600, wall, fails


def bug_bundles(a, work: Path) -> None:
    """Part 3: failing programs on an injected bug: steps, bundle, bundle contents."""
    spec = RunSpec(hw=a.hw, root_seed=a.seed, bug=a.bug, minimize=False, invalid_rate=0.0,
                   bundle_root=str(work / "bundles"), work_root=str(work / "bugwork"))
    prebuild(load_config(a.hw), spec.bugs, True)
    print(f"\nPart 3: injected bug {a.bug}, execute_program (no minimisation)")
    found = 0
    for i in range(60):
        t = time.perf_counter()
        row = execute_program(spec, "bench", i, derive_seed(a.seed, i))
        wall = time.perf_counter() - t
        if row.status == "pass":
            continue
        run_s = sum(v for k, v in row.timings.items() if k != "minimize")
        files = sorted(str(p.relative_to(row.bundle)) for p in Path(row.bundle).rglob("*") if p.is_file())
        print(f"  program {i}: {row.status} {row.reason} signal {row.signal}: run {run_s * 1000:.0f} ms, "
              f"bundle {max(0.0, wall - run_s) * 1000:.0f} ms; bundle: {' '.join(files)}")
        found += 1
        if found == 3:
            break
    rtl_server.close_shared()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=30, help="programs of part 1")
    ap.add_argument("--campaign-count", type=int, default=100, help="programs of each part 2 campaign")
    ap.add_argument("--hw", default="small")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", default="1,2", help="comma-separated worker counts for part 2")
    ap.add_argument("--modes", default="fresh,server,server-nowaves")
    ap.add_argument("--bug", default=None, help="part 3 on this injected bug (cocotb_tests/bugs.py)")
    ap.add_argument("--skip-campaign", action="store_true")
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in ("fresh", "server", "server-nowaves")]
    if bad:
        ap.error(f"--modes: unknown mode {bad[0]!r} (fresh, server, server-nowaves)")
    work = Path(tempfile.mkdtemp(prefix="bench-stress-"))
    try:
        results = {m: direct(m, a, work) for m in modes}
        _print_direct(results, a.count)
        if not a.skip_campaign:
            print(f"\nPart 2: python -m stressgen run --count {a.campaign_count} --hw {a.hw} --no-minimize "
                  f"({os.cpu_count()} CPUs)")
            print(f"{'mode':<16}{'jobs':>5}{'programs/h':>14}{'wall s':>9}{'failing':>9}")
            for m in modes:
                for j in [int(x) for x in a.jobs.split(",")]:
                    pph, wall, fails = campaign(m, j, a, work)
                    print(f"{m:<16}{j:>5}{pph:14,.0f}{wall:9.1f}{fails:9d}", flush=True)
        if a.bug:
            bug_bundles(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
