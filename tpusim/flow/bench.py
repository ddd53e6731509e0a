"""`make bench`: measure the budgets of the main job on this machine and print the figures.

    python -m tpusim.flow.bench [--hw seed] [--model resnet50] [--rtl]

Budgets (issue #2): compile ResNet-50 <= 30 s; SimPy full ResNet-50 <= 120 s; the whole
`make cosim MODEL=resnet50` including the first RTL build <= 20 min; the profile of the run
(table, Perfetto trace <= 200 MB, roofline plot) <= 10 s (with --rtl: the RTL build is
measured from a clean cache folder and the RTL run on the full network). A model's own budgets
(``MODEL_BUDGETS_S``, issue 10: bert-base compile <= 10 s, SimPy <= 60 s; issue 9: the onnx
wheel's zoo, vgg19 and the others, compile <= 5 s, SimPy <= 30 s) replace those. Also
printed: each MatMul's utilisation, the Softmax / LayerNorm / LUT (GELU) cycle shares, and the
accuracy of the compared output (the last hidden state of a transformer, the logits of a
classifier) against onnxruntime FP32 (cosine, SQNR; ``fp32.error_metrics``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from cocotb_tests import build
from cocotb_tests.harness import run_rtl
from tpucompile import driver, fp32, golden, realdata
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import load_config
from tpusim.arch.host_transforms import host_feeds
from tpusim.flow.profile import print_matmuls_and_shares, print_table, write_profile
from tpusim.sim import run_binary

BUDGETS_S = {"compile": 30.0, "simpy": 120.0, "cosim_total": 1200.0, "profile": 10.0}
#: a model's own budgets where they differ (issue 10: bert-base compile <= 10 s, SimPy <= 60 s;
#: issue 9: each model of the onnx wheel's zoo compile <= 5 s, SimPy <= 30 s on seed)
MODEL_BUDGETS_S = {"bert-base": {"compile": 10.0, "simpy": 60.0},
                   **{name: {"compile": 5.0, "simpy": 30.0} for name in realdata.WHEEL_MODELS}}
#: the profiler's Perfetto trace of a full ResNet-50 run (architecture-exploration issue)
TRACE_BUDGET_BYTES = 200 * 10**6


@user_errors("bench")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--hw", default="seed")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--rtl", action="store_true", help="also build (uncached) and run the RTL")
    ap.add_argument("--out", type=Path, default=Path("runs/bench"))
    a = ap.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    cfg = load_config(a.hw)
    a.out = writable_dir(a.out, "--out")
    budgets = {**BUDGETS_S, **MODEL_BUDGETS_S.get(a.model, {})}
    rows = []
    t0 = time.perf_counter()
    model, x, calib = driver.load_model_and_data(a.model)
    t_load = time.perf_counter() - t0
    t = time.perf_counter()
    res = driver.compile_onnx(model, cfg, calib)
    t_compile = time.perf_counter() - t
    rows.append(("compile (import, passes, calibration, quantize, back end)", t_compile, budgets["compile"]))
    path = a.out / f"{Path(a.model).stem}-{cfg.name}.tpubin"
    res.binary.write(path)
    xq = golden.quantize_input(res.qgraph, x)
    feeds = host_feeds(res.binary, xq)                  # one array per input (several: by name)
    t = time.perf_counter()
    sim = run_binary(res.binary, cfg, feeds)
    t_sim = time.perf_counter() - t
    rows.append((f"SimPy model, {sim.cycles:,} cycles ({sim.cycles / t_sim:,.0f} cycles/s, "
                 f"{sim.events:,} events)", t_sim, budgets["simpy"]))
    t = time.perf_counter()
    layer_rows = write_profile(res.binary, cfg, sim.timeline, a.out / "profile", sim.sram_grants)
    t_prof = time.perf_counter() - t
    tc = res.binary.meta["stats"]["true_compulsory"]
    c = sim.counters
    moved = c["ddr_read_bytes"] + c["ddr_write_bytes"]
    trace_bytes = (a.out / "profile" / "trace.json").stat().st_size
    rows.append((f"profile (profile.csv, trace.json {trace_bytes / 1e6:.1f} MB of a "
                 f"{TRACE_BUDGET_BYTES / 1e6:.0f} MB budget, roofline.png)", t_prof, budgets["profile"]))
    figures = {"profile_s": t_prof, "trace_bytes": trace_bytes, "true_compulsory": tc, "ddr_bytes": moved,
               "floor_ratio": sim.cycles / tc["floor_cycles"], "model": a.model, "config": cfg.name, "load_s": t_load, "compile_s": t_compile,
               "simpy_s": t_sim, "cycles": sim.cycles, "instructions": res.binary.meta["stats"]["instructions"],
               "simpy_cycles_per_s": sim.cycles / t_sim, "events": sim.events}
    if a.rtl:
        import shutil
        shutil.rmtree(build.build_dir(cfg), ignore_errors=True)
        r = run_rtl(path, cfg, feeds, a.out / "rtl")
        rows.append(("RTL build (Verilator, from scratch)", r.build_s, None))
        rows.append((f"RTL run, {r.cycles:,} cycles ({r.cycles / max(r.run_s, 1e-9):,.0f} cycles/s)", r.run_s, None))
        total = t_load + t_compile + t_sim + r.build_s + r.run_s
        rows.append(("whole cosim (sum of the steps above)", total, budgets["cosim_total"]))
        figures.update(rtl_build_s=r.build_s, rtl_run_s=r.run_s, rtl_cycles=r.cycles, cosim_total_s=total)

    print_table(layer_rows, "per layer: cycles against the layer's own floor max(MACs / PEs, vector busy cycles, compulsory bytes / peak)")
    print("matmul utilisation and the cycle shares of Softmax / LayerNorm / LUT (GELU):")
    shares = print_matmuls_and_shares(layer_rows)
    figures["op_shares"] = {label: {"layers": n, "cycles": c, "share": sh} for label, n, c, sh in shares}
    lname = driver.logits_name(res.qgraph)
    d0 = res.binary.outputs[0]
    acc = fp32.error_metrics((sim.outputs[d0.name].astype(np.float32) - d0.zero_point) * d0.scale,
                             fp32.run_fp32(model, x, names=[lname])[lname])
    figures["accuracy"] = {"tensor": lname, **{k: float(v) for k, v in acc.items()}}
    print(f"accuracy of {lname!r} against onnxruntime FP32: " + ("constant FP32 output" if acc.get("constant_fp32")
          else f"cosine {acc['cosine']:.4f}, SQNR {acc['sqnr_db']:.1f} dB"))
    print(f"whole run: {sim.cycles:,} cycles = x{sim.cycles / tc['floor_cycles']:.2f} the physical floor "
          f"{tc['floor_cycles']:,} (true compulsory traffic {tc['total'] / 1e6:.2f} MB: weights {tc['weights'] / 1e6:.2f}, "
          f"input {tc['input'] / 1e6:.2f}, activations written {tc['writes'] / 1e6:.2f}, read {tc['reads'] / 1e6:.2f}); "
          f"DDR moved {moved / 1e6:.2f} MB = x{moved / tc['total']:.2f}")
    tab = Table(title=f"bench: {a.model} on '{cfg.name}' ({cfg.array_rows}x{cfg.array_cols} array)")
    tab.add_column("step")
    tab.add_column("seconds", justify="right")
    tab.add_column("budget", justify="right")
    tab.add_column("")
    for label, sec, budget in rows:
        status = "" if budget is None else ("[green]within[/green]" if sec <= budget else "[red]over[/red]")
        tab.add_row(label, f"{sec:.1f}", "" if budget is None else f"{budget:.0f}", status)
    Console().print(tab)
    (a.out / "bench.json").write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
