"""The RTL build's phase record (cocotb_tests/build.py: TimedVerilator, the per-file compile
timer of TPU_CXX_TIMES=1) and the bench that prints it (tpusim/flow/bench_rtl.py)."""
import json
import subprocess
from pathlib import Path

import pytest

from cocotb_tests.build import CXX_TIMES, _cxx_phases, _cxx_timer
from tpusim.flow.bench_rtl import load_average, report

needs_time = pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="needs GNU time")


@needs_time
def test_cxx_timer_records_each_compile_by_its_source(tmp_path):
    """The wrapper runs its command and appends wall / user / sys and the last argument (the
    source file in verilated.mk's compile rules) for every call."""
    wrapper = _cxx_timer(tmp_path, None)
    for src in ("Vtop___024root__0.cpp", "ddr_mem.cpp"):
        subprocess.run([wrapper, "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done", src],
                       check=True)
    phases = _cxx_phases(tmp_path)
    assert [p["step"] for p in phases] == ["c++ Vtop___024root__0.cpp", "c++ ddr_mem.cpp"]
    assert all(p["wall_s"] >= 0 and p["cpu_s"] >= 0 for p in phases)
    assert sum(p["cpu_s"] for p in phases) > 0


@needs_time
def test_cxx_timer_passes_a_failing_compile_on(tmp_path):
    wrapper = _cxx_timer(tmp_path, None)
    r = subprocess.run([wrapper, "sh", "-c", "exit 3", "bad.cpp"])
    assert r.returncode == 3
    assert [p["step"] for p in _cxx_phases(tmp_path)] == ["c++ bad.cpp"]


def test_cxx_phases_without_a_record_is_empty(tmp_path):
    assert _cxx_phases(tmp_path) == []
    (tmp_path / CXX_TIMES).write_text("Command exited with non-zero status 1\n")
    assert _cxx_phases(tmp_path) == []


def test_report_names_every_phase():
    row = {"config": "small", "ccache": "off", "load_before": "1 1 1", "load_after": "2 2 2",
           "verilator": {"step": "verilator", "wall_s": 2.0, "cpu_s": 1.5},
           "make": {"step": "make", "wall_s": 40.0, "cpu_s": 39.0}, "cxx_files": 2, "cxx_cpu_s": 38.0,
           "cxx_largest": [{"step": "c++ a.cpp", "wall_s": 20.0, "cpu_s": 20.0}],
           "link_wall_s": 0.5, "link_cpu_s": 0.4, "cpp_files": 1, "cpp_mbytes": 5.0, "build_wall_s": 43.0,
           "run": {"cycles": 1000, "sim_s": 0.1, "process_s": 2.0, "process_cpu_s": 1.9,
                   "cycles_per_s": 10000, "cycles_equal_simpy": True, "load": "1 1 1"}}
    text = report(row)
    for part in ("Verilator", "1.5 s CPU", "make (C++ + link)", "a.cpp 20.0", "link alone",
                 "1000 cycles", "1.9 s CPU", "cycles = SimPy: True"):
        assert part in text, part
    assert len(load_average().split()) == 3


@pytest.mark.rtl
@needs_time
def test_forced_small_build_records_its_phases():
    """A forced build of the small config times Verilator, make and every compiled object."""
    from cocotb_tests.build import build
    info = build("small", waves="", force=True)
    assert info.built
    stamp = json.loads((info.build_dir / "build_ok.json").read_text())
    steps = [p["step"] for p in stamp["phases"]]
    assert steps[:2] == ["verilator", "make"]
    assert stamp["phases"][0]["cpu_s"] > 0 and stamp["phases"][1]["wall_s"] > 0
