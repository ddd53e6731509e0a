"""The onnx wheel's model graphs as built-in names with seeded synthetic weights (issue 9)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tpucompile import driver, realdata
from tpucompile.frontend.onnx_import import import_onnx
from tpusim.flow.cosim import run


def test_every_wheel_graph_is_a_builtin_name():
    assert set(realdata.WHEEL_MODELS) <= set(driver.MODELS)
    for file in realdata.WHEEL_MODELS.values():
        assert (realdata.LIGHT_RESNET50.parent / f"{file}.onnx").exists(), file


def test_synthetic_weights_replace_every_placeholder_and_are_seeded():
    m = realdata.wheel_model("squeezenet")
    assert not [n for n in m.graph.node if n.op_type == "ConstantOfShape"]
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    conv0 = next(n for n in m.graph.node if n.op_type == "Conv")
    std = np.sqrt(2.0 / np.prod(w[conv0.input[1]].shape[1:]))
    assert abs(w[conv0.input[1]].std() / std - 1) < 0.05          # He-normal
    assert [i.name for i in m.graph.input] == ["data_0"]
    again = realdata.wheel_model("squeezenet")
    assert m.SerializeToString() == again.SerializeToString()
    other = realdata.synthetic_weights(onnx.load(str(realdata.LIGHT_RESNET50.parent / "light_squeezenet.onnx")), seed=1)
    assert not np.array_equal(numpy_helper.to_array(other.graph.initializer[-1]), w[other.graph.initializer[-1].name])


def test_single_number_mul_add_constants_are_kept():
    """A hard swish's scalar operands (x * (relu6(x + 3) / 6) as Add 3, Mul 1/6) are the export's
    own constants, kept; a per-channel Mul operand is redrawn like a BN scale."""
    inits = [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three"),
             numpy_helper.from_array(np.array([1 / 6], np.float32), "sixth"),
             numpy_helper.from_array(np.ones((1, 4, 1, 1), np.float32), "gain")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "three"], ["a"]),
             helper.make_node("Mul", ["a", "sixth"], ["m"]), helper.make_node("Mul", ["m", "gain"], ["y"])]
    g = helper.make_graph(nodes, "hs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    m = realdata.synthetic_weights(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), seed=2)
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    assert float(w["three"]) == 3.0 and w["sixth"].tolist() == [np.float32(1 / 6)]
    assert not np.array_equal(w["gain"], np.ones((1, 4, 1, 1))) and not np.array_equal(w["w"], np.ones((4, 3, 3, 3)))


def test_a_reshaped_classifier_weight_is_replaced_too():
    """inception_v1's Gemm weight is a (1, 1, 1000, 1024) placeholder behind a Reshape: He-normal
    over its 1024 inputs, not the placeholder's constant (which made every logit equal)."""
    m = realdata.wheel_model("inception_v1")
    w = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "loss3/classifier_w_0"))
    assert w.shape == (1, 1, 1000, 1024) and abs(w.std() / np.sqrt(2.0 / 1024) - 1) < 0.05


@pytest.mark.slow
def test_vgg19_imports():
    import_onnx(driver.load_model("vgg19"))       # 143 M synthetic weights: ~10 s


def test_lrn_wheel_model_compiles_bit_exact(tmp_path):
    """inception_v1 (GoogLeNet: two LRNs, 9 inception Concats) with synthetic weights on 'seed'
    through SimPy: every layer golden = SimPy (each LRN four device ops)."""
    v = run("inception_v1", "seed", tmp_path, rtl=False, calib=1)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.layer_mismatches)


def test_unknown_wheel_model():
    with pytest.raises(ValueError, match=r"unknown model 'lenet'; known: alexnet, densenet121"):
        realdata.wheel_model("lenet")


def test_synthetic_weights_flag_of_the_compiler_cli(tmp_path, capsys):
    """`tpucompile FILE --synthetic-weights SEED` replaces the wheel's placeholder weights."""
    from tpucompile.cli import main
    from tpusim.arch.binary import TpuBinary
    src = realdata.LIGHT_RESNET50.parent / "light_squeezenet.onnx"
    outs = []
    for flag in ([], ["--synthetic-weights", "3"]):
        out = tmp_path / f"sq{len(outs)}.tpubin"
        assert main([str(src), "--hw", "small", "-o", str(out), *flag]) == 0
        outs.append(TpuBinary.read(out))
    assert [L["op"] for L in outs[0].meta["layers"]] == [L["op"] for L in outs[1].meta["layers"]]
    assert outs[0].ddr_segments() != outs[1].ddr_segments()                 # other weights


