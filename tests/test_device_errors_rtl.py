"""Device errors on the RTL ('small' config) against the SimPy model (docs/architecture.md,
"Device errors"): the same programs give the same flag tuple (kind, code, pc, core cycle) on
both sides, and where the device halts after the error the same cycle count, retire trace and
performance counters; a deadlock names the same waiting engines, PCs and missing senders."""
from __future__ import annotations

import deverr_programs as P
import pytest

from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError, flag_of

pytestmark = pytest.mark.rtl

CFG = load_config("small")
CODE_ADDR = 0x100000


def _both(tmp_path, program, deadlock_cycles: int = 2000):
    """(SimPy outcome: exception or result, RtlResult) of one program."""
    from cocotb_tests.harness import run_rtl
    from tpusim.sim import run_binary
    b = TpuBinary(CFG.hash_bytes(), CODE_ADDR, P.code_of(program))
    path = tmp_path / "prog.tpubin"
    b.write(path)
    try:
        sim = run_binary(b, CFG, {})
    except SimulationError as e:
        sim = e
    rtl = run_rtl(path, CFG, {}, tmp_path / "rtl", max_cycles=50_000,
                  deadlock_cycles=deadlock_cycles)
    return sim, rtl


def _same_run(sim_run, rtl) -> None:
    assert rtl.cycles == sim_run.cycles
    assert sorted(rtl.retire) == sorted(sim_run.retire)
    assert rtl.counters == sim_run.counters


@pytest.mark.parametrize("name", ["reserved_opcode", "unused_bits", "dma_zero_length", "dma_misaligned",
                                  "dma_sram_range", "dma_ddr_range", "mxu_sram_range",
                                  "mxu_acc_range", "vpu_sram_range", "vpu_acc_range",
                                  "qreg_unloaded", "token_overflow"])
def test_same_flag_as_simpy(tmp_path, name):
    case = P.CASES[name]
    sim, rtl = _both(tmp_path, case.program)
    assert flag_of(rtl) == flag_of(sim) == ("error", case.code, case.pc, case.cycle), rtl.message
    assert rtl.status == "error" and rtl.raw["error_code"] == sim.code_num
    _same_run(sim.run, rtl)


def test_queue_full_stall_ended_by_an_error(tmp_path):
    """The MXU queue-full stall counter up to the error stop (edges counted while stopped: none)."""
    sim, rtl = _both(tmp_path, P.QUEUE_FULL_AT_ERROR)
    assert flag_of(rtl) == flag_of(sim)
    assert sim.run.counters["mxu_queue_full_cycles"] == P.QUEUE_FULL_AT_ERROR_CYCLES
    _same_run(sim.run, rtl)


@pytest.mark.parametrize("program", [P.TIE_MXU_FIRST, P.TIE_VPU_FIRST], ids=["mxu", "vpu"])
def test_tie_rule(tmp_path, program):
    sim, rtl = _both(tmp_path, program)
    assert flag_of(rtl) == flag_of(sim) and sim.pc == 0x0 and sim.cycle == 51
    _same_run(sim.run, rtl)


def test_deadlock_names_the_same_engines(tmp_path):
    sim, rtl = _both(tmp_path, P.DEADLOCK)
    assert rtl.status == "deadlock", rtl.message
    assert rtl.waiting == P.DEADLOCK_WAITING
    assert flag_of(rtl) == flag_of(sim) == ("deadlock", tuple(P.DEADLOCK_WAITING))
    assert "LOAD at pc 0x0 waits for a token from MXU" in rtl.message
    assert "MXU at pc 0x20 waits for a token from LOAD, VPU" in rtl.message


def test_error_then_stuck(tmp_path):
    """The error stops dispatch before the instruction that would free the waiting LOAD NOP:
    the RTL never halts; both sides report the error (and the same waiting engine)."""
    sim, rtl = _both(tmp_path, P.ERROR_THEN_STUCK)
    assert flag_of(rtl) == flag_of(sim) == ("error", "mxu_sram_range", 0x20, 22)
    assert sim.run is None and rtl.cycles is None
    assert rtl.waiting == sim.waiting == [("LOAD", 0x0, ("MXU",))]
    assert "the device did not halt" in rtl.message
