"""The per-layer profiler (tpusim.flow.profile, ``tpusim profile``, ``cosim --profile``): its
figures agree with the model's own counters, the trace is valid Trace Event Format, the roofline
plot is written with its axes, and the CLI refuses a bad --out before running."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from tests import qnets
from tpucompile import golden
from tpucompile.driver import compile_onnx
from tpusim.arch.config import load_config
from tpusim.arch.errors import TpuError
from tpusim.arch.host_transforms import host_input_transform
from tpusim.arch.isa import ENGINE_KEYS, INSTR_BYTES
from tpusim.arch.timebase import Timebase
from tpusim.flow import cli, profile
from tpusim.flow.cosim import run
from tpusim.sim import run_binary


@pytest.fixture(scope="module")
def residual_run():
    cfg = load_config("small")
    model = qnets.residual_add()
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=1)
    res = compile_onnx(model, cfg, xs[1:])
    name = res.binary.inputs[0].name
    x = host_input_transform(res.binary.meta, name, golden.quantize_input(res.qgraph, xs[0]))
    return cfg, res.binary, run_binary(res.binary, cfg, {name: x}), x


def test_rows_agree_with_the_counters(residual_run):
    """Every DMA byte and every engine's busy time of the run is in exactly one layer's row (the
    MXU's and the DMA channels' overlapping instructions: their rows count the time any is in
    flight, at most the counter's sum of c - s)."""
    cfg, binary, sim, _ = residual_run
    rows = profile.layer_rows(binary, cfg, sim.timeline)
    assert [r["layer"] for r in rows] == [L["name"] for L in binary.meta["layers"] if L["instr_end"] > L["instr_begin"]]
    assert sum(r["load_bytes"] for r in rows) == sim.counters["ddr_read_bytes"]
    assert sum(r["store_bytes"] for r in rows) == sim.counters["ddr_write_bytes"]
    tb = Timebase(cfg)
    for e, key in enumerate(ENGINE_KEYS):
        period = (tb.dma if key in ("load", "store") else tb.core).period_ps
        busy_ps = sum(r[f"{key}_busy"] * r["cycles"] * tb.core.period_ps for r in rows)
        if key in ("mxu", "load", "store"):
            assert 0 < busy_ps / period <= sim.counters[f"{key}_busy_cycles"] + 2
        else:
            assert abs(busy_ps / period - sim.counters[f"{key}_busy_cycles"]) <= 2 + 0.01 * sim.counters[f"{key}_busy_cycles"]
    assert all(0 < r["cycles"] <= sim.cycles and r["floor"] >= 1 and r["ratio"] > 0 for r in rows)
    assert sum(r["macs"] for r in rows) == sum(L["macs"] for L in binary.meta["layers"])
    conv = next(r for r in rows if r["op"] == "QConv")
    assert conv["utilisation"] == pytest.approx(conv["macs"] / (conv["cycles"] * cfg.pes), rel=1e-3)


def test_trace_is_trace_event_format(residual_run, tmp_path):
    cfg, binary, sim, _ = residual_run
    rows = profile.write_profile(binary, cfg, sim.timeline, tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    ev = trace["traceEvents"]
    need = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "args"},
            "C": {"name", "ph", "ts", "pid", "args"}}
    assert {e["ph"] for e in ev} == set(need)
    for e in ev:
        assert need[e["ph"]] <= set(e), e
        if e["ph"] in ("X", "C"):
            assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) and v >= 0 for v in e["args"].values())
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(sim.timeline)
    named = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert {e["tid"] for e in xs} <= set(named) and {"LOAD", "STORE", "MXU", "VPU"} <= set(named.values())
    # complete events on one thread nest (Perfetto drops slices that partly overlap): each
    # thread's slices, by start, begin no earlier than the one before ends (the DMA channels'
    # overlapping instructions drawn on lanes "LOAD #2", ...)
    by_tid: dict = {}
    for e in xs:
        by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for tid, spans in by_tid.items():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(spans, spans[1:])), named[tid]
    assert len(by_tid) > 4          # this run has overlapping DMAs: more lanes than engines
    assert {e["name"] for e in xs} >= {r["layer"] for r in rows}
    assert max(e["ts"] + e["dur"] for e in xs) <= sim.halt_ps / 1e6
    header = (tmp_path / "profile.csv").read_text().splitlines()[0].split(",")
    assert header == list(profile.COLUMNS)
    png = (tmp_path / "roofline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert profile.roofline_png(rows, cfg, tmp_path / "again.png") == (
        "operational intensity (MACs per DDR byte)", "achieved MACs per cycle")


