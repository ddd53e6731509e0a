"""tpusim.arch.device_checks: each check on the 'small' config (W = R = C = 8, 16 KiB SRAM =
2048 words, 512 accumulator rows, 9-word requant table) at its valid edge and at the first
invalid value, with the exact message; the documented order; the DeviceFault -> DeviceError
conversion."""
from __future__ import annotations

import pytest

from tpusim.arch import device_checks as dc
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError, IsaError
from tpusim.arch.isa import DEVICE_ERRORS, OPCODES, decode_as_hardware, encode, make
from tpusim.arch.limits import DDR_ADDR_LIMIT

CFG = load_config("small")
WORDS, ROWS, PW = CFG.sram_words, CFG.acc_depth_rows, CFG.param_words
ALL_Q = frozenset(range(CFG.qreg_count))
DMA = dict(ddr_addr=0x1000, sram_addr=0, inner_bytes=64, count1=1, count2=1)


def fault(op, loaded=ALL_Q, **args):
    return dc.start_fault(make(op, **args), CFG, loaded)


def text(f) -> tuple[str, str]:
    return f.code, str(f)


def test_config_numbers_used_below():
    assert (CFG.word_bytes, CFG.array_cols, WORDS, ROWS, PW) == (8, 8, 2048, 512, 9)
    assert dc.ddr_align_bytes(CFG) == 32


# ------------------------------------------------------------------ DMA
@pytest.mark.parametrize("op", ["DMA_LOAD", "DMA_STORE"])
@pytest.mark.parametrize("field", ["inner_bytes", "count1", "count2"])
def test_dma_zero_length(op, field):
    assert fault(op, **{**DMA, field: 8 if field == "inner_bytes" else 1}) is None
    assert text(fault(op, **{**DMA, field: 0})) == ("dma_zero_length", f"{field}=0x0 (0) is zero: zero-length DMA")


@pytest.mark.parametrize("field, good, bad, why", [
    ("sram_addr", 8, 9, "is not a multiple of the 8-byte SRAM word"),
    ("inner_bytes", 72, 73, "is not a multiple of the 8-byte SRAM word"),
    ("sram_stride1", 8, 12, "is not a multiple of the 8-byte SRAM word"),
    ("sram_stride2", 16, 17, "is not a multiple of the 8-byte SRAM word"),
    ("ddr_addr", 0x1020, 0x1021, "is not a multiple of 32 bytes"),
    ("ddr_stride1", 32, 40, "is not a multiple of 32 bytes"),
    ("ddr_stride2", 64, 65, "is not a multiple of 32 bytes"),
])
def test_dma_misaligned(field, good, bad, why):
    args = {**DMA, "count1": 2, "count2": 2}
    assert fault("DMA_LOAD", **{**args, field: good}) is None
    assert text(fault("DMA_LOAD", **{**args, field: bad})) == ("dma_misaligned", f"{field}={bad:#x} ({bad}) {why}")


def test_dma_sram_range_last_run_of_strided_copy():
    """Two rows of two runs: the last run starts at sram_addr + sram_stride2 + sram_stride1."""
    args = dict(ddr_addr=0, inner_bytes=64, count1=2, sram_stride1=1024, count2=2, sram_stride2=2048,
                ddr_stride1=64, ddr_stride2=128)
    ok = 16384 - 64 - 2048 - 1024
    assert fault("DMA_LOAD", sram_addr=ok, **args) is None
    assert text(fault("DMA_STORE", sram_addr=ok + 8, **args)) == (
        "dma_sram_range", f"sram_addr={ok + 8:#x} ({ok + 8}) with these strides reaches SRAM byte 0x4007, "
        "past the end of the 16384-byte SRAM")


def test_dma_ddr_range_ends_at_2_40():
    args = dict(sram_addr=0, inner_bytes=32, count1=1, count2=2, ddr_stride2=64)
    top = DDR_ADDR_LIMIT - 96
    assert fault("DMA_LOAD", ddr_addr=top, **args) is None          # last byte 2^40 - 1
    assert text(fault("DMA_LOAD", ddr_addr=top + 32, **args)) == (
        "dma_ddr_range", f"ddr_addr={top + 32:#x} ({top + 32}) with these strides reaches DDR byte "
        "0x1000000001f >= 2^40")


def test_dma_check_order_zero_then_alignment_then_sram_then_ddr():
    worst = dict(ddr_addr=DDR_ADDR_LIMIT - 1, sram_addr=16383, inner_bytes=0, count1=1, count2=1)
    assert fault("DMA_LOAD", **worst).code == "dma_zero_length"
    assert fault("DMA_LOAD", **{**worst, "inner_bytes": 64}).field == "sram_addr"   # misaligned
    assert fault("DMA_LOAD", **{**worst, "inner_bytes": 64, "sram_addr": 16384 - 8}).code == "dma_misaligned"
    assert fault("DMA_LOAD", **{**worst, "inner_bytes": 64, "sram_addr": 16384 - 8,
                                "ddr_addr": DDR_ADDR_LIMIT - 32}).code == "dma_sram_range"
    assert fault("DMA_LOAD", **{**worst, "inner_bytes": 64, "sram_addr": 0,
                                "ddr_addr": DDR_ADDR_LIMIT - 32}).code == "dma_ddr_range"


