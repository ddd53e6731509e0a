"""Control-path unit benches (Verilator + cocotb): CDC synchroniser, async queue, DDR arbiter,
each checked against the timing formulas of docs/architecture.md (see ctrl_tb.py).

    .venv/bin/python -m pytest cocotb_tests/unit/test_ctrl_units.py -q
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cocotb_tests.build import verilator_env
from tpusim.arch.config import load_config
from tpusim.arch.svgen import write_cfg_pkg

pytestmark = pytest.mark.rtl

REPO = Path(__file__).resolve().parents[2]
UNIT = Path(__file__).resolve().parent
SOURCES = ["tpu_gray_pkg.sv", "tpu_cdc_sync.sv", "tpu_async_queue.sv", "tpu_ddr_arbiter.sv"]


def _build(cfg_name: str):
    """Build (or reuse) the bench for one config; returns (runner, build dir)."""
    from cocotb_tools.runner import get_runner
    runner = get_runner("verilator")
    build = REPO / "sim_build" / f"ctrl_units_{cfg_name}"
    pkg = write_cfg_pkg(load_config(cfg_name), build / "pkg")
    srcs = [pkg, REPO / "rtl" / "tpu_isa_pkg.sv"] + [REPO / "rtl" / s for s in SOURCES]
    srcs.append(UNIT / "ctrl_tb_top.sv")
    with verilator_env():
        runner.build(sources=srcs, hdl_toplevel="ctrl_tb_top", build_dir=build,
                                      build_args=["-Wno-fatal"], timescale=("1ps", "1ps"))
    return runner, build


@pytest.mark.parametrize("cfg_name", ["small", pytest.param("seed", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", ["cdc_sync_third_edge", "async_queue_visibility",
                                  "ddr_arbiter_round_robin"])
def test_ctrl_unit(cfg_name, case):
    runner, build = _build(cfg_name)
    if str(UNIT) not in sys.path:
        sys.path.insert(0, str(UNIT))
    for d in (str(UNIT), str(REPO)):
        if d not in sys.path:
            sys.path.insert(0, d)
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)
    try:
        with verilator_env():
            xml = runner.test(
                hdl_toplevel="ctrl_tb_top", test_module="ctrl_tb", testcase=case,
                build_dir=build, test_dir=build, extra_env={"CTRL_CONFIG": cfg_name},
                results_xml=str(build / f"{case}.xml"))
    finally:
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    assert total == 1 and failed == 0, f"{case} failed on {cfg_name}: see {build}"
