"""Programs that hit each device error (docs/architecture.md, "Device errors") on the ``small``
config, shared by tests/test_device_errors.py (SimPy) and tests/test_device_errors_rtl.py (RTL).

``CASES``: name -> Case(program, code, pc, cycle, message). ``program`` is a list of
instructions (HALT appended by ``code_of``) or raw code bytes; ``code``/``pc``/``cycle`` are the
expected ``DeviceError.code``, ``.pc`` and ``.cycle``; ``message`` the exact ``str(error)``.
Timing of the first cases (small config: core 1000 ps, DMA 2500 ps phase 50; line 0 valid at
core 19, two instructions per 64-byte line, line 1 much later):
  * an MXU/VPU instruction at index 1 is dispatched at 20, visible and started at 21, so the
    decoder registers its error at 22;
  * a DMA_LOAD at index 1 behind a LOAD NOP: the NOP runs DMA 25050 -> 27550; the DMA_LOAD
    starts at 30050 and its error crosses to the core at cdc(30050) = 33000; a DMA_STORE there
    starts at cdc(20000 -> dma) = 25050 and registers at cdc(25050) = 28000.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.isa import encode_program, make

LOAD, STORE, MXU, VPU = 1, 2, 4, 8
DMA = dict(count1=1, count2=1)
Q0 = make("LOAD_QREG", qreg=0, multiplier=1 << 30, shift=-1, zero_point=0)


@dataclass(frozen=True)
class Case:
    program: object          # list of Instruction (HALT appended) or code bytes
    code: str
    pc: int
    cycle: int
    message: str


def code_of(program) -> bytes:
    """The code bytes of a case's program (HALT appended to an instruction list)."""
    if isinstance(program, bytes):
        return program
    return encode_program(list(program) + [make("HALT")])


def _at1(bad) -> list:
    """``bad`` at index 1 (pc 0x20) behind a LOAD NOP."""
    return [make("NOP", engine=0), bad]


_W = "instruction #1 at pc 0x20"

CASES: dict[str, Case] = {
    "reserved_opcode": Case(
        encode_program([make("NOP", engine=0)]) + bytes([0xEE]) + bytes(31) + encode_program(
            [make("HALT")]),
        "reserved_opcode", 0x20, 20,
        "reserved opcode 0xee at instruction #1 (pc 0x20): device halted with error_code 1 after "
        "30 cycles"),
    # bit 200 of a VPU NOP (pc 0x20), dispatched at 20 like the reserved opcode above
    "unused_bits": Case(
        encode_program([make("NOP", engine=0)])
        + (int.from_bytes(encode_program([make("NOP", engine=3)]), "little") | 1 << 200).to_bytes(32, "little")
        + encode_program([make("HALT")]),
        "unused_bits", 0x20, 20,
        "NOP at instruction #1 (pc 0x20): bit=0xc8 (200) is set: NOP uses bits 0-17, bits 18 and up "
        "must be zero: device halted with error_code 12 after 30 cycles"),
    "dma_zero_length": Case(
        _at1(make("DMA_LOAD", ddr_addr=0x10000, sram_addr=0, inner_bytes=64, count1=1, count2=0)),
        "dma_zero_length", 0x20, 33,
        f"{_W} (DMA_LOAD): count2=0x0 (0) is zero: zero-length DMA"),
    "dma_misaligned": Case(
        _at1(make("DMA_STORE", ddr_addr=0x10010, sram_addr=0, inner_bytes=16, **DMA)),
        "dma_misaligned", 0x20, 28,
        f"{_W} (DMA_STORE): ddr_addr=0x10010 (65552) is not a multiple of 32 bytes"),
    "dma_sram_range": Case(
        _at1(make("DMA_LOAD", ddr_addr=0x10000, sram_addr=0x3c00, inner_bytes=64, count1=2,
                  sram_stride1=0x400, ddr_stride1=64, count2=1)),
        "dma_sram_range", 0x20, 33,
        f"{_W} (DMA_LOAD): sram_addr=0x3c00 (15360) with these strides reaches SRAM byte "
        "0x403f, past the end of the 16384-byte SRAM"),
    "dma_ddr_range": Case(
        _at1(make("DMA_STORE", ddr_addr=(1 << 40) - 64, sram_addr=0, inner_bytes=32, count1=1,
                  count2=2, ddr_stride2=64)),
        "dma_ddr_range", 0x20, 28,
        f"{_W} (DMA_STORE): ddr_addr=0xffffffffc0 (1099511627712) with these strides reaches DDR "
        "byte 0x1000000001f >= 2^40"),
    "mxu_sram_range": Case(
        _at1(make("LOAD_WEIGHTS", sram_addr=2041)),
        "mxu_sram_range", 0x20, 22,
        f"{_W} (LOAD_WEIGHTS): sram_addr=0x7f9 (2041) reaches SRAM word 0x800, past the last "
        "word 0x7ff"),
    "mxu_acc_range": Case(
        _at1(make("MATMUL", act_addr=0, count_x=3, stride_x=1, count_y=2, stride_y=3,
                  acc_addr=507)),
        "mxu_acc_range", 0x20, 22,
        f"{_W} (MATMUL): acc_addr=0x1fb (507) + 6 rows runs past the end of the 512-row "
        "accumulator"),
    "vpu_sram_range": Case(
        [Q0, make("POOL", mode=0, src_addr=2030, win_w=2, win_h=2, win_stride_x=1,
                  win_stride_y=8, out_w=2, out_stride_x=2, out_h=2, out_stride_y=16,
                  dst_addr=100)],
        "vpu_sram_range", 0x20, 23,
        f"{_W} (POOL): src_addr=0x7ee (2030) + 28 words reaches SRAM word 0x809, past the last "
        "word 0x7ff"),
    "vpu_acc_range": Case(
        [Q0, make("REQUANT", acc_addr=510, count=3, param_addr=0, dst_addr=100, qreg=0)],
        "vpu_acc_range", 0x20, 23,
        f"{_W} (REQUANT): acc_addr=0x1fe (510) + 3 rows runs past the end of the 512-row "
        "accumulator"),
    "qreg_unloaded": Case(
        [Q0, make("ADD", src_a=0, src_b=8, dst_addr=16, count=1, qreg_a=0, qreg_b=0,
                  qreg_out=17)],
        "qreg_unloaded", 0x20, 23,
        f"{_W} (ADD): qreg_out=0x11 (17) (bank 1, entry 1) reads a quant register that was never "
        "loaded"),
    # 256 VPU NOPs signal the MXU, which never takes a token: the 256th overflows at its
    # completion edge c = 2563 (registered at c + 1)
    "token_overflow": Case(
        [make("NOP", engine=3, signal=MXU)] * 256,
        "token_overflow", 0x1fe0, 2564,
        "instruction #255 at pc 0x1fe0 (NOP): signal=0x4 (4) overflows token counter VPU->MXU "
        "(255 tokens not yet consumed)"),
}