# ------------------------------------------------------------------ MXU
def test_load_weights_tile_past_the_end():
    assert fault("LOAD_WEIGHTS", sram_addr=WORDS - 8) is None
    assert text(fault("LOAD_WEIGHTS", sram_addr=WORDS - 7)) == (
        "mxu_sram_range", "sram_addr=0x7f9 (2041) reaches SRAM word 0x800, past the last word 0x7ff")


def test_matmul_last_vector_and_accumulator_rows():
    mm = dict(count_x=3, stride_x=2, count_y=2, stride_y=100)       # last word act + 4 + 100
    assert fault("MATMUL", act_addr=WORDS - 105, **mm) is None
    assert text(fault("MATMUL", act_addr=WORDS - 104, **mm)) == (
        "mxu_sram_range", "act_addr=0x798 (1944) reaches SRAM word 0x800, past the last word 0x7ff")
    assert fault("MATMUL", acc_addr=ROWS - 6, **mm) is None
    assert text(fault("MATMUL", acc_addr=ROWS - 5, **mm)) == (
        "mxu_acc_range", "acc_addr=0x1fb (507) + 6 rows runs past the end of the 512-row accumulator")
    # SRAM before accumulator; M = 0 is never an error
    assert fault("MATMUL", act_addr=WORDS, acc_addr=ROWS, **mm).code == "mxu_sram_range"
    assert fault("MATMUL", act_addr=WORDS, acc_addr=ROWS, count_x=0, count_y=5) is None


# ------------------------------------------------------------------ VPU
def test_requant_accumulator_table_destination_qreg_in_order():
    rq = dict(acc_addr=0, count=4, param_addr=0, dst_addr=100, qreg=3)
    assert fault("REQUANT", **{**rq, "acc_addr": ROWS - 4}) is None
    assert text(fault("REQUANT", **{**rq, "acc_addr": ROWS - 3})) == (
        "vpu_acc_range", "acc_addr=0x1fd (509) + 4 rows runs past the end of the 512-row accumulator")
    assert fault("REQUANT", **{**rq, "param_addr": WORDS - PW}) is None
    assert text(fault("REQUANT", **{**rq, "param_addr": WORDS - PW + 1})) == (
        "vpu_sram_range", "param_addr=0x7f8 (2040) + 9 words reaches SRAM word 0x800, past the last word 0x7ff")
    assert fault("REQUANT", **{**rq, "dst_addr": WORDS - 4}) is None
    assert text(fault("REQUANT", **{**rq, "dst_addr": WORDS - 3})) == (
        "vpu_sram_range", "dst_addr=0x7fd (2045) + 4 words reaches SRAM word 0x800, past the last word 0x7ff")
    assert fault("REQUANT", loaded={3}, **rq) is None
    assert text(fault("REQUANT", loaded={2, 4}, **rq)) == (
        "qreg_unloaded", "qreg=0x3 (3) (bank 0, entry 3) reads a quant register that was never loaded")
    # count 0 still reads the table; the accumulator comes first
    assert fault("REQUANT", **{**rq, "count": 0, "param_addr": WORDS - PW + 1}).code == "vpu_sram_range"
    assert fault("REQUANT", loaded=(), **{**rq, "acc_addr": ROWS, "dst_addr": WORDS}).code == "vpu_acc_range"


def test_pool_source_destination_and_average_qregs():
    p = dict(mode=0, src_addr=0, win_w=2, win_h=2, win_stride_x=1, win_stride_y=8, out_w=2,
             out_stride_x=2, out_h=2, out_stride_y=16, dst_addr=100)      # last tap src + 27
    assert fault("POOL", **{**p, "src_addr": WORDS - 28}) is None
    assert text(fault("POOL", **{**p, "src_addr": WORDS - 27})) == (
        "vpu_sram_range", "src_addr=0x7e5 (2021) + 28 words reaches SRAM word 0x800, past the last word 0x7ff")
    assert fault("POOL", **{**p, "dst_addr": WORDS - 4}) is None
    assert text(fault("POOL", **{**p, "dst_addr": WORDS - 3})) == (
        "vpu_sram_range", "dst_addr=0x7fd (2045) + 4 words reaches SRAM word 0x800, past the last word 0x7ff")
    # max reads no quant register; average reads qreg_in, then qreg_out
    assert fault("POOL", loaded=(), **p) is None
    avg = {**p, "mode": 1, "qreg_in": 17, "qreg_out": 40}
    assert fault("POOL", loaded={17, 40}, **avg) is None
    assert text(fault("POOL", loaded={40}, **avg)) == (
        "qreg_unloaded", "qreg_in=0x11 (17) (bank 1, entry 1) reads a quant register that was never loaded")
    assert fault("POOL", loaded={17}, **avg).field == "qreg_out"
    # no output: nothing is checked; a window without taps reads no source
    assert fault("POOL", loaded=(), **{**avg, "out_w": 0, "src_addr": 65535, "dst_addr": 65535}) is None
    assert fault("POOL", **{**p, "win_w": 0, "src_addr": 65535}) is None


