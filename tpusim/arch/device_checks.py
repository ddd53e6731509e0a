"""The device checks: what makes one instruction a device error on a given config, by the
``DEVICE_ERRORS`` name (docs/isa.md, "Device errors"; docs/architecture.md, "Device errors").

One module for every side that asks: the SimPy model's blocks (at the instruction's start edge,
before any wait), the ISA executor (``tpusim.arch.executor``), stressgen's validator and so the
assembler's refusal of an invalid stress program. The RTL's ``tpu_dma_check`` /
``tpu_mxu_check`` / ``tpu_vpu_check`` implement the same conditions in the same order.

Each ``*_fault`` function returns the FIRST failing check as a ``DeviceFault`` (code name, the
field at fault, its value, why), or None; checks run in the documented order (DMA: zero length,
misalignment, SRAM range, DDR range; MXU: SRAM, accumulator; VPU: accumulator, SRAM, quant
registers; field by field). ``start_fault`` picks the function by opcode. ``loaded`` is any
container of the quant register indices written so far (``idx in loaded``). ``DeviceFault.error``
makes the ``DeviceError`` to raise; its message is ``"<where>: <field>=<hex> (<dec>) <why>"``.
Field widths (``tpusim.arch.isa.check_ranges``) are not device errors and not checked here.
"""
from __future__ import annotations

from dataclasses import dataclass

from tpusim.arch.device_errors import DEVICE_ERRORS
from tpusim.arch.errors import DeviceError, IsaError
from tpusim.arch.isa import BY_CODE, ENGINE_NAMES, INSTR_BYTES, lowest_unused_bit, unused_bit_why
from tpusim.arch.limits import DDR_ADDR_BITS, DDR_ADDR_LIMIT, TOKEN_MAX
from tpusim.arch.operands import (
    dma_ddr_end,
    dma_sram_end,
    matmul_last_word,
    pool_last_tap,
    requant_last_word,
    requant_skip_last_word,
)
from tpusim.arch.rowops import rowop_ranges

#: DDR addresses and strides of a DMA are multiples of max(W, DDR_ALIGN_MIN_BYTES).
DDR_ALIGN_MIN_BYTES = 32
DMA_LENGTH_FIELDS = ("inner_bytes", "count1", "count2")
DMA_SRAM_ALIGNED_FIELDS = ("sram_addr", "inner_bytes", "sram_stride1", "sram_stride2")
DMA_DDR_ALIGNED_FIELDS = ("ddr_addr", "ddr_stride1", "ddr_stride2")


@dataclass(frozen=True)
class DeviceFault:
    """One failed device check: ``code`` (a DEVICE_ERRORS name), the instruction ``field`` at
    fault, its ``value`` and ``why`` (the rest of the message). IsaError for an unknown code."""
    code: str
    field: str
    value: int
    why: str

    def __post_init__(self) -> None:
        if self.code not in DEVICE_ERRORS:
            raise IsaError(f"unknown device error {self.code!r}; known: {sorted(DEVICE_ERRORS)}")

    def __str__(self) -> str:
        return f"{self.field}={self.value:#x} ({self.value}) {self.why}"

    def error(self, where_text: str, pc: int) -> DeviceError:
        """The DeviceError of this fault for the instruction at ``pc`` (byte offset from
        code_addr) described by ``where_text`` (``where(...)``)."""
        return DeviceError(f"{where_text}: {self}", self.code, pc, field=self.field, value=self.value)


def where(index: int, op: str | None, pc: int | None = None) -> str:
    """``"instruction #3 at pc 0x60 (MATMUL)"``; ``pc`` defaults to ``index * INSTR_BYTES``
    (code from its first byte), ``op`` None for a word with no opcode name."""
    pc = index * INSTR_BYTES if pc is None else pc
    return f"instruction #{index} at pc {pc:#x}" + (f" ({op})" if op else "")


def ddr_align_bytes(cfg) -> int:
    """Alignment in bytes of a DMA's DDR address and strides: max(W, 32)."""
    return max(cfg.word_bytes, DDR_ALIGN_MIN_BYTES)


