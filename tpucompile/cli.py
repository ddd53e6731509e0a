"""tpucompile MODEL.onnx --hw CONFIG -o OUT.tpubin [--dump-ir DIR] [--calib N|DIR|FILE] [--input FILE]

Front end (import -> passes -> calibrate/quantize, tpucompile.quantize.compile_model) and back end
(tpucompile.backend.compile.compile_qgraph). Calibration samples (tpucompile.inputs): the real
photographs of tpucompile.realdata at the model's input size (``--calib N`` of them, default 4;
for a model whose input is not a 3-channel image, seeded normal noise), a folder of images or an
.npy/.npz stack (a model with several run-time inputs: seeded noise for each, or an .npz of one
stack per input name). ``--input FILE.npy|.npz``: a test input, read and checked as cosim's
(tpucompile.inputs: the same messages); the golden int8 model runs it on the compiled graph and
its device outputs go next to the binary (OUT.golden.npz, one int8 array per output name) with
the quantized input (OUT.input_q.npy, or OUT.input_q_<name>.npy per input) that ``tpusim run
OUT.tpubin --input ...`` takes: the outputs a run of the binary must give. The binary is the same
with or without it. Every TpuError -> one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from tpusim.arch.cliutil import quiet_interrupt

quiet_interrupt("tpucompile")        # a Ctrl-C while the modules below load (seconds): one line

from tpucompile import golden, inputs
from tpucompile.backend.compile import compile_qgraph
from tpucompile.driver import MODELS, load_model_head, missing_model_error, token_data
from tpucompile.quantize import compile_model
from tpucompile.stages import IrDumps
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import file_part, save_npy_atomic, save_npz_atomic
from tpusim.arch.isa import decode_program


def _model_data(model, calib, head=None, input_path=None) -> tuple:
    """(test input, calibration samples, notes): ``--calib`` a count of built-in photographs
    (noise for a non-image model) or a path, ``--input`` a file or None (cosim's reading and
    checks); a token-id model (``head``): its host embeddings of seeded token ids (or of the
    file's)."""
    if head is not None:
        return token_data(head, input_path, calib, model)
    return inputs.model_data(model, input_path, calib)


def _write_golden(qg, b, x, output: str) -> tuple[Path, list[str]]:
    """``--input``: the quantized test input and the golden int8 model's device outputs on it,
    next to ``output`` (OUT.input_q.npy, or OUT.input_q_<name>.npy per input of a model with
    several; OUT.golden.npz by output name): (the .npz, the ``tpusim run`` --input arguments)."""
    stem = Path(output).with_suffix("")
    x_q = golden.quantize_input(qg, x)
    env = golden.run_golden(qg, x_q)
    args = []
    for name, q in (x_q.items() if isinstance(x_q, dict) else [(None, x_q)]):
        path = Path(f"{stem}.input_q{'' if name is None else '_' + file_part(name)}.npy")
        save_npy_atomic(path, q)
        args.append(f"--input {shlex.quote(str(path))}" if name is None else f"--input {shlex.quote(f'{name}={path}')}")
    save_npz_atomic(Path(f"{stem}.golden.npz"), {d.name: env[qg.resolve(d.name)] for d in b.outputs})
    return Path(f"{stem}.golden.npz"), args


def _check_destinations(a) -> None:
    """Before the compile: ``-o``'s folder created (TpuError naming the option and the path if it
    cannot be) and ``-o`` not a folder; ``--dump-ir`` created and writable."""
    out = Path(a.output)
    if out.is_dir():
        raise TpuError(f"-o/--output {a.output}: is a folder; give the path of the .tpubin file to write")
    writable_dir(out.parent, f"-o/--output {a.output}: folder")
    if a.dump_ir:
        writable_dir(a.dump_ir, "--dump-ir")


@user_errors("tpucompile")
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tpucompile", description="Compile an ONNX model to a .tpubin")
    ap.add_argument("model", help=f"ONNX model file, or a built-in model: {', '.join(MODELS)} (the onnx "
                                  "wheel's graphs with seeded synthetic weights)")
    ap.add_argument("--hw", default="seed", help="hardware config name or YAML path (default seed)")
    ap.add_argument("-o", "--output", required=True, help="output .tpubin")
    ap.add_argument("--dump-ir", metavar="DIR", help="write the IR after every front-end and back-end "
                                                     "pass (NN_<pass>.mlir/.txt), the program and meta")
    inputs.add_calib_options(ap)
    ap.add_argument("--input", metavar="FILE.npy|.npz",
                    help="a test input (float32 of the model's input shape; an .npz of one array per input "
                         "name): writes OUT.golden.npz, the golden int8 model's outputs on it, and the quantized "
                         "input OUT.input_q.npy (OUT.input_q_<name>.npy per input) for tpusim run")
    ap.add_argument("--no-im2col", action="store_true", help="compute the first conv directly on the image")
    ap.add_argument("--synthetic-weights", type=int, default=None, metavar="SEED",
                    help="replace the model file's Conv/Gemm/BatchNorm weights by seeded synthetic ones (a "
                         "transformer is refused)")
    ap.add_argument("--host-tail", action="store_true",
                    help="run the graph's post-processing tail without a device mapping on the host (onnxruntime)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        cfg = load_config(a.hw)
        calib = inputs.calib_arg(a.calib)
        _check_destinations(a)
        p = Path(a.model)
        if a.model in MODELS and not p.exists():
            model, head = load_model_head(a.model, a.synthetic_weights)
        else:
            if not p.exists():
                raise missing_model_error(a.model)
            model, head = load_model_head(p, a.synthetic_weights)
        t1 = time.perf_counter()
        dumps = IrDumps.open(a.dump_ir)
        data = []

        def samples():
            data[:] = _model_data(model, calib, head, a.input)
            return data[1]
        qg, _ = compile_model(model, samples, dumps, calib_method=a.calib_method, host_tail=a.host_tail, cfg=cfg)
        t2 = time.perf_counter()
        b = compile_qgraph(qg, cfg, im2col=not a.no_im2col, model_name=p.stem, dump_ir=dumps)
        t3 = time.perf_counter()
        b.write(a.output)
        written = _write_golden(qg, b, data[0], a.output) if a.input else None
        if a.dump_ir:
            d = Path(a.dump_ir)
            d.mkdir(parents=True, exist_ok=True)
            (d / "program.s").write_text("\n".join(i.text() for i in decode_program(b.code)) + "\n")
            (d / "meta.json").write_text(json.dumps(b.meta, indent=1))
    except TpuError as e:
        print(f"tpucompile: error: {e}", file=sys.stderr)
        return 2
    s = b.meta["stats"]
    print(f"{p.name} -> {a.output} for '{cfg.name}': {len(b.meta['layers'])} device layers, "
          f"{len(b.meta['host_ops'])} host ops, {s['instructions']} instructions, "
          f"DDR footprint {s['ddr_footprint'] / 2**20:.2f} MiB (weights {s['const_bytes'] / 2**20:.2f} MiB), "
          f"DDR traffic {s['ddr_load_bytes'] / 2**20:.2f} MiB in / {s['ddr_store_bytes'] / 2**20:.2f} MiB out; "
          f"compile {t3 - t0:.2f} s (front end {t2 - t1:.2f} s, back end {t3 - t2:.2f} s)")
    if written:
        for note in data[2]:
            print(f"note: {note}")
        print(f"--input {a.input}: golden int8 outputs -> {written[0]}; `tpusim run {shlex.quote(a.output)} {' '.join(written[1])} "
              "--out DIR` gives them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
