"""stressgen on non-square arrays: 'small_wide' (REQUANT planes) and 'small_tall' (lane groups):
short campaigns pass golden = SimPy (= RTL) and hit the config's shape bins
(``stressgen.coverage.shape_bins``), which square configs do not require."""
from __future__ import annotations

import pytest

from stressgen.campaign import RunSpec, run_campaign
from stressgen.coverage import TALL_BINS, WIDE_BINS, bins_of, required_bins, shape_bins
from stressgen.db import ResultsDb
from stressgen.gen import generate
from stressgen.report import summarize
from tpusim.arch.config import load_config

WIDE, TALL = load_config("small_wide"), load_config("small_tall")


def test_shape_bins_are_required_only_on_their_config():
    assert shape_bins(load_config("small")) == ()
    assert shape_bins(WIDE) == WIDE_BINS and shape_bins(TALL) == TALL_BINS
    assert set(required_bins(0.0, WIDE)) - set(required_bins(0.0)) == set(WIDE_BINS)
    assert set(required_bins(0.05, TALL)) - set(required_bins(0.05)) == set(TALL_BINS)


@pytest.mark.parametrize("cfg", [WIDE, TALL], ids=lambda c: c.name)
def test_generated_programs_hit_the_shape_bins(cfg):
    """Static bins of 12 generated programs: every shape bin of the config, none of the other's."""
    hit = set()
    for seed in range(12):
        b = bins_of(generate(seed, cfg), cfg)
        hit |= {k for k, v in b.items() if v}
    assert set(shape_bins(cfg)) <= hit
    assert not hit & set(WIDE_BINS + TALL_BINS) - set(shape_bins(cfg))


def _campaign(tmp_path, cfg, rtl: bool, count: int):
    spec = RunSpec(hw=cfg.name, root_seed=1, rtl=rtl, bundle_root=str(tmp_path / "bundles"),
                   work_root=str(tmp_path / "work"), minimize=False, invalid_rate=0.0)
    with ResultsDb(tmp_path / "s.db") as db:
        st = run_campaign(spec, count, 2, db, progress=False)
        return summarize(db, st.campaign_id)[0]


@pytest.mark.parametrize("cfg", [WIDE, TALL], ids=lambda c: c.name)
def test_simpy_campaign_passes_with_shape_bins(cfg, tmp_path):
    s = _campaign(tmp_path, cfg, rtl=False, count=30)
    assert s.programs == 30 and not s.failing, [(r["seed"], r["reason"]) for r in s.failing]
    assert all(s.bin_programs.get(b) for b in shape_bins(cfg)), s.bin_programs


@pytest.mark.rtl
@pytest.mark.parametrize("cfg", [WIDE, TALL], ids=lambda c: c.name)
def test_rtl_campaign_passes_with_shape_bins(cfg, tmp_path):
    """20 programs golden = SimPy = RTL (outputs, retire trace, counters, arch waves)."""
    s = _campaign(tmp_path, cfg, rtl=True, count=20)
    assert s.programs == 20 and not s.failing, [(r["seed"], r["reason"], r["divergence"][:300]) for r in s.failing]
    assert all(s.bin_programs.get(b) for b in shape_bins(cfg)), s.bin_programs
