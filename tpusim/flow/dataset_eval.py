"""Top-1 accuracy of a compiled classifier over a labelled dataset: onnxruntime FP32, the int8
golden model, the SimPy model and (on a subset) the RTL, with the SimPy/RTL outputs checked
bit-exact against the golden ones image by image. Used by cosim for dataset models (the built-in
``digits``)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from cocotb_tests.harness import run_rtl
from tpucompile import golden
from tpucompile.driver import logits_name
from tpucompile.quantize.calibrate import session_input, session_with_outputs
from tpusim.arch.errors import CompileError
from tpusim.arch.host_transforms import host_input_transform
from tpusim.sim import run_binary

__all__ = ["evaluate"]


def _top1(logits) -> int:
    return int(np.argmax(np.asarray(logits).ravel()))


def evaluate(qg, binary, binary_path: Path, cfg, onnx_model, xs, ys, simpy_n: int | None = None,
             rtl_n: int = 0, out: Path | None = None) -> dict:
    """``xs``: float32 (N, *input shape without batch); ``ys``: int labels. SimPy runs on the
    first ``simpy_n`` images (all by default), the RTL on the first ``rtl_n``. Returns counts,
    top-1 accuracies (fractions) and the images whose device output differs from golden."""
    if len(binary.inputs) != 1:
        raise CompileError(f"dataset evaluation takes a model with one run-time input (one labelled image "
                           f"each); this one has {len(binary.inputs)}: {[d.name for d in binary.inputs]}")
    d0 = binary.outputs[0]
    in_name = binary.inputs[0].name
    sess = session_with_outputs(onnx_model, [logits_name(qg)])
    inp = session_input(sess, onnx_model).name
    n = len(ys)
    simpy_n = n if simpy_n is None else min(simpy_n, n)
    rtl_n = min(rtl_n, n)
    res = {"images": n, "simpy_images": simpy_n, "rtl_images": rtl_n, "fp32_correct": 0, "golden_correct": 0,
           "simpy_correct": 0, "rtl_correct": 0, "simpy_vs_golden_images": 0, "rtl_vs_golden_images": 0}
    t = time.perf_counter()
    for i in range(n):
        x = xs[i][None].astype(np.float32)
        res["fp32_correct"] += _top1(sess.run(None, {inp: x})[0]) == ys[i]
        xq = golden.quantize_input(qg, x)
        g = golden.run_golden(qg, xq)[qg.resolve(d0.name)]
        res["golden_correct"] += _top1(g) == ys[i]
        if i < simpy_n or i < rtl_n:
            x_dev = host_input_transform(binary.meta, in_name, xq)
        if i < simpy_n:
            s = run_binary(binary, cfg, {in_name: x_dev}).outputs[d0.name]
            res["simpy_correct"] += _top1(s) == ys[i]
            res["simpy_vs_golden_images"] += not np.array_equal(s, g)
        if i < rtl_n:
            r = run_rtl(binary_path, cfg, {in_name: x_dev}, (out or binary_path.parent) / "rtl_dataset")
            o = r.outputs.get(d0.name)
            res["rtl_correct"] += o is not None and _top1(o) == ys[i]
            res["rtl_vs_golden_images"] += o is None or not np.array_equal(o, g)
    res["wall_s"] = time.perf_counter() - t
    for k in ("fp32", "golden"):
        res[f"{k}_top1"] = res[f"{k}_correct"] / n
    res["simpy_top1"] = res["simpy_correct"] / simpy_n if simpy_n else None
    res["rtl_top1"] = res["rtl_correct"] / rtl_n if rtl_n else None
    return res
