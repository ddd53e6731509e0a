"""The tpusim instruction set: the single source of truth for opcodes, fields and encodings.

Every instruction is one 256-bit little-endian word (INSTR_BYTES = 32). Bits [7:0] hold the
opcode, [11:8] the wait mask and [15:12] the signal mask (one bit per engine, see ``Engine``);
operand fields follow from bit 16 upward in the order listed in ``OPCODES``. Unused bits are zero.

Dependency synchronisation (tokens): before an instruction starts, its engine takes one token
from each engine named in ``wait``; when it completes, it sends one token to each engine named in
``signal``. Semantics and timing of every instruction: docs/isa.md and docs/architecture.md.
The SystemVerilog package rtl/tpu_isa_pkg.sv is generated from this module (tpusim.arch.svgen).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache

from tpusim.arch.device_errors import DEVICE_ERROR_TEXT, DEVICE_ERRORS, ERROR_NAMES, DeviceErrorSpec  # noqa: F401
from tpusim.arch.errors import IsaError
from tpusim.arch.limits import (  # noqa: F401 (the ISA's limits)
    DDR_ADDR_BITS,
    DDR_ADDR_LIMIT,
    DMA_MAX_INFLIGHT,
    MXU_MAX_INFLIGHT,
    TOKEN_COUNTER_BITS,
    TOKEN_MAX,
)

INSTR_BYTES = 32
INSTR_BITS = 256
HEADER_BITS = 16


class Engine(IntEnum):
    """Execution engines; each has an in-order instruction queue. The value is its mask bit."""
    LOAD = 0   # DMA read channel: DDR -> SRAM (DMA clock domain)
    STORE = 1  # DMA write channel: SRAM -> DDR (DMA clock domain)
    MXU = 2    # systolic array: LOAD_WEIGHTS, MATMUL (core clock domain)
    VPU = 3    # vector unit: LOAD_QREG, REQUANT, REQUANT_ADD, POOL, ADD, MUL, LUT, DWCONV, SOFTMAX, LAYERNORM (core clock)


#: Engine names in Engine order: ("LOAD", "STORE", "MXU", "VPU"); lower case in counter and
#: signal names ("load", "store", "mxu", "vpu").
ENGINE_NAMES = tuple(e.name for e in Engine)
ENGINE_KEYS = tuple(n.lower() for n in ENGINE_NAMES)
#: SRAM arbiter requesters in priority order (docs/architecture.md, "SRAM and the bank arbiter"):
#: the four engines (the MXU's for MATMUL activations), then "mxuw", the MXU's weight port
#: (LOAD_WEIGHTS); ``SRAM_REQUESTER_ENGINE``: the engine each one serves
SRAM_REQUESTERS = ENGINE_KEYS + ("mxuw",)
SRAM_REQUESTER_ENGINE = (Engine.LOAD, Engine.STORE, Engine.MXU, Engine.VPU, Engine.MXU)


@dataclass(frozen=True)
class FieldSpec:
    """One operand field. ``optional``: a field only some configs use (REQUANT's non-square
    fields), left out of the assembly text when it is 0 (the assembler defaults it to 0)."""
    name: str
    bits: int
    signed: bool = False
    optional: bool = False


@dataclass(frozen=True)
class OpSpec:
    name: str
    code: int
    engine: Engine | None  # None: executed by the decoder (HALT) or chosen by a field (NOP)
    fields: tuple[FieldSpec, ...]

    @property
    def used_bits(self) -> int:
        """Bits [used_bits-1:0] hold the header and the fields; the bits above must be zero."""
        return HEADER_BITS + sum(f.bits for f in self.fields)

    def layout(self) -> list[tuple[FieldSpec, int]]:
        """(field, lsb) pairs, packed from bit HEADER_BITS upward."""
        out, lsb = [], HEADER_BITS
        for f in self.fields:
            out.append((f, lsb))
            lsb += f.bits
        assert lsb <= INSTR_BITS, self.name
        return out


def _f(name: str, bits: int, signed: bool = False, optional: bool = False) -> FieldSpec:
    return FieldSpec(name, bits, signed, optional)


_DMA_FIELDS = (
    _f("ddr_addr", 40),      # byte address of the first element in DDR
    _f("sram_addr", 20),     # byte address in SRAM (word aligned)
    _f("inner_bytes", 20),   # contiguous bytes per innermost run (multiple of the word)
    _f("count1", 16),        # runs per row (>= 1)
    _f("ddr_stride1", 32),   # DDR bytes between runs
    _f("sram_stride1", 20),  # SRAM bytes between runs
    _f("count2", 16),        # rows (>= 1)
    _f("ddr_stride2", 32),   # DDR bytes between rows
    _f("sram_stride2", 20),  # SRAM bytes between rows
)

#: a window over SRAM words (POOL and DWCONV, after their 1-bit mode / relu field): every output
#: (y, x) reads the taps (ty, tx) at src_addr + y*out_stride_y + x*out_stride_x + ty*win_stride_y
#: + tx*win_stride_x and writes word dst_addr + y*out_w + x
_WINDOW_FIELDS = (
    _f("src_addr", 16),
    _f("win_w", 8), _f("win_h", 8),
    _f("win_stride_x", 16), _f("win_stride_y", 16),  # words between window taps
    _f("out_w", 16), _f("out_stride_x", 16),         # outputs per row, src words between them
    _f("out_h", 16), _f("out_stride_y", 16),         # output rows, src words between them
    _f("dst_addr", 16),      # dense: output (y, x) -> dst_addr + y * out_w + x
    _f("qreg_in", 6),        # input zero point (POOL: average only)
    _f("qreg_out", 6),       # POOL average: multiplier, shift, output zero point; DWCONV: zero point
)

#: a row operation over SRAM rows (SOFTMAX and LAYERNORM, first, at the same bits): row r of
#: row_len int8 elements is the ceil(row_len/W) words src_addr + r*src_stride + j, its output the
#: words dst_addr + r*dst_stride + j (tpusim.arch.rowops)
_ROW_FIELDS = (
    _f("src_addr", 16), _f("dst_addr", 16),
    _f("row_len", 16),       # elements per row (lanes past it in the last word are not in the row)
    _f("rows", 16),
    _f("src_stride", 16), _f("dst_stride", 16),  # words between row starts
    _f("qreg_out", 6),       # output multiplier, shift, zero point
)

#: REQUANT's fields (REQUANT_ADD's first ones, at the same bits)
_REQUANT_FIELDS = (
    _f("acc_addr", 16), _f("count", 16),
    _f("param_addr", 16),    # word address of the per-channel table (bias, mult, shift)
    _f("dst_addr", 16),      # word address; acc row i -> word dst_addr + i
    _f("qreg", 6),           # output zero point
    _f("relu", 1),           # clamp below at the zero point
    # non-square arrays (0 when R = C; docs/architecture.md, "Non-square arrays"):
    _f("dst_plane_stride", 16, optional=True),  # C > R: words between the C/R channel-block planes
    _f("lane_group", 8, optional=True),         # R > C: the C-byte lane group (< R/C) written
)

OPCODES: dict[str, OpSpec] = {s.name: s for s in (
    OpSpec("NOP", 0x01, None, (_f("engine", 2),)),
    OpSpec("HALT", 0x02, None, ()),
    OpSpec("DMA_LOAD", 0x03, Engine.LOAD, _DMA_FIELDS),
    OpSpec("DMA_STORE", 0x04, Engine.STORE, _DMA_FIELDS),
    OpSpec("LOAD_WEIGHTS", 0x05, Engine.MXU, (
        _f("sram_addr", 16),     # word address of a tile of `cols` words; word n = W[0:rows, n]
    )),
    OpSpec("MATMUL", 0x06, Engine.MXU, (
        _f("act_addr", 16),      # word address of the first activation vector
        _f("count_x", 16), _f("stride_x", 16),  # vectors per row, words between them
        _f("count_y", 16), _f("stride_y", 16),  # rows, words between row starts
        _f("acc_addr", 16),      # first accumulator row; row i gets vector i (y outer, x inner)
        _f("accumulate", 1),     # 1: acc += result; 0: acc = result
    )),
    OpSpec("LOAD_QREG", 0x07, Engine.VPU, (
        _f("qreg", 6),                     # bank * 16 + entry
        _f("multiplier", 32, True),        # Q31 fixed-point multiplier
        _f("shift", 8, True),              # exponent: >0 left shift, <0 rounding right shift
        _f("zero_point", 8, True),
    )),
    OpSpec("REQUANT", 0x08, Engine.VPU, _REQUANT_FIELDS),
    # REQUANT then the residual ADD of its output (operand a) and the skip word (operand b) at
    # the same place as the destination word, in one pass: REQUANT's fields at the same bits
    # (REQUANT_FIELDS; qreg: the requant zero point and the ADD's operand a), then the ADD's
    OpSpec("REQUANT_ADD", 0x10, Engine.VPU, (
        *_REQUANT_FIELDS,
        _f("skip_addr", 16),     # word address of the skip (operand b): word dst - dst_addr + skip_addr
        _f("qreg_b", 6),         # operand b's multiplier, shift, zero point
        _f("qreg_out", 6),       # the sum's multiplier, shift, output zero point
        _f("add_relu", 1),       # clamp the sum below at the output zero point
    )),
    OpSpec("POOL", 0x09, Engine.VPU, (
        _f("mode", 1),           # 0 max, 1 average
        *_WINDOW_FIELDS,
    )),
    OpSpec("ADD", 0x0A, Engine.VPU, (
        _f("src_a", 16), _f("src_b", 16), _f("dst_addr", 16), _f("count", 16),
        _f("qreg_a", 6), _f("qreg_b", 6), _f("qreg_out", 6),
        _f("relu", 1),
    )),
    OpSpec("MUL", 0x0C, Engine.VPU, (
        _f("src_a", 16), _f("src_b", 16), _f("dst_addr", 16), _f("count", 16),
        _f("stride_b", 1),       # 1: b[i] = word src_b + i; 0: word src_b for every i (broadcast)
        _f("qreg_a", 6), _f("qreg_b", 6), _f("qreg_out", 6),
        _f("relu", 1),
    )),
    OpSpec("LUT", 0x0B, Engine.VPU, (
        _f("src_addr", 16), _f("dst_addr", 16), _f("count", 16),
        _f("table_addr", 16),    # word address of the 256-byte table (lut_words words)
    )),
    # depthwise convolution: POOL's window (the same first 13 fields at the same bits, relu in
    # mode's place: DWCONV_POOL_FIELDS), per-lane weights and a REQUANT table
    OpSpec("DWCONV", 0x0D, Engine.VPU, (
        _f("relu", 1),           # 1: clamp below at the output zero point
        *_WINDOW_FIELDS,
        _f("wt_addr", 16),       # word address of win_h*win_w weight words: tap ty*win_w + tx
        _f("param_addr", 16),    # word address of the per-channel table (bias, mult, shift)
    )),
    # integer-only row operations (docs/integer_nonlinear.md; arithmetic tpusim.arch.arith)
    OpSpec("SOFTMAX", 0x0E, Engine.VPU, (
        *_ROW_FIELDS,
        _f("exp_mult", 24),      # round(S_in * log2(e) * 2^20): (max - x) * exp_mult is Q20
        _f("mask", 1),           # 1: an input of -128 is masked (probability 0)
    )),
    OpSpec("LAYERNORM", 0x0F, Engine.VPU, (
        *_ROW_FIELDS,
        _f("param_addr", 16),    # word address of the per-channel gamma/beta table (6 words per row word)
        _f("eps", 48),           # round(eps * row_len^2 / S_in^2 * 2^16)
    )),
)}

BY_CODE: dict[int, OpSpec] = {s.code: s for s in OPCODES.values()}
#: DWCONV's fields that lie where POOL's do (the RTL decodes DWCONV's window with pool_fields)
DWCONV_POOL_FIELDS = 1 + len(_WINDOW_FIELDS)
#: REQUANT_ADD's fields that lie where REQUANT's do (the RTL decodes them with requant_fields)
REQUANT_FIELDS = len(_REQUANT_FIELDS)
#: SOFTMAX's and LAYERNORM's common first fields (the RTL decodes them with softmax_fields)
ROW_FIELDS = len(_ROW_FIELDS)



def error_name(code: int) -> str:
    """Name of a device error code (``error_code_o``); IsaError for an unknown code."""
    try:
        return ERROR_NAMES[code]
    except KeyError:
        raise IsaError(f"unknown device error code {code}; known: {ERROR_NAMES}") from None


@dataclass(frozen=True)
class Instruction:
    """One decoded instruction. ``args`` maps every field of the opcode to its integer value."""
    op: str
    args: dict = field(default_factory=dict)
    wait: int = 0    # engine mask
    signal: int = 0  # engine mask

    @property
    def spec(self) -> OpSpec:
        return OPCODES[self.op]

    @property
    def engine(self) -> Engine | None:
        if self.op == "NOP":
            return Engine(self.args["engine"])
        return self.spec.engine

    def __getitem__(self, k: str) -> int:
        return self.args[k]

    def text(self) -> str:
        """Assembly text, e.g. ``MATMUL act_addr=0 count_x=4 ... wait=LOAD signal=VPU`` (an
        optional field only when it is not 0)."""
        parts = [self.op] + [f"{f.name}={self.args[f.name]:#x}" if f.name.endswith("addr")
                             else f"{f.name}={self.args[f.name]}" for f in self.spec.fields
                             if not (f.optional and self.args[f.name] == 0)]
        for label, m in (("wait", self.wait), ("signal", self.signal)):
            if m:
                parts.append(f"{label}=" + "|".join(e.name for e in Engine if m >> e & 1))
        return " ".join(parts)


def make(op: str, wait: int = 0, signal: int = 0, **args: int) -> Instruction:
    """Build an instruction, checking names and ranges. Missing fields default to 0."""
    if op not in OPCODES:
        raise IsaError(f"unknown opcode {op!r}; known: {sorted(OPCODES)}")
    spec = OPCODES[op]
    names = {f.name for f in spec.fields}
    extra = sorted(set(args) - names)
    if extra:
        raise IsaError(f"{op}: unknown field(s) {extra}; fields are {[f.name for f in spec.fields]}")
    full = {f.name: int(args.get(f.name, 0)) for f in spec.fields}
    ins = Instruction(op, full, wait, signal)
    check_ranges(ins)
    return ins


@lru_cache(maxsize=None)
def _range(f: FieldSpec) -> tuple[int, int]:
    if f.signed:
        return -(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1
    return 0, (1 << f.bits) - 1


@lru_cache(maxsize=None)
def _field_ranges(op: str) -> tuple[tuple[str, int, int, int], ...]:
    """(name, lowest, highest, bits) of each field of opcode ``op``, in field order."""
    return tuple((f.name, *_range(f), f.bits) for f in OPCODES[op].fields)


def check_ranges(ins: Instruction) -> None:
    """IsaError if a field value does not fit its width, or a mask is not 4 bits."""
    for label, m in (("wait", ins.wait), ("signal", ins.signal)):
        if not 0 <= m < 16:
            raise IsaError(f"{ins.op}: {label} mask {m} is not a 4-bit engine mask")
    args = ins.args
    for name, lo, hi, bits in _field_ranges(ins.op):
        v = args[name]
        if not lo <= v <= hi:
            raise IsaError(f"{ins.op}: field {name}={v} out of range [{lo}, {hi}] ({bits} bits)")


@lru_cache(maxsize=None)
def _encoding(op: str) -> tuple[int, tuple[tuple[str, int, int], ...]]:
    """(opcode byte, (name, mask, lsb) of each field in ``OpSpec.layout`` order) of opcode ``op``."""
    spec = OPCODES[op]
    return spec.code, tuple((f.name, (1 << f.bits) - 1, lsb) for f, lsb in spec.layout())


def encode(ins: Instruction) -> bytes:
    """The 32-byte little-endian encoding of an instruction."""
    check_ranges(ins)
    code, fields = _encoding(ins.op)
    word = code | ins.wait << 8 | ins.signal << 12
    args = ins.args
    for name, mask, lsb in fields:
        word |= (args[name] & mask) << lsb
    return word.to_bytes(INSTR_BYTES, "little")


def decode(raw: bytes, pc: int | None = None) -> Instruction:
    """Decode 32 bytes. IsaError naming the PC for a reserved opcode or non-zero unused bits."""
    where = f" at pc {pc:#x}" if pc is not None else ""
    if len(raw) != INSTR_BYTES:
        raise IsaError(f"instruction{where} is {len(raw)} bytes, expected {INSTR_BYTES}")
    word = int.from_bytes(raw, "little")
    code = word & 0xFF
    if code not in BY_CODE:
        raise IsaError(f"reserved opcode {code:#04x}{where}")
    spec = BY_CODE[code]
    args = {}
    top = HEADER_BITS
    for f, lsb in spec.layout():
        v = (word >> lsb) & ((1 << f.bits) - 1)
        if f.signed and v >> (f.bits - 1):
            v -= 1 << f.bits
        args[f.name] = v
        top = lsb + f.bits
    if word >> top:
        bit = lowest_unused_bit(raw)
        raise IsaError(f"{spec.name}{where}: bit={bit:#x} ({bit}) {unused_bit_why(spec)}")
    return Instruction(spec.name, args, (word >> 8) & 0xF, (word >> 12) & 0xF)


def lowest_unused_bit(raw: bytes) -> int | None:
    """The lowest set bit above the word's opcode's last field, or None (also for a reserved opcode)."""
    extra = unused_bits(raw)
    return BY_CODE[raw[0]].used_bits + (extra & -extra).bit_length() - 1 if extra else None


def unused_bit_why(spec: OpSpec) -> str:
    """The reason in the unused-bits messages of ``decode`` and the device error unused_bits."""
    return f"is set: {spec.name} uses bits 0-{spec.used_bits - 1}, bits {spec.used_bits} and up must be zero"


def unused_bits(raw: bytes) -> int:
    """The bits of a 32-byte word above its opcode's last field, shifted down to bit 0 (0 for a
    well-formed word; 0 for a reserved opcode, which has no fields to be above)."""
    spec = BY_CODE.get(raw[0])
    return 0 if spec is None else int.from_bytes(raw, "little") >> spec.used_bits


@lru_cache(maxsize=65536)
def decode_as_hardware(raw: bytes) -> Instruction | None:
    """Decode 32 bytes as the hardware decoder does (docs/architecture.md, clarification 5):
    None for a word the decoder rejects with a device error (a reserved opcode, or non-zero bits
    above the opcode's last field: ``tpusim.arch.device_checks.decode_fault`` says which). The
    result is cached and shared: do not modify its ``args``."""
    if raw[0] not in BY_CODE or unused_bits(raw):
        return None
    return decode(raw)


def encode_program(prog: list[Instruction]) -> bytes:
    return b"".join(encode(i) for i in prog)


def decode_program(code: bytes) -> list[Instruction]:
    if len(code) % INSTR_BYTES:
        raise IsaError(f"code section of {len(code)} bytes is not a whole number of instructions")
    return [decode(code[i:i + INSTR_BYTES], i) for i in range(0, len(code), INSTR_BYTES)]


def parse_mask(text: str) -> int:
    m = 0
    for name in filter(None, text.split("|")):
        try:
            m |= 1 << Engine[name.strip().upper()]
        except KeyError:
            raise IsaError(f"unknown engine {name!r} in mask {text!r}; engines: "
                           f"{[e.name for e in Engine]}") from None
    return m


def assemble(text: str) -> list[Instruction]:
    """Parse assembly text (one instruction per line, ``#`` comments) as written by ``text()``."""
    prog = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        op, *kvs = line.split()
        args, wait, signal = {}, 0, 0
        for kv in kvs:
            if "=" not in kv:
                raise IsaError(f"line {lineno}: expected field=value, got {kv!r}")
            k, v = kv.split("=", 1)
            try:
                if k == "wait":
                    wait = parse_mask(v)
                elif k == "signal":
                    signal = parse_mask(v)
                else:
                    args[k] = int(v, 0)
            except ValueError:
                raise IsaError(f"line {lineno}: bad value {v!r} for {k}") from None
            except IsaError as e:
                raise IsaError(f"line {lineno}: {e}") from None
        try:
            prog.append(make(op, wait, signal, **args))
        except IsaError as e:
            raise IsaError(f"line {lineno}: {e}") from None
    return prog


__all__ = ["INSTR_BYTES", "Engine", "SRAM_REQUESTERS", "SRAM_REQUESTER_ENGINE", "OPCODES", "BY_CODE", "Instruction", "make", "encode",
           "decode", "decode_as_hardware", "unused_bits", "lowest_unused_bit", "unused_bit_why", "encode_program", "decode_program", "assemble", "check_ranges",
           "DEVICE_ERRORS", "DEVICE_ERROR_TEXT", "ERROR_NAMES", "error_name"]
