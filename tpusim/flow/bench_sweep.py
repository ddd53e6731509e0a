"""Speed of the architecture sweep against its budgets (``make bench-sweep``).

    python -m tpusim.flow.bench_sweep [--model resnet50] [--points 1000] [--no-simpy]

1. The estimator (tpucompile.backend.estimate), one core, points per second (budget: >= 1,000
   points/s per core) of: points sharing one geometry (DMA depth varies), a mixed grid of
   ``--points`` points, DDR timing and clocks turned on one chip (``TIMING_GRID``), a realistic
   1,512-point grid turning every knob (``LARGE_GRID``), and
   the worst case where every point is a new array, SRAM and accumulator (``NEW_GEOMETRY_GRID``:
   the back end tiles every layer of every point).
2. A 3 x 3 sweep of the model with SimPy (arrays 32x32, 64x64, 128x128 x SRAM 64K, 128K, 256K) on
   a 2-worker LocalCluster, cold (no cache; budget: <= 2 min on 2 cores), then rerun (cache).
Prints a JSON record of the figures.
"""
from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

from stressgen.cluster import ClusterSpec
from tpucompile.backend.estimate import Estimator
from tpusim.arch.cliutil import user_errors
from tpusim.arch.errors import CompileError
from tpusim.flow import sweep

ARRAYS = ("32x32", "64x64", "128x128")
SRAMS = ("64K", "128K", "256K")


#: the realistic grid: every knob the tilers, the work hooks and the DMA timing read, turned
#: together (5 x 3 x 3 x 2 x 3 x 2 x 3 = 1,620 configs, 1,512 of them valid, evaluated once each in grid order)
LARGE_GRID = {"array": ("16x16", "32x32", "64x64", "128x128", "256x256"), "sram": ("64K", "256K", "1M"),
              "banks": (4, 8, 16), "acc_depth": (512, 2048), "ddr_latency": (10, 20, 40), "core_mhz": (500, 1000),
              "outstanding": (2, 4, 8)}
#: DDR timing and clocks turned on one array / SRAM / accumulator (the seed's): every point a new
#: LOAD bandwidth for the tilers, no new candidate table (16 x 5 x 3 x 4 = 960 configs)
TIMING_GRID = {"ddr_latency": tuple(range(5, 85, 5)), "core_mhz": (250, 400, 500, 800, 1000),
               "ddr_mhz": (400, 800, 1000), "outstanding": (1, 2, 4, 8)}
#: the worst case: every point a new array, SRAM and accumulator (all its layers re-tiled)
NEW_GEOMETRY_GRID = {"array": ("16x16", "32x32", "64x64", "128x128", "256x256", "32x128", "128x32"),
                     "sram": ("64K", "128K", "256K", "512K", "1M"), "acc_depth": (512, 1024, 2048)}


def _rate(est: Estimator, cands: list) -> dict:
    """Points per second of ``est`` over ``cands`` per core (``Estimator.estimate_many``, as
    the sweep estimates; by this process's CPU time, which
    other jobs on a shared machine do not inflate; the wall-clock rate beside it). A config that
    does not fit counts: the sweep reports it as a compile error."""
    t, cpu = time.perf_counter(), time.process_time()
    out = est.estimate_many([c.cfg for c in cands])
    s, cpu = time.perf_counter() - t, time.process_time() - cpu
    refused = sum(isinstance(e, CompileError) for e in out)
    return {"points": len(cands), "refused": refused, "cpu_seconds": round(cpu, 3),
            "points_per_s": round(len(cands) / max(cpu, 1e-9)), "wall_points_per_s": round(len(cands) / s)}


def bench_estimator(md, n: int) -> dict:
    """Points per second (one core, a fresh Estimator each): points that share one geometry (DMA
    depth varies), a mixed grid of ``n`` points (72 configs over 18 geometries, cycled), the
    1,512-point ``LARGE_GRID``, and the worst case ``NEW_GEOMETRY_GRID`` (every point new)."""
    out = {}
    gc.collect()
    gc.freeze()         # as sweep.estimate_rows: the model lives for the whole run
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
    for name, grid in (("timing_grid", TIMING_GRID), ("large_grid", LARGE_GRID), ("new_geometry", NEW_GEOMETRY_GRID)):
        cands = [c for c in sweep.candidates("seed", grid, []) if c.cfg]
        out[name] = _rate(Estimator(md.qg), cands)
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
