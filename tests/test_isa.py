"""tpusim.arch.isa: encodings, layouts, range checks, decode errors, assembly round trip."""
import random
import re

import pytest

from tpusim.arch import isa
from tpusim.arch.errors import IsaError, TpuError
from tpusim.arch.isa import (
    BY_CODE,
    HEADER_BITS,
    INSTR_BITS,
    INSTR_BYTES,
    OPCODES,
    Engine,
    Instruction,
    assemble,
    check_ranges,
    decode,
    decode_program,
    encode,
    encode_program,
    make,
    parse_mask,
)

OPS = sorted(OPCODES)


def rand_value(rng: random.Random, f) -> int:
    lo, hi = isa._range(f)
    r = rng.random()
    if r < 0.15:
        return lo
    if r < 0.30:
        return hi
    if r < 0.40 and f.signed:
        return rng.choice([-1, 0, 1])
    return rng.randint(lo, hi)


def rand_instr(rng: random.Random, op: str) -> Instruction:
    spec = OPCODES[op]
    args = {f.name: rand_value(rng, f) for f in spec.fields}
    if op == "NOP":
        args["engine"] = rng.randrange(4)
    return make(op, wait=rng.randrange(16), signal=rng.randrange(16), **args)


# ---- opcode table -----------------------------------------------------------------------------
def test_constants():
    assert INSTR_BYTES == 32 and INSTR_BITS == 256 and HEADER_BITS == 16
    assert [e.value for e in Engine] == [0, 1, 2, 3]


def test_opcode_codes_unique_and_in_byte():
    codes = [s.code for s in OPCODES.values()]
    assert len(set(codes)) == len(codes)
    assert all(0 < c <= 0xFF for c in codes)
    assert {s.code: s.name for s in OPCODES.values()} == {c: s.name for c, s in BY_CODE.items()}
    assert {n: s.code for n, s in OPCODES.items()} == {
        "NOP": 0x01, "HALT": 0x02, "DMA_LOAD": 0x03, "DMA_STORE": 0x04, "LOAD_WEIGHTS": 0x05,
        "MATMUL": 0x06, "LOAD_QREG": 0x07, "REQUANT": 0x08, "POOL": 0x09, "ADD": 0x0A, "LUT": 0x0B, "MUL": 0x0C,
        "DWCONV": 0x0D, "SOFTMAX": 0x0E, "LAYERNORM": 0x0F, "REQUANT_ADD": 0x10}
    assert all(s.name == n for n, s in OPCODES.items())


def test_engines():
    assert OPCODES["DMA_LOAD"].engine is Engine.LOAD
    assert OPCODES["DMA_STORE"].engine is Engine.STORE
    assert OPCODES["LOAD_WEIGHTS"].engine is OPCODES["MATMUL"].engine is Engine.MXU
    for op in ("LOAD_QREG", "REQUANT", "POOL", "ADD"):
        assert OPCODES[op].engine is Engine.VPU
    assert OPCODES["HALT"].engine is None
    for e in Engine:
        assert make("NOP", engine=int(e)).engine is e
    assert make("HALT").engine is None
    assert make("MATMUL").engine is Engine.MXU


@pytest.mark.parametrize("op", OPS)
def test_layout_contiguous_non_overlapping_and_fits(op):
    spec = OPCODES[op]
    lay = spec.layout()
    assert [f for f, _ in lay] == list(spec.fields)
    used = (1 << HEADER_BITS) - 1  # opcode, wait, signal
    expect_lsb = HEADER_BITS
    for f, lsb in lay:
        assert lsb == expect_lsb
        mask = ((1 << f.bits) - 1) << lsb
        assert used & mask == 0, f.name
        used |= mask
        expect_lsb += f.bits
        assert f.bits >= 1
    assert expect_lsb <= INSTR_BITS
    assert used < 1 << INSTR_BITS
    names = [f.name for f in spec.fields]
    assert len(set(names)) == len(names)


