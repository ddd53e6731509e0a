"""Deliberately invalid stress programs (``generate(..., invalid_rate > 0)``) and
``assembler_rejects``: the error message the tools give for one.

Classes (``prog.invalid``), each made from a valid program by one mutation that leaves the rest
race-free: ``reserved_opcode`` (a raw word with an unassigned opcode byte is inserted),
``unused_bits`` (an instruction's word gets bits set above its opcode's last field),
``dma_misaligned`` (a DMA address, stride or length off the word / 32-byte grid),
``dma_zero_length`` (inner_bytes, count1 or count2 = 0), ``ddr_out_of_range`` (a DMA whose last
byte is at or past 2^40), ``qreg_unloaded`` (a VPU read of a register no LOAD_QREG wrote),
``sram_out_of_range`` (an MXU/VPU/DMA SRAM access past the end), ``deadlock`` (a wait nobody
signals), ``double_fault`` (faults on two engines at once: the first DMA_LOAD zero-length with a
zero-length DMA_STORE inserted after it, or range faults on two instructions of two engines near
each other in program order; the decoder's lowest-pc choice between engine errors; the
sub-kinds of ``sram_out_of_range`` are in SRAM_SUBKINDS). ``to_binary`` still encodes them (raw words verbatim), so SimPy and the RTL can be
run on them and must both flag the fault.

Each class has checker paths (CLASS_PATHS: the opcode and field at fault, or the range
sub-kind); ``generate`` picks one of the 81 of INVALID_PATHS per invalid seed with
``invalid_path_of`` (the invalid seeds cycle through the paths in order, so a hunt over consecutive seeds meets every path
early), and a path whose opcode the program does not use gets a fresh instruction (``_fresh``).
"""
from __future__ import annotations

import math

from stressgen.analysis import engine_of
from stressgen.program import RawWord, StressProgram, instruction_from
from stressgen.validate import validate
from tpusim.arch.device_checks import DMA_DDR_ALIGNED_FIELDS, DMA_SRAM_ALIGNED_FIELDS, ddr_align_bytes
from tpusim.arch.errors import IsaError
from tpusim.arch.isa import BY_CODE, INSTR_BITS, INSTR_BYTES, OPCODES, decode, encode
from tpusim.arch.limits import DDR_ADDR_LIMIT
from tpusim.arch.operands import pool_last_tap
from tpusim.arch.rowops import ROWOPS, rowop_ranges

INVALID_CLASSES = ("reserved_opcode", "unused_bits", "dma_misaligned", "dma_zero_length", "ddr_out_of_range",
                   "qreg_unloaded", "sram_out_of_range", "deadlock", "double_fault")
#: The StressError kinds (``DEVICE_ERRORS`` names, or "deadlock") ``validate`` refuses a program
#: of each class with; the SimPy model and the RTL flag the same device error names.
CLASS_KINDS = {
    "reserved_opcode": ("reserved_opcode",), "unused_bits": ("unused_bits",),
    "dma_misaligned": ("dma_misaligned",),
    "dma_zero_length": ("dma_zero_length",), "ddr_out_of_range": ("dma_ddr_range",),
    "qreg_unloaded": ("qreg_unloaded",),
    "sram_out_of_range": ("dma_sram_range", "mxu_sram_range", "mxu_acc_range", "vpu_sram_range",
                          "vpu_acc_range"),
    "deadlock": ("deadlock",),
    "double_fault": ("dma_zero_length", "dma_sram_range", "mxu_sram_range", "mxu_acc_range",
                     "vpu_sram_range", "vpu_acc_range"),
}


def _replace(prog, i, **changes):
    ins = prog.instrs[i]
    args = dict(ins.args)
    wait, signal = changes.pop("wait", ins.wait), changes.pop("signal", ins.signal)
    args.update(changes)
    prog.instrs[i] = instruction_from(ins.op, args, wait, signal)


_DMA_OPS = ("DMA_LOAD", "DMA_STORE")


def _of(prog, ops):
    return [i for i, ins in enumerate(prog.instrs) if ins.op in ops]


def _pick(prog, r, ops=_DMA_OPS):
    """Index of a random instruction with an opcode in ``ops`` (the opcode drawn first, so a rare
    one is as likely as a common one), or None if there is none."""
    present = [op for op in ops if _of(prog, (op,))]
    return r.choice(_of(prog, (r.choice(present),))) if present else None


