"""Process-replay probe: record what a source tree compiles and simulates, as JSON.

Run by ``scripts/replay_check.py`` with ``PYTHONPATH`` set to the tree under test (a git worktree
of some ref, or the working tree). It reaches the code only through public entry points that
every version since the restructure keeps (``tpucompile.driver.compile_onnx``/``load_model``,
``tpusim.sim.run_binary``, ``stressgen.gen.generate``); where a module moved, both the old and
the new path are tried, so one probe compares a tree before and after a refactor.

What is recorded, per case (all must be identical between two trees):
  compile cases   sha256 of the binary's device bytes (META excluded: it holds wall times),
                  the SimPy cycle count, sha256 of the retire trace, the performance counters
                  and of every output (name, shape, bytes)
  stress seeds    sha256 of the assembled program (.tpubin), golden and SimPy output bytes,
                  SimPy cycles and retire/counter digests, or the flag of an invalid program
  estimator       per model, sha256 of the fast estimator's per-layer arrays (cycles, DDR
                  bytes, MACs, bound, energy; bit for bit) on every config of ``ESTIMATOR_GRID``
                  met in order by one Estimator (its caches at work), or the CompileError text
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np

PACKAGES = ("tpusim", "tpucompile", "stressgen", "waves", "cocotb_tests")
#: the estimator's configs (tpusim.flow.sweep knobs on seed): square and non-square arrays, SRAM,
#: banks, accumulator, DDR latency, core clock, DMA depth, burst and beat bytes (1,536 points)
ESTIMATOR_GRID = {"array": ("16x16", "64x64", "128x128", "64x256", "32x128", "8x16"), "sram": ("64K", "256K"),
                  "banks": (4, 16), "acc_depth": (512, 2048), "ddr_latency": (10, 40), "core_mhz": (500, 1000),
                  "outstanding": (2, 8), "burst": (256, 512)}
ESTIMATOR_MODELS = ("resnet50", "shufflenet", "bert-base-linears")


def _only_this_tree() -> None:
    """Drop the editable-install finders of the venv (they would serve a module that the tree
    under test lacks from the checkout the venv was installed from): project modules then come
    only from ``PYTHONPATH``, i.e. the tree under test."""
    def name(f) -> str:          # finders are classes or instances
        cls = f if isinstance(f, type) else type(f)
        return f"{cls.__module__}.{cls.__qualname__}".lower()
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in name(f)]


def _foreign_modules(tree: Path) -> list[str]:
    """Project modules loaded from outside ``tree`` (must be none)."""
    out = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if name.split(".")[0] in PACKAGES and f and tree not in Path(f).resolve().parents:
            out.append(f"{name} ({f})")
    return out


def _imp(*names):
    """The first importable module of ``names`` (new path first, then the old one)."""
    err = None
    for n in names:
        try:
            return importlib.import_module(n)
        except ModuleNotFoundError as e:
            err = e
    raise err


def _sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
    return h.hexdigest()[:32]


def _device_bytes(binary) -> bytes:
    return dataclasses.replace(binary, meta={}).to_bytes()


def _sim_record(res) -> dict:
    outs = {k: _sha(str(np.asarray(v).shape), np.ascontiguousarray(v).tobytes())
            for k, v in sorted(res.outputs.items())}
    return {"cycles": int(res.cycles), "retire": _sha([tuple(r) for r in res.retire]),
            "counters": {k: int(v) for k, v in sorted(dict(res.counters).items())}, "outputs": outs,
            # what the profiler and the energy model read (tpusim.flow.profile)
            "timeline": _sha([tuple(r) for r in getattr(res, "timeline", ())]),
            "sram_grants": _sha([tuple(r) for r in getattr(res, "sram_grants", ())])}


def compile_case(model, cfg_name: str, calib, x: np.ndarray, simulate: bool = True) -> dict:
    driver = _imp("tpucompile.driver")
    config = _imp("tpusim.arch.config", "tpusim.config")
    sim = _imp("tpusim.sim")
    cfg = config.load_config(cfg_name)
    res = driver.compile_onnx(model, cfg, calib)
    b = res.binary
    rec = {"binary": _sha(_device_bytes(b)), "binary_bytes": len(_device_bytes(b))}
    if simulate:
        name = b.inputs[0].name
        xi = x
        desc = b.inputs[0]
        xi = np.clip(np.rint(x / desc.scale) + desc.zero_point, -128, 127).astype(np.int8)
        tr = next((t for t in b.meta.get("input_transforms", []) if t["name"] == name), None)
        if tr is not None:
            xi = _host_transform()(b.meta, name, xi)
        rec.update(_sim_record(sim.run_binary(b, cfg, {name: xi})))
    return rec


def _host_transform():
    try:
        return _imp("tpusim.arch.host_transforms").host_input_transform
    except ModuleNotFoundError:
        return _imp("tpucompile.backend").host_input_transform


def stress_case(seed: int, cfg_name: str, invalid_rate: float) -> dict:
    gen = _imp("stressgen.gen")
    config = _imp("tpusim.arch.config", "tpusim.config")
    sim = _imp("tpusim.sim")
    golden = _imp("stressgen.golden")
    errors = _imp("tpusim.arch.errors", "tpusim.errors")
    cfg = config.load_config(cfg_name)
    prog = gen.generate(seed, cfg, invalid_rate=invalid_rate)
    rec = {"invalid": prog.invalid, "asm": _sha(prog.asm())}
    binary = prog.to_binary(cfg)
    rec["binary"] = _sha(binary.to_bytes())
    if prog.invalid:
        try:
            r = sim.run_binary(binary, cfg, {})
            rec["flag"] = ["ok", int(r.cycles)]
        except errors.SimulationError as e:
            rec["flag"] = list(errors.flag_of(e)) if hasattr(errors, "flag_of") else str(e)
        return rec
    gold = golden.run_golden(prog, cfg)
    rec["golden"] = _sha(sorted((k, bytes(v)) for k, v in gold.items()))
    r = sim.run_binary(binary, cfg, {}, keep_ddr=True)
    rec.update(_sim_record(r))
    rec["simpy_outputs"] = _sha(sorted((o.name, bytes(r.read_ddr(o.ddr_addr, o.size_bytes)))
                                       for o in prog.outputs))
    return rec


def estimator_case(model: str) -> dict:
    """The estimator's figures of ``model`` over ``ESTIMATOR_GRID`` (module docstring)."""
    sweep = _imp("tpusim.flow.sweep")
    estimate = _imp("tpucompile.backend.estimate")
    errors = _imp("tpusim.arch.errors")
    md = sweep.load_model(model, None, 2)
    est = estimate.Estimator(md.qg)
    h, points, refused = hashlib.sha256(), 0, 0
    for c in sweep.candidates("seed", ESTIMATOR_GRID, []):
        if not c.cfg:
            continue
        points += 1
        try:
            e = est.estimate(c.cfg)
        except errors.CompileError as ex:
            refused += 1
            h.update(str(ex).encode())
            continue
        h.update(repr((e.config, e.names, e.kinds)).encode())
        for a in (e.layer_cycles, e.load_bytes, e.store_bytes, e.layer_macs, e.bound_index, e.layer_energy_uj):
            h.update(a.dtype.str.encode() + np.ascontiguousarray(a).tobytes())
    return {"points": points, "refused": refused, "estimates": h.hexdigest()[:32]}


