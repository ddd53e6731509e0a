"""Exceptions shared by the simulator, the compiler and the harness.

Every error a user can cause is one of these, carrying the bad value in its message; the command
line tools print the message and exit non-zero instead of showing a traceback.
"""


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


class CompileError(TpuError):
    """The compiler refuses a model; the message names the ONNX node at fault."""


class SimulationError(TpuError):
    """The simulated device flagged an error (illegal instruction, deadlock, bad address)."""
