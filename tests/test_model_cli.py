"""``tpusim run`` command line: success path and clean one-line errors with exit status 2."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from test_model_sim import build_conv_binary

from tpusim.arch.config import load_config
from tpusim.flow.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, cfg_name="small"):
    binary, ref = build_conv_binary(load_config(cfg_name))
    path = tmp_path / "conv.tpubin"
    binary.write(path)
    x = np.random.default_rng(4).integers(-128, 128, (1, 8, 4, 4), dtype=np.int8)
    np.save(tmp_path / "x.npy", x)
    return path, x, ref


def test_run_writes_outputs_and_summary(tmp_path, capsys):
    path, x, ref = _write(tmp_path)
    out = tmp_path / "out"
    rc = main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--hw", "small",
               "--out", str(out), "--vcd", str(tmp_path / "w.vcd")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "cycles:" in text and "ddr_busy_cycles" in text
    assert (np.load(out / "y.npy") == ref(x)).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cycles"] == summary["counters"]["cycles"] > 0
    assert summary["retire"][-1][1] == "HALT"
    assert (tmp_path / "w.vcd").stat().st_size > 0


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tpusim.flow.cli", *args], cwd=ROOT,
                          capture_output=True, text=True)


def test_bad_file_clean_error(tmp_path):
    bad = tmp_path / "bad.tpubin"
    bad.write_bytes(b"NOPE" + bytes(100))
    r = _cli("run", str(bad), "--hw", "small")
    assert r.returncode == 2
    assert r.stderr.startswith("tpusim: error: ") and "bad magic" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_file_and_wrong_config(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.tpubin"), "--hw", "small"]) == 2
    assert "cannot read" in capsys.readouterr().err
    path, _, _ = _write(tmp_path)
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--hw", "seed"]) == 2
    assert "recompile for this config" in capsys.readouterr().err


def test_bad_input_clean_error(tmp_path, capsys):
    path, _, _ = _write(tmp_path)
    np.save(tmp_path / "f.npy", np.zeros((1, 8, 4, 4), np.int32))
    assert main(["run", str(path), "--input", str(tmp_path / "f.npy"), "--hw", "small"]) == 2
    assert f"--input {tmp_path / 'f.npy'}: input 'x': dtype int32 is neither int8 nor float" in capsys.readouterr().err
    np.save(tmp_path / "s.npy", np.zeros((1, 8, 4, 5), np.int8))
    assert main(["run", str(path), "--input", str(tmp_path / "s.npy"), "--hw", "small"]) == 2
    assert f"--input {tmp_path / 's.npy'}: input 'x': shape (1, 8, 4, 5) is not (1, 8, 4, 4)" in capsys.readouterr().err
    assert main(["run", str(path), "--hw", "small"]) == 2
    assert capsys.readouterr().err.strip() == (
        "tpusim: error: no --input for 'x' (int8 or float, shape (1, 8, 4, 4)): pass --input FILE.npy (the inputs "
        "in order) or --input NAME=FILE.npy")
    assert main(["run", str(path), "--input", str(tmp_path / "nothere.npy"), "--hw", "small"]) == 2
    assert "cannot load input 'x'" in capsys.readouterr().err


def test_float_input_quantized_and_config_inferred(tmp_path, capsys):
    """A float input is quantized with the input's scale and zero point; without --hw the
    shipped config whose hash the binary carries is used."""
    path, _, _ = _write(tmp_path)
    np.save(tmp_path / "f.npy", np.zeros((1, 8, 4, 4), np.float32))
    assert main(["run", str(path), "--input", str(tmp_path / "f.npy"), "--out", str(tmp_path / "o")]) == 0
    assert "cycles:" in capsys.readouterr().out


def test_unwritable_destinations_refused_before_the_run(tmp_path, capsys):
    path, _, _ = _write(tmp_path)
    x = str(tmp_path / "x.npy")
    assert main(["run", str(path), "--input", x, "--vcd", str(tmp_path / "no" / "d" / "a.vcd")]) == 2
    err = capsys.readouterr().err
    assert f"--vcd {tmp_path / 'no' / 'd' / 'a.vcd'}: folder {tmp_path / 'no' / 'd'} does not exist" in err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", str(path), "--input", x, "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tpusim: error: --out {blocker / 'sub'}: cannot create it (")
    assert "cycles:" not in capsys.readouterr().out


def test_run_takes_a_vector_models_own_input_shape(tmp_path, capsys):
    """`tpusim run` of an MLP compiled from a (1, K) input takes the (1, K) array a user has
    (the device's input is (1, K, 1, 1)) and gives golden's output; another shape names both."""
    import qnets

    from tpucompile import golden
    from tpucompile.driver import compile_onnx
    m = qnets.mlp(k=48)
    xs = qnets.inputs((1, 48), 3, seed=2)
    res = compile_onnx(m, load_config("small"), xs[1:])
    res.binary.write(tmp_path / "mlp.tpubin")
    np.save(tmp_path / "x.npy", xs[0])
    assert main(["run", str(tmp_path / "mlp.tpubin"), "--input", str(tmp_path / "x.npy"), "--out", str(tmp_path / "o")]) == 0
    out = res.binary.outputs[0]
    want = golden.run_golden(res.qgraph, golden.quantize_input(res.qgraph, xs[0]))[res.qgraph.resolve(out.name)]
    got = np.load(tmp_path / "o" / f"{out.name}.npy")
    assert np.array_equal(got.reshape(-1), want.reshape(-1))
    np.save(tmp_path / "bad.npy", np.zeros((1, 47), np.float32))
    capsys.readouterr()
    assert main(["run", str(tmp_path / "mlp.tpubin"), "--input", str(tmp_path / "bad.npy")]) == 2
    assert "shape (1, 47) is not (1, 48, 1, 1) or (1, 48)" in capsys.readouterr().err