def test_cli_profile_and_bad_out(residual_run, tmp_path, capsys):
    cfg, binary, _, x = residual_run
    binary.write(tmp_path / "r.tpubin")
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["profile", str(tmp_path / "r.tpubin"), "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "prof")]) == 0
    assert "profile of r.tpubin on 'small'" in capsys.readouterr().out
    assert (tmp_path / "prof" / "trace.json").exists()
    (tmp_path / "file").write_text("")
    assert cli.main(["profile", str(tmp_path / "r.tpubin"), "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "file" / "sub")]) == 2
    assert "--out" in capsys.readouterr().err


def test_cli_profile_refuses_hand_edited_layers(residual_run, tmp_path, capsys):
    """A META whose layers a user edited by hand (here: a non-integer MAC count) is refused when
    the binary is read, naming the layer and field: one line, no traceback."""
    cfg, binary, _, x = residual_run
    bad = copy.deepcopy(binary)
    bad.meta["layers"][0]["macs"] = "lots"
    bad.write(tmp_path / "r.tpubin")
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["profile", str(tmp_path / "r.tpubin"), "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "prof")]) == 2
    err = capsys.readouterr().err.strip()
    name = binary.meta["layers"][0]["name"]
    assert err.startswith("tpusim: error: ") and err.endswith(
        f"(META): layers[0] ({name!r}): macs must be an integer >= 0, got 'lots'"), err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_cosim_profile_flag(tmp_path):
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="c", profile_layers=True)
    assert v.passed and any(n.startswith("profile: 1 layers in ") for n in v.notes), v.notes
    assert any(n.startswith("profile: 1 layers: 1 ") and n.endswith(" cycles)") for n in v.notes), v.notes
    assert (tmp_path / "profile" / "profile.csv").exists()


def test_sram_and_energy_figures(residual_run):
    """Every SRAM grant of the run lands in one instruction of its engine; the energy of each
    layer is its events times the config's table (tpusim.arch.costs defaults)."""
    cfg, binary, sim, _ = residual_run
    rows = profile.layer_rows(binary, cfg, sim.timeline, sim.sram_grants)
    assert sim.sram_grants and sum(r["sram_bytes"] for r in rows) == sum(n for _, _, n in sim.sram_grants) * cfg.word_bytes
    for r in rows:
        assert r["mac_uj"] == pytest.approx(r["macs"] * 0.3e-6)
        assert r["ddr_uj"] == pytest.approx((r["load_bytes"] + r["store_bytes"]) * 162.5e-6)
        assert r["sram_uj"] == pytest.approx(r["sram_bytes"] * 1.25e-6)         # small: 2 KiB banks
        assert r["energy_uj"] == pytest.approx(r["mac_uj"] + r["sram_uj"] + r["acc_uj"] + r["ddr_uj"])
    conv = next(r for r in rows if r["op"] == "QConv")
    assert conv["acc_accesses"] > 0 and conv["acc_uj"] == pytest.approx(conv["acc_accesses"] * 5.1e-6)
    tot = profile.energy_totals(rows, cfg, sim.counters)
    assert tot["fetch"] > 0 and tot["total"] == pytest.approx(sum(v for k, v in tot.items() if k != "total"))
    area = profile.area_mm2(cfg)
    assert area["array"] == pytest.approx(cfg.pes * 660e-6) and area["total"] > area["sram"] > 0


def test_shares_are_at_most_one(residual_run):
    cfg, binary, sim, _ = residual_run
    for r in profile.layer_rows(binary, cfg, sim.timeline, sim.sram_grants):
        for key in ENGINE_KEYS:
            assert 0 <= r[f"{key}_busy"] <= 1 and 0 <= r[f"{key}_wait"] <= 1, (r["layer"], key, r)
            assert r[f"{key}_busy"] + r[f"{key}_wait"] <= 1 + 1e-9, (r["layer"], key)


def test_foreign_timeline_is_refused_naming_the_pc(residual_run):
    """A timeline from another (longer) binary's run names the first pc past this binary's code,
    in the rows and in the trace alike."""
    cfg, binary, sim, _ = residual_run
    n = len(binary.code) // INSTR_BYTES
    bad = list(sim.timeline) + [(0, n * INSTR_BYTES, 0, 0, 1)]
    for fn in (profile.layer_rows, profile.chrome_trace):
        with pytest.raises(TpuError, match=rf"pc {n * INSTR_BYTES:#x} is outside the binary's {n} instructions"):
            fn(binary, cfg, bad)


def test_the_layer_table_folds_long_layer_names_whole(tmp_path):
    """`make bench`'s per-layer table (profile.layer_table) of a reduced BERT: every layer name is
    whole in its column, folded over lines if need be (was cut to '/encoder.layer.0.att…', the
    same for every attention layer)."""
    import io

    import onnx
    from rich.console import Console

    from tpucompile import driver
    from tpucompile.transformer_models import bert_model
    cfg = load_config("small")
    path = tmp_path / "bert.onnx"
    onnx.save(bert_model(layers=1, hidden=16, heads=2, ffn=32, seq=32, vocab=64, seed=3, name="bert_x"), path)
    model, x, cal = driver.load_model_and_data(str(path), calib=1)
    res = compile_onnx(model, cfg, cal)
    feeds = {d.name: host_input_transform(res.binary.meta, d.name, v)
             for d, v in zip(res.binary.inputs, [golden.quantize_input(res.qgraph, x)[d.name]
                                                 for d in res.binary.inputs])}
    rows = profile.layer_rows(res.binary, cfg, run_binary(res.binary, cfg, feeds).timeline)
    buf = io.StringIO()
    Console(width=150, file=buf).print(profile.layer_table(rows, "t"))
    names: list = []
    for line in buf.getvalue().splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[2]:                     # a row's first line (its cycles)
            names.append(cells[0])
        else:
            names[-1] += cells[0]
    assert len(rows) > 10 and max(len(r["layer"]) for r in rows) > 40
    assert names == [r["layer"] for r in rows], names


def test_floors_bounds_and_causes(residual_run):
    """Each row's floor is the hardware's (MACs / PEs, the vector unit's busy cycles or the
    compiler's per-layer compulsory bytes / peak), the traffic ratio the bytes moved over the compulsory ones; a layer within 1.25x of
    its floor is at it, any other is compiler-bound with what the compiler left named."""
    cfg, binary, sim, _ = residual_run
    rows = profile.layer_rows(binary, cfg, sim.timeline)
    peak = cfg.ddr_peak_bytes_per_cycle
    for r, L in zip(rows, [L for L in binary.meta["layers"] if L["instr_end"] > L["instr_begin"]]):
        moved = r["load_bytes"] + r["store_bytes"]
        assert r["compulsory_bytes"] == L["compulsory_bytes"] > 0
        assert r["compulsory_floor"] == pytest.approx(r["compulsory_bytes"] / peak)
        assert r["vector_floor"] == pytest.approx(r["vpu_busy"] * r["cycles"], rel=1e-3)
        assert r["floor"] == pytest.approx(max(r["compute_floor"], r["vector_floor"], r["compulsory_floor"], 1.0))
        assert r["traffic_ratio"] == pytest.approx(moved / r["compulsory_bytes"])
        if r["ratio"] <= profile.AT_FLOOR:
            assert r["bound"] in ("compute", "vector", "memory") and r["cause"] == f"at {r['bound']} floor", r
        else:
            assert r["bound"] == "compiler" and r["cause"].split(":")[0] in ("traffic", "schedule"), r


def _row(cycles, compute, vector, moved, compulsory):
    """A layer row of the floors (core cycles) ``bound_and_cause`` reads; the load channel busiest,
    the MXU waiting longest."""
    shares = {f"{e}_{k}": 0.0 for e in ENGINE_KEYS for k in ("busy", "wait")}
    shares.update(load_busy=0.8, mxu_wait=0.4)
    return {"cycles": cycles, "compute_floor": compute, "vector_floor": vector, "memory_floor": moved,
            "compulsory_floor": compulsory, "traffic_ratio": moved / compulsory,
            "floor": max(compute, vector, compulsory), "ratio": cycles / max(compute, vector, compulsory), **shares}


@pytest.mark.parametrize("row, bound, cause", [
    (_row(1000, 900, 50, 400, 400), "compute", "at compute floor"),
    (_row(1000, 100, 820, 400, 400), "vector", "at vector floor"),
    (_row(1000, 100, 50, 990, 810), "memory", "at memory floor"),
    (_row(1000, 100, 50, 900, 300), "compiler", "traffic: moves 3.0x its compulsory bytes"),
    (_row(1000, 100, 50, 330, 300), "compiler", "schedule: load busy 80%, mxu token wait 40%"),
    (_row(440, 100, 50, 360, 300), "compiler",
     "traffic: moves 1.2x its compulsory bytes; schedule: load busy 80%, mxu token wait 40%"),
])
def test_bound_and_cause(row, bound, cause):
    """Within 1.25x of the largest hardware floor a layer is bound by it; past it, compiler-bound
    by the traffic it moved (over 1.25x the floor on its own), by the schedule (cycles over 1.25x
    what its MACs, vector work and moved bytes need), or by both when neither alone is past 1.25x."""
    assert profile.bound_and_cause(row) == (bound, cause)


def test_a_binary_without_compulsory_bytes_counts_the_bytes_moved(residual_run):
    """A binary compiled before the compiler recorded each layer's compulsory bytes: the bytes
    the layer moved stand for them (traffic ratio 1)."""
    cfg, binary, sim, _ = residual_run
    old = copy.deepcopy(binary)
    for L in old.meta["layers"]:
        L.pop("compulsory_bytes", None)
    rows = profile.layer_rows(old, cfg, sim.timeline)
    assert rows and all(r["compulsory_bytes"] == r["load_bytes"] + r["store_bytes"] and r["traffic_ratio"] == 1.0
                        for r in rows)


def test_summary_lines_count_bounds_and_name_what_is_missing(residual_run):
    """The table's summary: layers and cycles per bound; a binary without compulsory bytes or
    without layer metadata (a stressgen program) says so instead of reading as all at floor."""
    cfg, binary, sim, _ = residual_run
    rows = profile.layer_rows(binary, cfg, sim.timeline)
    lines = profile.summary_lines(rows, binary)
    assert lines[0].startswith(f"{len(rows)} layers: ") and len(lines) == 1
    for b in {r["bound"] for r in rows}:
        n, c = sum(r["bound"] == b for r in rows), sum(r["cycles"] for r in rows if r["bound"] == b)
        assert f"{n} {b}-bound ({c:,} cycles)" in lines[0]
    old = copy.deepcopy(binary)
    for L in old.meta["layers"]:
        L.pop("compulsory_bytes", None)
    assert f"{len(rows)} of {len(rows)} layers have no compulsory bytes" in profile.summary_lines(rows, old)[-1]
    old.meta["layers"] = []
    assert "no per-layer metadata" in profile.summary_lines([], old)[0]


def test_compulsory_bytes_of_strided_1x1_convs_and_slices():
    """A 1x1 stride-2 conv needs only the input pixels it samples (a quarter), a spatial slice only
    its output's worth of its input: their compulsory bytes say so (else a layer loading its whole
    input reads as at its floor)."""
    from onnx import helper
    rng = np.random.default_rng(0)
    w = qnets.conv_w(rng, 16, 8, 1)
    proj = qnets.make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="proj", strides=[2, 2])], {"w": w},
                            (1, 8, 12, 12), "y", None)
    cfg = load_config("small")
    for model, check in ((proj, "proj"), (qnets.spatial_slices(), "slices")):
        res = compile_onnx(model, cfg, qnets.inputs(qnets.in_shape(model), 2, seed=1))
        qg, layers = res.qgraph, res.binary.meta["layers"]
        size = {k: int(np.prod(t.shape)) for k, t in qg.tensors.items()}
        ops = {op.name: op for op in qg.ops}
        if check == "proj":
            L = next(L for L in layers if L["name"] == "proj")
            assert L["compulsory_bytes"] == w.size + 8 * 6 * 6 + 16 * 6 * 6
        else:
            sl = [L for L in layers if L["op"] == "QSpatialSlice" and L["instr_end"] > L["instr_begin"]]
            assert sl
            for L in sl:
                out = size[qg.resolve(ops[L["name"]].out)]
                assert L["compulsory_bytes"] == 2 * out < size[qg.resolve(ops[L["name"]].inputs[0])] + out