def qnet_models(qnets_path: Path) -> dict:
    """The small test graphs of tests/qnets.py (taken from the probe's own tree)."""
    spec = importlib.util.spec_from_file_location("replay_qnets", qnets_path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = {}
    for fn in ("conv_bn_relu", "conv_stride2", "conv_maxpool", "conv_avgpool", "residual_add", "gemm_head"):
        out[fn] = getattr(mod, fn)()
    out["conv_avgpool_global"] = mod.conv_avgpool(global_pool=True)
    out["gemm_head_softmax"] = mod.gemm_head(softmax=True)
    out["residual_add_norelu"] = mod.residual_add(relu=False)
    return out, mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--qnets", required=True, help="tests/qnets.py of the checking tree")
    ap.add_argument("--stress-seeds", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="skip the full-size ResNet-50 runs")
    a = ap.parse_args(argv)
    _only_this_tree()
    import tpusim
    tree = Path(tpusim.__file__).resolve().parent.parent
    rec = {"tree": str(tree), "cases": {}}
    cases = rec["cases"]
    t0 = time.time()

    def log(msg):
        print(f"[{time.time() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    driver = _imp("tpucompile.driver")
    models, qn = qnet_models(Path(a.qnets))
    for name, m in models.items():
        shape = qn.in_shape(m)
        calib = qn.inputs(shape, 4, seed=1)
        x = qn.inputs(shape, 1, seed=7)[0]
        cases[f"qnet/{name}/small"] = compile_case(m, "small", calib, x)
        log(f"qnet {name}")
    for model, hws, sim_hws in (("resnet50-reduced", ("small", "medium", "seed"), ("small", "medium", "seed")),
                                ("resnet50", ("seed", "medium", "small"),
                                 () if a.quick else ("seed", "medium"))):
        m, x, calib = driver.load_model_and_data(model, 4)
        for hw in hws:
            cases[f"model/{model}/{hw}"] = compile_case(m, hw, calib, x, simulate=hw in sim_hws)
            log(f"{model} {hw}: {cases[f'model/{model}/{hw}'].get('cycles')}")
    for s in range(a.stress_seeds):
        cases[f"stress/{s}/small"] = stress_case(s, "small", 0.05)
    log(f"{a.stress_seeds} stress seeds")
    for model in ESTIMATOR_MODELS:
        cases[f"estimator/{model}"] = estimator_case(model)
        log(f"estimator {model}: {cases[f'estimator/{model}']}")
    foreign = _foreign_modules(tree)
    if foreign:
        raise SystemExit(f"replay probe: modules loaded from outside {tree}: {foreign}")
    Path(a.out).write_text(json.dumps(rec, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
