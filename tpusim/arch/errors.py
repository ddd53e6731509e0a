"""Exceptions shared by the simulator, the compiler and the harness.

Every error a user can cause is one of these, carrying the bad value in its message; the command
line tools print the message and exit non-zero instead of showing a traceback.
"""
from __future__ import annotations

from tpusim.arch.device_errors import DEVICE_ERRORS


class TpuError(Exception):
    """Base class of every user-facing tpusim/tpucompile error."""


class ConfigError(TpuError):
    """A hardware configuration YAML is unknown, incomplete or inconsistent."""


class TimebaseError(TpuError):
    """A clock frequency or time does not convert exactly to picoseconds."""


class IsaError(TpuError):
    """An instruction cannot be encoded or decoded (bad opcode, field out of range, misalignment)."""


class BinaryFormatError(TpuError):
    """A .tpubin file is malformed, corrupt, or built for another hardware configuration."""


class WaveError(TpuError):
    """A user-facing error about a dump or a dump request (missing file, not a waveform, a
    truncated header, unknown signal, bad scope or window)."""


class CompileError(TpuError):
    """The compiler refuses a model; the message names the ONNX node at fault."""


class SimulationError(TpuError):
    """The simulated device flagged an error (illegal instruction, deadlock, bad address)."""


class DeviceError(SimulationError):
    """The device flagged an error (docs/architecture.md, "Device errors").

    ``code``: name in ``tpusim.arch.isa.DEVICE_ERRORS`` (e.g. ``"dma_misaligned"``); ``pc``: byte
    offset from ``code_addr`` of the erroneous instruction (token_overflow: the sender's
    instruction); ``cycle``: core edge index at which the decoder registers the error
    (``error_o`` rises in the RTL); ``detect_ps``: the detecting edge (ps, model time) in the
    detecting engine's domain. ``run``: the ``TpuRun`` if the device halted after the error
    (cycles, retire trace, counters), else None; ``waiting``: the blocked engines, as in
    ``DeadlockError``, if it did not halt. ``field``/``value``: the instruction field at fault
    and its value (``tpusim.arch.device_checks``), None when no one field is. Raises IsaError
    for an unknown ``code``.
    """

    def __init__(self, message: str, code: str, pc: int, cycle: int | None = None, *,
                 field: str | None = None, value: int | None = None) -> None:
        if code not in DEVICE_ERRORS:
            raise IsaError(f"unknown device error {code!r}; known: {sorted(DEVICE_ERRORS)}")
        super().__init__(message)
        self.code = code
        self.pc = pc
        self.cycle = cycle
        self.field = field
        self.value = value
        self.detect_ps: int | None = None
        self.run = None
        self.waiting: list | None = None

    @property
    def code_num(self) -> int:
        """The numeric code (``error_code_o``)."""
        return DEVICE_ERRORS[self.code]


class DeadlockError(SimulationError):
    """No engine can make progress and the device has not halted (no error flagged).

    ``waiting``: [(engine name, pc of its queue head, (names of the engines whose token it
    misses, in engine order))] for every engine blocked on tokens, in engine order.
    """

    def __init__(self, message: str, waiting: list) -> None:
        super().__init__(message)
        self.waiting = [(e, pc, tuple(miss)) for e, pc, miss in waiting]


def flag_of(outcome) -> tuple:
    """A comparable summary of one run's outcome, the same for the SimPy model and the RTL:

    * ``("ok",)`` — a SimPy result (no exception) or an RtlResult with status "ok";
    * ``("error", code name, pc, cycle)`` — a ``DeviceError`` or an RtlResult with status
      "error" (``error_code``, ``error_pc``, ``error_cycle``);
    * ``("deadlock", ((engine, pc, (senders...)), ...))`` — a ``DeadlockError`` or an RtlResult
      with status "deadlock" (``waiting``);
    * ``(status,)`` for any other RtlResult status ("timeout", "crash") and
      ``("exception", type name)`` for any other exception.
    ``outcome``: an exception, a SimPy result (SimResult / TpuRun) or a
    ``cocotb_tests.harness.RtlResult`` (anything with a ``status`` attribute).
    """
    if isinstance(outcome, DeviceError):
        return ("error", outcome.code, outcome.pc, outcome.cycle)
    if isinstance(outcome, DeadlockError):
        return ("deadlock", tuple(outcome.waiting))
    if isinstance(outcome, BaseException):
        return ("exception", type(outcome).__name__)
    status = getattr(outcome, "status", None)
    if status is None or status == "ok":
        return ("ok",)
    if status == "error":
        return ("error", outcome.error_code, outcome.error_pc, outcome.error_cycle)
    if status == "deadlock":
        return ("deadlock", tuple((e, pc, tuple(m)) for e, pc, m in outcome.waiting))
    return (status,)
