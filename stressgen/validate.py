"""``validate(prog, cfg)``: reject an ill-formed stress program with a StressError (a
tpusim.arch.errors.IsaError) naming the instruction index, PC, field and value.

Checked, in program order (the first fault is reported): raw words with a reserved opcode; field
ranges (tpusim.arch.isa.check_ranges); DMA zero length / misalignment / SRAM range past the end / DDR
range past 2^40 / a store into the code; MXU and VPU SRAM words and accumulator rows past the end;
quant register index (every int8 LOAD_QREG shift is defined, tpusim.arch.arith); reading a quant
register no earlier LOAD_QREG wrote; HALT last. Then the tokens: a wait whose token no earlier
instruction sends (deadlock, see stressgen.analysis), more than 255 possibly unconsumed tokens on
one counter; and finally races (two engines touching the same bytes or accumulator rows, one
writing, with no token path between them). The same checks are the model's device errors
(docs/architecture.md, clarification 8) plus the stress-program rules (race freedom,
program-ordered tokens).
"""
from __future__ import annotations

from tpusim.arch.errors import IsaError
from tpusim.arch.isa import BY_CODE, HEADER_BITS, INSTR_BYTES, check_ranges, decode
from tpusim.arch.limits import DDR_ADDR_LIMIT, TOKEN_MAX

from stressgen.analysis import NAMES, engine_of, find_race, match_tokens, max_outstanding
from stressgen.program import CODE_ADDR, CODE_SPAN_BYTES, RawWord, StressError, stress_error



def hw_decode(raw: RawWord):
    """A raw word as the hardware decodes it: the Instruction (bits above the opcode's last
    field ignored), or None for a reserved opcode."""
    spec = BY_CODE.get(raw.word[0])
    if spec is None:
        return None
    top = HEADER_BITS + sum(f.bits for f in spec.fields)
    word = int.from_bytes(raw.word, "little") & ((1 << top) - 1)
    return decode(word.to_bytes(INSTR_BYTES, "little"))


def normalise(instrs) -> list:
    """Raw words that decode are replaced by their Instruction; reserved ones stay RawWord."""
    out = []
    for ins in instrs:
        if isinstance(ins, RawWord):
            d = hw_decode(ins)
            out.append(ins if d is None else d)
        else:
            out.append(ins)
    return out


def _dma(i, ins, cfg):
    a, op, w = ins.args, ins.op, cfg.word_bytes
    align = w if w >= 32 else 32
    for f in ("inner_bytes", "count1", "count2"):
        if a[f] == 0:
            raise stress_error(i, op, f, 0, "is zero: zero-length DMA", "dma_zero_length")
    for f in ("sram_addr", "inner_bytes", "sram_stride1", "sram_stride2"):
        if a[f] % w:
            raise stress_error(i, op, f, a[f], f"is not a multiple of the {w}-byte SRAM word",
                               "dma_misaligned")
    for f in ("ddr_addr", "ddr_stride1", "ddr_stride2"):
        if a[f] % align:
            raise stress_error(i, op, f, a[f], f"is not a multiple of {align} bytes", "dma_misaligned")
    c1, c2, inner = a["count1"], a["count2"], a["inner_bytes"]
    s_end = a["sram_addr"] + (c2 - 1) * a["sram_stride2"] + (c1 - 1) * a["sram_stride1"] + inner
    if s_end > cfg.sram_size_bytes:
        raise stress_error(i, op, "sram_addr", a["sram_addr"],
                           f"with these strides reaches SRAM byte {s_end - 1:#x}, past the end of "
                           f"the {cfg.sram_size_bytes}-byte SRAM", "sram_out_of_range")
    d_end = a["ddr_addr"] + (c2 - 1) * a["ddr_stride2"] + (c1 - 1) * a["ddr_stride1"] + inner
    if d_end > DDR_ADDR_LIMIT:
        raise stress_error(i, op, "ddr_addr", a["ddr_addr"],
                           f"with these strides reaches DDR byte {d_end - 1:#x} >= 2^40",
                           "ddr_out_of_range")
    if op == "DMA_STORE" and a["ddr_addr"] < CODE_ADDR + CODE_SPAN_BYTES and d_end > CODE_ADDR:
        raise stress_error(i, op, "ddr_addr", a["ddr_addr"],
                           f"writes DDR up to {d_end - 1:#x}, over the code at {CODE_ADDR:#x} "
                           "(races with instruction fetch)", "race")


def _words(i, op, field, value, last, cfg):
    if last >= cfg.sram_words:
        raise stress_error(i, op, field, value, f"reaches SRAM word {last:#x}, past the last word "
                           f"{cfg.sram_words - 1:#x}", "sram_out_of_range")


def _acc(i, op, a, n, cfg):
    if a["acc_addr"] + n > cfg.acc_depth_rows:
        raise stress_error(i, op, "acc_addr", a["acc_addr"], f"+ {n} rows runs past the end of the "
                           f"{cfg.acc_depth_rows}-row accumulator", "sram_out_of_range")


def _qreg(i, op, field, idx, loaded, cfg):
    if idx >= cfg.qreg_count:
        raise stress_error(i, op, field, idx, f"is outside the {cfg.qreg_count} quant registers")
    if idx not in loaded:
        raise stress_error(i, op, field, idx, f"(bank {idx // 16}, entry {idx % 16}) reads a quant "
                           "register that no earlier LOAD_QREG wrote", "qreg_unloaded")