@pytest.mark.parametrize("field", ["src_a", "src_b", "dst_addr"])
def test_add_operands(field):
    a = dict(src_a=0, src_b=100, dst_addr=200, count=5, qreg_a=1, qreg_b=2, qreg_out=3)
    assert fault("ADD", **{**a, field: WORDS - 5}) is None
    assert text(fault("ADD", **{**a, field: WORDS - 4})) == (
        "vpu_sram_range", f"{field}=0x7fc (2044) + 5 words reaches SRAM word 0x800, past the last word 0x7ff")


def test_add_qregs_in_field_order_and_count_zero():
    a = dict(src_a=0, src_b=100, dst_addr=200, count=5, qreg_a=1, qreg_b=2, qreg_out=3)
    assert fault("ADD", loaded={1, 2, 3}, **a) is None
    assert [fault("ADD", loaded=q, **a).field for q in ((), {1}, {1, 2})] == ["qreg_a", "qreg_b", "qreg_out"]
    assert fault("ADD", loaded=(), **{**a, "src_a": WORDS}).code == "vpu_sram_range"   # SRAM first
    assert fault("ADD", loaded=(), **{**a, "count": 0, "src_a": WORDS}) is None


def test_instructions_without_device_checks():
    for ins in (make("NOP", engine=2), make("HALT"), make("LOAD_QREG", qreg=63)):
        assert dc.start_fault(ins, CFG, ()) is None


# ------------------------------------------------------------------ faults and errors
def test_every_engine_start_error_has_a_check():
    """Every DEVICE_ERRORS name comes out of some check here."""
    codes = {fault("DMA_LOAD", **{**DMA, "count1": 0}).code, fault("DMA_LOAD", **{**DMA, "sram_addr": 1}).code,
             fault("DMA_LOAD", **{**DMA, "sram_addr": 16384}).code,
             fault("DMA_LOAD", **{**DMA, "ddr_addr": DDR_ADDR_LIMIT - 32}).code,
             fault("LOAD_WEIGHTS", sram_addr=WORDS).code, fault("MATMUL", count_x=1, count_y=1, acc_addr=ROWS).code,
             fault("ADD", count=1, dst_addr=WORDS).code, fault("REQUANT", acc_addr=ROWS, count=1).code,
             fault("ADD", loaded=(), count=1).code,
             dc.reserved_opcode_fault(0xEE).code, dc.token_overflow_fault(3, 2, 4).code,
             dc.decode_fault(encode(make("HALT"))[:31] + b"\x01").code}
    assert codes == set(DEVICE_ERRORS)


@pytest.mark.parametrize("op", sorted(OPCODES))
def test_decode_fault_names_the_lowest_unused_bit(op):
    """Every opcode: a clean word decodes; the lowest and the highest unused bit are faults."""
    spec = OPCODES[op]
    clean = int.from_bytes(encode(make(op)), "little")
    assert dc.decode_fault(clean.to_bytes(32, "little")) is None
    for bits in ((spec.used_bits,), (255,), (spec.used_bits + 3, 255)):
        word = clean
        for b in bits:
            word |= 1 << b
        f = dc.decode_fault(word.to_bytes(32, "little"))
        assert (f.code, f.field, f.value) == ("unused_bits", "bit", bits[0])
        assert decode_as_hardware(word.to_bytes(32, "little")) is None
    assert dc.decode_fault(bytes([0xEE]) + bytes(30) + b"\xff").code == "reserved_opcode"


def test_fault_error_and_messages():
    f = fault("LOAD_WEIGHTS", sram_addr=WORDS - 7)
    err = f.error(dc.where(1, "LOAD_WEIGHTS"), 0x20)
    assert isinstance(err, DeviceError)
    assert (err.code, err.pc, err.field, err.value, err.cycle) == ("mxu_sram_range", 0x20, "sram_addr", 2041, None)
    assert str(err) == ("instruction #1 at pc 0x20 (LOAD_WEIGHTS): sram_addr=0x7f9 (2041) reaches SRAM word "
                        "0x800, past the last word 0x7ff")
    assert str(dc.reserved_opcode_fault(0xEE)) == "opcode=0xee (238) is a reserved opcode"
    assert str(dc.token_overflow_fault(3, 2, 0xC)) == (
        "signal=0xc (12) overflows token counter VPU->MXU (255 tokens not yet consumed)")
    assert dc.where(3, None) == "instruction #3 at pc 0x60"
    assert dc.where(3, "ADD", pc=0x1000) == "instruction #3 at pc 0x1000 (ADD)"
    with pytest.raises(IsaError, match="unknown device error 'mxu_oops'"):
        dc.DeviceFault("mxu_oops", "f", 0, "")
