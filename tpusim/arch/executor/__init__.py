"""The ISA-level functional executor: the one instruction-level reference of the chip.

What a program computes, without timing: the instructions of docs/isa.md on a sparse DDR
(2^40 bytes), the SRAM, the accumulator, the weight tile and the quant registers, each engine's
queue in program order, the engines interleaved in any token-respecting order. Used by
stressgen's golden model (``stressgen.golden.run_golden``) and by the compiler's self-check
(``tpucompile.selfcheck``); the SimPy model is the independent implementation with timing.

  machine    ``Machine``: the architectural state and every opcode's semantics
  schedule   ``program_from_code``, ``dispatch`` (engine queues up to HALT) and ``run_tokens``
             (the token-respecting scheduler; ``sched_seed`` picks among the ready engines)

``run_program`` puts them together. Errors are those of the device (``tpusim.arch.errors``):
``DeviceError`` with the ``DEVICE_ERRORS`` name of the first failing device check
(``tpusim.arch.device_checks``, at the instruction's start) or token_overflow; ``DeadlockError``
with the stuck engines; ``SimulationError`` for a program without HALT.
"""
from __future__ import annotations

from collections.abc import Sequence

from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.executor.machine import POOL_MAX_EMPTY, Machine
from tpusim.arch.executor.schedule import dispatch, program_from_code, run_tokens
from tpusim.arch.isa import Instruction


def run_program(instrs: Sequence[Instruction], cfg, ddr: DdrMemory | None = None,
                sched_seed: int | None = None, observe=None) -> Machine:
    """Execute ``instrs`` (index i at pc i * 32; up to the first HALT) on config ``cfg`` with
    DDR ``ddr`` (modified in place; empty if None), in the interleaving of ``sched_seed``
    (round robin if None). Returns the final ``Machine`` (``.ddr``, ``.sram``, ...).
    ``observe``: see ``tpusim.arch.executor.machine``. Errors: module docstring."""
    machine = Machine(cfg, ddr, observe)
    run_tokens(instrs, dispatch(instrs), machine.execute, sched_seed)
    return machine


__all__ = ["Machine", "POOL_MAX_EMPTY", "run_program", "program_from_code", "dispatch", "run_tokens"]
