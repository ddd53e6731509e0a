"""`make cosim MODEL=…`: compile a real ONNX model, run golden, SimPy and RTL, print the verdict.

    python -m tpusim.flow.cosim --model resnet50 [--hw seed] [--out runs/resnet50-seed] [--no-rtl]

Steps (each timed): compile (front end, int8 calibration on real images, back end) → FP32
reference (onnxruntime) → golden int8 (numpy, every layer) → SimPy model → RTL build (cached;
started in a background process at the beginning, so it overlaps the steps before: the verdict
gives its own time and the time the flow waited for it) → RTL run (Verilator + cocotb). Exit status 0 only when every output element agrees on all three
sides and the SimPy and RTL retire traces are identical; 1 on a mismatch; 2 on a user error.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from cocotb_tests.build import BackgroundBuild
from cocotb_tests.harness import run_rtl
from cocotb_tests.rtl_dump import dump_request
from tpucompile import driver, fp32, golden, inputs
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import file_part, save_npy_atomic
from tpusim.arch.host_transforms import host_feeds
from tpusim.arch.retire import first_retire_difference
from tpusim.flow import dataset_eval, layer_report
from tpusim.flow.profile import summary_lines, write_profile
from tpusim.flow.stagecache import StageCache, make_key, source_digest
from tpusim.flow.verdict import Verdict, count_mismatch, render, traffic_figures
from tpusim.sim import run_binary


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn())


def _accuracy(logits_q: np.ndarray, logits_f: np.ndarray, scale: float) -> dict:
    """Dequantized device output vs onnxruntime FP32: ``fp32.error_metrics`` (max |error|, SQNR,
    cosine or ``constant_fp32``), ``max_lsb`` (max |error| in units of the output's ``scale``: for
    a pre-quantized QDQ model, whose onnxruntime output lies on the same grid, the difference in
    LSB), and top-1/top-5 for a classifier output (``is_classifier_shape``: (1, N) or a Conv
    classifier's (1, N, 1, 1); not a feature map)."""
    out = fp32.error_metrics(logits_q, logits_f)
    out["max_lsb"] = out["max_abs"] / scale
    if out.get("constant_fp32"):
        return out
    a = logits_q.reshape(-1).astype(np.float64)
    b = logits_f.reshape(-1).astype(np.float64)
    if is_classifier_shape(np.shape(logits_f)):
        t5a, t5b = np.argsort(-a)[:5], np.argsort(-b)[:5]
        out.update({"top1_int8": int(t5a[0]), "top1_fp32": int(t5b[0]),
                    "top1_agree": bool(t5a[0] == t5b[0]), "top5_overlap": int(len(set(t5a) & set(t5b))),
                    "top1_fp32_in_int8_top5": bool(t5b[0] in set(t5a))})
    return out


def is_classifier_shape(shape) -> bool:
    """True for a classifier's scores: batch 1, N >= 2 classes on axis 1 and every further axis
    of size 1 -- (1, N) from a Gemm, (1, N, 1, 1) from a Conv classifier's global pool
    (SqueezeNet); False for a feature map (1, C, H, W) with H x W > 1."""
    shape = tuple(int(d) for d in shape)
    return len(shape) >= 2 and shape[0] == 1 and shape[1] >= 2 and all(d == 1 for d in shape[2:])


def _device_bytes(binary) -> bytes:
    """The parts of a binary the device sees (code, constants, fills, I/O layout, config hash);
    META (compile statistics and times) differs between identical compilations."""
    import dataclasses
    return dataclasses.replace(binary, meta={}).to_bytes()


def _stage_keys(binary_bytes: bytes, x_dev, waves: bool) -> tuple[str, str]:
    """Keys of the SimPy and RTL stage results: the binary, the device input(s: a dict by name)
    and the source of the code that computes them (a changed model or RTL recomputes the stage)."""
    if isinstance(x_dev, dict):
        base = (binary_bytes, *(part for n in sorted(x_dev) for part in
                                (n, np.ascontiguousarray(x_dev[n]).tobytes(), str(x_dev[n].shape))))
    else:
        base = (binary_bytes, np.ascontiguousarray(x_dev).tobytes(), str(x_dev.shape))
    simpy = make_key(*base, source_digest("tpusim/models/*.py", "tpusim/sim.py", "tpusim/arch/*.py"))
    rtl = make_key(simpy, str(bool(waves)),
                   source_digest("rtl/*", "cocotb_tests/tb/*", "cocotb_tests/*.py"))
    return simpy, rtl


#: --dataset-rtl's default: held-out images of a dataset model run on the RTL too
DATASET_RTL_IMAGES = 10


def run(model, hw: str, out: Path, rtl: bool = True, calib: int = 4, input_hw: int | None = None,
        waves: bool = False, data: tuple | None = None, name: str | None = None,
        resume: bool = True, synthetic_seed: int | None = None, input_path=None,
        calib_method: str = "minmax", dataset_simpy: int | None = None, dataset_rtl: int = DATASET_RTL_IMAGES,
        profile_layers: bool = False, host_tail: bool = False) -> Verdict:
    """Run the whole co-simulation and return the Verdict (also written to out/verdict.json).

    model: a built-in model name (tpucompile.driver.MODELS), a path to an .onnx file, or an
    onnx.ModelProto (then ``data`` = (x_float NCHW, [calibration images]) must be given; for a
    model with several run-time inputs, dicts {input name: array} instead of the arrays).
    rtl: also build and run the Verilator RTL. resume: reuse the SimPy and RTL results that an
    earlier (possibly interrupted) run in ``out`` finished for the same binary, inputs and
    source (out/stages/, tpusim.flow.stagecache); False recomputes everything. synthetic_seed: a
    model file's weights replaced by seeded synthetic ones (tpucompile.driver.load_model).
    input_path: the test input (.npy/.npz); calib: a count of built-in photographs or a folder /
    array file of calibration samples (tpucompile.inputs); calib_method: minmax, percentile, mse
    or entropy (tpucompile.quantize.calibrate). For a built-in dataset model (``digits``) the
    verdict's ``dataset`` row gives top-1 over the held-out images for FP32, the int8 golden
    model, SimPy (the first ``dataset_simpy``, all by default) and the RTL (the first
    ``dataset_rtl`` when ``rtl``), each device output checked bit-exact against golden.
    Raises TpuError subclasses for user mistakes.
    """

    cfg = load_config(hw)
    out.mkdir(parents=True, exist_ok=True)
    # the RTL build (minutes, mostly C++) overlaps compile, golden and SimPy (cocotb_tests.build)
    prebuild = BackgroundBuild(hw, dump_request(out, waves).build_waves, out / "rtl_build.log") if rtl else None
    try:
        return _run(model, cfg, out, rtl, calib, input_hw, waves, data, name, resume, synthetic_seed,
                    input_path, calib_method, dataset_simpy, dataset_rtl, profile_layers, host_tail, prebuild)
    finally:
        if prebuild is not None:
            prebuild.stop()


def _run(model, cfg, out, rtl, calib, input_hw, waves, data, name, resume, synthetic_seed, input_path,
         calib_method, dataset_simpy, dataset_rtl, profile_layers, host_tail, prebuild) -> Verdict:
    label = name or (model if isinstance(model, str) else model.graph.name)
    v = Verdict(model=label, config=cfg.name, pes=cfg.pes)
    with _progress() as prog:
        task = prog.add_task("compile", total=None)
        t = time.perf_counter()
        if data is None:
            onnx_model, x_float, calib_images = driver.load_model_and_data(
                model, calib=calib, size=input_hw, synthetic_seed=synthetic_seed, input_path=input_path,
                notes=v.notes)
        else:
            onnx_model, (x_float, calib_images) = model, data
        v.times_s["load"] = time.perf_counter() - t          # the model, its data (and built-ins' weights)
        t = time.perf_counter()
        res = driver.compile_onnx(onnx_model, cfg, calib_images, dump_ir=out / "ir",
                                  keep_intermediates=True, calib_method=calib_method, host_tail=host_tail,
                                  notes=v.notes)
        res.binary.write(out / f"{Path(label).stem}.tpubin")
        v.times_s["compile"] = time.perf_counter() - t
        qg = res.qgraph

        prog.update(task, description="FP32 reference (onnxruntime)")
        t = time.perf_counter()
        lname = driver.logits_name(qg)
        logits_f = fp32.run_fp32(onnx_model, x_float, names=[lname])[lname]
        v.times_s["fp32"] = time.perf_counter() - t

        prog.update(task, description="golden int8 (numpy, layer by layer)")
        t = time.perf_counter()
        x_q = golden.quantize_input(qg, x_float)
        gold = golden.run_golden(qg, x_q)
        v.times_s["golden"] = time.perf_counter() - t
        n_instr = len(res.binary.code) // 32
        prog.update(task, description="SimPy model (instructions retired)", total=n_instr, completed=0)
        feeds = host_feeds(res.binary, x_q)
        if isinstance(x_q, dict):          # several run-time inputs: one file of each per input
            for n in x_q:
                save_npy_atomic(out / f"input_q_{file_part(n)}.npy", x_q[n])
                save_npy_atomic(out / f"input_device_{file_part(n)}.npy", feeds[n])
            key_in = feeds
        else:
            save_npy_atomic(out / "input_q.npy", x_q)
            key_in = next(iter(feeds.values()))
            save_npy_atomic(out / "input_device.npy", key_in)
        cache = StageCache(out / "stages", enabled=resume)
        simpy_key, rtl_key = _stage_keys(_device_bytes(res.binary), key_in, waves)
        sim = cache.load("simpy", simpy_key)
        if sim is None:
            t = time.perf_counter()
            run_ = run_binary(res.binary, cfg, feeds, keep_ddr=True,
                              progress=lambda n, _t: prog.update(task, completed=n))
            layers = {d.name: d.from_blocked(run_.read_ddr(d.ddr_addr, d.size_bytes))
                      for d in driver.layer_tensors(res.binary)}
            sim = {"cycles": run_.cycles, "retire": run_.retire, "counters": dict(run_.counters),
                   "outputs": run_.outputs, "layers": layers, "wall_s": time.perf_counter() - t,
                   "timeline": run_.timeline, "sram_grants": run_.sram_grants}
            cache.save("simpy", simpy_key, sim)
        else:
            v.notes.append(f"SimPy result resumed from {out / 'stages' / 'simpy.pkl'} (same binary, "
                           "input and model source; --fresh recomputes)")
        v.times_s["simpy"] = sim["wall_s"]
        v.cycles_simpy = sim["cycles"]
        v.simpy_cycles_per_s = sim["cycles"] / max(v.times_s["simpy"], 1e-9)
        v.counters = dict(sim["counters"])
        if profile_layers:
            if "timeline" in sim:
                rows = write_profile(res.binary, cfg, sim["timeline"], out / "profile", sim.get("sram_grants", ()))
                v.notes.append(f"profile: {len(rows)} layers in {out / 'profile'} (profile.csv, trace.json "
                               "for ui.perfetto.dev, roofline.png)")
                v.notes += [f"profile: {line}" for line in summary_lines(rows, res.binary)]
            else:
                v.notes.append("profile: the resumed SimPy result has no timeline; --fresh reruns it")

        # every layer output the binary keeps in DDR, golden vs SimPy
        for lname_, s in sim["layers"].items():
            g = gold.get(qg.resolve(lname_)) if hasattr(qg, "resolve") else gold.get(lname_)
            if g is None:
                continue
            v.layers_compared += 1
            n = count_mismatch(g, s)
            if n:
                v.layer_mismatches[lname_] = n

        rtl_res = None
        if rtl:
            prog.update(task, description="RTL build + run (Verilator, cocotb)", total=None, completed=0)
            waited_s, built_s = prebuild.wait()
            v.times_s["rtl_build_wait"] = waited_s
            rtl_res = cache.load("rtl", rtl_key)
            if rtl_res is None:
                rtl_res = run_rtl(out / f"{Path(label).stem}.tpubin", cfg, feeds, out / "rtl",
                                  waves=waves)
                if rtl_res.ok:
                    cache.save("rtl", rtl_key, rtl_res)
            else:
                v.notes.append(f"RTL result resumed from {out / 'stages' / 'rtl.pkl'} (same binary, "
                               "input and RTL source; --fresh recomputes)")
            v.times_s["rtl_build"] = rtl_res.build_s or built_s     # built here, or in the background
            v.times_s["rtl_run"] = rtl_res.run_s
            v.cycles_rtl = rtl_res.cycles
            v.rtl_cycles_per_s = rtl_res.cycles / max(rtl_res.run_s, 1e-9)
            v.first_retire_diff = first_retire_difference(sim["retire"], rtl_res.retire)
            for k, val in sim["counters"].items():
                if rtl_res.counters.get(k) != val:
                    v.counter_diffs[k] = {"simpy": val, "rtl": rtl_res.counters.get(k)}
        else:
            v.rtl_skipped = "--no-rtl"

    for desc in res.binary.outputs:
        g = gold[qg.resolve(desc.name)] if hasattr(qg, "resolve") else gold[desc.name]
        s = sim["outputs"][desc.name]
        m = {"elements": int(g.size), "golden_vs_simpy": count_mismatch(g, s)}
        if rtl_res is not None:
            m["simpy_vs_rtl"] = count_mismatch(s, rtl_res.outputs.get(desc.name))
        v.mismatches[desc.name] = m
        save_npy_atomic(out / f"out_{file_part(desc.name)}_simpy.npy", s)

    # accuracy layer by layer: the golden int8 tensors (= SimPy's, checked above) vs FP32
    t = time.perf_counter()
    rows = fp32.layer_accuracy(qg, gold, onnx_model, x_float)
    csv_path, png_path = out / "layers_accuracy.csv", out / "layers_accuracy.png"
    layer_report.write_csv(rows, fp32.LAYER_COLUMNS, csv_path)
    if rows:
        layer_report.write_png(rows, f"{label} on '{cfg.name}': int8 vs FP32 per layer", png_path)
    v.layer_accuracy = layer_report.summary(rows, csv_path, png_path)
    v.times_s["fp32_layers"] = time.perf_counter() - t

    # accuracy on the logits (dequantized device output vs FP32)
    d0 = res.binary.outputs[0]
    logits_q = (sim["outputs"][d0.name].astype(np.float32) - d0.zero_point) * d0.scale
    v.accuracy = _accuracy(logits_q, logits_f, d0.scale)
    if v.accuracy.get("constant_fp32"):
        v.notes.append("the FP32 output is constant (placeholder weights?): no cosine or top-k; "
                       "--synthetic-weights SEED gives a model file seeded weights")
    for h in qg.host_ops:
        if "nodes" in h:          # a host tail (tpucompile/ops/host_tail.py)
            v.notes.append(f"host tail after the device: {sum(h['nodes'].values())} nodes ("
                           + ", ".join(f"{k} x{n}" for k, n in h["nodes"].items())
                           + f") run by onnxruntime in float32 from {', '.join(h['inputs'])} to "
                           f"{', '.join(h['outputs'])}; accuracy compares {h['inp']}")
            v.notes += _host_tail_accuracy(qg, gold, onnx_model, x_float, h, out)
        else:
            v.notes.append(f"host op after the device: {h['op']} (a graph's final Softmax stays on the host; one "
                           "inside the network runs on the vector unit); accuracy compares logits")

    if isinstance(model, str) and model in driver.DATASETS and input_path is None:
        _, (xte, yte) = driver.DATASETS[model]()
        v.dataset = dataset_eval.evaluate(qg, res.binary, out / f"{Path(label).stem}.tpubin", cfg, onnx_model,
                                          xte, yte, simpy_n=dataset_simpy, rtl_n=dataset_rtl if rtl else 0,
                                          out=out)
        v.times_s["dataset"] = v.dataset["wall_s"]

    # utilisation and roofline
    meta = res.binary.meta
    v.macs = int(sum(L.get("macs", 0) for L in meta.get("layers", [])))
    if v.cycles_simpy:
        v.utilisation = v.macs / (v.cycles_simpy * cfg.pes)
        c = v.counters
        ddr_bytes = c.get("ddr_read_bytes", 0) + c.get("ddr_write_bytes", 0) + c.get("fetch_bytes", 0)
        compute = v.macs / cfg.pes
        memory = ddr_bytes / cfg.ddr_peak_bytes_per_cycle
        v.roofline_cycles = max(compute, memory)
        v.roofline_bound = "compute" if compute >= memory else "memory"
        v.traffic = traffic_figures(meta, c)
    v.write(out / "verdict.json")
    return v


def _host_tail_accuracy(qg, gold: dict, onnx_model, x_float, h: dict, out: Path) -> list[str]:
    """The host tail's outputs (from the device tensors, golden = SimPy) against onnxruntime on the
    float model, one note each; each saved as out/out_<name>_host.npy."""
    vals = golden.run_host_ops(qg, gold)
    refs = fp32.run_fp32(onnx_model, x_float, names=list(h["outputs"]))
    notes = []
    for name in h["outputs"]:
        save_npy_atomic(out / f"out_{name.replace('/', '_')}_host.npy", vals[name])
        m = fp32.error_metrics(vals[name], refs[name])
        cos = "constant FP32" if m.get("constant_fp32") else f"cosine {m['cosine']:.4f}"
        notes.append(f"host tail output {name!r} {tuple(vals[name].shape)} vs FP32: {cos}, SQNR "
                     f"{m['sqnr_db']:.1f} dB, max |error| {m['max_abs']:.4g}")
    return notes


@user_errors("cosim")
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cosim", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help=f"a built-in model ({', '.join(driver.MODELS)}) or a "
                                                        "path to an .onnx file")
    ap.add_argument("--hw", default="seed", help="hardware config name or YAML path (default: the seed chip)")
    ap.add_argument("--out", type=Path, default=None, help="run folder (default runs/<model>-<hw>)")
    ap.add_argument("--no-rtl", action="store_true", help="skip the Verilator RTL")
    ap.add_argument("--input", type=Path, default=None, metavar="FILE",
                    help="the test input: .npy, or .npz (under the input's name; a model with several "
                         "run-time inputs: an .npz of one array per input name); default: a built-in "
                         "photograph for an image model, else seeded noise")
    inputs.add_calib_options(ap)
    ap.add_argument("--dataset-simpy", type=int, default=None, metavar="N",
                    help="dataset models (digits): held-out images run on SimPy (default all)")
    ap.add_argument("--dataset-rtl", type=int, default=None, metavar="N",
                    help=f"dataset models: held-out images run on the RTL too (default {DATASET_RTL_IMAGES})")
    ap.add_argument("--input-size", type=int, default=None,
                    help="the input height/width the model has (its input shape is static: a check, "
                         "another size is refused)")
    ap.add_argument("--waves", action="store_true", help="dump RTL waveforms (slow)")
    ap.add_argument("--fresh", action="store_true",
                    help="recompute every stage (default: resume the SimPy/RTL results an earlier run "
                         "in --out finished for the same binary, input and source)")
    ap.add_argument("--synthetic-weights", type=int, default=None, metavar="SEED",
                    help="replace a model file's Conv/Gemm/BatchNorm weights by seeded synthetic ones (a "
                         "transformer is refused)")
    ap.add_argument("--host-tail", action="store_true",
                    help="run the graph's post-processing tail without a device mapping (a detector's box "
                         "decoding) on the host, by onnxruntime, instead of refusing it")
    ap.add_argument("--profile", action="store_true",
                    help="per-layer profile of the SimPy run in OUT/profile (CSV, Perfetto trace, roofline plot)")
    a = ap.parse_args(argv)
    a.calib = inputs.calib_arg(a.calib)
    if a.input_size is not None and (a.input_size < 32 or a.input_size % 32):
        raise TpuError(f"--input-size must be a positive multiple of 32, got {a.input_size}")
    if a.waves and a.no_rtl:
        raise TpuError("--waves dumps the RTL's waveforms; it cannot go with --no-rtl")
    for opt, n in (("--dataset-simpy", a.dataset_simpy), ("--dataset-rtl", a.dataset_rtl)):
        if n is not None and n < 0:
            raise TpuError(f"{opt} must be 0 or more held-out images, got {n}")
        if n is not None and (a.model not in driver.DATASETS or a.input is not None):
            raise TpuError(f"{opt} runs the held-out images of a dataset model ({', '.join(driver.DATASETS)})"
                           + (f" without --input; --input {a.input} replaces them" if a.model in driver.DATASETS
                              else f"; {a.model!r} has none") + f": leave {opt} out")
    if a.dataset_rtl is None:
        a.dataset_rtl = DATASET_RTL_IMAGES
    out = writable_dir(a.out or Path("runs") / f"{Path(a.model).stem}-{Path(a.hw).stem}", "--out")
    try:
        v = run(a.model, a.hw, out, rtl=not a.no_rtl, calib=a.calib, input_hw=a.input_size, waves=a.waves,
                resume=not a.fresh, synthetic_seed=a.synthetic_weights, input_path=a.input,
                calib_method=a.calib_method, dataset_simpy=a.dataset_simpy, dataset_rtl=a.dataset_rtl,
                profile_layers=a.profile, host_tail=a.host_tail)
    except TpuError as e:
        print(f"cosim: error: {e}", file=sys.stderr)
        return 2
    render(v)
    print(f"verdict written to {out / 'verdict.json'}")
    return 0 if v.passed else 1


if __name__ == "__main__":
    sys.exit(main())
