"""Dispatch and the token-respecting scheduler of the ISA executor (docs/isa.md, "Encoding";
docs/architecture.md, "Engines and tokens").

``dispatch`` puts the program's instructions, up to the first HALT, into the four in-order
engine queues (NOP into the queue its ``engine`` field names). ``run_tokens`` then runs them:
an engine may start its queue head only when every engine in the head's ``wait`` mask has sent
it a token not yet consumed; the start consumes them, the instruction executes atomically
(``execute(index, instruction)``) and sends one token to each engine in its ``signal`` mask.
Among the ready engines one is picked round robin (``sched_seed`` None) or at random from
``random.Random(sched_seed)``, so several legal interleavings of one program can be run; queue
depths and timing are not modelled (every token-respecting order is legal here).

Errors: ``DeadlockError`` when no head is ready and some queue is not empty (``waiting``: every
stuck engine in engine order, as the SimPy model reports it); ``DeviceError`` token_overflow
when a signal would leave more than TOKEN_MAX unconsumed tokens on one counter (the functional
reading of the sender's check); ``SimulationError`` for a program without HALT.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from tpusim.arch.device_checks import decode_fault, token_overflow_fault, where
from tpusim.arch.errors import DeadlockError, SimulationError
from tpusim.arch.isa import BY_CODE, ENGINE_NAMES, INSTR_BYTES, Instruction, decode_as_hardware
from tpusim.arch.limits import TOKEN_MAX

N_ENGINES = len(ENGINE_NAMES)


def program_from_code(code: bytes) -> list[Instruction]:
    """The instructions of a code section as the hardware decodes them, up to and including the
    first HALT. DeviceError reserved_opcode / unused_bits for a word the decoder rejects before
    it (nothing runs); SimulationError if the code ends without HALT."""
    prog = []
    for pc in range(0, len(code) - len(code) % INSTR_BYTES, INSTR_BYTES):
        raw = code[pc:pc + INSTR_BYTES]
        ins = decode_as_hardware(raw)
        if ins is None:
            op = None if raw[0] not in BY_CODE else BY_CODE[raw[0]].name
            raise decode_fault(raw).error(where(pc // INSTR_BYTES, op), pc)
        prog.append(ins)
        if ins.op == "HALT":
            return prog
    raise SimulationError(f"code of {len(code)} bytes has no HALT: the decoder would run off its end")


def dispatch(instrs: Sequence[Instruction]) -> list[list[int]]:
    """Program indices of the instructions before the first HALT, per engine (Engine order),
    in program order. SimulationError if there is no HALT."""
    queues: list[list[int]] = [[] for _ in range(N_ENGINES)]
    for i, ins in enumerate(instrs):
        if ins.op == "HALT":
            return queues
        queues[int(ins.engine)].append(i)
    raise SimulationError("program has no HALT: the decoder would run off the end of the code")


def _missing(ins: Instruction, tokens: list[int]) -> list[int]:
    """Engines in ``ins.wait`` with no unconsumed token in ``tokens`` (per sender)."""
    return [x for x in range(N_ENGINES) if ins.wait >> x & 1 and tokens[x] == 0]


def run_tokens(instrs: Sequence[Instruction], queues: list[list[int]],
               execute: Callable[[int, Instruction], None], sched_seed: int | None = None) -> None:
    """Run the queued instructions in a token-respecting order (module docstring)."""
    heads = [0] * N_ENGINES
    tok = [[0] * N_ENGINES for _ in range(N_ENGINES)]      # tok[sender][receiver]: unconsumed
    rng = random.Random(sched_seed) if sched_seed is not None else None
    turn = 0
    while True:
        waiting = [e for e in range(N_ENGINES) if heads[e] < len(queues[e])]
        ready = [e for e in waiting
                 if not _missing(instrs[queues[e][heads[e]]], [tok[x][e] for x in range(N_ENGINES)])]
        if not ready:
            if waiting:
                raise _deadlock(instrs, queues, heads, tok, waiting)
            return
        if rng is not None:
            e = rng.choice(ready)
        else:
            e = min(ready, key=lambda q: (q - turn) % N_ENGINES)
            turn = (e + 1) % N_ENGINES
        i = queues[e][heads[e]]
        ins = instrs[i]
        heads[e] += 1
        for x in range(N_ENGINES):
            if ins.wait >> x & 1:
                tok[x][e] -= 1
        execute(i, ins)
        for y in range(N_ENGINES):
            if ins.signal >> y & 1:
                if tok[e][y] >= TOKEN_MAX:
                    raise token_overflow_fault(e, y, ins.signal).error(where(i, ins.op), i * INSTR_BYTES)
                tok[e][y] += 1


def _deadlock(instrs, queues, heads, tok, stuck: list[int]) -> DeadlockError:
    """``deadlock: MXU waits forever for a token from LOAD|VPU; stuck heads: MXU #1, ...``
    naming the first stuck engine; ``waiting`` = (engine, pc, missing senders) of each."""
    waiting = []
    for e in stuck:
        i = queues[e][heads[e]]
        miss = _missing(instrs[i], [tok[x][e] for x in range(N_ENGINES)])
        waiting.append((ENGINE_NAMES[e], i * INSTR_BYTES, tuple(ENGINE_NAMES[x] for x in miss)))
    first, _, miss = waiting[0]
    heads_text = ", ".join(f"{ENGINE_NAMES[e]} #{queues[e][heads[e]]}" for e in stuck)
    return DeadlockError(f"deadlock: {first} waits forever for a token from {'|'.join(miss)}; "
                         f"stuck heads: {heads_text}", waiting)


__all__ = ["program_from_code", "dispatch", "run_tokens", "N_ENGINES"]