# ------------------------------------------------------------------ DMA_LOAD / DMA_STORE
def dma_fault(a: dict, cfg) -> DeviceFault | None:
    """dma_zero_length, dma_misaligned, dma_sram_range (last run past the SRAM's
    ``sram_size_bytes``), dma_ddr_range (last run past byte 2^40 - 1), in that order."""
    w, align = cfg.word_bytes, ddr_align_bytes(cfg)
    for f in DMA_LENGTH_FIELDS:
        if a[f] == 0:
            return DeviceFault("dma_zero_length", f, 0, "is zero: zero-length DMA")
    for f in DMA_SRAM_ALIGNED_FIELDS:
        if a[f] % w:
            return DeviceFault("dma_misaligned", f, a[f], f"is not a multiple of the {w}-byte SRAM word")
    for f in DMA_DDR_ALIGNED_FIELDS:
        if a[f] % align:
            return DeviceFault("dma_misaligned", f, a[f], f"is not a multiple of {align} bytes")
    sram_end = dma_sram_end(a)
    if sram_end > cfg.sram_size_bytes:
        return DeviceFault("dma_sram_range", "sram_addr", a["sram_addr"],
                           f"with these strides reaches SRAM byte {sram_end - 1:#x}, past the end of "
                           f"the {cfg.sram_size_bytes}-byte SRAM")
    ddr_end = dma_ddr_end(a)
    if ddr_end > DDR_ADDR_LIMIT:
        return DeviceFault("dma_ddr_range", "ddr_addr", a["ddr_addr"],
                           f"with these strides reaches DDR byte {ddr_end - 1:#x} >= 2^{DDR_ADDR_BITS}")
    return None


# ------------------------------------------------------------------ shared range checks
def _sram_words(code: str, field: str, first: int, last: int, cfg, span: bool) -> DeviceFault | None:
    """``code`` if SRAM word ``last`` is past the last word; ``span``: say "+ n words"."""
    if last < cfg.sram_words:
        return None
    count = f"+ {last - first + 1} words " if span else ""
    return DeviceFault(code, field, first, f"{count}reaches SRAM word {last:#x}, past the last word "
                       f"{cfg.sram_words - 1:#x}")


def _acc_rows(code: str, acc_addr: int, rows: int, cfg) -> DeviceFault | None:
    if acc_addr + rows <= cfg.acc_depth_rows:
        return None
    return DeviceFault(code, "acc_addr", acc_addr, f"+ {rows} rows runs past the end of the "
                       f"{cfg.acc_depth_rows}-row accumulator")


def qreg_fault(field: str, idx: int, loaded, cfg) -> DeviceFault | None:
    """qreg_unloaded if quant register ``idx`` (the value of ``field``) is not in ``loaded``."""
    if idx in loaded:
        return None
    bank, entry = divmod(idx, cfg.qreg_entries)
    return DeviceFault("qreg_unloaded", field, idx, f"(bank {bank}, entry {entry}) reads a quant "
                       "register that was never loaded")


def _first(*checks) -> DeviceFault | None:
    return next((c for c in checks if c is not None), None)


# ------------------------------------------------------------------ MXU
def load_weights_fault(a: dict, cfg) -> DeviceFault | None:
    """mxu_sram_range if the tile's ``array_cols`` words run past the last SRAM word."""
    return _sram_words("mxu_sram_range", "sram_addr", a["sram_addr"], a["sram_addr"] + cfg.array_cols - 1,
                       cfg, span=False)


def matmul_fault(a: dict, cfg) -> DeviceFault | None:
    """M = count_x * count_y > 0 only: mxu_sram_range (a vector past the last word), then
    mxu_acc_range (``acc_addr + M`` > accumulator rows)."""
    m = a["count_x"] * a["count_y"]
    if m == 0:
        return None
    return (_sram_words("mxu_sram_range", "act_addr", a["act_addr"], matmul_last_word(a), cfg, span=False)
            or _acc_rows("mxu_acc_range", a["acc_addr"], m, cfg))


# ------------------------------------------------------------------ VPU
def _vpu_words(field: str, a: dict, n: int, cfg) -> DeviceFault | None:
    """vpu_sram_range for ``n`` words from the word address in ``field`` (none if n == 0)."""
    return _sram_words("vpu_sram_range", field, a[field], a[field] + n - 1, cfg, span=True) if n else None


def requant_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """vpu_acc_range (``acc_addr + count``), vpu_sram_range (the table of ``param_words``
    words, even for count 0; then with count > 0 the destination: ``dst_addr`` to the last
    plane's last word ``requant_last_word``; then ``lane_group`` >= ``cfg.lane_groups``, lanes
    past the word), qreg_unloaded (``qreg``)."""
    n = a["count"]
    dst = None
    if n:
        dst = _sram_words("vpu_sram_range", "dst_addr", a["dst_addr"],
                          requant_last_word(a, cfg.requant_planes), cfg, span=True)
    return _first(_acc_rows("vpu_acc_range", a["acc_addr"], n, cfg),
                  _vpu_words("param_addr", a, cfg.param_words, cfg),
                  dst, _lane_group_fault(a, cfg),
                  qreg_fault("qreg", a["qreg"], loaded, cfg))