def test_known_field_widths():
    dma = {f.name: f.bits for f in OPCODES["DMA_LOAD"].fields}
    assert dma["ddr_addr"] == 40 and sum(dma.values()) + HEADER_BITS == 232
    assert OPCODES["DMA_STORE"].fields == OPCODES["DMA_LOAD"].fields
    signed = {(op, f.name) for op, s in OPCODES.items() for f in s.fields if f.signed}
    assert signed == {("LOAD_QREG", "multiplier"), ("LOAD_QREG", "shift"), ("LOAD_QREG", "zero_point")}


# ---- encode / decode ------------------------------------------------------------------------
def test_halt_encoding_exact():
    raw = encode(make("HALT"))
    assert raw == bytes([0x02]) + bytes(31)


def test_header_bits_exact():
    raw = encode(make("LOAD_WEIGHTS", wait=0b0101, signal=0b1010, sram_addr=0xBEEF))
    word = int.from_bytes(raw, "little")
    assert word & 0xFF == 0x05
    assert (word >> 8) & 0xF == 0b0101
    assert (word >> 12) & 0xF == 0b1010
    assert (word >> 16) & 0xFFFF == 0xBEEF
    assert word >> 32 == 0


def test_signed_field_twos_complement():
    raw = encode(make("LOAD_QREG", qreg=63, multiplier=-1, shift=-128, zero_point=127))
    word = int.from_bytes(raw, "little")
    assert (word >> 16) & 0x3F == 63
    assert (word >> 22) & 0xFFFFFFFF == 0xFFFFFFFF
    assert (word >> 54) & 0xFF == 0x80
    assert (word >> 62) & 0xFF == 0x7F
    d = decode(raw)
    assert (d["multiplier"], d["shift"], d["zero_point"]) == (-1, -128, 127)


def test_dma_ddr_addr_40_bits():
    ins = make("DMA_LOAD", ddr_addr=(1 << 40) - 1, count1=1, count2=1)
    assert decode(encode(ins)) == ins
    with pytest.raises(IsaError, match=re.escape(
            f"DMA_LOAD: field ddr_addr={1 << 40} out of range [0, {(1 << 40) - 1}] (40 bits)")):
        make("DMA_LOAD", ddr_addr=1 << 40)


@pytest.mark.parametrize("op", OPS)
def test_round_trip_random(op):
    rng = random.Random(op)  # str seeds are deterministic
    for _ in range(200):
        ins = rand_instr(rng, op)
        raw = encode(ins)
        assert len(raw) == INSTR_BYTES
        back = decode(raw)
        assert back == ins
        assert back.args == ins.args and back.wait == ins.wait and back.signal == ins.signal
        assert encode(back) == raw


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("which", ["lo", "hi"])
def test_round_trip_extremes(op, which):
    spec = OPCODES[op]
    args = {f.name: isa._range(f)[0 if which == "lo" else 1] for f in spec.fields}
    ins = make(op, wait=0 if which == "lo" else 15, signal=0 if which == "lo" else 15, **args)
    assert decode(encode(ins)) == ins


@pytest.mark.parametrize("op", OPS)
def test_each_field_lands_in_its_bits(op):
    """Setting one field to all-ones sets exactly that field's bit range."""
    for f, lsb in OPCODES[op].layout():
        v = -1 if f.signed else (1 << f.bits) - 1
        word = int.from_bytes(encode(make(op, **{f.name: v})), "little")
        assert word == OPCODES[op].code | ((1 << f.bits) - 1) << lsb, f.name


def test_make_defaults_missing_fields_to_zero():
    ins = make("MATMUL", count_x=3)
    assert ins.args == {"act_addr": 0, "count_x": 3, "stride_x": 0, "count_y": 0, "stride_y": 0,
                        "acc_addr": 0, "accumulate": 0}
    assert ins["count_x"] == 3
    assert ins.spec is OPCODES["MATMUL"]


def test_program_round_trip():
    rng = random.Random(5)
    prog = [rand_instr(rng, rng.choice(OPS)) for _ in range(100)]
    code = encode_program(prog)
    assert len(code) == 100 * INSTR_BYTES
    assert decode_program(code) == prog
    assert decode_program(b"") == []


# ---- range errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_out_of_range_each_field(op):
    for f in OPCODES[op].fields:
        lo, hi = isa._range(f)
        for v in (hi + 1, lo - 1):
            with pytest.raises(IsaError, match=re.escape(
                    f"{op}: field {f.name}={v} out of range [{lo}, {hi}] ({f.bits} bits)")):
                make(op, **{f.name: v})


