"""Architecture sweep: models x candidate chips, ranked by the fast estimator and measured on the
cycle-accurate SimPy model.

    python -m tpusim.sweep --models resnet50,shufflenet --array 128x128,64x256 --sram 128K,256K
    python -m tpusim.sweep --spec sweep.yaml [--estimate-only | --refine N] [--scheduler ADDR]
    tpusim sweep ...                                   (the same, as a subcommand)

Configurations: a base config (``--base``, default seed) with knobs changed, the cartesian product
of the values given (flags, or a YAML spec's ``grid``) plus explicit ``points``::

    base: seed
    models: [resnet50, shufflenet]
    grid: {array: [128x128, 32x32], sram: [128K, 256K], outstanding: [4, 8]}
    points: [{array: 64x64, ddr_latency: 40}]

Knobs (``KNOBS``): array (RxC), sram (bytes, K/M suffixes), banks, acc_depth, beat, ddr_latency,
outstanding, burst, queue_depth, core_mhz, ddr_mhz, dma_mhz. A combination the config validator
refuses (tpusim.arch.config) is a row with status ``refused`` and the reason; a model that does
not fit a config (CompileError) is a row with status ``compile error``.

Each model's front end (import, calibration, quantization) runs once. Every point is estimated
(tpucompile.backend.estimate: milliseconds); all of them (default), the ``--refine N`` best by
estimate per model, or none (``--estimate-only``) are compiled and run on SimPy, in parallel on
Dask (a ``distributed.LocalCluster`` of ``--workers`` processes, or ``--scheduler ADDRESS``;
stressgen.cluster). Finished SimPy points are cached in ``OUT/cache`` by (config hash and cost
tables, model graph digest, simulator and compiler source digest): a rerun is instant.

Outputs in ``--out`` (default runs/sweep): ``results.csv`` and ``results.json`` (one row per model x
config, ``COLUMNS``; ``time_us`` = cycles / ``core_mhz``), ``cycles.png`` (cycles per model per
config), ``pareto.png`` (cycles against area and against energy, the Pareto frontier of each model
drawn; both plots, and ``--refine``'s choice, rank by time per inference instead when the points'
core clocks differ, so a slower clock does not look faster), and on stdout the table and the
estimator's error against SimPy: median and maximum relative error and the Spearman rank
correlation over the points that ran both.
"""
from __future__ import annotations

import argparse
import copy
import csv
import dataclasses
import gc
import io
import itertools
import json
import math
import pickle
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from distributed import as_completed

from stressgen.cluster import ClusterSpec, connect
from tpucompile import driver, golden, realdata
from tpucompile.backend.compile import compile_qgraph
from tpucompile.backend.estimate import Estimator
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import config_from_dict, config_path, load_config_data
from tpusim.arch.errors import CompileError, ConfigError, TpuError
from tpusim.arch.fileio import write_bytes_atomic, write_text_atomic
from tpusim.arch.host_transforms import host_feeds
from tpusim.flow.profile import area_mm2, energy_totals, layer_rows
from tpusim.flow.stagecache import make_key, source_digest
from tpusim.sim import run_binary

COLUMNS = ("model", "config", "rows", "cols", "sram_bytes", "banks", "acc_depth", "outstanding", "ddr_latency",
           "core_mhz", "status", "cycles", "estimated_cycles", "estimate_error", "time_us", "estimated_time_us",
           "utilisation", "ddr_bytes", "estimated_ddr_bytes", "energy_uj", "estimated_energy_uj", "area_mm2",
           "sim_seconds", "reason")