def requant_add_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """REQUANT's checks (``requant_fault``) up to the lane group, then with count > 0
    vpu_sram_range for the skip (``skip_addr`` to its last plane's last word, the destination's
    layout), then qreg_unloaded (``qreg``, ``qreg_b``, ``qreg_out``; all three even for count 0,
    as REQUANT's ``qreg``)."""
    n = a["count"]
    dst = skip = None
    if n:
        dst = _sram_words("vpu_sram_range", "dst_addr", a["dst_addr"],
                          requant_last_word(a, cfg.requant_planes), cfg, span=True)
        skip = _sram_words("vpu_sram_range", "skip_addr", a["skip_addr"],
                           requant_skip_last_word(a, cfg.requant_planes), cfg, span=True)
    return _first(_acc_rows("vpu_acc_range", a["acc_addr"], n, cfg),
                  _vpu_words("param_addr", a, cfg.param_words, cfg),
                  dst, _lane_group_fault(a, cfg), skip,
                  *(qreg_fault(f, a[f], loaded, cfg) for f in ("qreg", "qreg_b", "qreg_out")))


def _lane_group_fault(a: dict, cfg) -> DeviceFault | None:
    """vpu_sram_range if REQUANT's ``lane_group`` names lanes past the W-byte word."""
    g = a["lane_group"]
    if g < cfg.lane_groups:
        return None
    c = cfg.word_bytes // cfg.lane_groups
    return DeviceFault("vpu_sram_range", "lane_group", g,
                       f"writes lanes {g * c}..{g * c + c - 1}, past the {cfg.word_bytes}-byte word "
                       f"({cfg.lane_groups} lane group(s) of {c} bytes)")


def pool_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """With outputs (out_w * out_h > 0) only: vpu_sram_range (source first to last tap, if the
    window has taps; then the dense destination), then for average (mode 1) qreg_unloaded
    (qreg_in, qreg_out)."""
    outs = a["out_w"] * a["out_h"]
    if outs == 0:
        return None
    src = None
    if a["win_w"] * a["win_h"]:
        src = _sram_words("vpu_sram_range", "src_addr", a["src_addr"], pool_last_tap(a), cfg, span=True)
    qregs = [qreg_fault(f, a[f], loaded, cfg) for f in ("qreg_in", "qreg_out")] if a["mode"] else []
    return _first(src, _vpu_words("dst_addr", a, outs, cfg), *qregs)


def add_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """With count > 0 only: vpu_sram_range (src_a, src_b, dst_addr, ``count`` words each), then
    qreg_unloaded (qreg_a, qreg_b, qreg_out)."""
    n = a["count"]
    if n == 0:
        return None
    return _first(*(_vpu_words(f, a, n, cfg) for f in ("src_a", "src_b", "dst_addr")),
                  *(qreg_fault(f, a[f], loaded, cfg) for f in ("qreg_a", "qreg_b", "qreg_out")))


def mul_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """With count > 0 only: vpu_sram_range (src_a and dst_addr ``count`` words; src_b ``count``
    words, or 1 with stride_b = 0), then qreg_unloaded (qreg_a, qreg_b, qreg_out)."""
    n = a["count"]
    if n == 0:
        return None
    return _first(_vpu_words("src_a", a, n, cfg), _vpu_words("src_b", a, n if a["stride_b"] else 1, cfg),
                  _vpu_words("dst_addr", a, n, cfg),
                  *(qreg_fault(f, a[f], loaded, cfg) for f in ("qreg_a", "qreg_b", "qreg_out")))


def lut_fault(a: dict, cfg, loaded=frozenset()) -> DeviceFault | None:
    """vpu_sram_range: the table of ``lut_words`` words (even for count 0), then with count > 0
    the ``count`` source and destination words. LUT reads no quant register."""
    n = a["count"]
    return _first(_vpu_words("table_addr", a, cfg.lut_words, cfg),
                  _vpu_words("src_addr", a, n, cfg), _vpu_words("dst_addr", a, n, cfg))


def dwconv_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """With outputs (out_w * out_h > 0) only: vpu_sram_range (the table of ``dw_param_words`` words;
    then, if the window has taps, the source first to last tap and the ``win_w * win_h`` weight
    words; then the dense destination), then qreg_unloaded (qreg_in, qreg_out)."""
    outs, taps = a["out_w"] * a["out_h"], a["win_w"] * a["win_h"]
    if outs == 0:
        return None
    src = None
    if taps:
        src = _sram_words("vpu_sram_range", "src_addr", a["src_addr"], pool_last_tap(a), cfg, span=True)
    return _first(_vpu_words("param_addr", a, cfg.dw_param_words, cfg), src, _vpu_words("wt_addr", a, taps, cfg),
                  _vpu_words("dst_addr", a, outs, cfg),
                  *(qreg_fault(f, a[f], loaded, cfg) for f in ("qreg_in", "qreg_out")))