def test_out_of_range_examples():
    with pytest.raises(IsaError, match=re.escape("LOAD_QREG: field shift=128 out of range [-128, 127] (8 bits)")):
        make("LOAD_QREG", shift=128)
    with pytest.raises(IsaError, match=re.escape(
            "LOAD_QREG: field multiplier=-2147483649 out of range [-2147483648, 2147483647] (32 bits)")):
        make("LOAD_QREG", multiplier=-(1 << 31) - 1)
    with pytest.raises(IsaError, match=re.escape("MATMUL: field accumulate=2 out of range [0, 1] (1 bits)")):
        make("MATMUL", accumulate=2)
    with pytest.raises(IsaError, match=re.escape("NOP: field engine=4 out of range [0, 3] (2 bits)")):
        make("NOP", engine=4)
    with pytest.raises(IsaError, match=re.escape("LOAD_WEIGHTS: field sram_addr=-1 out of range [0, 65535]")):
        make("LOAD_WEIGHTS", sram_addr=-1)


@pytest.mark.parametrize("label", ["wait", "signal"])
@pytest.mark.parametrize("m", [16, -1, 255])
def test_bad_mask_values(label, m):
    with pytest.raises(IsaError, match=re.escape(f"HALT: {label} mask {m} is not a 4-bit engine mask")):
        make("HALT", **{label: m})


def test_encode_rechecks_ranges_of_hand_built_instruction():
    ins = Instruction("MATMUL", {**make("MATMUL").args, "count_x": 1 << 16})
    with pytest.raises(IsaError, match=re.escape("MATMUL: field count_x=65536 out of range [0, 65535] (16 bits)")):
        encode(ins)
    with pytest.raises(IsaError, match=re.escape("MATMUL: field count_x=65536")):
        check_ranges(ins)
    with pytest.raises(IsaError, match=re.escape("HALT: wait mask 16 is not a 4-bit engine mask")):
        encode(Instruction("HALT", {}, wait=16))


def test_unknown_opcode():
    with pytest.raises(IsaError, match=re.escape(f"unknown opcode 'CONV'; known: {sorted(OPCODES)}")):
        make("CONV")
    with pytest.raises(IsaError, match=re.escape("unknown opcode 'halt'")):
        make("halt")


def test_unknown_field():
    with pytest.raises(IsaError, match=re.escape(
            "LOAD_WEIGHTS: unknown field(s) ['act_addr', 'zz']; fields are ['sram_addr']")):
        make("LOAD_WEIGHTS", zz=1, act_addr=2)
    with pytest.raises(IsaError, match=re.escape("HALT: unknown field(s) ['engine']; fields are []")):
        make("HALT", engine=0)


def test_isa_error_is_tpu_error():
    assert issubclass(IsaError, TpuError)


# ---- decode errors --------------------------------------------------------------------------
@pytest.mark.parametrize("code", [0x00, 0x11, 0x7F, 0xFF])
def test_reserved_opcode_names_pc(code):
    raw = bytes([code]) + bytes(31)
    with pytest.raises(IsaError, match=re.escape(f"reserved opcode {code:#04x} at pc 0x40")):
        decode(raw, 0x40)
    with pytest.raises(IsaError, match=re.escape(f"reserved opcode {code:#04x}") + "$"):
        decode(raw)


def test_reserved_opcode_at_pc_zero():
    with pytest.raises(IsaError, match=re.escape("reserved opcode 0x00 at pc 0x0")):
        decode(bytes(32), 0)


def test_decode_program_names_pc_of_bad_instruction():
    code = encode_program([make("NOP"), make("NOP"), make("HALT")])
    code = code[:64] + bytes([0xEE]) + code[65:]
    with pytest.raises(IsaError, match=re.escape("reserved opcode 0xee at pc 0x40")):
        decode_program(code)


def test_decode_program_partial_instruction():
    with pytest.raises(IsaError, match=re.escape(
            "code section of 40 bytes is not a whole number of instructions")):
        decode_program(bytes(40))


