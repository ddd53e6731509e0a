"""A stress program: instructions + initial DDR contents + the DDR regions compared after HALT.

Text form (``StressProgram.asm()`` / ``parse_asm()``), self-contained, one file:

    # stressgen seed=12 hw=small invalid=none
    # output out0 0x10000a000 64          (name, DDR byte address, size in bytes)
    # data 0xfffff000 <base64 bytes>       (one line per ddr_init segment)
    # bins {"k_prime_large": 1, ...}       (JSON)
    DMA_LOAD ddr_addr=0xfffff000 ... signal=MXU
    .word 0x00...ff                        (a raw 256-bit word: forced invalid encodings)
    HALT

Instruction lines are ``tpusim.arch.isa.Instruction.text()``; ``.word`` lines are ``RawWord``s, encoded
verbatim by ``to_binary`` (so an invalid program can still be run on SimPy and the RTL).
"""
from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass, field

import numpy as np

from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.device_checks import where
from tpusim.arch.errors import IsaError
from tpusim.arch.isa import INSTR_BYTES, OPCODES, Instruction, assemble, encode

#: DDR byte address of the code (BB-aligned for every config; data never overlaps it).
CODE_ADDR = 0x1000
#: Bytes reserved for code at CODE_ADDR (room for 2048 instructions).
CODE_SPAN_BYTES = 0x10000


class StressError(IsaError):
    """An ill-formed stress program. ``index``/``pc``/``field``/``value`` locate the fault
    (None when not tied to one instruction); ``kind`` is the invalid class it belongs to
    (see stressgen.invalid.INVALID_CLASSES) or another short tag ("race", "range", ...)."""

    def __init__(self, msg: str, *, index=None, pc=None, field=None, value=None, kind="range"):
        super().__init__(msg)
        self.index, self.pc, self.field, self.value, self.kind = index, pc, field, value, kind


def stress_error(index: int, op: str, field: str, value, why: str, kind: str = "range") -> StressError:
    """A StressError whose message names the instruction, its PC, the field and the value."""
    v = f"{value:#x} ({value})" if isinstance(value, int) else repr(value)
    return StressError(f"{where(index, op)}: {field}={v} {why}", index=index,
                       pc=index * INSTR_BYTES, field=field, value=value, kind=kind)


@dataclass(frozen=True)
class RawWord:
    """A raw 32-byte instruction word placed verbatim in the code (e.g. a reserved opcode)."""
    word: bytes
    op: str = "RAW"
    wait: int = 0
    signal: int = 0

    def __post_init__(self):
        if len(self.word) != INSTR_BYTES:
            raise IsaError(f".word must be {INSTR_BYTES} bytes, got {len(self.word)}")

    @property
    def opcode(self) -> int:
        return self.word[0]

    @property
    def engine(self):
        return None

    def text(self) -> str:
        return f".word {int.from_bytes(self.word, 'little'):#066x}"


@dataclass
class OutputRegion:
    """A DDR region compared after HALT; ``size_bytes`` is a multiple of cfg.array_rows."""
    name: str
    ddr_addr: int
    size_bytes: int


