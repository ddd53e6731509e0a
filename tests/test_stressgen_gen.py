"""stressgen: generation, validation, coverage bins, text round trip, invalid programs."""
import random

import pytest

from stressgen import generate, parse_asm, validate
from stressgen.coverage import DYNAMIC_BINS, STATIC_BINS, dma_bins, drain_bins, observed_bins, tie_mask
from stressgen.invalid import CLASS_KINDS, INVALID_CLASSES, assembler_rejects, make_invalid
from stressgen.program import CODE_ADDR, RawWord, StressError, StressProgram, config
from tpusim.arch.errors import IsaError, SimulationError
from tpusim.arch.isa import DEVICE_ERRORS, make
from tpusim.sim import run_binary

SMALL = config("small")
LOAD, STORE, MXU, VPU = 1, 2, 4, 8


def _prog(instrs, outputs=()):
    return StressProgram(0, "small", list(instrs) + [make("HALT")], [], list(outputs))


def test_deterministic_and_valid_small():
    for s in range(20):
        p = generate(s, SMALL)
        assert p.asm() == generate(s, SMALL).asm()
        validate(p, SMALL)
        assert p.invalid is None and p.instrs[-1].op == "HALT"
        assert 5 <= len(p.instrs) <= 70, len(p.instrs)
        assert p.outputs and all(r.size_bytes % SMALL.array_rows == 0 for r in p.outputs)


def test_every_bin_hit_in_30_small_programs():
    static, dynamic = set(), set()
    for s in range(30):
        p = generate(s, SMALL)
        static |= set(p.bins)
        res = run_binary(p.to_binary(SMALL), SMALL, {})
        dynamic |= (set(observed_bins(res.counters)) | set(drain_bins(p, SMALL, res.retire))
                    | set(dma_bins(SMALL, res.sram_grants, res.timeline)))
    assert not set(STATIC_BINS) - static
    assert not set(DYNAMIC_BINS) - dynamic


def test_36bit_alias_and_qreg_alias_frequency():
    progs = [generate(s, SMALL) for s in range(80)]
    assert sum("ddr_ge_2_36" in p.bins for p in progs) >= 40
    assert sum("qreg_alias" in p.bins for p in progs) >= 8
    # over the 80 programs every one of the 64 quant registers is loaded and read
    read = {i.args[f] for p in progs for i in p.instrs
            if i.op in ("REQUANT", "ADD", "MUL", "DWCONV") or i.op == "POOL" and i.args["mode"]
            for f in ("qreg", "qreg_a", "qreg_b", "qreg_out", "qreg_in") if f in i.args}
    assert read == set(range(SMALL.qreg_count))


def test_medium_programs_validate():
    med = config("medium")
    for s in range(6):
        p = generate(s, med)
        validate(p, med)
        assert p.hw == "medium"


def test_asm_round_trip_and_binary():
    for s in (0, 3, 7):
        p = generate(s, SMALL, invalid_rate=1.0 if s == 7 else 0.0)
        q = parse_asm(p.asm())
        assert (q.seed, q.hw, q.invalid, q.bins) == (p.seed, p.hw, p.invalid, p.bins)
        assert [i.text() for i in q.instrs] == [i.text() for i in p.instrs]
        assert q.ddr_init == p.ddr_init and q.outputs == p.outputs
        assert q.to_binary(SMALL).to_bytes() == p.to_binary(SMALL).to_bytes()
    b = generate(1, SMALL).to_binary(SMALL)
    assert b.code_addr == CODE_ADDR and len(b.code) == 32 * len(generate(1, SMALL).instrs)


def test_parse_asm_rejects_garbage():
    with pytest.raises(IsaError, match="line 2"):
        parse_asm("# stressgen seed=1 hw=small invalid=none\n# data 0x10 !!notbase64\nHALT\n")


@pytest.mark.parametrize("instrs,kind,text", [
    ([make("NOP", engine=2, wait=LOAD)], "deadlock", "instruction #0 at pc 0x0 (NOP): wait=0x1"),
    ([make("DMA_LOAD", ddr_addr=0x100000, sram_addr=0, inner_bytes=64, count1=1, count2=1),
      make("LOAD_WEIGHTS", sram_addr=4)], "race", "instruction #1 at pc 0x20 (LOAD_WEIGHTS)"),
    ([make("LOAD_QREG", qreg=1), make("REQUANT", count=1, qreg=33)], "qreg_unloaded", "qreg=0x21 (33)"),
    ([make("MATMUL", act_addr=2047, count_x=2, stride_x=1, count_y=1)], "mxu_sram_range",
     "act_addr=0x7ff (2047) reaches SRAM word 0x800, past the last word 0x7ff"),
    ([make("MATMUL", act_addr=0, count_x=2, stride_x=1, count_y=1, acc_addr=511)], "mxu_acc_range",
     "acc_addr=0x1ff (511) + 2 rows runs past the end of the 512-row accumulator"),
    ([make("DMA_STORE", ddr_addr=(1 << 40) - 32, sram_addr=0, inner_bytes=64, count1=1, count2=1)],
     "dma_ddr_range", "ddr_addr=0xffffffffe0 (1099511627744) with these strides reaches DDR byte "
     "0x1000000001f >= 2^40"),
    ([make("DMA_LOAD", ddr_addr=0x100010, sram_addr=0, inner_bytes=64, count1=1, count2=1)],
     "dma_misaligned", "ddr_addr=0x100010"),
    ([make("DMA_STORE", ddr_addr=CODE_ADDR, sram_addr=0, inner_bytes=64, count1=1, count2=1)],
     "race", "over the code"),
    ([RawWord(bytes([0xEE]) + bytes(31))], "reserved_opcode", "opcode=0xee"),
    ([RawWord(bytes([0x01]) + bytes(30) + b"\x80")], "unused_bits",
     "instruction #0 at pc 0x0 (RAW): bit=0xff (255) is set: NOP uses bits 0-17, bits 18 and up must be zero"),
])
def test_validate_rejects(instrs, kind, text):
    with pytest.raises(StressError) as ei:
        validate(_prog(instrs), SMALL)
    assert ei.value.kind == kind and text in str(ei.value), str(ei.value)