@pytest.mark.parametrize("n", [0, 31, 33, 64])
def test_decode_wrong_length(n):
    with pytest.raises(IsaError, match=re.escape(f"instruction at pc 0x20 is {n} bytes, expected 32")):
        decode(bytes([2]) + bytes(max(n - 1, 0)) if n else b"", 0x20)


@pytest.mark.parametrize("op", OPS)
def test_nonzero_unused_bits_rejected(op):
    spec = OPCODES[op]
    top = HEADER_BITS + sum(f.bits for f in spec.fields)
    base = int.from_bytes(encode(make(op)), "little")
    for bit in sorted({top, top + 1, (top + INSTR_BITS) // 2, INSTR_BITS - 1}):
        if bit >= INSTR_BITS:
            continue
        raw = (base | 1 << bit).to_bytes(32, "little")
        why = f"bit={bit:#x} ({bit}) is set: {op} uses bits 0-{top - 1}, bits {top} and up must be zero"
        with pytest.raises(IsaError, match=re.escape(f"{op} at pc 0x60: {why}")):
            decode(raw, 0x60)
        with pytest.raises(IsaError, match=re.escape(f"{op}: {why}")):
            decode(raw)


def test_halt_with_operand_bits_rejected():
    raw = (0x02 | 1 << 16).to_bytes(32, "little")
    with pytest.raises(IsaError, match=re.escape("HALT at pc 0x0: bit=0x10 (16) is set: HALT uses bits 0-15, "
                                                 "bits 16 and up must be zero")):
        decode(raw, 0)


# ---- assembly text -------------------------------------------------------------------------
def test_text_format():
    ins = make("MATMUL", wait=0b0001, signal=0b1000, act_addr=0x10, count_x=4, stride_x=1, count_y=2,
               stride_y=8, acc_addr=3, accumulate=1)
    assert ins.text() == ("MATMUL act_addr=0x10 count_x=4 stride_x=1 count_y=2 stride_y=8 acc_addr=0x3 "
                          "accumulate=1 wait=LOAD signal=VPU")
    assert make("HALT").text() == "HALT"
    assert make("NOP", wait=0b1111, engine=2).text() == "NOP engine=2 wait=LOAD|STORE|MXU|VPU"
    assert make("LOAD_QREG", qreg=1, multiplier=-5, shift=-3).text() == \
        "LOAD_QREG qreg=1 multiplier=-5 shift=-3 zero_point=0"


def test_assemble_text_round_trip_random():
    rng = random.Random(11)
    prog = [rand_instr(rng, op) for op in OPS for _ in range(50)]
    rng.shuffle(prog)
    text = "\n".join(i.text() for i in prog)
    assert assemble(text) == prog
    assert encode_program(assemble(text)) == encode_program(prog)


def test_assemble_comments_blank_lines_and_case():
    prog = assemble("""
        # a comment line
        LOAD_WEIGHTS sram_addr=0x20 wait=load|Mxu   # trailing comment

        HALT signal=VPU
    """)
    assert prog == [make("LOAD_WEIGHTS", wait=0b0101, sram_addr=0x20), make("HALT", signal=0b1000)]


def test_assemble_number_bases():
    (ins,) = assemble("MATMUL act_addr=0b101 count_x=0o17 stride_x=0x1F count_y=-0 acc_addr=1_000")
    assert (ins["act_addr"], ins["count_x"], ins["stride_x"], ins["acc_addr"]) == (5, 15, 31, 1000)


def test_assemble_errors_name_the_line():
    with pytest.raises(IsaError, match=re.escape("line 2: expected field=value, got 'sram_addr'")):
        assemble("HALT\nLOAD_WEIGHTS sram_addr")
    with pytest.raises(IsaError, match=re.escape("line 1: bad value 'zz' for sram_addr")):
        assemble("LOAD_WEIGHTS sram_addr=zz")
    with pytest.raises(IsaError, match=re.escape("line 1: bad value '08' for count_x")):
        assemble("MATMUL count_x=08")
    with pytest.raises(IsaError, match=re.escape("line 3: unknown opcode 'FOO'")):
        assemble("HALT\n# c\nFOO x=1")
    with pytest.raises(IsaError, match=re.escape("line 1: LOAD_WEIGHTS: unknown field(s) ['bogus']")):
        assemble("LOAD_WEIGHTS bogus=1")
    with pytest.raises(IsaError, match=re.escape(
            "line 2: LOAD_QREG: field shift=200 out of range [-128, 127] (8 bits)")):
        assemble("HALT\nLOAD_QREG shift=200")


def test_assemble_mask_errors_name_the_line():
    with pytest.raises(IsaError, match=re.escape(
            "line 2: unknown engine 'DMA' in mask 'LOAD|DMA'; engines: ['LOAD', 'STORE', 'MXU', 'VPU']")):
        assemble("HALT\nNOP wait=LOAD|DMA")
    with pytest.raises(IsaError, match=re.escape("line 1: unknown engine '3' in mask '3'")):
        assemble("HALT signal=3")


# ---- masks -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, m", [("", 0), ("LOAD", 1), ("STORE", 2), ("MXU", 4), ("VPU", 8),
                                     ("LOAD|VPU", 9), ("vpu|load", 9), ("LOAD|STORE|MXU|VPU", 15),
                                     ("MXU|MXU", 4), ("LOAD||MXU", 5), (" mxu ", 4)])
