"""DMA burst trains (tpusim/models/dma_train.py) change no result: the same programs run with
trains and with every grant on the arbiters' own decisions give identical cycles, retire traces,
counters, per-instruction timelines, SRAM grant logs and memory contents."""
from __future__ import annotations

import pytest

from stressgen import gen
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.flow.bench_sim import bench_program
from tpusim.sim import run_binary


def _record(binary, cfg, trains: bool) -> tuple:
    try:
        r = run_binary(binary, cfg, {}, keep_ddr=True, dma_trains=trains)
    except SimulationError as e:              # invalid programs: the same error, same place
        return ("error", str(e))
    pages = sorted((k, bytes(v)) for k, v in r.ddr.pages.items())
    return (r.cycles, r.retire, r.counters, r.timeline, r.sram_grants, pages)


def _both(binary, cfg) -> tuple[tuple, tuple]:
    return _record(binary, cfg, True), _record(binary, cfg, False)


@pytest.mark.parametrize("cfg_name", ["small", "seed"])
def test_trains_change_nothing_on_stress_programs(cfg_name):
    cfg = load_config(cfg_name)
    for seed in range(1, 25):
        prog = gen.generate(seed, cfg, invalid_rate=0.05)
        a, b = _both(prog.to_binary(cfg), cfg)
        assert a == b, f"seed {seed} on {cfg_name}: trains change the result"


def test_trains_change_nothing_with_load_and_store_overlapping():
    """bench_sim's program: MATMULs while LOAD/STORE round trips share the DDR bus."""
    cfg = load_config("small")
    a, b = _both(bench_program(cfg, matmuls=4, dma_trips=6), cfg)
    assert a == b