def test_validate_token_overflow_and_ordering():
    # 300 tokens LOAD -> MXU, consumed only at the end: more than 255 may be outstanding
    many = [make("NOP", engine=0, signal=MXU) for _ in range(300)]
    eat = [make("NOP", engine=2, wait=LOAD) for _ in range(300)]
    with pytest.raises(StressError, match="unconsumed tokens on counter LOAD->MXU") as ei:
        validate(_prog(many + eat), SMALL)
    assert ei.value.kind == "token_overflow"
    # a consumer placed before its producer in program order is rejected (possible deadlock)
    with pytest.raises(StressError, match="no earlier instruction sends"):
        validate(_prog([make("NOP", engine=2, wait=LOAD), make("NOP", engine=0, signal=MXU)]), SMALL)
    validate(_prog([make("NOP", engine=0, signal=MXU), make("NOP", engine=2, wait=LOAD)]), SMALL)


@pytest.mark.parametrize("cls", INVALID_CLASSES)
def test_invalid_classes_rejected_and_flagged_by_simpy(cls):
    for s in range(3):
        p = generate(40 + s, SMALL)
        make_invalid(p, SMALL, random.Random(s), cls)
        assert p.invalid == cls
        msg = assembler_rejects(p, SMALL)
        assert msg.startswith("instruction #") and ("=" in msg or "reserved opcode" in msg), msg
        with pytest.raises(IsaError) as ei:
            validate(p, SMALL)
        assert getattr(ei.value, "kind", "reserved_opcode") in CLASS_KINDS[cls]
        with pytest.raises(SimulationError):
            run_binary(p.to_binary(SMALL), SMALL, {})


def test_invalid_classes_map_to_device_error_names():
    assert tuple(CLASS_KINDS) == INVALID_CLASSES
    assert {k for kinds in CLASS_KINDS.values() for k in kinds} - {"deadlock"} <= set(DEVICE_ERRORS)


def test_invalid_rate():
    kinds = [generate(s, SMALL, invalid_rate=0.5).invalid for s in range(40)]
    assert 8 <= sum(k is not None for k in kinds) <= 32
    assert set(kinds) - {None} <= set(INVALID_CLASSES)
    assert all(generate(s, SMALL, invalid_rate=1.0).invalid for s in range(5))
    # the valid part of the program does not depend on invalid_rate
    assert generate(9, SMALL, invalid_rate=0.0).ddr_init == generate(9, SMALL, invalid_rate=1.0).ddr_init


def test_tie_mask():
    # requant(x, 2^30, 0) = x/2 with SRDHM ties toward +inf: 3 -> 2 (tie), -3 -> -1 (tie), 4 exact
    tie, neg = tie_mask([3, -3, 4], 1 << 30, 0, 0, -128)
    assert tie.tolist() == [True, True, False] and neg.tolist() == [False, True, False]
    # RoundingDivideByPOT tie: 12 * 2^30 / 2^31 = 6, 6 / 2^2 = 1.5
    assert tie_mask([12], 1 << 30, -2, 0, -128)[0].tolist() == [True]
    # a tie that ends clamped at 127 does not count
    assert tie_mask([1001], 1 << 30, 0, 0, -128)[0].tolist() == [False]


def test_unused_bits_class_hits_its_coverage_bin():
    """The unused_bits class sets bits above one instruction's fields; bins_of counts the word
    (INVALID_BINS), and only campaigns that make invalid programs must hit it."""
    from stressgen.coverage import INVALID_BINS, STATIC_BINS, bins_of, required_bins
    p = generate(41, SMALL)
    assert "invalid_unused_bits" not in bins_of(p, SMALL)
    make_invalid(p, SMALL, random.Random(5), "unused_bits")
    assert bins_of(p, SMALL)["invalid_unused_bits"] == 1
    assert "invalid_unused_bits" in INVALID_BINS and "invalid_unused_bits" in required_bins(0.05)
    assert "invalid_unused_bits" not in required_bins(0.0) and set(STATIC_BINS) <= set(required_bins(0.0))
