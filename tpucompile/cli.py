"""tpucompile MODEL.onnx --hw CONFIG -o OUT.tpubin [--dump-ir DIR] [--calib N]

Front end (import -> passes -> calibrate/quantize, tpucompile.quantize.compile_model) and back end
(tpucompile.backend.compile.compile_qgraph). Calibration images: the real photographs of
tpucompile.realdata at the model's input size (``--calib N`` of them, default 4); for a model
whose input is not 3-channel, seeded normal noise. Every TpuError -> one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from tpucompile.backend.compile import compile_qgraph
from tpucompile.driver import MODELS, load_model
from tpucompile.frontend.onnx_import import runtime_inputs
from tpucompile.quantize import compile_model
from tpucompile.realdata import calibration_images
from tpucompile.stages import IrDumps
from tpusim.arch.cliutil import user_errors
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError, TpuError
from tpusim.arch.isa import decode_program


def _calib_images(model, n: int):
    dims = [d.dim_value for d in runtime_inputs(model)[0].type.tensor_type.shape.dim]
    if len(dims) == 4 and dims[1] == 3 and dims[2] >= 16 and dims[3] >= 16:
        try:
            return calibration_images(min(n, 25), (dims[2], dims[3]))
        except TpuError:
            raise
        except Exception:  # photographs unavailable: fall back to noise
            pass
    rng = np.random.default_rng(0)
    return [rng.normal(0, 1, dims).astype(np.float32) for _ in range(n)]


@user_errors("tpucompile")
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tpucompile", description="Compile an ONNX model to a .tpubin")
    ap.add_argument("model", help=f"ONNX model file, or a built-in model: {', '.join(MODELS)} (the onnx "
                                  "wheel's graphs with seeded synthetic weights)")
    ap.add_argument("--hw", default="seed", help="hardware config name or YAML path (default seed)")
    ap.add_argument("-o", "--output", required=True, help="output .tpubin")
    ap.add_argument("--dump-ir", metavar="DIR", help="write the IR after every front-end and back-end "
                                                     "pass (NN_<pass>.mlir/.txt), the program and meta")
    ap.add_argument("--calib", type=int, default=4, metavar="N", help="calibration images (default 4)")
    ap.add_argument("--no-im2col", action="store_true", help="compute the first conv directly on the image")
    ap.add_argument("--synthetic-weights", type=int, default=None, metavar="SEED",
                    help="replace the model file's Conv/Gemm/BatchNorm weights by seeded synthetic ones")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        cfg = load_config(a.hw)
        if a.calib < 1:
            raise CompileError(f"--calib must be >= 1, got {a.calib}")
        p = Path(a.model)
        if a.model in MODELS and not p.exists():
            model = load_model(a.model)
        else:
            if not p.exists():
                raise CompileError(f"model file {str(p)!r} not found (built-in models: {sorted(MODELS)})")
            model = load_model(p, a.synthetic_weights)
        t1 = time.perf_counter()
        dumps = IrDumps.open(a.dump_ir)
        qg, _ = compile_model(model, lambda: _calib_images(model, a.calib), dumps)
        t2 = time.perf_counter()
        b = compile_qgraph(qg, cfg, im2col=not a.no_im2col, model_name=p.stem, dump_ir=dumps)
        t3 = time.perf_counter()
        b.write(a.output)
        if a.dump_ir:
            d = Path(a.dump_ir)
            d.mkdir(parents=True, exist_ok=True)
            (d / "program.s").write_text("\n".join(i.text() for i in decode_program(b.code)) + "\n")
            (d / "meta.json").write_text(json.dumps(b.meta, indent=1))
    except TpuError as e:
        print(f"tpucompile: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tpucompile: error: {e}", file=sys.stderr)
        return 2
    s = b.meta["stats"]
    print(f"{p.name} -> {a.output} for '{cfg.name}': {len(b.meta['layers'])} device layers, "
          f"{len(b.meta['host_ops'])} host ops, {s['instructions']} instructions, "
          f"DDR footprint {s['ddr_footprint'] / 2**20:.2f} MiB (weights {s['const_bytes'] / 2**20:.2f} MiB), "
          f"DDR traffic {s['ddr_load_bytes'] / 2**20:.2f} MiB in / {s['ddr_store_bytes'] / 2**20:.2f} MiB out; "
          f"compile {t3 - t0:.2f} s (front end {t2 - t1:.2f} s, back end {t3 - t2:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