def check_instruction(i: int, ins, cfg, loaded: set) -> None:
    """Static checks of instruction ``i``; ``loaded`` = quant registers written before it
    (updated for LOAD_QREG). StressError on the first fault."""
    if isinstance(ins, RawWord):
        raise stress_error(i, "RAW", "opcode", ins.opcode, "is a reserved opcode", "reserved_opcode")
    try:
        check_ranges(ins)
    except IsaError as e:
        raise StressError(f"instruction #{i} at pc {i * INSTR_BYTES:#x}: {e}", index=i,
                          pc=i * INSTR_BYTES, field=None, value=None) from None
    op, a = ins.op, ins.args
    if op in ("DMA_LOAD", "DMA_STORE"):
        _dma(i, ins, cfg)
    elif op == "LOAD_WEIGHTS":
        _words(i, op, "sram_addr", a["sram_addr"], a["sram_addr"] + cfg.array_cols - 1, cfg)
    elif op == "MATMUL":
        m = a["count_x"] * a["count_y"]
        if m:
            last = a["act_addr"] + (a["count_x"] - 1) * a["stride_x"] + (a["count_y"] - 1) * a["stride_y"]
            _words(i, op, "act_addr", a["act_addr"], last, cfg)
            _acc(i, op, a, m, cfg)
    elif op == "LOAD_QREG":
        if a["qreg"] >= cfg.qreg_count:
            raise stress_error(i, op, "qreg", a["qreg"], f"is outside the {cfg.qreg_count} quant registers")
        loaded.add(a["qreg"])
    elif op == "REQUANT":
        n = a["count"]
        _acc(i, op, a, n, cfg)
        _words(i, op, "param_addr", a["param_addr"], a["param_addr"] + cfg.param_words - 1, cfg)
        if n:
            _words(i, op, "dst_addr", a["dst_addr"], a["dst_addr"] + n - 1, cfg)
        _qreg(i, op, "qreg", a["qreg"], loaded, cfg)
    elif op == "POOL":
        outs = a["out_w"] * a["out_h"]
        if outs:
            if a["win_w"] * a["win_h"]:
                last = (a["src_addr"] + (a["out_h"] - 1) * a["out_stride_y"]
                        + (a["out_w"] - 1) * a["out_stride_x"] + (a["win_h"] - 1) * a["win_stride_y"]
                        + (a["win_w"] - 1) * a["win_stride_x"])
                _words(i, op, "src_addr", a["src_addr"], last, cfg)
            _words(i, op, "dst_addr", a["dst_addr"], a["dst_addr"] + outs - 1, cfg)
            if a["mode"]:
                _qreg(i, op, "qreg_in", a["qreg_in"], loaded, cfg)
                _qreg(i, op, "qreg_out", a["qreg_out"], loaded, cfg)
    elif op == "ADD":
        n = a["count"]
        if n:
            for f in ("src_a", "src_b", "dst_addr"):
                _words(i, op, f, a[f], a[f] + n - 1, cfg)
            for f in ("qreg_a", "qreg_b", "qreg_out"):
                _qreg(i, op, f, a[f], loaded, cfg)


def check_static(instrs, cfg) -> None:
    """Per-instruction checks and HALT placement (no token or race analysis)."""
    if not instrs:
        raise StressError("empty program: no HALT", kind="range")
    loaded: set = set()
    for i, ins in enumerate(instrs):
        check_instruction(i, ins, cfg, loaded)
        if ins.op == "HALT" and i != len(instrs) - 1:
            raise stress_error(i, "HALT", "index", i, f"is not last: {len(instrs) - 1 - i} "
                               "instruction(s) after it never execute")
    if instrs[-1].op != "HALT":
        raise stress_error(len(instrs) - 1, instrs[-1].op, "op", instrs[-1].op,
                           "is last but the program must end with HALT")


def check_tokens(instrs, cfg, senders, problems) -> None:
    if problems:
        i, x, _ = problems[0]
        ins = instrs[i]
        raise stress_error(i, ins.op, "wait", ins.wait, f"waits for a token from {NAMES[x]} that no "
                           f"earlier instruction sends to {NAMES[engine_of(ins)]}: deadlock", "deadlock")
    worst, pair, at = max_outstanding(instrs, cfg.queue_depth)
    if worst > TOKEN_MAX:
        ins = instrs[at]
        raise stress_error(at, ins.op, "signal", ins.signal, f"can leave {worst} unconsumed tokens on "
                           f"counter {NAMES[pair[0]]}->{NAMES[pair[1]]} (> {TOKEN_MAX})", "token_overflow")


def validate(prog, cfg) -> None:
    """Raise StressError (an IsaError) for an ill-formed program; see the module docstring."""
    instrs = normalise(prog.instrs)
    check_static(instrs, cfg)
    senders, problems = match_tokens(instrs)
    check_tokens(instrs, cfg, senders, problems)
    race = find_race(instrs, cfg, senders=senders)
    if race:
        j, i, (space, lo, hi) = race
        unit = "rows" if space == "acc" else "bytes"
        raise stress_error(i, instrs[i].op, "wait", instrs[i].wait,
                           f"races with instruction #{j} ({instrs[j].op} on {NAMES[engine_of(instrs[j])]}) "
                           f"on {space} {unit} [{lo:#x}, {hi:#x}): no token orders them", "race")


__all__ = ["validate", "check_instruction", "check_static", "normalise", "hw_decode"]
