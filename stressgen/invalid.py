"""Deliberately invalid stress programs (``generate(..., invalid_rate > 0)``) and
``assembler_rejects``: the error message the tools give for one.

Classes (``prog.invalid``), each made from a valid program by one mutation that leaves the rest
race-free: ``reserved_opcode`` (a raw word with an unassigned opcode byte is inserted),
``unused_bits`` (an instruction's word gets bits set above its opcode's last field),
``dma_misaligned`` (a DMA address, stride or length off the word / 32-byte grid),
``dma_zero_length`` (inner_bytes, count1 or count2 = 0), ``ddr_out_of_range`` (a DMA whose last
byte is at or past 2^40), ``qreg_unloaded`` (a VPU read of a register no LOAD_QREG wrote),
``sram_out_of_range`` (an MXU/VPU/DMA SRAM access past the end), ``deadlock`` (a wait nobody
signals). ``to_binary`` still encodes them (raw words verbatim), so SimPy and the RTL can be
run on them and must both flag the fault.
"""
from __future__ import annotations

from stressgen.analysis import engine_of
from stressgen.program import RawWord, StressProgram, instruction_from
from stressgen.validate import validate
from tpusim.arch.device_checks import ddr_align_bytes
from tpusim.arch.errors import IsaError
from tpusim.arch.isa import BY_CODE, INSTR_BITS, INSTR_BYTES, decode, encode
from tpusim.arch.limits import DDR_ADDR_LIMIT

INVALID_CLASSES = ("reserved_opcode", "unused_bits", "dma_misaligned", "dma_zero_length", "ddr_out_of_range",
                   "qreg_unloaded", "sram_out_of_range", "deadlock")
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
    """Index of a random instruction with an opcode in ``ops``, or None if there is none."""
    cands = _of(prog, ops)
    return r.choice(cands) if cands else None


def _reserved(prog, cfg, r):
    code = r.choice([c for c in range(256) if c not in BY_CODE])
    word = bytes([code]) + bytes(r.getrandbits(8) for _ in range(INSTR_BYTES - 1))
    prog.instrs.insert(r.randrange(len(prog.instrs)), RawWord(word))
    return True


def _unused(prog, cfg, r):
    """One instruction (HALT included) as a raw word with 1 to 3 bits set above its fields."""
    i = r.randrange(len(prog.instrs))
    ins = prog.instrs[i]
    if isinstance(ins, RawWord):
        return False
    word = int.from_bytes(encode(ins), "little")
    for _ in range(r.randint(1, 3)):
        word |= 1 << r.randrange(ins.spec.used_bits, INSTR_BITS)
    prog.instrs[i] = RawWord(word.to_bytes(INSTR_BYTES, "little"))
    return True


def _misaligned(prog, cfg, r):
    i = _pick(prog, r)
    if i is None:
        return False
    a, w, al = prog.instrs[i].args, cfg.word_bytes, ddr_align_bytes(cfg)
    f = r.choice(["sram_addr", "inner_bytes", "ddr_addr"] + (["ddr_stride1"] if a["count1"] > 1 else []))
    off = r.randrange(1, w) if f in ("sram_addr", "inner_bytes") else r.randrange(1, al)
    val = a[f] + off if f != "ddr_addr" or a[f] + a["inner_bytes"] + off < DDR_ADDR_LIMIT else a[f] - off
    _replace(prog, i, **{f: val})
    return True


def _zero(prog, cfg, r):
    i = _pick(prog, r)
    if i is None:
        return False
    _replace(prog, i, **{r.choice(["inner_bytes", "count1", "count2"]): 0})
    return True


def _ddr(prog, cfg, r):
    i = _pick(prog, r)
    if i is None:
        return False
    a, al = prog.instrs[i].args, ddr_align_bytes(cfg)
    ext = (a["count2"] - 1) * a["ddr_stride2"] + (a["count1"] - 1) * a["ddr_stride1"] + a["inner_bytes"]
    if ext <= al:          # one short run: repeat it one 32-byte step further, same SRAM bytes
        _replace(prog, i, count1=2, count2=1, ddr_stride1=al, sram_stride1=0)
        ext += al
    start = max(0, DDR_ADDR_LIMIT - ext + al * r.randint(1, max(1, min(4, ext // al - 1))))
    _replace(prog, i, ddr_addr=min(start - start % al, DDR_ADDR_LIMIT - al))
    return True


def _qreg(prog, cfg, r):
    loaded = {ins.args["qreg"] for ins in prog.instrs if ins.op == "LOAD_QREG"}
    free = [q for q in range(cfg.qreg_count) if q not in loaded]
    cands = [(i, f) for i, ins in enumerate(prog.instrs) for f in ("qreg", "qreg_a", "qreg_b")
             if ins.op in ("REQUANT", "ADD") and f in ins.args and (ins.op != "ADD" or ins.args["count"])]
    if not free or not cands:
        return False
    i, f = r.choice(cands)
    _replace(prog, i, **{f: r.choice(free)})
    return True


def _sram(prog, cfg, r):
    nw = cfg.sram_words
    i = _pick(prog, r, _DMA_OPS + ("LOAD_WEIGHTS", "MATMUL", "REQUANT", "ADD"))
    if i is None:
        return False
    op = prog.instrs[i].op
    if op in ("DMA_LOAD", "DMA_STORE"):
        w = cfg.word_bytes
        _replace(prog, i, sram_addr=cfg.sram_size_bytes - w, inner_bytes=2 * w, count1=1, count2=1)
    elif op == "LOAD_WEIGHTS":
        _replace(prog, i, sram_addr=nw - r.randint(1, cfg.array_cols - 1))
    elif op == "MATMUL":
        _replace(prog, i, act_addr=nw - 1, count_x=2, stride_x=1, count_y=1)
    else:                              # REQUANT, ADD: the destination runs past the end
        _replace(prog, i, dst_addr=nw - 1, count=max(2, prog.instrs[i].args["count"]))
    return True


def _deadlock(prog, cfg, r):
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


MUTATORS = {"reserved_opcode": _reserved, "unused_bits": _unused, "dma_misaligned": _misaligned, "dma_zero_length": _zero,
            "ddr_out_of_range": _ddr, "qreg_unloaded": _qreg, "sram_out_of_range": _sram,
            "deadlock": _deadlock}


def make_invalid(prog: StressProgram, cfg, r, cls: str | None = None) -> str:
    """Mutate ``prog`` in place into one invalid class (random if ``cls`` is None; a class the
    program cannot express falls back to ``reserved_opcode``); sets and returns prog.invalid."""
    cls = cls or r.choice(INVALID_CLASSES)
    if not MUTATORS[cls](prog, cfg, r):
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


__all__ = ["INVALID_CLASSES", "CLASS_KINDS", "make_invalid", "assembler_rejects"]
