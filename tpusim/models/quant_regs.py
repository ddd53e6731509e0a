"""Quant register banks: 4 banks x 16 entries (index = bank*16 + entry).

Each entry holds {multiplier int32 (Q31), shift int8, zero_point int8, valid}; reset clears valid.
Reading an entry that was never loaded is device error ``qreg_unloaded``, which the VPU checks at
the instruction's start (tpusim.arch.device_checks, with ``idx in regs``) before any ``get``.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.errors import SimulationError


@dataclass(frozen=True)
class QuantReg:
    multiplier: int
    shift: int
    zero_point: int


class QuantRegs:
    """The register file; ``load`` by LOAD_QREG, ``get`` by REQUANT/POOL/ADD; ``idx in regs``
    is the valid bit."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.regs: list[QuantReg | None] = [None] * count

    def __contains__(self, idx: int) -> bool:
        return 0 <= idx < self.count and self.regs[idx] is not None

    def load(self, idx: int, multiplier: int, shift: int, zero_point: int) -> None:
        self._check(idx)
        self.regs[idx] = QuantReg(int(multiplier), int(shift), int(zero_point))

    def get(self, idx: int) -> QuantReg:
        """The loaded register ``idx``; SimulationError if it was never loaded (the VPU's
        qreg_unloaded check comes first, so this is an internal error)."""
        self._check(idx)
        r = self.regs[idx]
        if r is None:
            raise SimulationError(f"internal: quant register {idx} read before the qreg_unloaded check")
        return r

    def _check(self, idx: int) -> None:
        if not 0 <= idx < self.count:
            raise SimulationError(f"quant register index {idx} outside [0, {self.count})")


__all__ = ["QuantReg", "QuantRegs"]