#: in-range fields of a fresh instruction of each opcode (the rest 0): one word or row each,
#: a POOL of one 1x1 window, a DMA of one word
_FRESH = {"DMA_LOAD": {"count1": 1, "count2": 1}, "DMA_STORE": {"count1": 1, "count2": 1},
          "LOAD_WEIGHTS": {}, "MATMUL": {"count_x": 1, "count_y": 1, "stride_x": 1},
          "REQUANT": {"count": 1}, "REQUANT_ADD": {"count": 1}, "ADD": {"count": 1}, "MUL": {"count": 1, "stride_b": 1},
          "LUT": {"count": 1}, "POOL": {"win_w": 1, "win_h": 1, "out_w": 1, "out_h": 1},
          "DWCONV": {"win_w": 1, "win_h": 1, "out_w": 1, "out_h": 1},
          "SOFTMAX": {"row_len": 1, "rows": 1}, "LAYERNORM": {"row_len": 1, "rows": 1}}


def _fresh(prog, cfg, r, op: str, **args) -> int:
    """Insert a new ``op`` instruction (in range, no wait, no signal; ``args`` override) after the
    last LOAD_QREG and before HALT, and return its index: the fault it is then given is met at its
    start, so it accesses nothing and races with nothing. Its quant-register fields name a loaded
    register (if there is one). A checker path of an opcode the valid
    program does not use (a LUT, a MUL, an average POOL) is thereby as likely as any other."""
    loaded = sorted(ins.args["qreg"] for ins in prog.instrs if getattr(ins, "op", None) == "LOAD_QREG")
    full = {**_FRESH[op], **{f: loaded[0] for f in _QREG_FIELDS.get(op, ()) if loaded}, **args}
    if op in _DMA_OPS:
        full.setdefault("inner_bytes", cfg.word_bytes)
    last_q = max((k for k, ins in enumerate(prog.instrs) if getattr(ins, "op", None) == "LOAD_QREG"), default=-1)
    i = r.randint(last_q + 1, len(prog.instrs) - 1)
    prog.instrs.insert(i, instruction_from(op, full, 0, 0))
    return i


def _reserved(prog, cfg, r, path=None):
    code = r.choice([c for c in range(256) if c not in BY_CODE])
    word = bytes([code]) + bytes(r.getrandbits(8) for _ in range(INSTR_BYTES - 1))
    prog.instrs.insert(r.randrange(len(prog.instrs)), RawWord(word))
    return True


def _unused(prog, cfg, r, path=None):
    """An instruction of opcode ``path`` (HALT included; the decoder's check differs per opcode:
    its own last used bit), or a random one if the program has none, as a raw word with 1 to 3
    bits set above its fields."""
    cands = [k for k, ins in enumerate(prog.instrs) if getattr(ins, "op", None) == path]
    i = r.choice(cands) if cands else r.randrange(len(prog.instrs))
    ins = prog.instrs[i]
    if isinstance(ins, RawWord):
        return False
    word = int.from_bytes(encode(ins), "little")
    for _ in range(r.randint(1, 3)):
        word |= 1 << r.randrange(ins.spec.used_bits, INSTR_BITS)
    prog.instrs[i] = RawWord(word.to_bytes(INSTR_BYTES, "little"))
    return True


def _dma_of(prog, cfg, r, op: str) -> int:
    """A random ``op`` (DMA_LOAD / DMA_STORE) of the program, or a fresh one."""
    i = _pick(prog, r, (op,))
    return _fresh(prog, cfg, r, op) if i is None else i


def _misaligned(prog, cfg, r, path):
    op, f = path                                    # strides: even if unused
    i = _dma_of(prog, cfg, r, op)
    a, w, al = prog.instrs[i].args, cfg.word_bytes, ddr_align_bytes(cfg)
    off = r.randrange(1, w) if f in DMA_SRAM_ALIGNED_FIELDS else r.randrange(1, al)
    val = a[f] + off if f != "ddr_addr" or a[f] + a["inner_bytes"] + off < DDR_ADDR_LIMIT else a[f] - off
    _replace(prog, i, **{f: val})
    return True


