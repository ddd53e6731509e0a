"""``tpusim`` command line: run a compiled .tpubin on the SimPy model.

    tpusim run OUT.tpubin --input x.npy [--input name=y.npy] [--hw CONFIG] [--vcd FILE] [--out DIR]
    tpusim profile OUT.tpubin --input x.npy [--hw CONFIG] [--out DIR]
    tpusim sweep --models M1,M2 --array 128x128,32x32 [...]   (tpusim.flow.sweep)

Prints the cycle count and the performance counters; with ``--out`` writes every output as
``<name>.npy`` and ``summary.json`` (cycles, counters, wall time, retire trace). ``profile``
runs the same and writes the per-layer profile, a Perfetto trace and a roofline plot
(tpusim.flow.profile). Every TpuError
(bad file, wrong config, device error, deadlock) is one line on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path

from tpusim.arch.cliutil import quiet_interrupt

quiet_interrupt("tpusim")            # a Ctrl-C while the modules below load: one line

import numpy as np

from tpusim.arch.binary import TpuBinary
from tpusim.arch.cliutil import user_errors, writable_dir
from tpusim.arch.config import CONFIG_DIR, load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.fileio import save_npy_atomic, write_text_atomic
from tpusim.arch.host_transforms import host_input_transform
from tpusim.flow import profile, sweep
from tpusim.sim import run_binary

EXIT_ERROR = 2


def _parse_inputs(specs: list[str], binary) -> dict:
    """``x.npy`` (binds the binary's inputs in order) or ``name=x.npy``: {input name: (path, array)}."""
    names = [t.name for t in binary.inputs]
    out, pos = {}, 0
    for spec in specs:
        if "=" in spec and not Path(spec).exists():
            name, path = spec.split("=", 1)
        else:
            if pos >= len(names):
                raise TpuError(f"too many --input files: the binary has {len(names)} input(s) {names}")
            name, path = names[pos], spec
            pos += 1
        if name in out:
            raise TpuError(f"input {name!r} is given twice (--input)")
        _check_npy(path, name)
        try:
            arr = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise TpuError(f"cannot load input {name!r} from {path}: {e or type(e).__name__}") from None
        if not isinstance(arr, np.ndarray):
            raise TpuError(f"input {name!r}: {path} holds several arrays (.npz); give one .npy file")
        out[name] = (path, arr)
    return out


def _check_npy(path: str, name: str) -> None:
    """TpuError unless ``path`` starts as a .npy (or .npz) file does: a text or other file would
    get numpy's advice about pickled data, which is not the problem. A missing or unreadable file
    is left to ``np.load``'s message."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return
    if head and head != b"\x93NUMPY" and not head.startswith(b"PK"):
        raise TpuError(f"input {name!r}: {path} is not a .npy file (no NumPy header): save the array with "
                       "numpy.save")


def _accepted_shapes(binary, name: str) -> list:
    """The shapes ``_prepare_input`` takes for input ``name``: the device's, the model's original
    one when the host transforms it (im2col), (1, K) for a (1, K, 1, 1) vector input."""
    desc = next(t for t in binary.inputs if t.name == name)
    tr = next((t for t in binary.meta.get("input_transforms", []) if t["name"] == name), None)
    want = [tuple(desc.shape)] + ([tuple(tr["orig_shape"])] if tr else [])
    if len(desc.shape) == 4 and desc.shape[2:] == (1, 1):
        want.append(tuple(desc.shape[:2]))
    return want


def _device_inputs(specs: list[str], binary) -> dict:
    """The --input files as device inputs: each prepared (``_prepare_input``; an error names the
    file it came from); TpuError naming every input of the binary no file was given for, with
    the shapes it takes."""
    out = {}
    for name, (path, x) in _parse_inputs(specs, binary).items():
        try:
            out[name] = _prepare_input(binary, name, x)
        except TpuError as e:
            raise TpuError(f"--input {path}: {e}") from None
    missing = [t.name for t in binary.inputs if t.name not in out]
    if missing:
        raise TpuError("no --input for " + "; ".join(
            f"{n!r} (int8 or float, shape {' or '.join(map(str, _accepted_shapes(binary, n)))})" for n in missing)
            + ": pass --input FILE.npy (the inputs in order) or --input NAME=FILE.npy")
    return out


def _prepare_input(binary, name: str, x: np.ndarray) -> np.ndarray:
    """A user input → the device input: float arrays are quantized with the input's scale and
    zero point (round half to even, saturate: the ONNX QuantizeLinear rule); then the binary's
    host-side transform (im2col of a first conv, see docs/backend.md) is applied if the array has
    the model's original shape; a (1, K) vector model's (1, K) array is its (1, K, 1, 1)."""
    desc = next((t for t in binary.inputs if t.name == name), None)
    if desc is None:
        raise TpuError(f"the binary has no input named {name!r}; its inputs are {[t.name for t in binary.inputs]}")
    if np.issubdtype(x.dtype, np.floating):
        bad = int((~np.isfinite(x)).sum())
        if bad:
            raise TpuError(f"input {name!r}: {bad} non-finite values (NaN or infinity) cannot be quantized")
        x = np.clip(np.rint(x / desc.scale) + desc.zero_point, -128, 127).astype(np.int8)
    elif x.dtype != np.int8:
        raise TpuError(f"input {name!r}: dtype {x.dtype} is neither int8 nor float")
    tr = next((t for t in binary.meta.get("input_transforms", []) if t["name"] == name), None)
    if tr is not None and tuple(x.shape) == tuple(tr["orig_shape"]):
        x = host_input_transform(binary.meta, name, x)
    if x.ndim == 2 and tuple(desc.shape) == (*x.shape, 1, 1):
        x = x.reshape(desc.shape)         # a (1, K) vector model's input: the device's (1, K, 1, 1)
    if tuple(x.shape) != tuple(desc.shape):
        want = _accepted_shapes(binary, name)
        raise TpuError(f"input {name!r}: shape {tuple(x.shape)} is not {' or '.join(map(str, want))}")
    return x


def _config_for(binary, hw: str | None, path: str = "the binary"):
    """The config named by --hw (TpuError naming both configs if the binary, read from ``path``,
    was built for another), or the shipped config whose hash the binary carries."""
    if hw:
        cfg = load_config(hw)
        if cfg.hash_bytes() != binary.config_hash:
            built = binary.meta.get("config", "?")
            raise TpuError(f"{path}: built for hardware config {built!r} ({binary.config_hash.hex()[:16]}…), but "
                           f"--hw {hw} is config {cfg.name!r} ({cfg.hash_hex()[:16]}…): recompile for this config "
                           f"(tpucompile --hw {hw}) or run it with the config it was built for")
        return cfg
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        cfg = load_config(path)
        if cfg.hash_bytes() == binary.config_hash:
            return cfg
    raise TpuError(f"the binary was built for hardware config {binary.config_hash.hex()[:16]}…, "
                   "which is none of the shipped configs: pass --hw CONFIG.yaml")


def _print_report(res) -> None:
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"tpusim: {res.cycles} cycles ({res.wall_s:.2f} s, "
                        f"{res.cycles_per_s:,.0f} cycles/s)")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for k, v in res.counters.items():
        table.add_row(k, f"{v:,}")
    Console().print(table)


def _write_out(res, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, arr in res.outputs.items():
        save_npy_atomic(out_dir / f"{name.replace('/', '_').replace(chr(92), '_')}.npy", arr)  # stay in out_dir
    summary = res.summary()
    summary["retire"] = [[pc, eng, t] for pc, eng, t in res.retire]
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=1))


def _check_destinations(args) -> None:
    """Refuse an unwritable --vcd folder or --out directory before simulating (TpuError naming
    the option), so a long run is not lost at the end."""
    if args.vcd:
        folder = Path(args.vcd).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise TpuError(f"--vcd {args.vcd}: folder {folder} does not exist or is not writable")
    if args.out:
        writable_dir(args.out, "--out")


def _load_run(args) -> tuple:
    """(binary, config, device inputs) of a run's arguments. The file is read once; its config
    hash is checked by ``_config_for`` (the message names both configs)."""
    binary = TpuBinary.read(args.binary)
    cfg = _config_for(binary, args.hw, args.binary)
    inputs = _device_inputs(args.input, binary)
    return binary, cfg, inputs


def cmd_run(args) -> int:
    _check_destinations(args)
    binary, cfg, inputs = _load_run(args)
    res = run_binary(binary, cfg, inputs, vcd=args.vcd)
    print(f"cycles: {res.cycles}")
    for h in binary.meta.get("host_ops", []):
        print(f"note: host op {h['op']} ({', '.join(h.get('inputs', [h['inp']]))} -> "
              f"{', '.join(h.get('outputs', [h['out']]))}) runs after the device and is not run by tpusim run: "
              "the outputs are the device tensors it reads (cosim runs it)")
    _print_report(res)
    if args.out:
        _write_out(res, Path(args.out))
    return 0


def cmd_profile(args) -> int:
    """Run on SimPy, print the per-layer table, write profile.csv, trace.json and roofline.png."""
    writable_dir(args.out, "--out")
    binary, cfg, inputs = _load_run(args)
    res = run_binary(binary, cfg, inputs)
    rows = profile.write_profile(binary, cfg, res.timeline, Path(args.out), res.sram_grants)
    profile.print_table(rows, f"profile of {Path(args.binary).name} on '{cfg.name}': {res.cycles:,} cycles")
    for line in profile.summary_lines(rows, binary):
        print(line)
    en, area = profile.energy_totals(rows, cfg, res.counters), profile.area_mm2(cfg)
    print("energy per inference: " + ", ".join(f"{k} {v:,.1f} uJ" for k, v in en.items())
          + f"; area {area['total']:.1f} mm^2 (" + ", ".join(f"{k} {v:.2f}" for k, v in area.items() if k != "total")
          + "; tpusim.arch.costs, 45 nm)")
    print(f"wrote {Path(args.out) / 'profile.csv'}, trace.json (open in ui.perfetto.dev) and roofline.png")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tpusim", description="cycle-accurate TPU simulator")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a .tpubin")
    r.add_argument("binary", help="compiled program (.tpubin)")
    r.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="int8 NCHW input tensor (repeat for several inputs)")
    r.add_argument("--hw", default=None, help="hardware config name or YAML path (default: the shipped config the binary was built for)")
    r.add_argument("--vcd", default=None, help="write architectural signals to this VCD file")
    r.add_argument("--out", default=None, help="directory for <output>.npy and summary.json")
    r.set_defaults(func=cmd_run)
    pr = sub.add_parser("profile", help="run a .tpubin and profile it per layer")
    pr.add_argument("binary", help="compiled program (.tpubin)")
    pr.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                    help="input tensor, int8 NCHW or float (quantized), (repeat for several inputs)")
    pr.add_argument("--hw", default=None, help="hardware config name or YAML path (default: the binary's)")
    pr.add_argument("--out", default="profile",
                    help="directory for profile.csv, trace.json, roofline.png (default: ./profile)")
    pr.set_defaults(func=cmd_profile)
    sw = sub.add_parser("sweep", help="models x configs: the fast estimate and SimPy (tpusim.flow.sweep)")
    sweep.build_parser(sw)
    sw.set_defaults(func=sweep.run_args)
    return p


@user_errors("tpusim")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except TpuError as e:
        print(f"tpusim: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:  # --out / --vcd not writable, disk full, ...
        print(f"tpusim: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
