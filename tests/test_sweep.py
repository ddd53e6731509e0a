"""The architecture sweep (tpusim.flow.sweep) and the fast estimator it checks
(tpucompile.backend.estimate): configs from knobs, refusals with their reason, SimPy points on a
2-worker Dask LocalCluster, the cache, the results files, the plots and the estimator's error."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from stressgen.cluster import ClusterSpec
from tpusim.flow import cli, sweep

SMALL_GRID = {"array": ["8x8", "16x16"], "sram": ["16K", "32K"]}


def test_knob_parsing_and_names():
    assert sweep.parse_bytes("128K", "sram") == 131072
    assert sweep.parse_bytes("1M", "sram") == 1 << 20
    assert sweep.parse_bytes(4096, "sram") == 4096
    assert sweep.parse_array("64x256") == (64, 256)
    assert sweep.point_name("seed", {"array": (64, 256), "sram": 262144, "outstanding": 8}) == "seed-64x256-s256K-k8"
    with pytest.raises(sweep.SweepError, match=r"array: '64by256' is not ROWSxCOLS"):
        sweep.parse_array("64by256")
    with pytest.raises(sweep.SweepError, match=r"sram: 'lots' is not a byte count"):
        sweep.parse_bytes("lots", "sram")
    with pytest.raises(sweep.SweepError, match=r"unknown knob 'colour'"):
        sweep.candidates("small", {"colour": [1]}, [])


def test_candidates_grid_points_and_refusals():
    cands = sweep.candidates("small", {"array": ["8x8", "16x16"], "outstanding": [2, 4]},
                             [{"sram": 128}, {"array": "8x8", "outstanding": 2}])
    names = [c.name for c in cands]
    assert names == ["small-8x8-k2", "small-8x8-k4", "small-16x16-k2", "small-16x16-k4", "small-s128"], names
    c = cands[2]
    assert (c.cfg.array_rows, c.cfg.array_cols, c.cfg.dma_outstanding) == (16, 16, 2)
    bad = cands[-1]                 # 128 bytes cannot hold two weight tiles and two activation tiles
    assert bad.cfg is None and "sram.size_bytes 128 (16 words) cannot hold two weight tiles" in bad.refusal
    refused = sweep.candidates("small", {"outstanding": [3]}, [])[0]
    assert "dma.outstanding must be 1, 2, 4 or 8" in refused.refusal and "got 3" in refused.refusal


def test_spearman_matches_the_definition():
    assert sweep.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert sweep.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks (1, 2, 3, 4, 5) vs (2, 1, 4, 3, 5): 1 - 6 * 4 / (5 * 24) = 0.8
    assert sweep.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert np.isnan(sweep.spearman([1], [2]))


def test_pareto_front():
    pts = [(1, 10, "a"), (2, 5, "b"), (3, 7, "c"), (4, 1, "d"), (2, 6, "e")]
    assert [p[2] for p in sweep.pareto_front(pts)] == ["a", "b", "d"]


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory):
    """digits and resnet50-reduced on 4 small configs, SimPy on a 2-worker LocalCluster."""
    out = tmp_path_factory.mktemp("sweep")
    cands = sweep.candidates("small", SMALL_GRID, [{"sram": 128}])
    res = sweep.run_sweep(["digits", "resnet50-reduced"], cands, out, cluster=ClusterSpec(jobs=2),
                          progress=False)
    return out, cands, res


def test_sweep_results_files(small_sweep):
    out, cands, res = small_sweep
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    for col in ("model", "config", "rows", "cols", "sram_bytes", "cycles", "estimated_cycles", "utilisation",
                "ddr_bytes", "energy_uj", "area_mm2"):
        assert col in rows[0], col
    assert len(rows) == 2 * len(cands)
    ran = [r for r in rows if r["status"] == "simulated"]
    assert len(ran) == 8, [(r["config"], r["status"], r["reason"]) for r in rows]
    for r in ran:
        assert int(r["cycles"]) > 0 and int(r["estimated_cycles"]) > 0 and float(r["energy_uj"]) > 0
        assert 0 < float(r["utilisation"]) <= 1
    refused = [r for r in rows if r["config"] == "small-s128"]
    assert all(r["status"] == "refused" and "cannot hold two weight tiles" in r["reason"] for r in refused)
    data = json.loads((out / "results.json").read_text())
    assert data["estimator"]["all"]["points"] == 8
    for png in ("cycles.png", "pareto.png"):
        blob = (out / png).read_bytes()
        assert blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 10_000, png


def test_sweep_simpy_cycles_are_the_model_s(small_sweep):
    """A sweep point's cycles are what the SimPy model gives for that config."""
    out, cands, res = small_sweep
    r = next(r for r in res.rows if r["model"] == "digits" and r["config"] == "small-16x16-s32K")
    md = sweep.load_model("digits", out / "cache", 2)
    cfg = next(c.cfg for c in cands if c.name == "small-16x16-s32K")
    assert sweep.simulate(md.qg, md.x_q, cfg)["cycles"] == r["cycles"]


def test_estimator_error_on_a_small_sweep(small_sweep):
    """The estimator ranks the small configs as SimPy does and stays near it on the CNN."""
    _, _, res = small_sweep
    s = res.stats["resnet50-reduced"]
    assert s["points"] == 4
    assert s["median_error"] <= 0.10, s
    assert s["max_error"] <= 0.20, s
    assert s["spearman"] >= 0.7, s