def _zero(prog, cfg, r, path):
    op, f = path
    _replace(prog, _dma_of(prog, cfg, r, op), **{f: 0})
    return True


def _ddr(prog, cfg, r, path):
    i = _dma_of(prog, cfg, r, path)
    a, al = prog.instrs[i].args, ddr_align_bytes(cfg)
    ext = (a["count2"] - 1) * a["ddr_stride2"] + (a["count1"] - 1) * a["ddr_stride1"] + a["inner_bytes"]
    if ext <= al:          # one short run: repeat it one 32-byte step further, same SRAM bytes
        _replace(prog, i, count1=2, count2=1, ddr_stride1=al, sram_stride1=0)
        ext += al
    past = 1 if r.random() < EDGE_P else r.randint(1, max(1, min(4, ext // al - 1)))
    start = max(0, DDR_ADDR_LIMIT - ext + al * past)
    _replace(prog, i, ddr_addr=min(start - start % al, DDR_ADDR_LIMIT - al))
    return True


#: quant-register fields a VPU instruction reads (POOL: average mode only)
_QREG_FIELDS = {"REQUANT": ("qreg",), "REQUANT_ADD": ("qreg", "qreg_b", "qreg_out"), "ADD": ("qreg_a", "qreg_b", "qreg_out"), "POOL": ("qreg_in", "qreg_out"),
                "MUL": ("qreg_a", "qreg_b", "qreg_out"), "DWCONV": ("qreg_in", "qreg_out"),
                "SOFTMAX": ("qreg_out",), "LAYERNORM": ("qreg_out",)}


#: the quant-register checker paths: (opcode, field)
QREG_PATHS = tuple((op, f) for op, fields in _QREG_FIELDS.items() for f in fields)


def _reads_qregs(ins) -> bool:
    """``ins`` reads its quant registers (REQUANT, REQUANT_ADD always; ADD, MUL with count > 0;
    POOL average and DWCONV with outputs, SOFTMAX and LAYERNORM with rows)."""
    a = ins.args
    return (ins.op in ("REQUANT", "REQUANT_ADD") or ins.op in ("ADD", "MUL") and a["count"] > 0
            or ins.op == "POOL" and a["mode"] == 1 and _is_pool(ins) or _is_dw(ins) or _is_ro(ins))


def _qreg(prog, cfg, r, path):
    """A quant-register field read before any LOAD_QREG wrote it: the path (opcode, field) drawn
    first, on an instruction of the program or a fresh one."""
    loaded = {ins.args["qreg"] for ins in prog.instrs if ins.op == "LOAD_QREG"}
    free = [q for q in range(cfg.qreg_count) if q not in loaded]
    if not free or not loaded:
        return False
    op, f = path
    cands = [i for i, ins in enumerate(prog.instrs) if getattr(ins, "op", None) == op and _reads_qregs(ins)]
    if cands:
        i = r.choice(cands)
    else:
        i = _fresh(prog, cfg, r, op, mode=int(op == "POOL"))
    _replace(prog, i, **{f: r.choice(free)})
    return True


#: Chance that a range fault is exactly one unit (SRAM word or byte grid, accumulator row,
#: DDR 32-byte step) past the limit: an off-by-one in a checker (``>`` for ``>=``) shows only there.
EDGE_P = 0.75


def _past(r) -> int:
    """Units past the last valid one: 1 (the edge, EDGE_P) or 2 .. 8."""
    return 1 if r.random() < EDGE_P else r.randint(2, 8)


def _sram_dma(prog, i, cfg, r):
    w, k = cfg.word_bytes, r.randint(1, 4)
    _replace(prog, i, sram_addr=cfg.sram_size_bytes - k * w + _past(r) * w, inner_bytes=k * w,
             count1=1, count2=1)


def _sram_lw(prog, i, cfg, r):
    _replace(prog, i, sram_addr=cfg.sram_words - cfg.array_cols + _past(r))


def _sram_mm_act(prog, i, cfg, r):
    cx = r.randint(2, 4)
    _replace(prog, i, act_addr=cfg.sram_words - cx + _past(r), count_x=cx, stride_x=1, count_y=1)


def _acc_mm(prog, i, cfg, r):
    a = prog.instrs[i].args
    m = a["count_x"] * a["count_y"]
    _replace(prog, i, acc_addr=max(0, cfg.acc_depth_rows - m + _past(r)))


def _acc_rq(prog, i, cfg, r):
    n = max(1, prog.instrs[i].args["count"])
    _replace(prog, i, count=n, acc_addr=max(0, cfg.acc_depth_rows - n + _past(r)))


def _words_past(field: str, count_field: str | None = None, table: str = "param_words"):
    """A VPU operand of n words (``count_field``, or the table's ``table`` words: REQUANT's
    param_words, DWCONV's dw_param_words, LUT's lut_words) that runs ``_past`` words past the
    last SRAM word."""
    def mutate(prog, i, cfg, r):
        a = prog.instrs[i].args
        n = max(1, a[count_field]) if count_field else getattr(cfg, table)
        extra = {count_field: n} if count_field else {}
        _replace(prog, i, **{field: cfg.sram_words - n + _past(r)}, **extra)
    return mutate


def _pool_dst(prog, i, cfg, r):
    a = prog.instrs[i].args
    _replace(prog, i, dst_addr=cfg.sram_words - a["out_w"] * a["out_h"] + _past(r))


def _pool_src(prog, i, cfg, r):
    a = prog.instrs[i].args
    _replace(prog, i, src_addr=a["src_addr"] + cfg.sram_words - 1 - pool_last_tap(a) + _past(r))


def _is_pool(ins) -> bool:
    return ins.op == "POOL" and ins.args["out_w"] * ins.args["out_h"] > 0


def _is_dw(ins, taps: bool = False) -> bool:
    """A DWCONV with outputs (and, if ``taps``, a window with taps)."""
    a = ins.args
    return ins.op == "DWCONV" and a["out_w"] * a["out_h"] > 0 and (not taps or a["win_w"] * a["win_h"] > 0)


def _dw_wt(prog, i, cfg, r):
    a = prog.instrs[i].args
    _replace(prog, i, wt_addr=cfg.sram_words - a["win_w"] * a["win_h"] + _past(r))


def _is_ro(ins, ops=ROWOPS) -> bool:
    """A SOFTMAX / LAYERNORM (of ``ops``) with accesses (rows * row_len > 0)."""
    return ins.op in ops and ins.args["rows"] * ins.args["row_len"] > 0


def _ro_past(field: str):
    """A row op's source rows, destination rows or LAYERNORM table (``field``) running ``_past``
    words past the last SRAM word (the operand's span: ``tpusim.arch.rowops.rowop_ranges``)."""
    def mutate(prog, i, cfg, r):
        ins = prog.instrs[i]
        first, last = next((f0, f1) for f, f0, f1 in rowop_ranges(ins.op, ins.args, cfg.word_bytes) if f == field)
        _replace(prog, i, **{field: cfg.sram_words - (last - first + 1) + _past(r)})
    return mutate


#: sram_out_of_range sub-kinds, one per range checker path: (name, opcodes of a fresh instruction,
#: which instructions, mutation); the device error each gives is in the name (dma/mxu/vpu,
#: sram/acc). The instruction is changed so that only the named range check fails (the earlier
#: checks of the same instruction still pass).
SRAM_SUBKINDS = (
    ("dma_sram", ("DMA_LOAD",), lambda ins: ins.op == "DMA_LOAD", _sram_dma),
    ("dma_sram_store", ("DMA_STORE",), lambda ins: ins.op == "DMA_STORE", _sram_dma),
    ("mxu_sram_lw", ("LOAD_WEIGHTS",), lambda ins: ins.op == "LOAD_WEIGHTS", _sram_lw),
    ("mxu_sram_act", ("MATMUL",), lambda ins: ins.op == "MATMUL", _sram_mm_act),
    ("mxu_acc", ("MATMUL",), lambda ins: ins.op == "MATMUL" and ins.args["count_x"] * ins.args["count_y"] > 0,
     _acc_mm),
    ("vpu_acc", ("REQUANT",), lambda ins: ins.op == "REQUANT", _acc_rq),
    ("vpu_sram_param", ("REQUANT",), lambda ins: ins.op == "REQUANT", _words_past("param_addr")),
    ("vpu_sram_rq_dst", ("REQUANT",), lambda ins: ins.op == "REQUANT", _words_past("dst_addr", "count")),
    # REQUANT_ADD: its own range term (the skip); its accumulator, table and destination terms are
    # REQUANT's (tpu_vpu_check: rq_acc_bad, rq_sram_bad), reached by the double faults
    ("vpu_sram_rqa_skip", ("REQUANT_ADD",), lambda ins: ins.op == "REQUANT_ADD", _words_past("skip_addr", "count")),
    ("vpu_sram_add_a", ("ADD",), lambda ins: ins.op == "ADD", _words_past("src_a", "count")),
    ("vpu_sram_add_b", ("ADD",), lambda ins: ins.op == "ADD", _words_past("src_b", "count")),
    ("vpu_sram_add_dst", ("ADD",), lambda ins: ins.op == "ADD", _words_past("dst_addr", "count")),
    ("vpu_sram_mul_a", ("MUL",), lambda ins: ins.op == "MUL", _words_past("src_a", "count")),
    ("vpu_sram_mul_b", ("MUL",), lambda ins: ins.op == "MUL" and ins.args["stride_b"], _words_past("src_b", "count")),
    ("vpu_sram_mul_dst", ("MUL",), lambda ins: ins.op == "MUL", _words_past("dst_addr", "count")),
    ("vpu_sram_lut_table", ("LUT",), lambda ins: ins.op == "LUT", _words_past("table_addr", table="lut_words")),
    ("vpu_sram_lut_src", ("LUT",), lambda ins: ins.op == "LUT", _words_past("src_addr", "count")),
    ("vpu_sram_lut_dst", ("LUT",), lambda ins: ins.op == "LUT", _words_past("dst_addr", "count")),
    ("vpu_sram_pool_src", ("POOL",), lambda ins: _is_pool(ins) and ins.args["win_w"] * ins.args["win_h"] > 0,
     _pool_src),
    ("vpu_sram_pool_dst", ("POOL",), _is_pool, _pool_dst),
    ("vpu_sram_dw_param", ("DWCONV",), _is_dw, _words_past("param_addr", table="dw_param_words")),
    ("vpu_sram_dw_src", ("DWCONV",), lambda ins: _is_dw(ins, taps=True), _pool_src),
    ("vpu_sram_dw_wt", ("DWCONV",), lambda ins: _is_dw(ins, taps=True), _dw_wt),
    ("vpu_sram_dw_dst", ("DWCONV",), _is_dw, _pool_dst),
    ("vpu_sram_sm_src", ("SOFTMAX",), lambda ins: _is_ro(ins, ("SOFTMAX",)), _ro_past("src_addr")),
    ("vpu_sram_sm_dst", ("SOFTMAX",), lambda ins: _is_ro(ins, ("SOFTMAX",)), _ro_past("dst_addr")),
    ("vpu_sram_ln_src", ("LAYERNORM",), lambda ins: _is_ro(ins, ("LAYERNORM",)), _ro_past("src_addr")),
    ("vpu_sram_ln_dst", ("LAYERNORM",), lambda ins: _is_ro(ins, ("LAYERNORM",)), _ro_past("dst_addr")),
    ("vpu_sram_ln_param", ("LAYERNORM",), lambda ins: _is_ro(ins, ("LAYERNORM",)), _ro_past("param_addr")),
)


def _sram(prog, cfg, r, path):
    """One SRAM / accumulator range fault of the sub-kind ``path`` (an SRAM_SUBKINDS entry), on an
    instruction of the program that can express it or on a fresh one, at the edge with
    probability EDGE_P."""
    _, ops, want, mut = path
    cands = [i for i, ins in enumerate(prog.instrs) if getattr(ins, "op", None) and want(ins)]
    i = r.choice(cands) if cands else _fresh(prog, cfg, r, r.choice(ops))
    mut(prog, i, cfg, r)
    return True


def _deadlock(prog, cfg, r, path=None):
    engines = sorted({engine_of(ins) for ins in prog.instrs} - {None})
    pairs = []
    for e in engines:
        last = max(i for i, ins in enumerate(prog.instrs) if engine_of(ins) == e)
        pairs += [(last, x) for x in range(4) if x != e and not prog.instrs[last].wait >> x & 1]
    if not pairs:
        return False
    i, x = r.choice(pairs)
    _replace(prog, i, wait=prog.instrs[i].wait | 1 << x)
    return True


#: one range fault per instruction kind, for ``double_fault``
_FAULT_OF = {"DMA_LOAD": _sram_dma, "DMA_STORE": _sram_dma, "LOAD_WEIGHTS": _sram_lw, "MATMUL": _acc_mm,
             "REQUANT": _acc_rq, "REQUANT_ADD": _words_past("skip_addr", "count"), "ADD": _words_past("dst_addr", "count"), "POOL": _pool_dst,
             "LUT": _words_past("table_addr", table="lut_words"), "MUL": _words_past("dst_addr", "count"),
             "DWCONV": _pool_dst, "SOFTMAX": _ro_past("dst_addr"), "LAYERNORM": _ro_past("dst_addr")}


def _faultable(ins) -> bool:
    if ins.op == "MATMUL":
        return ins.args["count_x"] * ins.args["count_y"] > 0
    if ins.op == "POOL":
        return _is_pool(ins)
    if ins.op == "DWCONV":
        return _is_dw(ins)
    if ins.op in ROWOPS:
        return _is_ro(ins)
    return ins.op in _FAULT_OF and (ins.op not in ("ADD", "MUL") or ins.args["count"] > 0)


def _double_dma(prog, cfg, r) -> bool:
    """The program's first DMA_LOAD made zero-length, and right after it a new zero-length
    DMA_STORE (no wait, no signal): both DMA engines are idle then, so the two errors usually
    reach the decoder at the same edge, the store's engine index and pc both the higher."""
    i = next((k for k, ins in enumerate(prog.instrs) if getattr(ins, "op", None) == "DMA_LOAD"), None)
    if i is None:
        return False
    _replace(prog, i, count1=0)
    prog.instrs.insert(i + 1, instruction_from("DMA_STORE", dict(prog.instrs[i].args), 0, 0))
    return True


def _double(prog, cfg, r, path=None):
    """Two faults on two engines, so that the decoder's lowest-pc choice between engine errors
    (tpu_decoder) is exercised: half the time ``_double_dma``, else a random faultable
    instruction and the nearest one of another engine, both with a range fault."""
    if r.random() < 0.5 and _double_dma(prog, cfg, r):
        return True
    cands = [i for i, ins in enumerate(prog.instrs) if getattr(ins, "op", None) and _faultable(ins)]
    if not cands:
        return False
    i = r.choice(cands)
    others = [j for j in cands if engine_of(prog.instrs[j]) != engine_of(prog.instrs[i])]
    if not others:
        return False
    j = min(others, key=lambda k: (abs(k - i), k))
    for k in (i, j):
        _FAULT_OF[prog.instrs[k].op](prog, k, cfg, r)
    return True


MUTATORS = {"reserved_opcode": _reserved, "unused_bits": _unused, "dma_misaligned": _misaligned, "dma_zero_length": _zero,
            "ddr_out_of_range": _ddr, "qreg_unloaded": _qreg, "sram_out_of_range": _sram,
            "deadlock": _deadlock, "double_fault": _double}


_DMA_ZERO_FIELDS = ("inner_bytes", "count1", "count2")
#: The checker paths of each class, each drawn as often as any other (INVALID_PATHS): the
#: instruction kind and field, or the SRAM_SUBKINDS entry; the opcode for unused bits (each has
#: its own last used bit); one each for a reserved opcode and a deadlock, and two for
#: double_fault (its DMA pair and its range pairs).
CLASS_PATHS = {
    "reserved_opcode": (None,), "unused_bits": tuple(OPCODES),
    "dma_misaligned": tuple((op, f) for op in _DMA_OPS for f in DMA_SRAM_ALIGNED_FIELDS + DMA_DDR_ALIGNED_FIELDS),
    "dma_zero_length": tuple((op, f) for op in _DMA_OPS for f in _DMA_ZERO_FIELDS),
    "ddr_out_of_range": _DMA_OPS, "qreg_unloaded": QREG_PATHS, "sram_out_of_range": SRAM_SUBKINDS,
    "deadlock": (None,), "double_fault": (None, None),
}
#: every (class, path), in a fixed order
INVALID_PATHS = tuple((cls, path) for cls in INVALID_CLASSES for path in CLASS_PATHS[cls])
#: 2^64 / golden ratio (Fibonacci hashing): ``(seed * GOLDEN_64) mod 2^64 / 2^64`` for
#: consecutive seeds is a low-discrepancy sequence in [0, 1), exact for any seed size
GOLDEN_64 = 0x9E3779B97F4A7C15


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum over i < n of floor((a*i + b) / m), for integers n, m >= 1, a, b >= 0, in O(log m)
    steps (the Euclid-like reduction of floor sums)."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y = a * n + b
        if y < m:
            return total
        n, b = divmod(y, m)
        m, a = a, m


def _invalid_rank(seed: int, threshold: int) -> int:
    """How many seeds s < ``seed`` are invalid (``s * GOLDEN_64 mod 2^64 < threshold``): s minus
    the valid ones, sum over s of floor((s*G + 2^64 - threshold) / 2^64) - floor(s*G / 2^64)."""
    m = 1 << 64
    valid = _floor_sum(seed, m, GOLDEN_64, m - threshold) - _floor_sum(seed, m, GOLDEN_64, 0)
    return seed - valid


def invalid_path_of(seed: int, invalid_rate: float):
    """The (class, path) a program of ``seed`` is made invalid with, or None for a valid one:
    ``x = seed * GOLDEN_64 mod 2^64``; invalid if ``x < invalid_rate * 2^64`` (a low-discrepancy
    share of the seeds), the path ``INVALID_PATHS[k mod len]`` where ``k`` is the number of
    invalid seeds below ``seed`` (``_invalid_rank``, exact in O(log) steps). Consecutive seeds (a
    mutant hunt's 0, 1, 2, ...) thereby meet every path once per ``len`` invalid seeds, about
    ``len / invalid_rate`` seeds, however many paths there are (mapping x itself onto the paths
    missed 5 of 79 paths in 200 seeds at rate 0.5, and 0 of 72 only by luck); derived campaign seeds draw them evenly."""
    threshold = math.ceil(invalid_rate * (1 << 64))
    if invalid_rate <= 0 or seed * GOLDEN_64 % (1 << 64) >= threshold:
        return None
    return INVALID_PATHS[_invalid_rank(seed, threshold) % len(INVALID_PATHS)]


def fault_kind(prog: StressProgram, cfg) -> str | None:
    """The ``StressError.kind`` ``validate`` rejects ``prog`` with (reserved_opcode for a word
    that does not decode), None if it accepts it."""
    try:
        validate(prog, cfg)
    except IsaError as e:
        return getattr(e, "kind", "reserved_opcode")
    return None


def make_invalid(prog: StressProgram, cfg, r, cls: str | None = None, path=None) -> str:
    """Mutate ``prog`` in place into one invalid class along one of its checker paths
    (CLASS_PATHS; ``cls`` with a random path of it, or both given, or neither: a random entry of
    INVALID_PATHS); sets and returns prog.invalid. A class the program cannot express, or a
    mutation that does not give one of the class's device errors (CLASS_KINDS; e.g. a field out of
    its range), is undone and falls back to ``reserved_opcode``."""
    if cls is None:
        cls, path = r.choice(INVALID_PATHS)
    elif path is None:
        path = r.choice(CLASS_PATHS[cls])
    before = list(prog.instrs)
    if not MUTATORS[cls](prog, cfg, r, path) or fault_kind(prog, cfg) not in CLASS_KINDS[cls]:
        prog.instrs = before
        cls = "reserved_opcode"
        _reserved(prog, cfg, r)
    prog.invalid = cls
    return cls


def assembler_rejects(prog: StressProgram, cfg) -> str:
    """The message with which the tools reject ``prog``: tpusim.arch.isa.encode/decode for a word
    that does not encode or decode (reserved opcode, unused bits set), else ``validate``. "" if
    accepted."""
    for i, ins in enumerate(prog.instrs):
        try:
            raw = ins.word if isinstance(ins, RawWord) else encode(ins)
            decode(raw, i * INSTR_BYTES)
        except IsaError as e:
            return f"instruction #{i}: {e}"
    try:
        validate(prog, cfg)
    except IsaError as e:
        return str(e)
    return ""


__all__ = ["INVALID_CLASSES", "CLASS_KINDS", "CLASS_PATHS", "INVALID_PATHS", "invalid_path_of", "SRAM_SUBKINDS", "QREG_PATHS", "EDGE_P", "make_invalid",
           "assembler_rejects", "fault_kind"]