@dataclass
class StressProgram:
    """One generated program (see the module docstring for its text form)."""
    seed: int
    hw: str
    instrs: list
    ddr_init: list
    outputs: list
    bins: dict = field(default_factory=dict)
    invalid: str | None = None

    def encode_code(self) -> bytes:
        """The code section: Instruction -> tpusim.arch.isa.encode (range-checked), RawWord verbatim."""
        return b"".join(i.word if isinstance(i, RawWord) else encode(i) for i in self.instrs)

    def to_binary(self, cfg) -> TpuBinary:
        """TpuBinary for ``cfg``: code at CODE_ADDR, consts = ddr_init, each output a flat
        TensorDesc ``(1, blk, 1, n // blk)`` with blk = cfg.array_rows (read back with
        ``region_bytes``)."""
        blk = cfg.array_rows
        outs = []
        for r in self.outputs:
            if r.size_bytes % blk or r.size_bytes <= 0:
                raise IsaError(f"output {r.name!r}: size {r.size_bytes} bytes is not a positive "
                               f"multiple of {blk}")
            outs.append(TensorDesc(r.name, (1, blk, 1, r.size_bytes // blk), 1.0, 0, r.ddr_addr, blk))
        return TpuBinary(cfg.hash_bytes(), CODE_ADDR, self.encode_code(),
                         consts=[(a, bytes(d)) for a, d in self.ddr_init], outputs=outs,
                         meta={"stressgen": {"seed": self.seed, "hw": self.hw,
                                             "invalid": self.invalid}})

    def asm(self) -> str:
        """Self-contained text: header comments (seed, hw, invalid, outputs, data, bins), then one
        instruction per line."""
        lines = [f"# stressgen seed={self.seed} hw={self.hw} invalid={self.invalid or 'none'}"]
        for r in self.outputs:
            lines.append(f"# output {r.name} {r.ddr_addr:#x} {r.size_bytes}")
        for a, d in self.ddr_init:
            lines.append(f"# data {a:#x} {base64.b64encode(bytes(d)).decode()}")
        lines.append(f"# bins {json.dumps(self.bins, sort_keys=True)}")
        lines += [i.text() for i in self.instrs]
        return "\n".join(lines) + "\n"


def parse_asm(text: str) -> StressProgram:
    """Inverse of ``StressProgram.asm()``. IsaError naming the line for malformed input."""
    seed, hw, invalid = 0, "small", None
    outputs, data, bins, instrs = [], [], {}, []
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        try:
            if s.startswith("# stressgen"):
                kv = dict(p.split("=", 1) for p in s.split()[2:])
                seed, hw = int(kv["seed"]), kv["hw"]
                invalid = None if kv.get("invalid", "none") == "none" else kv["invalid"]
            elif s.startswith("# output "):
                _, _, name, addr, size = s.split()
                outputs.append(OutputRegion(name, int(addr, 0), int(size, 0)))
            elif s.startswith("# data "):
                _, _, addr, b64 = s.split()
                data.append((int(addr, 0), base64.b64decode(b64, validate=True)))
            elif s.startswith("# bins "):
                bins = json.loads(s[len("# bins "):])
            elif s.startswith(".word"):
                v = int(s.split()[1], 0)
                instrs.append(RawWord(v.to_bytes(INSTR_BYTES, "little")))
            elif s and not s.startswith("#"):
                instrs += assemble(s)
        except IsaError as e:      # assemble() numbers its one-line text "line 1": drop that
            msg = str(e).removeprefix("line 1: ")
            raise IsaError(f"line {lineno}: {msg}") from None
        except (ValueError, KeyError, IndexError, OverflowError) as e:
            raise IsaError(f"line {lineno}: malformed stress program line {s[:60]!r}: {e}") from None
    return StressProgram(seed, hw, instrs, data, outputs, bins, invalid)


@functools.lru_cache(maxsize=16)
def config(name: str):
    """Cached tpusim.arch.config.load_config(name)."""
    return load_config(name)


def region_bytes(prog: StressProgram, cfg, outputs: dict) -> dict[str, bytes]:
    """SimPy ``SimResult.outputs`` (name -> int8 array from the flat TensorDescs of
    ``to_binary``) -> name -> raw DDR bytes of the region."""
    blk = cfg.array_rows
    out = {}
    for r in prog.outputs:
        desc = TensorDesc(r.name, (1, blk, 1, r.size_bytes // blk), 1.0, 0, r.ddr_addr, blk)
        out[r.name] = desc.to_blocked(np.asarray(outputs[r.name], dtype=np.int8), 0)
    return out


def instruction_from(op: str, args: dict, wait: int = 0, signal: int = 0) -> Instruction:
    """An Instruction without range checks (for deliberately invalid programs); missing fields 0."""
    full = {f.name: int(args.get(f.name, 0)) for f in OPCODES[op].fields}
    return Instruction(op, full, wait, signal)


__all__ = ["CODE_ADDR", "StressError", "RawWord", "OutputRegion", "StressProgram", "parse_asm",
           "region_bytes", "config", "stress_error", "instruction_from"]