#: knob -> (YAML path in the config, parser)
KNOBS = {
    "array": (None, None),                       # "RxC": array.rows and array.cols
    "sram": (("sram", "size_bytes"), "bytes"),
    "banks": (("sram", "banks"), int),
    "acc_depth": (("accumulator", "depth_rows"), int),
    "beat": (("ddr", "beat_bytes"), "bytes"),
    "ddr_latency": (("ddr", "latency_cycles"), int),
    "outstanding": (("dma", "outstanding"), int),
    "burst": (("dma", "burst_bytes"), "bytes"),
    "queue_depth": (("queues", "depth"), int),
    "core_mhz": (("clocks", "core", "freq_mhz"), int),
    "ddr_mhz": (("clocks", "ddr", "freq_mhz"), int),
    "dma_mhz": (("clocks", "dma", "freq_mhz"), int),
}
_SHORT = {"sram": "s", "banks": "b", "acc_depth": "acc", "beat": "beat", "ddr_latency": "lat",
          "outstanding": "k", "burst": "burst", "queue_depth": "q", "core_mhz": "core", "ddr_mhz": "ddr",
          "dma_mhz": "dma"}


class SweepError(TpuError):
    """A bad sweep spec or flag (the message names the knob and the value)."""


# ---------------------------------------------------------------- configurations

def read_spec_yaml(path, keys: tuple) -> dict:
    """The YAML mapping at ``path`` (``--spec``), its top-level keys among ``keys``. Raises
    SweepError naming the file for unreadable YAML, a non-mapping or an unknown key."""
    try:
        spec = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError:
        raise SweepError(f"--spec {path}: not a text (YAML) file") from None
    except (OSError, yaml.YAMLError) as e:
        raise SweepError(f"--spec {path}: {' '.join(str(e).split())}") from None
    if not isinstance(spec, dict):
        raise SweepError(f"--spec {path}: expected a mapping with {', '.join(keys)}")
    unknown = sorted(set(spec) - set(keys))
    if unknown:
        raise SweepError(f"--spec {path}: unknown key(s) {unknown}; expected {', '.join(keys)}")
    return spec

def parse_bytes(text, knob: str) -> int:
    """``131072``, ``128K``, ``1M`` -> bytes; SweepError naming the knob otherwise."""
    s = str(text).strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1024, "M": 1024 * 1024}.get(s[-1:], 1)
    try:
        v = int(s[:-1] if mult > 1 else s) * mult
    except ValueError:
        raise SweepError(f"{knob}: {text!r} is not a byte count (e.g. 131072, 128K, 1M)") from None
    if v <= 0:
        raise SweepError(f"{knob}: {text!r} must be positive")
    return v


def parse_array(text) -> tuple[int, int]:
    """``"64x256"`` -> (64, 256); SweepError otherwise."""
    parts = str(text).lower().split("x")
    try:
        r, c = (int(p) for p in parts)
    except ValueError:
        raise SweepError(f"array: {text!r} is not ROWSxCOLS (e.g. 128x128, 64x256)") from None
    return r, c


def _knob_value(knob: str, value):
    if knob not in KNOBS:
        raise SweepError(f"unknown knob {knob!r}; known: {', '.join(KNOBS)}")
    if knob == "array":
        return parse_array(value)
    kind = KNOBS[knob][1]
    if kind == "bytes":
        return parse_bytes(value, knob)
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise SweepError(f"{knob}: {value!r} is not an integer")   # a YAML 10.7 (int() would cut it)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise SweepError(f"{knob}: {value!r} is not an integer") from None


def point_name(base: str, knobs: dict) -> str:
    """A config name for ``knobs`` over ``base``: e.g. ``seed-64x256-s256K-k8``."""
    parts = [base]
    for k, v in knobs.items():
        if k == "array":
            parts.append(f"{v[0]}x{v[1]}")
        elif KNOBS[k][1] == "bytes":
            parts.append(f"{_SHORT[k]}{v // 1024}K" if v % 1024 == 0 else f"{_SHORT[k]}{v}")
        else:
            parts.append(f"{_SHORT[k]}{v}")
    return "-".join(parts)


def apply_knobs(base: dict, knobs: dict) -> dict:
    """The base config's YAML mapping with ``knobs`` (parsed values) set."""
    d = copy.deepcopy(base)
    for k, v in knobs.items():
        if k == "array":
            d["array"]["rows"], d["array"]["cols"] = v
            continue
        node = d
        path = KNOBS[k][0]
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = v
    return d


@dataclass
class Candidate:
    """One configuration of the sweep: its knobs, the validated HwConfig or the refusal."""
    name: str
    knobs: dict
    data: dict
    cfg: object = None
    refusal: str = ""


