"""The device errors of the chip: the table every side raises and flags from.

``DEVICE_ERRORS`` (name -> ``error_code_o`` value) is read by the SimPy model
(``tpusim.arch.errors.DeviceError``), the device checks (``tpusim.arch.device_checks``), the RTL
(generated into rtl/tpu_isa_pkg.sv as ``ERR_<NAME>``) and docs/isa.md; ``tpusim.arch.isa``
re-exports it. Detection, tie rule and what "stop" means: docs/architecture.md, "Device errors".
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.limits import DDR_ADDR_BITS, TOKEN_MAX


@dataclass(frozen=True)
class DeviceErrorSpec:
    """One device error: its ``error_code_o`` value, which block detects it and when, and the
    condition (the text of docs/isa.md's error table)."""
    name: str
    code: int
    detected_by: str
    condition: str


_DEVICE_ERROR_SPECS = (
    DeviceErrorSpec("reserved_opcode", 1, 'decoder, at dispatch',
                    'the opcode byte is not in the opcode table'),
    DeviceErrorSpec("qreg_unloaded", 2, 'VPU, at start',
                    'REQUANT, REQUANT_ADD, POOL average or ADD (with output), or SOFTMAX / LAYERNORM (with rows) '
                    'names a quant register that no LOAD_QREG has written'),
    DeviceErrorSpec("dma_zero_length", 3, 'LOAD/STORE, at start',
                    '`inner_bytes`, `count1` or `count2` is 0'),
    DeviceErrorSpec("dma_misaligned", 4, 'LOAD/STORE, at start',
                    'an SRAM address, `inner_bytes` or SRAM stride is not a multiple of `W`, or a'
                    ' DDR address or stride not a multiple of max(`W`, 32)'),
    DeviceErrorSpec("dma_sram_range", 5, 'LOAD/STORE, at start',
                    'the last run ends past the end of the SRAM'),
    DeviceErrorSpec("dma_ddr_range", 6, 'LOAD/STORE, at start',
                    f'the last run ends past DDR byte 2^{DDR_ADDR_BITS} - 1'),
    DeviceErrorSpec("mxu_sram_range", 7, 'MXU, at start',
                    "LOAD_WEIGHTS' `C` words or a MATMUL (M > 0) vector lies past the last SRAM "
                    'word'),
    DeviceErrorSpec("mxu_acc_range", 8, 'MXU, at start',
                    'MATMUL (M > 0): `acc_addr + M` > accumulator rows'),
    DeviceErrorSpec("vpu_sram_range", 9, 'VPU, at start',
                    'a REQUANT table or destination (REQUANT_ADD: or skip), POOL source or destination, ADD operand '
                    '(with output), or SOFTMAX / LAYERNORM source, destination or table (with rows) '
                    'lies past the last SRAM word, or a REQUANT (REQUANT_ADD) `lane_group` names '
                    'lanes past the word (>= R/C; > 0 when R <= C)'),
    DeviceErrorSpec("vpu_acc_range", 10, 'VPU, at start',
                    'REQUANT, REQUANT_ADD: `acc_addr + count` > accumulator rows'),
    DeviceErrorSpec("token_overflow", 11, 'sender engine, at completion',
                    f'{TOKEN_MAX} tokens sent to an engine in the `signal` mask are not yet seen consumed '
                    'by the sender (the new token is not sent)'),
    DeviceErrorSpec("unused_bits", 12, 'decoder, at dispatch',
                    "a bit above the opcode's last field (its *used bits*) is not zero"),
)

#: Device error codes: ``error_code_o`` of tpu_top (0 = no error) and ``DeviceError.code`` (the
#: name) in the SimPy model. Detection, tie rule and what "stop" means: docs/architecture.md,
#: "Device errors". Generated into rtl/tpu_isa_pkg.sv as ``ERR_<NAME>`` and into docs/isa.md.
DEVICE_ERRORS: dict[str, int] = {e.name: e.code for e in _DEVICE_ERROR_SPECS}
#: name -> (detected by, condition); the text of docs/isa.md's error table.
DEVICE_ERROR_TEXT: dict[str, tuple[str, str]] = {e.name: (e.detected_by, e.condition)
                                                  for e in _DEVICE_ERROR_SPECS}

ERROR_NAMES: dict[int, str] = {v: k for k, v in DEVICE_ERRORS.items()}