def _rowop_fault(op: str, a: dict, cfg, loaded) -> DeviceFault | None:
    """SOFTMAX / LAYERNORM with accesses (rows * row_len > 0) only: vpu_sram_range (the source
    rows: ``src_addr`` to the last row's last word; the destination rows likewise; LAYERNORM's
    table of 6n words), then qreg_unloaded (qreg_out)."""
    ranges = rowop_ranges(op, a, cfg.word_bytes)
    if not ranges:
        return None
    return _first(*(_sram_words("vpu_sram_range", f, first, last, cfg, span=True) for f, first, last in ranges),
                  qreg_fault("qreg_out", a["qreg_out"], loaded, cfg))


def softmax_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """SOFTMAX: ``_rowop_fault`` (source rows, destination rows, qreg_out)."""
    return _rowop_fault("SOFTMAX", a, cfg, loaded)


def layernorm_fault(a: dict, cfg, loaded) -> DeviceFault | None:
    """LAYERNORM: ``_rowop_fault`` (source rows, destination rows, table, qreg_out)."""
    return _rowop_fault("LAYERNORM", a, cfg, loaded)


# ------------------------------------------------------------------ by opcode
_CONFIG_ONLY = {"DMA_LOAD": dma_fault, "DMA_STORE": dma_fault, "LOAD_WEIGHTS": load_weights_fault,
                "MATMUL": matmul_fault}
_WITH_QREGS = {"REQUANT": requant_fault, "REQUANT_ADD": requant_add_fault, "POOL": pool_fault, "ADD": add_fault, "MUL": mul_fault, "LUT": lut_fault,
               "DWCONV": dwconv_fault, "SOFTMAX": softmax_fault, "LAYERNORM": layernorm_fault}


def start_fault(ins, cfg, loaded=frozenset()) -> DeviceFault | None:
    """The device error instruction ``ins`` (an ``Instruction``) raises at its start on ``cfg``
    with the quant registers ``loaded``, or None (always None for NOP, HALT and LOAD_QREG)."""
    if ins.op in _CONFIG_ONLY:
        return _CONFIG_ONLY[ins.op](ins.args, cfg)
    if ins.op in _WITH_QREGS:
        return _WITH_QREGS[ins.op](ins.args, cfg, loaded)
    return None


def reserved_opcode_fault(opcode: int) -> DeviceFault:
    """reserved_opcode for an opcode byte not in the opcode table (the decoder, at dispatch)."""
    return DeviceFault("reserved_opcode", "opcode", opcode, "is a reserved opcode")


def unused_bits_fault(raw: bytes) -> DeviceFault | None:
    """unused_bits for a word of a known opcode with a non-zero bit above its last field (the
    decoder, at dispatch), or None. ``field`` "bit", ``value``: the lowest such bit."""
    bit = lowest_unused_bit(raw)
    if bit is None:
        return None
    return DeviceFault("unused_bits", "bit", bit, unused_bit_why(BY_CODE[raw[0]]))


def decode_fault(raw: bytes) -> DeviceFault | None:
    """The device error the decoder raises for the 32-byte word ``raw`` at dispatch
    (reserved_opcode, unused_bits), or None if it decodes."""
    if raw[0] not in BY_CODE:
        return reserved_opcode_fault(raw[0])
    return unused_bits_fault(raw)


def token_overflow_fault(sender: int, receiver: int, signal: int) -> DeviceFault:
    """token_overflow: engine ``sender`` completes with ``signal`` while TOKEN_MAX tokens it sent
    to ``receiver`` are not yet consumed (the new token is not sent)."""
    return DeviceFault("token_overflow", "signal", signal, f"overflows token counter "
                       f"{ENGINE_NAMES[sender]}->{ENGINE_NAMES[receiver]} ({TOKEN_MAX} tokens not yet "
                       "consumed)")


__all__ = ["DeviceFault", "DDR_ALIGN_MIN_BYTES", "where", "ddr_align_bytes", "dma_fault",
           "load_weights_fault", "matmul_fault", "requant_fault", "requant_add_fault", "pool_fault", "add_fault", "mul_fault", "lut_fault", "dwconv_fault", "softmax_fault", "layernorm_fault",
           "qreg_fault", "start_fault", "reserved_opcode_fault", "unused_bits_fault", "decode_fault",
           "token_overflow_fault"]