def candidates(base: str, grid: dict, points: list) -> list[Candidate]:
    """The grid's cartesian product then the explicit points, each validated; duplicates dropped."""
    base_data = _base_data(base)
    base_name = base_data["name"]
    combos = []
    if grid:
        keys = list(grid)
        vals = [[_knob_value(k, v) for v in (grid[k] if isinstance(grid[k], (list, tuple)) else [grid[k]])] for k in keys]
        combos += [dict(zip(keys, c)) for c in itertools.product(*vals)]
    for p in points or []:
        if not isinstance(p, dict):
            raise SweepError(f"points: each point is a mapping of knobs, got {p!r}")
        combos.append({k: _knob_value(k, v) for k, v in p.items()})
    if not combos:
        combos = [{}]
    out, seen = [], set()
    for knobs in combos:
        name = point_name(base_name, knobs)
        if name in seen:
            continue
        seen.add(name)
        data = apply_knobs(base_data, knobs)
        data["name"] = name
        c = Candidate(name, knobs, data)
        try:
            c.cfg = config_from_dict(data)
        except ConfigError as e:
            c.refusal = str(e)
        out.append(c)
    return out


def _base_data(base: str) -> dict:
    """The base config's YAML mapping, its name resolved as load_config names it
    (tpusim.arch.config.config_name: a copy of small.yaml that still says ``name: small`` takes
    its file's stem); ConfigError if it is missing or invalid."""
    try:
        data = load_config_data(config_path(base), f"--base {base}")
    except ConfigError as e:
        raise SweepError(str(e)) from None
    config_from_dict(data)          # the base itself must be valid (ConfigError names the key)
    return data


# ---------------------------------------------------------------- models
@dataclass
class ModelData:
    """A model's quantized graph and its quantized test input (front end run once)."""
    name: str
    qg: object
    x_q: np.ndarray | dict       # int8 input (a dict by name for a model with several inputs)
    digest: str


def load_model(name: str, cache: Path | None, calib: int) -> ModelData:
    """The front end of ``name`` (a built-in model or an .onnx path), cached in ``cache`` by the
    model, the calibration count and the compiler's source."""
    src = source_digest("tpucompile/**/*.py", "tpusim/arch/*.py")
    p = Path(name)
    model_id = p.read_bytes() if p.is_file() else name.encode()
    key = make_key(model_id, str(calib), src)
    f = cache / f"frontend-{key[:24]}.pkl" if cache else None
    if f is not None and f.is_file():
        try:
            return pickle.loads(f.read_bytes())
        except Exception:       # a damaged cache file is recomputed
            pass
    onnx_model, x_float, calib_images = driver.load_model_and_data(name, calib=calib)
    qg, _ = driver.compile_model(onnx_model, calib_images)
    x_q = golden.quantize_input(qg, x_float)
    md = ModelData(Path(name).stem if p.is_file() else name, qg, x_q, make_key(pickle.dumps(qg), pickle.dumps(x_q)))
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(f, pickle.dumps(md))
    return md


# ---------------------------------------------------------------- one SimPy point (a Dask task)
#: the sources a SimPy run of a given binary depends on (the simulator, the profile's energy)
SIM_SOURCES = ("tpusim/models/*.py", "tpusim/sim.py", "tpusim/arch/*.py", "tpusim/flow/profile.py")


