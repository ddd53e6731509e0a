"""User mistakes on the command lines give one line on stderr and exit 2 (Ctrl-C: 130)."""
from __future__ import annotations

import numpy as np
import pytest

from cocotb_tests import build
from tpusim.arch.cliutil import user_errors
from tpusim.flow import bench, cosim, sweep


def test_cosim_argument_ranges(capsys):
    assert cosim.main(["--model", "resnet50-reduced", "--hw", "small", "--no-rtl", "--calib", "0"]) == 2
    assert "cosim: error: --calib must be between 1 and 25 built-in calibration images (or a folder / .npy/.npz file), got 0" in capsys.readouterr().err
    assert cosim.main(["--model", "resnet50-reduced", "--no-rtl", "--input-size", "-5"]) == 2
    assert "--input-size must be a positive multiple of 32, got -5" in capsys.readouterr().err
    # a negative count of held-out images was taken as a slice end: "SimPy -0.00% on -5", PASS
    assert cosim.main(["--model", "digits", "--hw", "small", "--no-rtl", "--dataset-simpy", "-5"]) == 2
    assert "cosim: error: --dataset-simpy must be 0 or more held-out images, got -5" in capsys.readouterr().err
    assert cosim.main(["--model", "digits", "--hw", "small", "--dataset-rtl", "-1"]) == 2
    assert "cosim: error: --dataset-rtl must be 0 or more held-out images, got -1" in capsys.readouterr().err
    # --input-size on a model of static shape (all are): the calibrator's shape error did not name the option
    assert cosim.main(["--model", "resnet50-reduced", "--hw", "small", "--no-rtl", "--input-size", "64"]) == 2
    assert ("cosim: error: --input-size 64: the model's input 'gpu_0/data_0' has the static shape (1, 3, 32, 32), "
            "its height and width are fixed at 32x32; leave --input-size out") in capsys.readouterr().err


BERT_FIXTURE = "tests/fixtures/bert_tiny_32.ts.onnx"
VIT_FIXTURE = "tests/fixtures/vit_tiny_32.ts.onnx"


@pytest.mark.parametrize("model, opts, want", [
    # silently ignored for token-id models before
    (BERT_FIXTURE, ["--input-size", "64"], "--input-size 64: the model's inputs are token ids and masks (input_ids "
                                           "(1, 32), token_type_ids (1, 32), attention_mask (1, 32)), not an image; "
                                           "their length is fixed by the model: leave --input-size out"),
    ("bert-tiny", ["--dataset-rtl", "3"], "--dataset-rtl runs the held-out images of a dataset model (digits); "
                                          "'bert-tiny' has none: leave --dataset-rtl out"),
    (BERT_FIXTURE, ["--dataset-simpy", "3"], "--dataset-simpy runs the held-out images of a dataset model (digits); "
                                             f"'{BERT_FIXTURE}' has none: leave --dataset-simpy out"),
    # a vision transformer's image size is checked like an image model's
    (VIT_FIXTURE, ["--input-size", "64"], "--input-size 64: the model's input 'pixel_values' has the static shape "
                                          "(1, 3, 32, 32), its height and width are fixed at 32x32"),
    # was a KeyError on the mask's ConstantOfShape ("cannot give it synthetic weights (KeyError: ...)")
    (BERT_FIXTURE, ["--synthetic-weights", "3"], f"{BERT_FIXTURE}: --synthetic-weights: the model is a transformer "
                                                 "(node '/model/embeddings/word_embeddings/Gather' is an embedding "
                                                 "lookup (a Gather of a constant table by a run-time input)); synthetic "
                                                 "weights are drawn for Conv, Gemm and BatchNormalization parameters"),
    (VIT_FIXTURE, ["--synthetic-weights", "3"], "(node '/model/layers.0/layernorm_before/LayerNormalization' is a "
                                                "LayerNormalization)"),
])
def test_cosim_options_a_transformer_cannot_use_are_refused(tmp_path, capsys, model, opts, want):
    assert cosim.main(["--model", model, "--hw", "small", "--no-rtl", "--out", str(tmp_path), *opts]) == 2
    err = capsys.readouterr().err
    assert want in err and len(err.strip().splitlines()) == 1, err