def test_parse_mask(text, m):
    assert parse_mask(text) == m


@pytest.mark.parametrize("text, bad", [("DMA", "DMA"), ("LOAD|FOO", "FOO"), ("LOAD,MXU", "LOAD,MXU"),
                                       ("1", "1"), ("LOAD|", None)])
def test_parse_mask_errors(text, bad):
    if bad is None:  # trailing separator is tolerated
        assert parse_mask(text) == 1
        return
    with pytest.raises(IsaError, match=re.escape(
            f"unknown engine {bad!r} in mask {text!r}; engines: ['LOAD', 'STORE', 'MXU', 'VPU']")):
        parse_mask(text)


def test_mask_text_round_trip():
    for m in range(16):
        ins = make("HALT", wait=m, signal=15 - m)
        (back,) = assemble(ins.text())
        assert (back.wait, back.signal) == (m, 15 - m)


def test_dwconv_window_fields_lie_where_pools_do():
    """The RTL decodes DWCONV's window with pool_fields (tpu_vpu, tpu_vpu_check): its first
    DWCONV_POOL_FIELDS fields have POOL's widths at POOL's bits, relu in mode's place."""
    from tpusim.arch.isa import DWCONV_POOL_FIELDS
    dw, pl = OPCODES["DWCONV"].layout(), OPCODES["POOL"].layout()
    assert DWCONV_POOL_FIELDS == len(pl)
    assert [(f.bits, lsb) for f, lsb in dw[:DWCONV_POOL_FIELDS]] == [(f.bits, lsb) for f, lsb in pl]
    assert [f.name for f, _ in dw[1:DWCONV_POOL_FIELDS]] == [f.name for f, _ in pl[1:]]


def test_requant_add_fields_lie_where_requants_do():
    """The RTL decodes REQUANT_ADD's first fields with requant_fields (tpu_vpu, tpu_vpu_check)."""
    from tpusim.arch.isa import REQUANT_FIELDS
    ra, rq = OPCODES["REQUANT_ADD"].layout(), OPCODES["REQUANT"].layout()
    assert REQUANT_FIELDS == len(rq)
    assert [(f.name, f.bits, lsb) for f, lsb in ra[:REQUANT_FIELDS]] == [(f.name, f.bits, lsb) for f, lsb in rq]


def test_row_fields_lie_at_the_same_bits():
    """The RTL decodes SOFTMAX's and LAYERNORM's common row fields with softmax_fields."""
    from tpusim.arch.isa import ROW_FIELDS
    sm, ln = OPCODES["SOFTMAX"].layout(), OPCODES["LAYERNORM"].layout()
    assert [(f.name, f.bits, lsb) for f, lsb in sm[:ROW_FIELDS]] == [(f.name, f.bits, lsb) for f, lsb in ln[:ROW_FIELDS]]
    assert [f.name for f, _ in sm[:ROW_FIELDS]][-1] == "qreg_out"