def simulate(qg, x_q, cfg, cache: Path | None = None) -> dict:
    """Compile ``qg`` for ``cfg`` and run it on SimPy (``x_q``: its int8 input, a dict by name for
    several inputs): cycles, DDR bytes, MACs, energy (uJ, from
    the run's events: tpusim.flow.profile), per-layer SimPy cycles (``layers``: [name, cycles]
    per layer, each its span from first instruction start to last completion), wall seconds; or
    ``{"error": message}`` for a CompileError / device error (a TpuError). ``cache``: a folder of
    finished runs keyed by the compiled binary's bytes, the config, the input and the
    simulator's source (``_binary_key``): a compiler change that leaves the binary unchanged (an
    estimator change) reuses the run."""
    t0 = time.perf_counter()
    try:
        binary = compile_qgraph(qg, cfg)
    except TpuError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    f = cache / f"sim-{_binary_key(binary, x_q, cfg)[:32]}.json" if cache is not None else None
    if f is not None and f.is_file():
        try:
            return json.loads(f.read_text())
        except ValueError:          # a damaged cache file is recomputed
            pass
    try:
        res = run_binary(binary, cfg, host_feeds(binary, x_q))
    except TpuError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    rows = layer_rows(binary, cfg, res.timeline, res.sram_grants)
    macs = sum(int(L.get("macs", 0)) for L in binary.meta["layers"])
    c = res.counters
    out = {"cycles": int(res.cycles), "ddr_bytes": int(c["ddr_read_bytes"] + c["ddr_write_bytes"]),
           "macs": macs, "energy_uj": energy_totals(rows, cfg, c)["total"],
           "layers": [[r["layer"], r["cycles"]] for r in rows], "sim_seconds": time.perf_counter() - t0}
    if f is not None:
        f.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(f, json.dumps(out))
    return out


def _binary_key(binary, x_q, cfg) -> str:
    """The binary's bytes but its compile time (meta stats ``compile_seconds``, which varies from
    one compile to the next), the input, the config and its cost tables, the simulator's source."""
    meta = dict(binary.meta)
    meta["stats"] = {k: v for k, v in meta.get("stats", {}).items() if k != "compile_seconds"}
    return make_key(dataclasses.replace(binary, meta=meta).to_bytes(), pickle.dumps(x_q), cfg.hash_hex(),
                    repr(cfg.energy), repr(cfg.area), source_digest(*SIM_SOURCES))


def _point_key(md: ModelData, cfg) -> str:
    return make_key(cfg.hash_hex(), repr(cfg.energy), repr(cfg.area), md.digest,
                    source_digest(*SIM_SOURCES, "tpucompile/**/*.py"))


# ---------------------------------------------------------------- the sweep
@dataclass
class SweepResult:
    rows: list = field(default_factory=list)
    stats: dict = field(default_factory=dict)


def _row(md_name: str, c: Candidate) -> dict:
    d = c.data
    return {"model": md_name, "config": c.name, "rows": d["array"]["rows"], "cols": d["array"]["cols"],
            "sram_bytes": d["sram"]["size_bytes"], "banks": d["sram"]["banks"],
            "acc_depth": d["accumulator"]["depth_rows"], "outstanding": d["dma"]["outstanding"],
            "ddr_latency": d["ddr"]["latency_cycles"], "core_mhz": d["clocks"]["core"]["freq_mhz"], "status": "",
            "cycles": None, "estimated_cycles": None, "estimate_error": None, "time_us": None,
            "estimated_time_us": None, "utilisation": None, "ddr_bytes": None, "estimated_ddr_bytes": None,
            "energy_uj": None, "estimated_energy_uj": None, "area_mm2": None, "sim_seconds": None, "reason": ""}


def estimate_rows(models: list, cands: list) -> tuple[list, float]:
    """Every (model, candidate) row with its estimate; (rows, seconds spent estimating). The
    objects made so far (the models, the candidates) live for the whole sweep: moved out of the
    garbage collector's sight (``gc.freeze``), which otherwise rescans them over and over while
    the estimator allocates (5 to 10 % of the 1,512-point grid's time)."""
    gc.collect()
    gc.freeze()
    rows, t = [], 0.0
    valid = [c for c in cands if c.cfg is not None]
    for md in models:
        t0 = time.perf_counter()
        estimates = dict(zip(map(id, valid), Estimator(md.qg).estimate_many([c.cfg for c in valid])))
        t += time.perf_counter() - t0
        for c in cands:
            r = _row(md.name, c)
            rows.append(r)
            if c.cfg is None:
                r["status"], r["reason"] = "refused", c.refusal
                continue
            r["area_mm2"] = area_mm2(c.cfg)["total"]
            e = estimates[id(c)]
            if isinstance(e, CompileError):
                r["status"], r["reason"] = "compile error", str(e)
                continue
            r["_estimate"] = e          # kept in memory (per-layer comparison), not written
            r.update(status="estimated", estimated_cycles=e.cycles, estimated_time_us=e.cycles / r["core_mhz"],
                     estimated_ddr_bytes=e.ddr_bytes,
                     estimated_energy_uj=e.energy_uj, utilisation=e.macs / (e.cycles * c.cfg.pes) if e.cycles else 0.0,
                     macs=e.macs)
    return rows, t