def test_sweep_rerun_comes_from_the_cache(small_sweep):
    """A rerun reads every SimPy point from OUT/cache: no cluster is contacted (the one given
    here does not exist)."""
    out, cands, res = small_sweep
    again = sweep.run_sweep(["digits", "resnet50-reduced"], cands, out,
                            cluster=ClusterSpec(scheduler="tcp://127.0.0.1:9", connect_timeout_s=1), progress=False)
    st = [r["status"] for r in again.rows if r["config"] != "small-s128"]
    assert st == ["cached"] * 8
    assert [r["cycles"] for r in again.rows] == [r["cycles"] for r in res.rows]


def test_estimate_only_and_refine(tmp_path):
    cands = sweep.candidates("small", SMALL_GRID, [])
    res = sweep.run_sweep(["digits"], cands, tmp_path, estimate_only=True, progress=False)
    assert [r["status"] for r in res.rows] == ["estimated"] * 4
    assert all(r["cycles"] is None and r["estimated_cycles"] > 0 for r in res.rows)
    best = sweep.choose_simulated(res.rows, 2)
    est = sorted(r["estimated_cycles"] for r in res.rows)
    assert sorted(r["estimated_cycles"] for r in best) == est[:2]


def test_refine_and_plots_rank_by_time_when_clocks_differ(tmp_path):
    """Points of different core clocks are ranked by time per inference (cycles / core MHz): a
    500 MHz chip takes fewer cycles but more time than the same chip at 1,000 MHz (the trial:
    --refine picked only the slow clock, and the plots showed it fastest)."""
    cands = sweep.candidates("small", {"core_mhz": [500, 1000]}, [])
    res = sweep.run_sweep(["digits"], cands, tmp_path, estimate_only=True, progress=False)
    slow, fast = sorted(res.rows, key=lambda r: r["core_mhz"])
    assert slow["estimated_cycles"] < fast["estimated_cycles"]          # fewer, slower cycles
    assert slow["estimated_time_us"] == pytest.approx(slow["estimated_cycles"] / 500)
    assert fast["estimated_time_us"] < slow["estimated_time_us"]
    assert sweep.choose_simulated(res.rows, 1) == [fast]
    speed, label = sweep._speed_axis(res.rows)
    assert label == "time per inference (us)" and speed(fast) < speed(slow)
    assert sweep._speed_axis([fast])[1] == "cycles"
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert {"core_mhz", "time_us", "estimated_time_us"} <= set(header)


def test_yaml_values_must_be_integers(tmp_path, capsys):
    """A YAML spec's 10.7 for an integer knob is refused, as on the command line (int() cut it
    to 10 and the sweep ran the wrong chip)."""
    spec = tmp_path / "s.yaml"
    spec.write_text("models: [digits]\nbase: small\ngrid: {ddr_latency: [10.7]}\n")
    assert sweep.main(["--spec", str(spec), "--estimate-only", "--out", str(tmp_path / "o")]) == 2
    assert "ddr_latency: 10.7 is not an integer" in capsys.readouterr().err
    assert sweep._knob_value("ddr_latency", 12.0) == 12
    with pytest.raises(sweep.SweepError, match="outstanding: True is not an integer"):
        sweep._knob_value("outstanding", True)


def test_a_sweep_of_refused_points_leaves_no_stale_plots(tmp_path, capsys):
    out = tmp_path / "o"
    sweep.run_sweep(["digits"], sweep.candidates("small", {"array": ["8x8"]}, []), out, estimate_only=True,
                    progress=False)
    assert (out / "cycles.png").is_file()
    res = sweep.run_sweep(["digits"], sweep.candidates("small", {"outstanding": [0]}, []), out, estimate_only=True)
    assert [r["status"] for r in res.rows] == ["refused"]
    assert not (out / "cycles.png").exists() and not (out / "pareto.png").exists()
    printed = capsys.readouterr().out
    assert "no plots written" in printed


def test_sweep_cli_errors(tmp_path, capsys):
    assert cli.main(["sweep", "--models", "digits", "--base", "small", "--array", "8x8", "--estimate-only",
                     "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "results.csv").is_file()
    assert sweep.main(["--base", "small"]) == 2
    assert "no models" in capsys.readouterr().err
    assert sweep.main(["--models", "digits", "--base", "nosuch"]) == 2
    assert "hardware config 'nosuch' not found" in capsys.readouterr().err
    spec = tmp_path / "s.yaml"
    spec.write_text("models: [digits]\ngrid: {array: [8x8]}\ncolour: red\n")
    assert sweep.main(["--spec", str(spec)]) == 2
    assert "unknown key(s) ['colour']" in capsys.readouterr().err
    assert sweep.main(["--models", "digits", "--refine", "0"]) == 2
    assert "--refine must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("knobs, message", [
    ({"beat": 512}, "ddr.beat_bytes must be a power of two <= dma.burst_bytes (256), got 512"),
    ({"core_mhz": 1500}, "clocks.core.freq_mhz: 1500 MHz has a period of 666.66"),
    ({"banks": 3}, "sram.size_bytes 131072 is not divisible into sram.banks 3 banks"),
    ({"burst": 64}, "dma.burst_bytes 64 must be a multiple of the SRAM word (128 bytes = array.rows)"),
    ({"acc_depth": 0}, "accumulator.depth_rows must be positive, got 0"),
    ({"queue_depth": 3}, "queues.depth must be a power of two >= 2, got 3"),
    ({"outstanding": 16}, "dma.outstanding must be 1, 2, 4 or 8"),
    ({"ddr_latency": 1}, "ddr.latency_cycles must be >= 2, got 1"),
])
def test_impossible_knob_combinations_are_refused_with_the_reason(knobs, message):
    c = sweep.candidates("seed", {}, [knobs])[0]
    assert c.cfg is None and message in c.refusal, c.refusal
    assert c.refusal.startswith(f"config '{c.name}'")
