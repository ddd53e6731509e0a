"""Device errors in the SimPy model (docs/architecture.md, "Device errors"): one program per
error class with the exact message, code name, PC and core cycle; the erroneous instruction
completes as a NOP and the device halts; the tie rule; deadlock and error-then-stuck reports;
``flag_of``; DEVICE_ERRORS generated into the SV package and the ISA doc."""
from __future__ import annotations

import deverr_programs as P
import pytest

from tpusim.arch import isa, isa_doc, svgen
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeadlockError, DeviceError, IsaError, flag_of
from tpusim.sim import run_program

CFG = load_config("small")


def _run(program):
    return run_program([], CFG, [(0, P.code_of(program))])


def _error(program) -> DeviceError:
    with pytest.raises(DeviceError) as ei:
        _run(program)
    return ei.value


def test_every_error_class_has_a_case():
    assert set(P.CASES) == set(isa.DEVICE_ERRORS)


@pytest.mark.parametrize("name", list(P.CASES))
def test_error_message_code_pc_cycle(name):
    case = P.CASES[name]
    err = _error(case.program)
    assert str(err) == case.message
    assert (err.code, err.pc, err.cycle) == (case.code, case.pc, case.cycle)
    assert err.code_num == isa.DEVICE_ERRORS[name]
    assert flag_of(err) == ("error", case.code, case.pc, case.cycle)
    # the device halted after the error: the run is attached, with the error code
    assert err.run is not None and err.run.error_code == isa.DEVICE_ERRORS[name]
    assert err.run.error_pc == case.pc and err.run.cycles > case.cycle


def test_erroneous_instruction_completes_as_nop_and_dispatch_stops():
    """MATMUL at pc 0x20 starts at core 21, does nothing, retires at 22 (like a NOP) and the
    decoder registers the error at 22: HALT (pc 0x40, fetch line 1) is never dispatched; the
    device halts at 30, when the LOAD NOP's retire (DMA 27550) is visible; the HALT retire
    carries the PC of the first instruction not dispatched."""
    err = _error(P.CASES["mxu_sram_range"].program)
    assert err.detect_ps == 21000 and err.cycle == 22
    assert err.run.retire == [(0x20, "MXU", 22000), (0x0, "LOAD", 27550), (0x40, "HALT", 30000)]
    assert err.run.counters["mxu_busy_cycles"] == 1 and err.run.counters["sram_conflicts"] == 0


def test_erroneous_instruction_takes_and_sends_tokens():
    """The erroneous MATMUL (pc 0x20) takes the token of the LOAD NOP (pc 0x40) and still sends
    its token to the VPU NOP (pc 0x0), which then runs: everything retires, the device halts."""
    prog = [make_nop(3, wait=P.MXU),
            isa.make("MATMUL", wait=P.LOAD, signal=P.VPU, act_addr=2047, count_x=2, stride_x=1,
                     count_y=1),
            make_nop(0, signal=P.MXU)]
    err = _error(prog)
    assert (err.code, err.pc) == ("mxu_sram_range", 0x20)
    assert [r[:2] for r in err.run.retire] == [(0x40, "LOAD"), (0x20, "MXU"), (0x0, "VPU"),
                                                (0x60, "HALT")]


def make_nop(engine, wait=0, signal=0):
    return isa.make("NOP", engine=engine, wait=wait, signal=signal)


@pytest.mark.parametrize("program, code", [(P.TIE_MXU_FIRST, "mxu_acc_range"),
                                           (P.TIE_VPU_FIRST, "vpu_acc_range")])
def test_tie_keeps_the_lower_pc(program, code):
    err = _error(program)
    assert (err.code, err.pc, err.cycle) == (code, 0x0, 51)
    # both erroneous instructions started at the same edge (and retired at 51000)
    assert sorted(r for r in err.run.retire if r[1] in ("MXU", "VPU")) == [
        (0x0, "MXU" if code.startswith("mxu") else "VPU", 51000),
        (0x20, "VPU" if code.startswith("mxu") else "MXU", 51000)]