def choose_simulated(rows: list, refine: int | None) -> list:
    """Rows to run on SimPy: every estimated one, or the ``refine`` fastest estimates per model (by
    time per inference: estimated cycles / core MHz, so a slower clock does not look better)."""
    ok = [r for r in rows if r["status"] == "estimated"]
    if refine is None:
        return ok
    out = []
    for m in dict.fromkeys(r["model"] for r in ok):
        mine = sorted((r for r in ok if r["model"] == m), key=lambda r: r["estimated_time_us"])
        out += mine[:refine]
    return out


def run_simpy(todo: list, models: dict, cfgs: dict, cache: Path | None, cluster: ClusterSpec | None,
              progress: bool = True) -> None:
    """Fill ``cycles`` etc. of the ``todo`` rows: from the cache, else on the Dask cluster."""
    pending = []
    for r in todo:
        md, cfg = models[r["model"]], cfgs[r["config"]]
        key = _point_key(md, cfg)
        f = cache / f"point-{key[:32]}.json" if cache else None
        if f is not None and f.is_file():
            try:
                _fill(r, json.loads(f.read_text()), cfg, cached=True)
                continue
            except (ValueError, KeyError):
                pass
        pending.append((r, md, cfg, f))
    if not pending:
        return
    with connect(cluster or ClusterSpec(jobs=2)) as client, _bar(progress, len(pending)) as bar:
        scattered = {m: client.scatter((md.qg, md.x_q), broadcast=True)
                     for m, md in {p[1].name: p[1] for p in pending}.items()}
        futs = {client.submit(_simulate_task, scattered[md.name], cfg, cache, pure=False): (r, cfg, f)
                for r, md, cfg, f in pending}
        for fut in as_completed(futs):
            r, cfg, f = futs[fut]
            try:
                out = fut.result()
            except Exception as e:          # a worker that died: the row says so, the sweep goes on
                out = {"error": f"dask task failed: {type(e).__name__}: {e}"}
            _fill(r, out, cfg, cached=False)
            if f is not None and "error" not in out:
                f.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(f, json.dumps(out))
            bar(r)


def _simulate_task(model_data, cfg, cache) -> dict:
    qg, x_q = model_data
    return simulate(qg, x_q, cfg, cache)


def _fill(r: dict, out: dict, cfg, cached: bool) -> None:
    if "error" in out:
        r["status"], r["reason"] = "sim error", out["error"]
        return
    r.update(status="cached" if cached else "simulated", cycles=out["cycles"], time_us=out["cycles"] / r["core_mhz"],
             ddr_bytes=out["ddr_bytes"],
             energy_uj=out["energy_uj"], sim_seconds=round(out["sim_seconds"], 2), sim_layers=out.get("layers"),
             utilisation=out["macs"] / (out["cycles"] * cfg.pes))
    if r["estimated_cycles"]:
        r["estimate_error"] = (r["estimated_cycles"] - r["cycles"]) / r["cycles"]