def test_cosim_dataset_options_with_an_input_file_are_refused(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 8, 8), np.float32))
    assert cosim.main(["--model", "digits", "--hw", "small", "--no-rtl", "--out", str(tmp_path / "o"),
                       "--input", str(tmp_path / "x.npy"), "--dataset-rtl", "2"]) == 2
    assert (f"cosim: error: --dataset-rtl runs the held-out images of a dataset model (digits) without --input; "
            f"--input {tmp_path / 'x.npy'} replaces them: leave --dataset-rtl out") in capsys.readouterr().err


def test_cosim_waves_without_the_rtl_is_refused(capsys):
    """--waves with --no-rtl: one line naming both options (the waveforms were silently not written)."""
    assert cosim.main(["--model", "resnet50-reduced", "--hw", "small", "--no-rtl", "--waves"]) == 2
    assert "cosim: error: --waves dumps the RTL's waveforms; it cannot go with --no-rtl" in capsys.readouterr().err


def test_cosim_out_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    assert cosim.main(["--model", "resnet50-reduced", "--hw", "small", "--no-rtl", "--out", str(f)]) == 2
    assert f"cosim: error: --out {f}: cannot create it (File exists)" in capsys.readouterr().err


def _tpucompile(argv):
    from tpucompile.cli import main
    return main(argv)


def _profile(argv):
    from tpusim.flow.cli import main
    return main(argv)


@pytest.mark.parametrize("prog, main, argv, option", [
    ("cosim", cosim.main, ["--model", "digits", "--hw", "small", "--no-rtl", "--out", "{d}"], "--out"),
    ("tpusim sweep", sweep.main, ["--models", "digits", "--array", "8x8", "--estimate-only", "--out", "{d}"], "--out"),
    ("tpusim", _profile, ["profile", "nosuch.tpubin", "--out", "{d}"], "--out"),
    ("tpucompile", _tpucompile, ["digits", "--hw", "small", "-o", "{d}/m.tpubin"], "-o/--output {d}/m.tpubin: folder"),
    ("tpucompile", _tpucompile, ["digits", "--hw", "small", "-o", "m.tpubin", "--dump-ir", "{d}"], "--dump-ir"),
])
def test_uncreatable_output_folder_names_the_option(prog, main, argv, option, capsys):
    """An output folder that cannot be created: one line naming the option and the path, exit 2,
    before any work (the model is not even loaded)."""
    d = "/proc/nope/run"
    assert main([a.format(d=d) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == f"{prog}: error: {option.format(d=d)} {d}: cannot create it (No such file or directory)\n"


def test_tpucompile_output_is_a_folder(tmp_path, capsys):
    assert _tpucompile(["digits", "--hw", "small", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"tpucompile: error: -o/--output {tmp_path}: is a folder; give the path of "
                                       "the .tpubin file to write\n")


@pytest.mark.parametrize("main", [build.main, lambda a: bench.main(["--hw"] + a)])
def test_unknown_config(main, capsys):
    assert main(["nosuch"]) == 2
    assert "error: hardware config 'nosuch' not found (known names: ['medium', 'narrow', 'seed', 'small', 'small_tall', 'small_wide', 'wide'])" \
        in capsys.readouterr().err


def test_interrupt_is_one_line(capsys):
    @user_errors("tool")
    def main():
        raise KeyboardInterrupt
    assert main() == 130
    assert capsys.readouterr().err == "tool: interrupted\n"


def test_tpusim_run_unknown_input_name(tmp_path, capsys):
    from tests.test_model_cli import _write
    from tpusim.flow.cli import main
    path, _, _ = _write(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 4, 4), np.int8))
    assert main(["run", str(path), "--input", f"foo={tmp_path / 'x.npy'}"]) == 2
    assert "the binary has no input named 'foo'; its inputs are ['x']" in capsys.readouterr().err


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    from tpusim.arch.fileio import save_npy_atomic, write_bytes_atomic
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_bytes_atomic(target, object())      # not bytes: nothing written
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]
    save_npy_atomic(tmp_path / "a.npy", np.arange(3, dtype=np.int8))
    assert np.load(tmp_path / "a.npy").tolist() == [0, 1, 2]


@pytest.mark.parametrize("module, prog", [("tpucompile.cli", "tpucompile"), ("tpusim.flow.cli", "tpusim"),
                                          ("tpusim.cosim", "cosim")])
