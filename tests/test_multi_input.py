"""Models with several run-time inputs (issue 9): ``--input FILE.npz`` (one array per input
name), ``--calib FILE.npz`` (one stack per input name), seeded noise per input without them;
golden == SimPy bit-exact and close to onnxruntime; errors name the missing / misshaped input."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import qnets
from onnx import TensorProto, helper, numpy_helper

from tpucompile import inputs
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import main as cosim_main


def _two_input_model(kind: str):
    """Conv(a) + Conv(b) -> Add -> Relu ("add"), Concat(a, b) -> Conv ("concat"), or the Add of
    two 2-D ("vectors") or 3-D ("sequences") inputs' layers."""
    rng = np.random.default_rng(0)
    if kind == "add":
        nodes = [helper.make_node("Conv", ["a", "wa"], ["ya"], name="conva", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["b", "wb"], ["yb"], name="convb", kernel_shape=[1, 1]),
                 helper.make_node("Add", ["ya", "yb"], ["s"], name="add"),
                 helper.make_node("Relu", ["s"], ["y"], name="relu")]
        inits = {"wa": qnets.conv_w(rng, 8, 3, 3), "wb": qnets.conv_w(rng, 8, 4, 1)}
        shapes = {"a": (1, 3, 8, 8), "b": (1, 4, 8, 8)}
    elif kind == "vectors":         # 2-D (1, K) inputs: MatMul(a) + MatMul(b)
        nodes = [helper.make_node("MatMul", ["a", "wa"], ["ya"], name="mma"),
                 helper.make_node("MatMul", ["b", "wb"], ["yb"], name="mmb"),
                 helper.make_node("Add", ["ya", "yb"], ["y"], name="add")]
        inits = {"wa": rng.normal(0, 0.3, (16, 8)).astype(np.float32),
                 "wb": rng.normal(0, 0.3, (12, 8)).astype(np.float32)}
        shapes = {"a": (1, 16), "b": (1, 12)}
    elif kind == "sequences":       # 3-D (1, C, L) inputs: Conv1d(a) + Conv1d(b)
        nodes = [helper.make_node("Conv", ["a", "wa"], ["ya"], name="ca", kernel_shape=[3], pads=[1, 1]),
                 helper.make_node("Conv", ["b", "wb"], ["yb"], name="cb", kernel_shape=[1]),
                 helper.make_node("Add", ["ya", "yb"], ["y"], name="add")]
        inits = {"wa": rng.normal(0, 0.3, (8, 4, 3)).astype(np.float32),
                 "wb": rng.normal(0, 0.3, (8, 6, 1)).astype(np.float32)}
        shapes = {"a": (1, 4, 32), "b": (1, 6, 32)}
    else:
        nodes = [helper.make_node("Concat", ["a", "b"], ["c"], name="cat", axis=1),
                 helper.make_node("Conv", ["c", "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
        inits = {"w": qnets.conv_w(rng, 6, 7, 3)}
        shapes = {"a": (1, 3, 8, 8), "b": (1, 4, 8, 8)}
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                                        for n, s in shapes.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, shapes


@pytest.mark.parametrize("kind", ["add", "concat", "vectors", "sequences"])
def test_two_inputs_cosim_from_files(kind, tmp_path):
    m, shapes = _two_input_model(kind)
    onnx.save(m, tmp_path / "m.onnx")
    rng = np.random.default_rng(7)
    np.savez(tmp_path / "x.npz", **{n: rng.normal(0, 1, s).astype(np.float32) for n, s in shapes.items()})
    np.savez(tmp_path / "cal.npz", **{n: rng.normal(0, 1, (32, *s[1:])).astype(np.float32) for n, s in shapes.items()})
    rc = cosim_main(["--model", str(tmp_path / "m.onnx"), "--hw", "small", "--no-rtl", "--out", str(tmp_path / "r"),
                     "--input", str(tmp_path / "x.npz"), "--calib", str(tmp_path / "cal.npz")])
    assert rc == 0
    v = json.loads((tmp_path / "r" / "verdict.json").read_text())
    assert all(m_["golden_vs_simpy"] == 0 for m_ in v["mismatches"].values()), v["mismatches"]
    assert v["accuracy"]["cosine"] > 0.99, v["accuracy"]
    assert v["mismatches"] and v["layers_compared"] >= 2
    assert not any("seeded noise" in n for n in v["notes"]), v["notes"]
    for n, s in shapes.items():
        assert np.load(tmp_path / "r" / f"input_q_{n}.npy").size == np.prod(s)     # (1, C, L): (1, C, 1, L)


def test_two_inputs_seeded_noise_and_compile(tmp_path, capsys):
    from tpucompile.cli import main as tpucompile_main
    m, shapes = _two_input_model("add")
    onnx.save(m, tmp_path / "m.onnx")
    assert cosim_main(["--model", str(tmp_path / "m.onnx"), "--hw", "small", "--no-rtl", "--out", str(tmp_path / "r")]) == 0
    notes = json.loads((tmp_path / "r" / "verdict.json").read_text())["notes"]
    assert any("several run-time inputs: accuracy is measured on seeded noise" in n for n in notes), notes
    x, cal, _ = inputs.model_data(m)
    assert sorted(x) == ["a", "b"] and len(cal) == 4 and all(sorted(c) == ["a", "b"] for c in cal)
    assert tpucompile_main([str(tmp_path / "m.onnx"), "--hw", "small", "-o", str(tmp_path / "m.tpubin")]) == 0
    from tpusim.arch.binary import TpuBinary
    assert [d.name for d in TpuBinary.read(tmp_path / "m.tpubin").inputs] == ["a", "b"]


def test_two_inputs_errors(tmp_path, capsys):
    m, shapes = _two_input_model("add")
    onnx.save(m, tmp_path / "m.onnx")
    specs = inputs.input_specs(m)
    np.savez(tmp_path / "miss.npz", a=np.zeros(shapes["a"]))
    with pytest.raises(CompileError, match=r"the model's run-time inputs are \['a', 'b'\]; missing \['b'\]"):
        inputs.load_inputs(tmp_path / "miss.npz", specs)
    np.savez(tmp_path / "extra.npz", a=np.zeros(shapes["a"]), b=np.zeros(shapes["b"]), c=np.zeros(3))
    with pytest.raises(CompileError, match=r"unknown \['c'\]"):
        inputs.load_inputs(tmp_path / "extra.npz", specs)
    np.save(tmp_path / "one.npy", np.zeros(shapes["a"]))
    with pytest.raises(CompileError, match=r"2 run-time inputs \['a', 'b'\]; give an .npz with one array per input"):
        inputs.load_inputs(tmp_path / "one.npy", specs)
    np.savez(tmp_path / "cal.npz", a=np.zeros((3, 3, 8, 8)), b=np.zeros((2, 4, 8, 8)))
    with pytest.raises(CompileError, match=r"different numbers of samples \{'a': 3, 'b': 2\}"):
        inputs.load_calibs(tmp_path / "cal.npz", specs)
    (tmp_path / "imgs").mkdir()
    with pytest.raises(CompileError, match=r"image folders calibrate a model with one image input"):
        inputs.load_calibs(tmp_path / "imgs", specs)
    np.savez(tmp_path / "bad.npz", a=np.zeros(shapes["a"]), b=np.zeros((1, 4, 4, 4)))
    capsys.readouterr()
    assert cosim_main(["--model", str(tmp_path / "m.onnx"), "--hw", "small", "--no-rtl", "--out", str(tmp_path / "b"),
                       "--input", str(tmp_path / "bad.npz")]) == 2
    err = capsys.readouterr().err
    assert "array 'b': array of shape (1, 4, 4, 4) does not fit the input 'b' of shape (1, 4, 8, 8)" in err, err


def test_two_inputs_tpucompile_input(tmp_path, capsys):
    """``tpucompile --input x.npz``: one quantized input file per input name and the golden
    outputs, which ``tpusim run`` given both inputs by name reproduces; an .npz missing an
    input's name is refused by tpucompile with cosim's message, before anything is written."""
    from tpucompile.cli import main as tpucompile_main
    from tpusim.flow.cli import main as tpusim_main
    m, shapes = _two_input_model("add")
    onnx.save(m, tmp_path / "m.onnx")
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "x.npz", **{n: rng.normal(0, 1, s).astype(np.float32) for n, s in shapes.items()})
    assert tpucompile_main([str(tmp_path / "m.onnx"), "--hw", "small", "-o", str(tmp_path / "o" / "m.tpubin"),
                            "--input", str(tmp_path / "x.npz")]) == 0
    gold = np.load(tmp_path / "o" / "m.golden.npz")
    assert tpusim_main(["run", str(tmp_path / "o" / "m.tpubin"), "--out", str(tmp_path / "run")]
                       + [f"--input={n}={tmp_path / 'o' / f'm.input_q_{n}.npy'}" for n in shapes]) == 0
    assert list(gold) == ["y"] and np.array_equal(np.load(tmp_path / "run" / "y.npy"), gold["y"])
    np.savez(tmp_path / "miss.npz", a=np.zeros(shapes["a"]))
    capsys.readouterr()
    assert tpucompile_main([str(tmp_path / "m.onnx"), "--hw", "small", "-o", str(tmp_path / "p" / "m.tpubin"),
                            "--input", str(tmp_path / "miss.npz")]) == 2
    msg = f"--input '{tmp_path / 'miss.npz'}': the model's run-time inputs are ['a', 'b']; missing ['b']\n"
    assert capsys.readouterr().err == "tpucompile: error: " + msg
    assert not any((tmp_path / "p").iterdir())
    assert cosim_main(["--model", str(tmp_path / "m.onnx"), "--hw", "small", "--no-rtl", "--out", str(tmp_path / "r"),
                       "--input", str(tmp_path / "miss.npz")]) == 2
    assert capsys.readouterr().err.endswith("cosim: error: " + msg)


@pytest.mark.rtl
@pytest.mark.parametrize("kind", ["add", "concat", "sequences"])
def test_two_inputs_three_way_small_rtl(kind, tmp_path):
    from tests.test_cosim_rtl import _check
    from tpusim.flow.cosim import run
    m, shapes = _two_input_model(kind)
    rng = np.random.default_rng(3)
    draw = lambda: {n: rng.normal(0, 1, s).astype(np.float32) for n, s in shapes.items()}  # noqa: E731
    v = run(m, "small", tmp_path, rtl=True, data=(draw(), [draw() for _ in range(8)]), name=f"two_inputs_{kind}")
    _check(v)
