"""The compiler's self-check: run a compiled program on the ISA executor.

``run_on_executor(binary, cfg, blocked_inputs, sched_seeds)`` loads the binary's DDR image
(``TpuBinary.ddr_segments``: fills, constants, code, the given inputs), runs its code on
``tpusim.arch.executor`` once per scheduler seed, i.e. in several token-respecting
interleavings, and reads every output back. A token the emitter forgot shows up as outputs
that differ between interleavings (a CompileError here), or as wrong outputs against the QGraph
golden (``tpucompile.golden``); a wait nobody signals as a DeadlockError.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import HwConfig
from tpusim.arch.ddr_memory import DdrMemory
from tpusim.arch.errors import CompileError
from tpusim.arch.executor import program_from_code, run_program

#: Default interleavings: round robin and two random ones.
SCHED_SEEDS = (None, 0, 1)


def _outputs(binary: TpuBinary, cfg: HwConfig, blocked_inputs: dict[str, bytes],
             sched_seed: int | None) -> dict[str, np.ndarray]:
    ddr = DdrMemory()
    for addr, data in binary.ddr_segments(blocked_inputs):
        ddr.write(addr, data)
    run_program(program_from_code(binary.code), cfg, ddr, sched_seed)
    return {d.name: d.from_blocked(ddr.read(d.ddr_addr, d.size_bytes)) for d in binary.outputs}


def run_on_executor(binary: TpuBinary, cfg: HwConfig, blocked_inputs: dict[str, bytes],
                    sched_seeds: Sequence[int | None] = SCHED_SEEDS) -> dict[str, np.ndarray]:
    """Outputs of ``binary`` (name -> int8 NCHW array, ``TensorDesc.from_blocked``) run on the
    ISA executor with ``blocked_inputs`` (name -> bytes of the whole blocked DDR buffer, as
    ``TensorDesc.to_blocked`` gives) once per seed of ``sched_seeds`` (None: round robin).
    Raises CompileError naming the output and the seeds if two interleavings disagree, and the
    executor's DeviceError / DeadlockError / SimulationError (tpusim.arch.executor)."""
    if not sched_seeds:
        raise CompileError("run_on_executor needs at least one scheduler seed")
    first = _outputs(binary, cfg, blocked_inputs, sched_seeds[0])
    for seed in sched_seeds[1:]:
        other = _outputs(binary, cfg, blocked_inputs, seed)
        for name, want in first.items():
            if not np.array_equal(other[name], want):
                raise CompileError(f"output {name!r} differs between scheduler seeds "
                                   f"{sched_seeds[0]} and {seed}: the program races (a token is missing)")
    return first


__all__ = ["run_on_executor", "SCHED_SEEDS"]