class _bar:
    """A rich progress bar over the SimPy points (a no-op when ``enabled`` is False)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total

    def __enter__(self):
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.p = Progress(TextColumn("SimPy points"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                              TextColumn("{task.description}"))
            self.p.__enter__()
            self.t = self.p.add_task("", total=self.total)
        return self

    def __call__(self, r: dict) -> None:
        if self.enabled:
            self.p.update(self.t, advance=1, description=f"{r['model']} on {r['config']}")

    def __exit__(self, *exc):
        if self.enabled:
            self.p.__exit__(*exc)


def spearman(a, b) -> float:
    """Spearman rank correlation of two equal-length sequences (average ranks for ties); nan for
    fewer than 2 values or a constant sequence."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2:
        return float("nan")

    def ranks(x):
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):          # ties share their average rank
            m = x == v
            r[m] = r[m].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def estimator_stats(rows: list) -> dict:
    """Median and maximum |relative error| of the estimate and the Spearman rank correlation of
    estimated and SimPy cycles, over the rows that have both (all models together, and per
    model)."""
    both = [r for r in rows if r["cycles"] and r["estimated_cycles"]]

    def stats(rs):
        if not rs:
            return {"points": 0}
        err = np.abs([r["estimate_error"] for r in rs])
        return {"points": len(rs), "median_error": float(np.median(err)), "max_error": float(err.max()),
                "spearman": spearman([r["estimated_cycles"] for r in rs], [r["cycles"] for r in rs])}
    out = {"all": stats(both)}
    for m in dict.fromkeys(r["model"] for r in both):
        out[m] = stats([r for r in both if r["model"] == m])
    return out


# ---------------------------------------------------------------- outputs
def write_results(rows: list, stats: dict, out: Path, meta: dict) -> None:
    """results.csv (``COLUMNS``) and results.json (meta, estimator statistics, rows) in ``out``."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r[k]) for k in COLUMNS})
    write_text_atomic(out / "results.csv", buf.getvalue())
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    write_text_atomic(out / "results.json", json.dumps({"meta": meta, "estimator": stats, "rows": public},
                                                       indent=1, default=float))


def layer_pairs(r: dict) -> list:
    """(layer, SimPy cycles, estimated cycles) of each layer of a row that both ran (its SimPy
    ``sim_layers`` and its in-memory ``_estimate``), in the estimate's layer order; [] otherwise."""
    e, sim = r.get("_estimate"), r.get("sim_layers")
    if e is None or not sim:
        return []
    by_name = dict((n, c) for n, c in sim)
    return [(n, by_name[n], float(c)) for n, c in zip(e.names, e.layer_cycles) if n in by_name]


def _cycles_of(r: dict):
    return r["cycles"] if r["cycles"] else r["estimated_cycles"]


def _speed_axis(rows: list) -> tuple:
    """(figure of a row, its axis label) that ranks the rows: cycles (SimPy where run, else the
    estimate) when every row has one core clock, else time per inference (cycles / core MHz, in
    microseconds), so a slower clock does not look faster."""
    if len({r["core_mhz"] for r in rows}) <= 1:
        return _cycles_of, "cycles"
    return (lambda r: _cycles_of(r) / r["core_mhz"] if _cycles_of(r) else None), "time per inference (us)"


def pareto_front(points: list) -> list:
    """The points (x, y, ...) no other point beats in both x and y (lower is better), by x."""
    front, best_y = [], math.inf
    for p in sorted(points, key=lambda p: (p[0], p[1])):
        if p[1] < best_y:
            front.append(p)
            best_y = p[1]
    return front


