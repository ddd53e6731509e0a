"""The estimator's one-command evaluation (tpusim.flow.estimator_eval, ``make estimator-eval``) and
the sweep's SimPy cache keyed by the compiled binary (tpusim.flow.sweep.simulate)."""
from __future__ import annotations

import csv
import json

import pytest

from stressgen.cluster import ClusterSpec
from tpusim.arch.config import load_config
from tpusim.flow import estimator_eval, sweep


def test_simpy_runs_are_cached_by_the_compiled_binary(tmp_path):
    """A second simulate of the same binary reads the cached run (a marked file is what it
    returns); another config compiles to another binary and runs; per-layer cycles are kept."""
    md = sweep.load_model("digits", tmp_path / "fe", 2)
    cfg = load_config("small")
    first = sweep.simulate(md.qg, md.x_q, cfg, tmp_path)
    files = sorted(tmp_path.glob("sim-*.json"))
    assert len(files) == 1 and first["cycles"] > 0
    assert first["layers"] and all(c > 0 for _, c in first["layers"])
    assert sum(c for _, c in first["layers"]) >= first["cycles"] * 0.5
    marked = dict(first, cycles=123)
    files[0].write_text(json.dumps(marked))
    assert sweep.simulate(md.qg, md.x_q, cfg, tmp_path)["cycles"] == 123
    other = sweep.candidates("small", {"array": ["16x16"]}, [])[0].cfg
    assert sweep.simulate(md.qg, md.x_q, other, tmp_path)["cycles"] not in (123, None)
    assert len(list(tmp_path.glob("sim-*.json"))) == 2


def test_the_evaluation_of_a_small_spec(tmp_path, capsys):
    """Two sets (one with its own model): the statistics per set and model, layers.csv with each
    layer's SimPy and estimated cycles, eval.json, the per-layer report on stdout."""
    spec = tmp_path / "e.yaml"
    spec.write_text("base: small\nmodels: [resnet50-reduced]\n"
                    "sets:\n  a: {grid: {array: [8x8, 16x16]}}\n  b: {models: [digits], points: [{sram: 32K}]}\n"
                    "targets: {median_error: 0.1, max_error: 0.5}\n")
    out = tmp_path / "out"
    assert estimator_eval.main(["--spec", str(spec), "--out", str(out), "--check"]) == 0
    data = json.loads((out / "eval.json").read_text())
    assert data["targets"] == {"median_error": 0.1, "max_error": 0.5, "spearman": 0.95}
    assert data["stats"]["a"]["resnet50-reduced"]["points"] == 2
    assert data["stats"]["b"]["digits"]["points"] == 1 and "resnet50-reduced" not in data["stats"]["b"]
    assert data["stats"]["all"]["all"]["points"] == 3
    assert (out / "results.csv").is_file() and (out / "b" / "results.csv").is_file()
    with open(out / "layers.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["model"] for r in rows} == {"resnet50-reduced", "digits"}
    for r in rows:
        assert int(r["sim_cycles"]) > 0 and int(r["estimated_cycles"]) > 0
        assert abs(float(r["error"]) - (int(r["estimated_cycles"]) - int(r["sim_cycles"])) / int(r["sim_cycles"])) < 1e-3
    text = capsys.readouterr().out
    assert "resnet50-reduced: layers of largest relative error" in text
    assert "       a resnet50-reduced:    2 points" in text


def test_a_missed_target_fails_the_check(tmp_path, capsys):
    spec = tmp_path / "e.yaml"
    spec.write_text("base: small\nmodels: [digits]\nsets:\n  a: {grid: {array: [8x8]}}\n"
                    "targets: {median_error: 0.0, max_error: 0.0}\n")
    rc = estimator_eval.main(["--spec", str(spec), "--out", str(tmp_path / "o"), "--check"])
    text = capsys.readouterr().out
    assert rc == 1 and "overall: missed median_error, max_error" in text


@pytest.mark.parametrize("text, message", [
    ("models: [digits]\n", "sets: expected a mapping of set name"),
    ("models: [digits]\nsets: {a: {grd: {array: [8x8]}}}\n", "set 'a': expected a mapping with grid and/or points"),
    ("models: [digits]\nsets: {a: {grid: {array: [8x8]}}}\ntargets: {mean: 1}\n", "targets: unknown key(s) ['mean']"),
    ("models: [digits]\nsets: {a: {grid: {array: [8x8]}}}\nextra: 1\n", "unknown key(s) ['extra']"),
])
def test_bad_specs_are_refused_naming_the_key(tmp_path, capsys, text, message):
    spec = tmp_path / "e.yaml"
    spec.write_text(text)
    assert estimator_eval.main(["--spec", str(spec), "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_set_is_named(tmp_path):
    spec = estimator_eval.load_spec(estimator_eval.DEFAULT_SPEC)
    with pytest.raises(sweep.SweepError, match=r"--sets: unknown set\(s\) \['nosuch'\]"):
        estimator_eval.evaluate(spec, tmp_path, sets=["nosuch"], cluster=ClusterSpec(jobs=1))


def test_the_shipped_spec_is_the_readme_grids():
    """docs/estimator_eval.yaml: 27 + 12 + 8 (non-square) configs of three CNNs (141 points) and
    bert-tiny on 6 + 12."""
    spec = estimator_eval.load_spec(estimator_eval.DEFAULT_SPEC)
    n = {s: len(sweep.candidates(spec["base"], v.get("grid") or {}, v.get("points") or []))
         for s, v in spec["sets"].items()}
    assert n == {"eval": 27, "holdout": 12, "bert": 6, "bert-holdout": 12, "nonsquare": 8}
    assert spec["models"] == ["resnet50", "shufflenet", "squeezenet"]