def test_first_error_in_time_wins_over_a_lower_pc():
    """The DMA_STORE error (pc 0x0, start DMA 25050) registers at core 28, the MATMUL error
    (pc 0x20, start 21) at 22: the MATMUL's is kept; the erroneous DMA_STORE, dispatched before,
    still starts, does nothing and retires before the device halts."""
    prog = [isa.make("DMA_STORE", ddr_addr=0x1000, sram_addr=4, inner_bytes=8, count1=1, count2=1),
            isa.make("MATMUL", act_addr=2047, count_x=2, stride_x=1, count_y=1)]
    err = _error(prog)
    assert (err.code, err.pc, err.cycle) == ("mxu_sram_range", 0x20, 22)
    assert (0x0, "STORE", 27550) in err.run.retire


def test_deadlock_lists_waiting_engines_pcs_and_missing_senders():
    with pytest.raises(DeadlockError) as ei:
        _run(P.DEADLOCK)
    assert ei.value.waiting == P.DEADLOCK_WAITING
    assert flag_of(ei.value) == ("deadlock", tuple(P.DEADLOCK_WAITING))
    assert str(ei.value).startswith("deadlock: no event left at ")


def test_error_then_stuck_reports_the_error_and_the_waiting_engines():
    err = _error(P.ERROR_THEN_STUCK)
    assert (err.code, err.pc, err.cycle) == ("mxu_sram_range", 0x20, 22)
    assert err.run is None
    assert err.waiting == [("LOAD", 0x0, ("MXU",))]


def test_queue_full_stall_counted_up_to_the_error_stop():
    err = _error(P.QUEUE_FULL_AT_ERROR)
    assert (err.code, err.pc, err.cycle) == ("vpu_sram_range", 0xc0, 158)
    assert err.run.counters["mxu_queue_full_cycles"] == P.QUEUE_FULL_AT_ERROR_CYCLES
    assert err.run.retire[-1] == (0x160, "HALT", 165000)    # the first pc not dispatched


def test_token_not_overflowing_at_255():
    run, _ = run_program([make_nop(3, signal=P.MXU)] * 255 + [isa.make("HALT")], CFG)
    assert run.error_code == 0 and run.counters["vpu_retired"] == 255


def test_flag_of_other_outcomes():
    class Rtl:                                   # the fields of cocotb_tests.harness.RtlResult
        status, error_code, error_pc, error_cycle, waiting = "error", "dma_misaligned", 32, 28, []
    assert flag_of(Rtl()) == ("error", "dma_misaligned", 32, 28)
    Rtl.status, Rtl.waiting = "deadlock", [("MXU", 32, ["LOAD"])]
    assert flag_of(Rtl()) == ("deadlock", (("MXU", 32, ("LOAD",)),))
    Rtl.status = "timeout"
    assert flag_of(Rtl()) == ("timeout",)
    run, _ = run_program([isa.make("HALT")], CFG)
    assert flag_of(run) == ("ok",)
    assert flag_of(ValueError("x")) == ("exception", "ValueError")


def test_unknown_error_code_is_refused():
    with pytest.raises(IsaError, match=r"unknown device error 'dma_oops'"):
        DeviceError("x", "dma_oops", 0)
    with pytest.raises(IsaError, match=r"unknown device error code 99"):
        isa.error_name(99)


def test_codes_are_generated_into_the_sv_package_and_the_isa_doc():
    pkg, doc = svgen.isa_pkg_text(), isa_doc.isa_doc_text()
    for name, code in isa.DEVICE_ERRORS.items():
        assert f"localparam logic [7:0] ERR_{name.upper()}" in pkg
        assert f"= 8'd{code};" in pkg.split(f"ERR_{name.upper()}", 1)[1].splitlines()[0]
        assert f"| {code} | `{name}` |" in doc
    assert len(set(isa.DEVICE_ERRORS.values())) == len(isa.DEVICE_ERRORS)
    assert 0 not in isa.DEVICE_ERRORS.values()
