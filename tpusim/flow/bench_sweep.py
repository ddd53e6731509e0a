"""Speed of the architecture sweep against its budgets (``make bench-sweep``).

    python -m tpusim.flow.bench_sweep [--model resnet50] [--points 1000] [--no-simpy]

1. The estimator (tpucompile.backend.estimate) on ``--points`` configurations of the model, one
   core: the first point of a new geometry (array, SRAM, accumulator, DDR timing: the back end
   tiles every layer), then points that share geometries (DMA depth varies) and a mixed grid;
   points per second of each (budget: >= 1,000 points/s per core).
2. A 3 x 3 sweep of the model with SimPy (arrays 32x32, 64x64, 128x128 x SRAM 64K, 128K, 256K) on
   a 2-worker LocalCluster, cold (no cache; budget: <= 2 min on 2 cores), then rerun (cache).
Prints a JSON record of the figures.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from stressgen.cluster import ClusterSpec
from tpucompile.backend.estimate import Estimator
from tpusim.arch.cliutil import user_errors
from tpusim.flow import sweep

ARRAYS = ("32x32", "64x64", "128x128")
SRAMS = ("64K", "128K", "256K")


def _rate(est: Estimator, cands: list) -> dict:
    t = time.perf_counter()
    for c in cands:
        est.estimate(c.cfg)
    s = time.perf_counter() - t
    return {"points": len(cands), "seconds": round(s, 3), "points_per_s": round(len(cands) / s)}


def bench_estimator(md, n: int) -> dict:
    """Points per second: new geometries, shared geometries, and a mixed grid of ``n`` points."""
    out = {}
    fresh = [c for c in sweep.candidates("seed", {"array": ARRAYS, "sram": SRAMS}, []) if c.cfg]
    out["new_geometry"] = _rate(Estimator(md.qg), fresh)
    est = Estimator(md.qg)
    shared = [c for c in sweep.candidates("seed", {"outstanding": [1, 2, 4, 8]}, []) if c.cfg]
    est.estimate(shared[0].cfg)                                # the one geometry, tiled once
    reps = max(1, n // len(shared))
    out["shared_geometry"] = _rate(est, shared * reps)
    grid = {"array": ARRAYS, "sram": SRAMS, "outstanding": [1, 2, 4, 8], "core_mhz": [500, 1000]}
    mixed = [c for c in sweep.candidates("seed", grid, []) if c.cfg]
    mixed = list(itertools.islice(itertools.cycle(mixed), n))
    out["mixed_grid"] = _rate(Estimator(md.qg), mixed)
    out["mixed_grid"]["distinct_configs"] = len({c.name for c in mixed})
    return out


@user_errors("python -m tpusim.flow.bench_sweep")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpusim.flow.bench_sweep", description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--no-simpy", action="store_true", help="only the estimator")
    ap.add_argument("--out", default=None, help="sweep folder (default: a temp folder)")
    a = ap.parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="tpusim-bench-sweep-"))
    t = time.perf_counter()
    md = sweep.load_model(a.model, None, 2)
    rec = {"model": a.model, "frontend_s": round(time.perf_counter() - t, 2), "estimator": bench_estimator(md, a.points)}
    if not a.no_simpy:
        cands = sweep.candidates("seed", {"array": ARRAYS, "sram": SRAMS}, [])
        for run in ("cold", "cached"):
            t = time.perf_counter()
            res = sweep.run_sweep([a.model], cands, out, cluster=ClusterSpec(jobs=2), progress=False)
            rec[f"sweep_3x3_{run}_s"] = round(time.perf_counter() - t, 1)
        rec["sweep_3x3_estimator"] = res.stats.get(a.model, {})
        rec["sweep_3x3_rows"] = [{k: r[k] for k in ("config", "status", "cycles", "estimated_cycles")} for r in res.rows]
    print(json.dumps(rec, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
