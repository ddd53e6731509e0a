"""The verdict's traffic and floor rows (tpusim.flow.verdict.traffic_figures / traffic_rows):
compulsory = the true, unpadded traffic of the program, not the padded constants blob."""
from __future__ import annotations

import pytest

from tpucompile.backend.compile import compile_qgraph
from tpusim.arch.config import load_config
from tpusim.flow import sweep
from tpusim.flow.verdict import traffic_figures, traffic_rows


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return sweep.load_model("digits", tmp_path_factory.mktemp("frontend"), 2)


def test_compulsory_is_the_unpadded_traffic(digits):
    """On seed (128 columns) the digits weight tiles load only their few output-channel columns:
    the compulsory read is weights + input + reads once per consumer, far below the padded blob,
    and the floor is max(MACs / PEs, compulsory bytes / DDR bytes per core cycle)."""
    cfg = load_config("seed")
    meta = compile_qgraph(digits.qg, cfg).meta
    tc = meta["stats"]["true_compulsory"]
    counters = {"ddr_read_bytes": 50_000, "ddr_write_bytes": 2_000, "fetch_bytes": 3_000}
    tr = traffic_figures(meta, counters)
    assert tr["compulsory_read"] == tc["weights"] + tc["input"] + tc["reads"]
    assert tr["compulsory_write"] == tc["writes"]
    assert tr["padded_read"] == meta["stats"]["compulsory_load_bytes"] > 5 * tr["compulsory_read"]
    peak = cfg.ddr_beat_bytes * cfg.clk_ddr.freq_mhz / cfg.clk_core.freq_mhz
    macs = sum(L["macs"] for L in meta["layers"])
    assert tr["floor_compute_cycles"] == round(macs / cfg.pes)
    assert tr["floor_ddr_cycles"] == round(tc["total"] / peak)
    assert tr["floor_cycles"] == max(tr["floor_compute_cycles"], tr["floor_ddr_cycles"]) == tc["floor_cycles"]
    assert (tr["floor_compute_cycles"], tr["floor_ddr_cycles"]) == (tc["floor_compute_cycles"], tc["floor_ddr_cycles"])
    assert tr["ddr_bytes_per_cycle"] == tc["ddr_bytes_per_cycle"] == peak
    rows = dict(traffic_rows(tr, 10_000))
    assert f"×{50_000 / tr['compulsory_read']:.2f} of the compulsory {tr['compulsory_read']:,}" in rows["traffic"]
    assert (f"padded layout (fused ops, whole constants blob, channel-padded tensors: not bytes moved, and below the "
            f"compulsory where fusion drops a tensor) read {tr['padded_read']:,} B") in rows["traffic"]
    assert f"physical floor {tr['floor_cycles']:,} cycles = max(compute" in rows["floor"]
    assert f"this run ×{10_000 / tr['floor_cycles']:.2f}" in rows["floor"]
    assert f"true compulsory traffic {tc['total']:,} B" in rows["floor"]      # small figures in bytes, not "0.01 MB"


def test_binary_without_floor_terms_gets_padded_figures(digits):
    """A binary compiled before true_compulsory carried the floor terms: the verdict does not
    recompute them, it prints the padded figures only."""
    meta = compile_qgraph(digits.qg, load_config("seed")).meta
    tc = meta["stats"]["true_compulsory"]
    for k in ("floor_compute_cycles", "floor_ddr_cycles", "ddr_bytes_per_cycle"):
        del tc[k]
    tr = traffic_figures(meta, {"ddr_read_bytes": 50_000, "ddr_write_bytes": 2_000, "fetch_bytes": 3_000})
    assert "compulsory_read" not in tr and "floor_cycles" not in tr
    rows = traffic_rows(tr, 10_000)
    assert [r[0] for r in rows] == ["traffic"] and "padded layout" in rows[0][1]
