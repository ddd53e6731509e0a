"""Functional ISA-level reference for stress programs: ``run_golden(prog, cfg)``.

A thin wrapper of the ISA executor (``tpusim.arch.executor``, which defines the semantics,
the arithmetic and the token-respecting scheduler): the program's ``ddr_init`` goes into a
sparse DDR, every instruction up to HALT is checked as ``validate`` checks it
(``stressgen.validate.check_instruction``) before anything runs, the executor runs the program
(round robin, or the interleaving of ``sched_seed``), and the output regions' bytes are read
back.

Errors: StressError, with the instruction index, PC and kind: the one ``validate`` gives for an
ill-formed instruction (kind = its ``DEVICE_ERRORS`` name, or "race" / "range"), a missing
HALT, a deadlock (kind "deadlock") and more than TOKEN_MAX unconsumed tokens on one counter
(kind "token_overflow"). Races are not detected here (``validate`` does that): a racy program
runs in the chosen order.

``observe``: optional callable(event: str, index: int, **info) for coverage (ties, scales);
the events are the executor's (``tpusim.arch.executor.machine``).
"""
from __future__ import annotations

from stressgen.program import StressError, stress_error
from stressgen.validate import check_instruction, normalise
from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.errors import DeadlockError, DeviceError
from tpusim.arch.executor import run_program
from tpusim.arch.isa import INSTR_BYTES


def run_golden(prog, cfg, sched_seed: int | None = None, observe=None) -> dict[str, bytes]:
    """Execute ``prog`` functionally on ``cfg``; returns output region name -> its bytes in the
    final DDR (``OutputRegion.size_bytes`` each). Raises StressError (module docstring)."""
    ddr = DdrMemory()
    for addr, data in prog.ddr_init:
        ddr.write(addr, bytes(data))
    instrs = normalise(prog.instrs)
    loaded: set = set()
    for i, ins in enumerate(instrs):
        check_instruction(i, ins, cfg, loaded)         # raises for a reserved opcode too
        if ins.op == "HALT":
            break
    else:
        raise StressError("program has no HALT: the decoder would run off the end of the code")
    try:
        run_program(instrs, cfg, ddr, sched_seed, observe)
    except DeadlockError as e:
        i = e.waiting[0][1] // INSTR_BYTES
        raise stress_error(i, instrs[i].op, "wait", instrs[i].wait, str(e), "deadlock") from None
    except DeviceError as e:
        raise StressError(str(e), index=e.pc // INSTR_BYTES, pc=e.pc, field=e.field, value=e.value,
                          kind=e.code) from None
    return {r.name: ddr.read(r.ddr_addr, r.size_bytes) for r in prog.outputs}


__all__ = ["run_golden"]
