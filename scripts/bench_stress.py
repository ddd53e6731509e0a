#!/usr/bin/env python3
"""Stress campaign throughput on Dask, measured on this machine; prints the figures.

    python scripts/bench_stress.py [--count 40] [--rtl] [--no-external]

1. per-program cost, one program at a time: a direct call of stressgen.execute.execute_program,
   the same in the per-program child process (stressgen.child), and as a Dask task
   (stressgen.worker.run_program on a 1-worker LocalCluster, submitted one after the other);
   the Dask overhead per task = task - child; the bare round trip of a no-op task
2. programs per hour of a campaign (run_campaign, cluster already started) with 1 and 2 local
   workers, and on `dask scheduler` + `dask worker --nworkers 2 --nthreads 1` processes
3. the client's cost per finished program (database transaction; bundle publication when
   programs fail) and the linear-scaling estimate for N machines: N x (programs/hour of one
   machine) until the client, which records every result, saturates

SimPy-only programs by default (the client and Dask costs show; a program takes ~0.1 s);
--rtl runs golden + SimPy + RTL programs (~3 s each on `small`, the RTL model built first).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from distributed import Client

from stressgen.campaign import derive_seed, prepare, run_campaign
from stressgen.child import ProgramChild
from stressgen.cluster import local_cluster, stop_processes
from stressgen.db import Owner, ProgramRow, ResultsDb
from stressgen.execute import execute_program
from stressgen.spec import RunSpec
from stressgen.worker import run_program

REPO = Path(__file__).resolve().parent.parent


def _spec(root: Path, rtl: bool, seed: int) -> RunSpec:
    return RunSpec(hw="small", root_seed=seed, rtl=rtl, bundle_root=str(root / "bundles"),
                   work_root=str(root / "work"), minimize=False)


def per_program(root: Path, rtl: bool, n: int, digest: str) -> dict:
    spec = _spec(root, rtl, 101)
    seeds = [derive_seed(101, i) for i in range(n)]
    out = {}
    t = time.perf_counter()
    for i, s in enumerate(seeds):
        execute_program(spec, "bench", i, s)
    out["direct"] = (time.perf_counter() - t) / n
    child = ProgramChild(spec, "bench")
    child.run(0, seeds[0])                                   # start it (import time not counted)
    t = time.perf_counter()
    for i, s in enumerate(seeds):
        child.run(i, s)
    out["child"] = (time.perf_counter() - t) / n
    child.close()
    with local_cluster(1, root / "dask") as cluster, Client(cluster) as client:
        fields = asdict(spec)
        client.submit(run_program, fields, "bench", 0, seeds[0], digest, pure=False).result()   # warm up
        t = time.perf_counter()
        for i, s in enumerate(seeds):
            client.submit(run_program, fields, "bench", i, s, digest, pure=False).result()
        out["dask"] = (time.perf_counter() - t) / n
        t = time.perf_counter()
        for i in range(200):
            client.submit(abs, -i, pure=False).result()
        out["noop"] = (time.perf_counter() - t) / 200
    return out


def campaign_rate(root: Path, rtl: bool, count: int, client: Client, label: str, seed: int) -> float:
    spec = _spec(root / label, rtl, seed)
    with ResultsDb(root / label / "s.db") as db:
        t = time.perf_counter()
        st = run_campaign(spec, count, 0, db, progress=False, client=client)
        wall = time.perf_counter() - t
    assert st.finished == count, st
    return count / wall * 3600


def external_cluster(root: Path, rtl: bool, count: int, seed: int) -> float:
    """`dask scheduler` + `dask worker --nworkers 2 --nthreads 1` processes on 127.0.0.1."""
    sfile = root / "scheduler.json"
    py = sys.executable
    procs = [subprocess.Popen([py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sfile)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        t = time.monotonic()
        while not sfile.exists() and time.monotonic() - t < 60:
            time.sleep(0.2)
        procs.append(subprocess.Popen([py, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(sfile),
                                       "--nworkers", "2", "--nthreads", "1", "--host", "127.0.0.1",
                                       "--no-dashboard", "--local-directory", str(root / "wd")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with Client(scheduler_file=str(sfile), timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            return campaign_rate(root, rtl, count, client, "external", seed)
    finally:
        stop_processes(procs)


def client_cost(root: Path, n: int = 200) -> float:
    """Seconds of database work the client spends per finished program, measured on its own:
    its claim (one transaction per two programs, as a 1-2 worker campaign claims) and its record
    (one transaction: row, session, claim dropped)."""
    with ResultsDb(root / "rec.db") as db:
        cid = db.ensure_campaign(_spec(root, False, 1).campaign("x"))
        sess = db.start_session(cid, 1)
        owner = Owner.me()
        t = time.perf_counter()
        for i in range(0, n, 2):
            db.claim(cid, owner, [i, i + 1], 120.0)
            for j in (i, i + 1):
                db.record(cid, sess, ProgramRow(j, j, "small", None, "pass", bins={"a": 1}, timings={"simpy": 0.1}),
                          owner)
        return (time.perf_counter() - t) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=40, help="programs per campaign measurement (default 40)")
    ap.add_argument("--rtl", action="store_true", help="golden + SimPy + RTL programs (default SimPy only)")
    ap.add_argument("--no-external", action="store_true", help="skip the dask scheduler + dask worker run")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-stress-"))
    try:
        digest = prepare(_spec(root, a.rtl, 1))
        kind = "golden+SimPy+RTL" if a.rtl else "SimPy-only"
        print(f"machine: {os.cpu_count()} CPUs; {kind} programs on small; load average "
              f"{os.getloadavg()[0]:.2f} at the start")
        n = max(5, a.count // 4)
        pp = per_program(root, a.rtl, n, digest)
        print(f"per program, one at a time ({n} programs): direct call {pp['direct'] * 1e3:.0f} ms, in the "
              f"program child {pp['child'] * 1e3:.0f} ms, as a Dask task {pp['dask'] * 1e3:.0f} ms")
        print(f"Dask overhead per task: {(pp['dask'] - pp['child']) * 1e3:.1f} ms (task - child); child "
              f"process overhead {(pp['child'] - pp['direct']) * 1e3:.1f} ms; no-op task round trip "
              f"{pp['noop'] * 1e3:.1f} ms")
        rates = {}
        for j in (1, 2):
            with local_cluster(j, root / f"dask{j}") as cluster, Client(cluster) as client:
                rates[f"local {j} worker{'s' if j > 1 else ''}"] = campaign_rate(root, a.rtl, a.count, client,
                                                                                  f"local{j}", 7)
        if not a.no_external:
            rates["dask scheduler + 2 dask worker processes"] = external_cluster(root, a.rtl, a.count, 7)
        for k, v in rates.items():
            print(f"campaign of {a.count}, {k}: {v:,.0f} programs/hour")
        per_machine = max(rates["local 2 workers"], rates.get("dask scheduler + 2 dask worker processes", 0))
        rec = client_cost(root)
        ceiling = 3600 / rec
        print(f"client database work per finished program: {rec * 1e3:.1f} ms (claim + record, fsync'd "
              f"transactions): one client records at most about {ceiling:,.0f} programs/hour")
        print(f"linear-scaling estimate: N machines like this one = N x {per_machine:,.0f} programs/hour "
              f"until the client's limit, about {ceiling / per_machine:,.1f} machines of these programs per "
              "client (the task round trip is hidden by the queued task; bundles of failing programs add "
              "their transfer and unpacking)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