def test_interrupt_while_importing_is_one_line(module, prog):
    """A Ctrl-C that comes while a tool's modules still load (before user_errors wraps main):
    ``prog: interrupted``, no traceback, the process ended by SIGINT (130 in a shell)."""
    import signal
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", f"import {module}; raise KeyboardInterrupt"],
                       capture_output=True, text=True, timeout=120)
    assert r.stderr == f"{prog}: interrupted\n"
    assert r.returncode == -signal.SIGINT


def test_tpusim_run_on_another_config_names_both(tmp_path, capsys):
    """A binary built for seed run with --hw small: both config names, and what to do."""
    from tpucompile.cli import main as tpucompile
    from tpusim.flow.cli import main
    b = tmp_path / "d.tpubin"
    assert tpucompile(["digits", "--hw", "seed", "-o", str(b), "--calib", "1"]) == 0
    capsys.readouterr()
    assert main(["run", str(b), "--hw", "small"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tpusim: error: {b}: built for hardware config 'seed' (")
    assert "but --hw small is config 'small' (" in err and "recompile for this config (tpucompile --hw small)" in err


def test_broken_npz_files_are_refused_by_name(tmp_path, capsys):
    """A file that starts like a zip but is none, and an .npz whose member is cut short, gave a
    zipfile / numpy traceback (exit 1) on --input and --calib (new-user trial, 2026-12-07)."""
    from tpucompile import cli as tpucompile_cli
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04garbage")
    buf = tmp_path / "good.npz"
    np.savez(buf, x=np.zeros((1, 3, 32, 32), np.float32))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(buf.read_bytes()[:-200])
    for opt in ("--input", "--calib"):
        for f in (junk, cut):
            assert tpucompile_cli.main(["resnet50-reduced", "--hw", "small", "-o", str(tmp_path / "o.tpubin"),
                                        opt, str(f)]) == 2
            err = capsys.readouterr().err
            assert f"{opt} {str(f)!r}: not a readable .npy/.npz file (" in err and "Traceback" not in err, err


def test_sweep_calib_range_and_spec_shape(tmp_path, capsys):
    """--calib beyond the built-in photographs, a binary --spec and `models: name` (a string)
    gave a ValueError / UnicodeDecodeError traceback or 'model 's' is not a built-in model'."""
    out = str(tmp_path / "s")
    assert sweep.main(["--estimate-only", "--models", "squeezenet", "--calib", "99", "--out", out]) == 2
    assert "--calib must be between 1 and 25 built-in calibration images, got 99" in capsys.readouterr().err
    binary = tmp_path / "spec.npy"
    np.save(binary, np.arange(4))
    assert sweep.main(["--estimate-only", "--spec", str(binary), "--out", out]) == 2
    assert f"--spec {binary}: not a text (YAML) file" in capsys.readouterr().err
    assert sweep.main(["--estimate-only", "--refine", "2", "--models", "squeezenet", "--out", out]) == 2
    assert ("--refine 2 runs SimPy on the 2 best points, --estimate-only on none: give one of them"
            in capsys.readouterr().err)
    spec = tmp_path / "spec.yaml"
    spec.write_text("models: squeezenet\n")
    assert sweep.main(["--estimate-only", "--spec", str(spec), "--out", out]) == 2
    assert (f"--spec {spec}: models: expected a list of model names, got the string 'squeezenet' "
            "(write models: [squeezenet])") in capsys.readouterr().err


def test_synthetic_weights_on_a_built_in_model_is_refused(tmp_path, capsys):
    """It was silently ignored (exit 0, PASS) on a built-in model (new-user trial, 2026-12-07)."""
    from tpucompile import cli as tpucompile_cli
    want = ("--synthetic-weights 1: 'squeezenet' is a built-in model, whose weights are fixed (seeded where "
            "synthetic); the option applies to a model file: leave it out")
    assert tpucompile_cli.main(["squeezenet", "--hw", "small", "-o", str(tmp_path / "o.tpubin"),
                                "--synthetic-weights", "1"]) == 2
    assert want in capsys.readouterr().err
    assert cosim.main(["--model", "squeezenet", "--hw", "small", "--no-rtl", "--synthetic-weights", "1",
                       "--out", str(tmp_path / "c")]) == 2
    assert want in capsys.readouterr().err


def test_python_m_tpucompile_and_the_sweep_help():
    """`python -m tpucompile` had no __main__ (only the console script worked); the sweep's help
    description was cut mid-sentence at the docstring's first line break."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "tpucompile", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("usage: tpucompile"), r.stderr
    assert sweep.build_parser().description.endswith("measured on the cycle-accurate SimPy model.")
