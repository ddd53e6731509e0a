"""``validate(prog, cfg)``: reject an ill-formed stress program with a StressError (a
tpusim.arch.errors.IsaError) naming the instruction index, PC, field and value.

Checked, in program order (the first fault is reported): raw words the decoder rejects (a
reserved opcode, non-zero unused bits: tpusim.arch.device_checks.decode_fault); field
ranges (tpusim.arch.isa.check_ranges); the device errors of each instruction
(tpusim.arch.device_checks: DMA zero length / misalignment / SRAM range / DDR range past 2^40,
MXU and VPU SRAM words and accumulator rows past the end, a quant register no earlier LOAD_QREG
wrote; every int8 LOAD_QREG shift is defined, tpusim.arch.arith) and a DMA_STORE into the code;
HALT last. Then the tokens: a wait whose token no earlier instruction sends (deadlock, see
stressgen.analysis), more than TOKEN_MAX possibly unconsumed tokens on one counter; and finally
races (two engines touching the same bytes or accumulator rows, one writing, with no token path
between them). ``StressError.kind`` is the ``DEVICE_ERRORS`` name of a device error
("reserved_opcode", "dma_sram_range", "qreg_unloaded", "token_overflow", ...), else "deadlock",
"race" or "range": the model's device errors (docs/architecture.md, clarification 8) plus the
stress-program rules (race freedom, program-ordered tokens).
"""
from __future__ import annotations

from stressgen.analysis import NAMES, engine_of, find_race, match_tokens, max_outstanding
from stressgen.program import CODE_ADDR, CODE_SPAN_BYTES, RawWord, StressError, stress_error
from tpusim.arch.device_checks import decode_fault, start_fault
from tpusim.arch.errors import IsaError
from tpusim.arch.isa import INSTR_BYTES, check_ranges, decode_as_hardware
from tpusim.arch.limits import TOKEN_MAX
from tpusim.arch.operands import dma_ddr_end


def hw_decode(raw: RawWord):
    """A raw word as the hardware decodes it: the Instruction, or None for a word the decoder
    rejects (reserved opcode, unused bits set: tpusim.arch.isa.decode_as_hardware)."""
    return decode_as_hardware(raw.word)


def normalise(instrs) -> list:
    """Raw words that decode are replaced by their Instruction; rejected ones stay RawWord."""
    out = []
    for ins in instrs:
        if isinstance(ins, RawWord):
            d = hw_decode(ins)
            out.append(ins if d is None else d)
        else:
            out.append(ins)
    return out


def _fault(i: int, op: str, fault) -> StressError:
    """The StressError of a device check's fault (kind = its DEVICE_ERRORS name)."""
    return stress_error(i, op, fault.field, fault.value, fault.why, fault.code)


def _store_over_code(i: int, ins) -> None:
    a = ins.args
    end = dma_ddr_end(a)
    if a["ddr_addr"] < CODE_ADDR + CODE_SPAN_BYTES and end > CODE_ADDR:
        raise stress_error(i, ins.op, "ddr_addr", a["ddr_addr"],
                           f"writes DDR up to {end - 1:#x}, over the code at {CODE_ADDR:#x} "
                           "(races with instruction fetch)", "race")


def check_instruction(i: int, ins, cfg, loaded: set) -> None:
    """Static checks of instruction ``i``; ``loaded`` = quant registers written before it
    (updated for LOAD_QREG). StressError on the first fault: a word the decoder rejects, a field out of
    range, the device error of ``tpusim.arch.device_checks.start_fault`` (kind = its name), a
    DMA_STORE over the code (kind "race")."""
    if isinstance(ins, RawWord):
        raise _fault(i, ins.op, decode_fault(ins.word))
    try:
        check_ranges(ins)
    except IsaError as e:
        raise StressError(f"instruction #{i} at pc {i * INSTR_BYTES:#x}: {e}", index=i,
                          pc=i * INSTR_BYTES, field=None, value=None) from None
    fault = start_fault(ins, cfg, loaded)
    if fault is not None:
        raise _fault(i, ins.op, fault)
    if ins.op == "DMA_STORE":
        _store_over_code(i, ins)
    elif ins.op == "LOAD_QREG":
        loaded.add(ins.args["qreg"])


def check_static(instrs, cfg) -> None:
    """Per-instruction checks and HALT placement (no token or race analysis)."""
    if not instrs:
        raise StressError("empty program: no HALT", kind="range")
    loaded: set = set()
    for i, ins in enumerate(instrs):
        check_instruction(i, ins, cfg, loaded)
        if ins.op == "HALT" and i != len(instrs) - 1:
            raise stress_error(i, "HALT", "index", i, f"is not last: {len(instrs) - 1 - i} "
                               "instruction(s) after it never execute")
    if instrs[-1].op != "HALT":
        raise stress_error(len(instrs) - 1, instrs[-1].op, "op", instrs[-1].op,
                           "is last but the program must end with HALT")


def check_tokens(instrs, cfg, senders, problems) -> None:
    if problems:
        i, x, _ = problems[0]
        ins = instrs[i]
        raise stress_error(i, ins.op, "wait", ins.wait, f"waits for a token from {NAMES[x]} that no "
                           f"earlier instruction sends to {NAMES[engine_of(ins)]}: deadlock", "deadlock")
    worst, pair, at = max_outstanding(instrs, cfg.queue_depth)
    if worst > TOKEN_MAX:
        ins = instrs[at]
        raise stress_error(at, ins.op, "signal", ins.signal, f"can leave {worst} unconsumed tokens on "
                           f"counter {NAMES[pair[0]]}->{NAMES[pair[1]]} (> {TOKEN_MAX})", "token_overflow")


def validate(prog, cfg) -> None:
    """Raise StressError (an IsaError) for an ill-formed program; see the module docstring."""
    instrs = normalise(prog.instrs)
    check_static(instrs, cfg)
    senders, problems = match_tokens(instrs)
    check_tokens(instrs, cfg, senders, problems)
    race = find_race(instrs, cfg, senders=senders)
    if race:
        j, i, (space, lo, hi) = race
        unit = "rows" if space == "acc" else "bytes"
        raise stress_error(i, instrs[i].op, "wait", instrs[i].wait,
                           f"races with instruction #{j} ({instrs[j].op} on {NAMES[engine_of(instrs[j])]}) "
                           f"on {space} {unit} [{lo:#x}, {hi:#x}): no token orders them", "race")


__all__ = ["validate", "check_instruction", "check_static", "normalise", "hw_decode"]