#: the tie rule: two erroneous instructions (pc 0x0 and 0x20) wait for the token of a LOAD NOP
#: (pc 0x40) that signals both; they see it at the same core edge, start there and register at
#: the same edge e = 51: the lower PC is kept.
_TIE_MXU = make("MATMUL", wait=LOAD, act_addr=0, count_x=1, count_y=1, acc_addr=512)
_TIE_VPU = make("REQUANT", wait=LOAD, acc_addr=512, count=1)
_TIE_SEND = make("NOP", engine=0, signal=MXU | VPU)
TIE_MXU_FIRST = [_TIE_MXU, _TIE_VPU, _TIE_SEND]
TIE_VPU_FIRST = [_TIE_VPU, _TIE_MXU, _TIE_SEND]

#: a deadlock: LOAD waits for MXU, MXU for LOAD and VPU (nobody sends)
DEADLOCK = [make("NOP", engine=0, wait=MXU), make("NOP", engine=2, wait=LOAD | VPU)]
DEADLOCK_WAITING = [("LOAD", 0x0, ("MXU",)), ("MXU", 0x20, ("LOAD", "VPU"))]

#: an error that leaves the device unable to halt: the MXU instruction that would signal the
#: waiting LOAD NOP is in fetch line 1, never dispatched (dispatch stopped at core edge 22)
ERROR_THEN_STUCK = [make("NOP", engine=0, wait=MXU),
                    make("MATMUL", act_addr=2047, count_x=2, stride_x=1, count_y=1),
                    make("NOP", engine=2, signal=LOAD)]

#: the decoder held by a full MXU queue (Q = 4) when a VPU error stops dispatch. Three two-burst
#: DMA_LOADs signal MXU (each next one starts as the previous one's first burst buffer frees, K = 2,
#: before that one completes: docs/architecture.md "DMA" v4; the MXU's NOPs start on their tokens
#: at core 75, 115, 155); NOP a, b, c (pc 0x60, 0x80, 0xa0) wait for them, c signals the bad
#: REQUANT (pc 0xc0, error flagged at core 158), then eight MXU NOPs, which the decoder cannot push while the
#: MXU queue is full: 54 stall edges in all up to the error stop (47 with one-burst LOADs one at a
#: time, before v4; with one-burst LOADs two in flight the queue never fills).
QUEUE_FULL_AT_ERROR = (
    [make("DMA_LOAD", ddr_addr=0x1000, sram_addr=0, inner_bytes=128, signal=MXU, **DMA)] * 3
    + [make("NOP", engine=2, wait=LOAD)] * 2 + [make("NOP", engine=2, wait=LOAD, signal=VPU)]
    + [make("REQUANT", wait=MXU, acc_addr=0, count=1, param_addr=2045, dst_addr=0, qreg=0)]
    + [make("NOP", engine=2)] * 8)
QUEUE_FULL_AT_ERROR_CYCLES = 54

__all__ = ["Case", "CASES", "code_of", "TIE_MXU_FIRST", "TIE_VPU_FIRST", "DEADLOCK",
           "DEADLOCK_WAITING", "ERROR_THEN_STUCK", "QUEUE_FULL_AT_ERROR", "QUEUE_FULL_AT_ERROR_CYCLES"]
