"""Quant register banks: 4 banks x 16 entries (index = bank*16 + entry).

Each entry holds {multiplier int32 (Q31), shift int8, zero_point int8, valid}; reset clears valid.
Reading an entry that was never loaded is device error ``qreg_unloaded``.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.errors import DeviceError, SimulationError


@dataclass(frozen=True)
class QuantReg:
    multiplier: int
    shift: int
    zero_point: int


class QuantRegs:
    """The register file; ``load`` by LOAD_QREG, ``get`` by REQUANT/POOL/ADD."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.regs: list[QuantReg | None] = [None] * count

    def load(self, idx: int, multiplier: int, shift: int, zero_point: int, where: str = "") -> None:
        self._check(idx, where)
        self.regs[idx] = QuantReg(int(multiplier), int(shift), int(zero_point))

    def get(self, idx: int, where: str = "", field: str = "qreg", pc: int = 0) -> QuantReg:
        """The loaded register; DeviceError ``qreg_unloaded`` (at ``pc``) naming ``where`` and
        ``field`` if never loaded."""
        self._check(idx, where)
        r = self.regs[idx]
        if r is None:
            raise DeviceError(f"{where}: {field}={idx} (bank {idx // 16}, entry {idx % 16}) "
                              "reads a quant register that was never loaded", "qreg_unloaded", pc)
        return r

    def _check(self, idx: int, where: str) -> None:
        if not 0 <= idx < self.count:
            raise SimulationError(f"{where}: quant register index {idx} outside [0, {self.count})")


__all__ = ["QuantReg", "QuantRegs"]
