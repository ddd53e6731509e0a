"""Bit-identity of the fast estimator across two trees: every number of every point of the
bench_sweep grids (``tpusim.flow.bench_sweep``: shared geometry, mixed, TIMING_GRID, LARGE_GRID,
NEW_GEOMETRY_GRID), one fresh Estimator per grid as the bench runs them (``estimate_many`` where
the tree has it).

    PYTHONPATH=/path/to/main python scripts/estimator_identity.py dump resnet50 /tmp/main.json
    python scripts/estimator_identity.py check resnet50 /tmp/main.json

``dump`` writes, per grid and point, the total cycles (repr), the rounded cycles, DDR bytes, energy
(repr) and a sha256 of every per-layer array (cycles, bytes, MACs, bound, energy) and the layer
names, or the refusal's message; ``check`` recomputes them on this tree and exits 1 naming the
first points that differ.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from tpucompile.backend.estimate import Estimator
from tpusim.arch.errors import CompileError
from tpusim.flow import bench_sweep, sweep


def grids() -> dict:
    """The grids bench_sweep times, by name."""
    return {"shared": {"outstanding": [1, 2, 4, 8]},
            "mixed": {"array": bench_sweep.ARRAYS, "sram": bench_sweep.SRAMS, "outstanding": [1, 2, 4, 8],
                      "core_mhz": [500, 1000]},
            "timing": bench_sweep.TIMING_GRID, "large": bench_sweep.LARGE_GRID,
            "new_geometry": bench_sweep.NEW_GEOMETRY_GRID}


def _digest(e) -> str:
    h = hashlib.sha256()
    for a in (e.layer_cycles, e.load_bytes, e.store_bytes, e.layer_macs, e.bound_index, e.layer_energy_uj):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((e.names, e.kinds)).encode())
    return h.hexdigest()[:20]


def _estimate_all(est: Estimator, cfgs: list) -> list:
    """Each config's Estimate or CompileError: ``estimate_many`` (the sweep's and the bench's
    path) where the tree has it, else one ``estimate`` at a time (a tree from before it)."""
    if hasattr(est, "estimate_many"):
        return est.estimate_many(cfgs)
    out = []
    for cfg in cfgs:
        try:
            out.append(est.estimate(cfg))
        except CompileError as x:
            out.append(x)
    return out


def estimates(model: str) -> dict:
    """{grid: {point name: its numbers}} on this tree."""
    qg = sweep.load_model(model, None, 2).qg
    out = {}
    for name, grid in grids().items():
        rows = {}
        cands = [c for c in sweep.candidates("seed", grid, []) if c.cfg]
        for c, e in zip(cands, _estimate_all(Estimator(qg), [c.cfg for c in cands])):
            if isinstance(e, CompileError):
                rows[c.name] = ["refused", str(e)]
            else:
                rows[c.name] = [repr(e.total_cycles), e.cycles, e.ddr_bytes, repr(e.energy_uj), _digest(e)]
        out[name] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("dump", "check"))
    ap.add_argument("model")
    ap.add_argument("json")
    a = ap.parse_args(argv)
    got = estimates(a.model)
    if a.mode == "dump":
        Path(a.json).write_text(json.dumps(got))
        return 0
    ref = json.loads(Path(a.json).read_text())
    bad = [(g, k) for g in ref for k in set(ref[g]) | set(got.get(g, {})) if ref[g].get(k) != got.get(g, {}).get(k)]
    for g, k in bad[:10]:
        print(f"differs: {g} {k}: {ref[g].get(k)} -> {got.get(g, {}).get(k)}")
    print(f"{a.model}: {sum(map(len, ref.values()))} points, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