def plot_cycles(rows: list, path: Path) -> None:
    """Grouped bars: cycles (SimPy where run, else the estimate) per model per config."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if _cycles_of(r)]
    speed, label = _speed_axis(ok)
    models = list(dict.fromkeys(r["model"] for r in ok))
    configs = list(dict.fromkeys(r["config"] for r in ok))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(configs) * max(1, len(models)) + 2), 4.5))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        vals = {r["config"]: speed(r) for r in ok if r["model"] == m}
        xs = [j + i * width for j, c in enumerate(configs) if c in vals]
        ax.bar(xs, [vals[c] for c in configs if c in vals], width, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(configs))])
    ax.set_xticklabels(configs, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(label)
    ax.set_xlabel("config")
    ax.set_yscale("log")
    ax.set_title(f"{label} per inference (SimPy; estimate where not simulated)" if label == "cycles"
                 else f"{label} (SimPy; estimate where not simulated)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pareto(rows: list, path: Path) -> None:
    """Cycles against area (left) and against energy (right), each model's Pareto frontier drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in rows if _cycles_of(r)]
    speed, label = _speed_axis(ok)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, key, xlabel in ((axes[0], "area_mm2", "area (mm^2)"), (axes[1], "energy", "energy per inference (uJ)")):
        for m in dict.fromkeys(r["model"] for r in ok):
            pts = [((r["area_mm2"] if key == "area_mm2" else (r["energy_uj"] or r["estimated_energy_uj"])),
                    speed(r), r["config"]) for r in ok if r["model"] == m]
            line = ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, label=m)
            front = pareto_front(pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], "-", color=line.get_facecolor()[0], lw=1)
            for x, y, name in front:
                ax.annotate(name, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    what = "cycles" if label == "cycles" else "time"
    axes[0].set_title(f"{what} vs area (Pareto frontier per model)")
    axes[1].set_title(f"{what} vs energy (Pareto frontier per model)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(rows: list, stats: dict, est_seconds: float, n_est: int) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title="sweep")
    for c in ("model", "config", "status", "cycles", "estimated", "error", "util", "DDR MB", "energy uJ", "mm^2"):
        t.add_column(c, justify="right" if c not in ("model", "config", "status") else "left")
    for r in rows:
        t.add_row(r["model"], r["config"], r["status"], f"{r['cycles']:,}" if r["cycles"] else "-",
                  f"{r['estimated_cycles']:,}" if r["estimated_cycles"] else "-",
                  f"{100 * r['estimate_error']:+.1f}%" if r["estimate_error"] is not None else "-",
                  f"{100 * r['utilisation']:.1f}%" if r["utilisation"] is not None else "-",
                  _or_dash(r["ddr_bytes"] or r["estimated_ddr_bytes"], lambda v: f"{v / 1e6:.1f}"),
                  _or_dash(r["energy_uj"] or r["estimated_energy_uj"], lambda v: f"{v:,.0f}"),
                  f"{r['area_mm2']:.2f}" if r["area_mm2"] else "-")
    Console(width=160).print(t)
    for r in rows:
        if r["reason"]:
            print(f"  {r['model']} on {r['config']}: {r['status']}: {r['reason']}")
    if n_est:
        print(f"estimator: {n_est} points in {est_seconds:.2f} s ({n_est / max(est_seconds, 1e-9):,.0f} points/s)")
    for m, s in stats.items():
        if s["points"]:
            rank = (f"Spearman {s['spearman']:.3f}" if s["points"] >= 3 and s["spearman"] == s["spearman"]
                    else "Spearman n/a (needs 3 points of different cycles)")
            print(f"estimator vs SimPy ({m}, {s['points']} points): median error {100 * s['median_error']:.1f} %, "
                  f"max {100 * s['max_error']:.1f} %, {rank}")


def _or_dash(value, fmt) -> str:
    """``fmt(value)``, or "-" for a point without the figure (refused: no bytes, no energy)."""
    return "-" if value is None else fmt(value)


def run_sweep(models: list, cands: list, out: Path, *, estimate_only: bool = False, refine: int | None = None,
              cluster: ClusterSpec | None = None, cache: bool = True, calib: int = 2,
              progress: bool = True) -> SweepResult:
    """The whole sweep (module docstring); returns the rows and the estimator's statistics."""
    out.mkdir(parents=True, exist_ok=True)
    cache_dir = out / "cache" if cache else None
    mds = [load_model(m, cache_dir, calib) for m in models]
    rows, est_s = estimate_rows(mds, cands)
    if not estimate_only:
        run_simpy(choose_simulated(rows, refine), {md.name: md for md in mds},
                  {c.name: c.cfg for c in cands if c.cfg is not None}, cache_dir, cluster, progress)
    stats = estimator_stats(rows)
    n_est = sum(1 for r in rows if r["estimated_cycles"])
    meta = {"models": models, "configs": [c.name for c in cands], "estimate_seconds": est_s,
            "estimated_points": n_est}
    write_results(rows, stats, out, meta)
    plotted = any(_cycles_of(r) for r in rows)
    if plotted:
        plot_cycles(rows, out / "cycles.png")
        plot_pareto(rows, out / "pareto.png")
    else:                   # no point has cycles: an earlier sweep's plots in ``out`` would mislead
        for name in ("cycles.png", "pareto.png"):
            (out / name).unlink(missing_ok=True)
    if progress:
        print_summary(rows, stats, est_s, n_est)
        if not plotted:
            print("no point was estimated or simulated (every one refused or failed, above): no plots written")
    return SweepResult(rows, stats)


# ---------------------------------------------------------------- command line
def _split(text: str | None) -> list:
    return [s.strip() for s in text.split(",") if s.strip()] if text else []


def build_parser(p: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = p or argparse.ArgumentParser(prog="python -m tpusim.sweep", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--spec", help="YAML spec: base, models, grid (knob -> list), points (list of knob maps)")
    p.add_argument("--models", help="comma-separated built-in model names or .onnx paths")
    p.add_argument("--base", help="base hardware config name or YAML path (default seed)")
    for k in KNOBS:
        p.add_argument(f"--{k.replace('_', '-')}", dest=k, help=f"comma-separated values of {k}")
    p.add_argument("--out", default="runs/sweep", help="output directory (default runs/sweep)")
    p.add_argument("--estimate-only", action="store_true", help="estimate every point, run none on SimPy")
    p.add_argument("--refine", type=int, help="run SimPy on the N best points by estimate, per model")
    p.add_argument("--workers", type=int, default=2, help="local Dask worker processes (default 2)")
    p.add_argument("--scheduler", help="address of a running Dask scheduler (instead of a local cluster)")
    p.add_argument("--no-cache", action="store_true", help="recompute every point (ignore OUT/cache)")
    p.add_argument("--calib", type=int, default=2, help="calibration images per model (default 2)")
    return p


def spec_from_args(a) -> tuple[list, str, dict, list]:
    """(models, base, grid, points) from the spec file and the flags (flags win)."""
    spec = {}
    if a.spec:
        spec = read_spec_yaml(a.spec, ("base", "models", "grid", "points"))
    if isinstance(spec.get("models"), str):
        raise SweepError(f"--spec {a.spec}: models: expected a list of model names, got the string "
                         f"{spec['models']!r} (write models: [{spec['models']}])")
    models = _split(a.models) or list(spec.get("models") or [])
    if not models:
        raise SweepError("no models: give --models a,b or a spec with models: [...]")
    grid = dict(spec.get("grid") or {})
    for k in KNOBS:
        v = getattr(a, k)
        if v:
            grid[k] = _split(v)
    if not isinstance(spec.get("points") or [], list):
        raise SweepError("points: expected a list of knob mappings")
    return models, a.base or spec.get("base") or "seed", grid, list(spec.get("points") or [])


def run_args(a: argparse.Namespace) -> int:
    """The sweep of parsed ``build_parser`` arguments (``main`` and ``tpusim sweep``)."""
    if a.refine is not None and a.refine < 1:
        raise SweepError(f"--refine must be at least 1, got {a.refine}")
    if a.refine is not None and a.estimate_only:
        raise SweepError(f"--refine {a.refine} runs SimPy on the {a.refine} best points, --estimate-only on none: "
                         "give one of them")
    if a.workers < 1:
        raise SweepError(f"--workers must be at least 1, got {a.workers}")
    if not 1 <= a.calib <= realdata.CALIB_IMAGES_MAX:
        raise SweepError(f"--calib must be between 1 and {realdata.CALIB_IMAGES_MAX} built-in calibration images, "
                         f"got {a.calib}")
    models, base, grid, points = spec_from_args(a)
    out = writable_dir(a.out, "--out", SweepError)
    cands = candidates(base, grid, points)
    cluster = ClusterSpec(scheduler=a.scheduler) if a.scheduler else ClusterSpec(jobs=a.workers)
    run_sweep(models, cands, out, estimate_only=a.estimate_only, refine=a.refine, cluster=cluster,
              cache=not a.no_cache, calib=a.calib)
    return 0


@user_errors("tpusim sweep")
def main(argv: list | None = None) -> int:
    return run_args(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