def test_the_zoo_table_never_cuts_a_model_name():
    """`make bench-zoo`'s table (bench_zoo.zoo_table) on a narrow console: every built-in name
    whole on one line (a 120-column console cut 'bert-base-linears' to 'bert-base-li…'), a
    refusal's reason folded, not cut."""
    import io

    from rich.console import Console

    from tpusim.flow.bench_zoo import zoo_table
    ok = {"passed": True, "load_s": 10.1, "compile_s": 11.0, "simpy_s": 123.8, "cycles": 117_122_300,
          "utilisation": 0.67, "cosine": 0.9995, "sqnr_db": 29.8, "top1": None, "top5": None, "dataset_top1": None}
    why = "the compiler refuses node 'x' (Conv): a reason long enough to need several lines in a narrow column"
    rows = [{"model": m, **ok} for m in driver.MODELS] + [{"model": "bert-base-linears", "error": why}]
    buf = io.StringIO()
    Console(width=120, file=buf).print(zoo_table(rows, "seed"))
    text = buf.getvalue()
    got = []                             # (model cell, verdict cells joined) per table row
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [c.strip() for c in line.split("│")[1:-1]]
            if cells[0]:
                got.append([cells[0], cells[-1]])
            else:
                got[-1][1] += " " + cells[-1]
    assert "…" not in text and [m for m, _ in got] == [r["model"] for r in rows], text
    assert " ".join(got[-1][1].split()) == f"refused: {why}", got[-1]


def test_bench_zoo_marks_each_budget(tmp_path, capsys):
    """`make bench-zoo`'s table marks compile and SimPy seconds within / over their budgets
    (compile <= 5 s, SimPy <= 30 s), its JSON rows carry the same verdicts and a line names
    every figure over budget; a real run of resnet50-reduced on small, then rows over budget."""
    import json

    from tpusim.flow import bench_zoo
    assert bench_zoo.main(["--hw", "small", "--models", "resnet50-reduced", "--out", str(tmp_path / "z"),
                           "--json", str(tmp_path / "zoo.json")]) == 0
    out = capsys.readouterr().out
    (row,) = json.loads((tmp_path / "zoo.json").read_text())
    for stage, budget in (("compile", 5.0), ("simpy", 30.0)):
        assert row[f"{stage}_within"] == (row[f"{stage}_s"] <= budget), row
        assert bench_zoo.budget_cell(row[f"{stage}_s"], stage) in out, out
    assert out.rstrip().endswith("every figure within budget" if row["compile_within"] and row["simpy_within"]
                                 else "s")
    assert bench_zoo.budget_cell(6.24, "compile") == "6.2 over" and bench_zoo.budget_cell(30.0, "simpy") == "30.0 within"
    assert bench_zoo.budget_cell(None, "simpy") == "-"
    rows = [{"model": "vgg19", "compile_s": 6.2, "simpy_s": 12.0}, {"model": "a", "compile_s": 1.0, "simpy_s": 31.5},
            {"model": "refused", "error": "x"}]
    assert bench_zoo.over_budget(rows) == ["vgg19 compile 6.2 s > 5 s", "a simpy 31.5 s > 30 s"]


def test_bench_zoo_refuses_bad_options_before_running(tmp_path, capsys):
    """A bad --hw ran every model into a 'refused' row (exit 0, 'every figure within budget'), an
    empty --models printed an empty table, a missing --json folder was refused after the runs
    (new-user trial, 2026-12-07)."""
    from tpusim.flow import bench_zoo
    out = str(tmp_path / "z")
    assert bench_zoo.main(["--hw", "nosuch", "--models", "digits", "--out", out]) == 2
    assert "bench-zoo: error: " in (err := capsys.readouterr().err) and "nosuch" in err, err
    assert bench_zoo.main(["--models", ",", "--out", out]) == 2
    assert "bench-zoo: error: --models: no model named in ','" in capsys.readouterr().err
    assert bench_zoo.main(["--models", "digits", "--json", str(tmp_path / "no" / "z.json"), "--out", out]) == 2
    assert f"--json {tmp_path / 'no' / 'z.json'}: no such folder" in capsys.readouterr().err
    assert not (tmp_path / "z" / "digits").exists()
