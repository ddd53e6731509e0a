"""Shrink a failing stress program to a small reproducer of the SAME failure.

``minimize(prog, cfg, predicate)``: ``predicate(candidate) -> signature | None`` runs a
candidate and returns a hashable failure signature (for the campaign: ``(reason, signal)`` from
``stressgen.runner.Outcome``) or None when it passes. A candidate counts as failing only if
``stressgen.gen.validate`` accepts it and its signature equals the original program's.

Two passes, repeated until neither makes progress (or the budget runs out):

1. Instructions: Zeller's ddmin over the instructions before the final HALT. Removing an
   instruction also removes the other end of every token it exchanged: the k-th ``signal``
   from engine S to engine R pairs with the k-th ``wait`` of R on S (tokens are counted in
   order), so dropping one end clears the matching bit of the other (``drop_instructions``).
2. Operand sizes: for every instruction and every size field (``SIZE_FIELDS``), try 1, then
   halve repeatedly (byte sizes stay multiples of the SRAM word) while the failure stays.

Sizes are reported as ``ProgramSize`` (instructions, work units = sum over instructions of
DMA bytes, MATMUL vectors, VPU elements, pool taps).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

from stressgen.coverage import bins_of
from stressgen.validate import validate as default_validate
from tpusim.arch.errors import TpuError
from tpusim.arch.isa import Engine, Instruction

#: size fields the second pass shrinks, per opcode
SIZE_FIELDS: dict[str, tuple[str, ...]] = {
    "DMA_LOAD": ("count2", "count1", "inner_bytes"),
    "DMA_STORE": ("count2", "count1", "inner_bytes"),
    "MATMUL": ("count_y", "count_x"),
    "REQUANT": ("count",),
    "REQUANT_ADD": ("count",),
    "POOL": ("out_h", "out_w", "win_h", "win_w"),
    "DWCONV": ("out_h", "out_w", "win_h", "win_w"),
    "ADD": ("count",),
    "MUL": ("count",),
    "LUT": ("count",),
    "SOFTMAX": ("rows", "row_len"),
    "LAYERNORM": ("rows", "row_len"),
}


class MinimizeError(TpuError):
    """The program to minimise does not fail (its predicate returned None) or is not valid."""


@dataclass(frozen=True, order=True)
class ProgramSize:
    instrs: int          # instructions including the final HALT
    work_units: int      # DMA bytes + MATMUL vectors + VPU elements + pool taps

    def to_json(self) -> dict:
        return {"instrs": self.instrs, "work_units": self.work_units}


def _work(ins: Instruction) -> int:
    a = ins.args
    if ins.op in ("DMA_LOAD", "DMA_STORE"):
        return a["inner_bytes"] * a["count1"] * a["count2"]
    if ins.op == "MATMUL":
        return a["count_x"] * a["count_y"]
    if ins.op in ("REQUANT", "REQUANT_ADD", "ADD", "MUL", "LUT"):
        return a["count"]
    if ins.op in ("POOL", "DWCONV"):
        return a["out_w"] * a["out_h"] * a["win_w"] * a["win_h"]
    if ins.op in ("SOFTMAX", "LAYERNORM"):
        return a["rows"] * a["row_len"]
    return 1 if ins.op in ("LOAD_WEIGHTS", "LOAD_QREG") else 0


def program_size(instrs: list[Instruction]) -> ProgramSize:
    return ProgramSize(len(instrs), sum(_work(i) for i in instrs))


def _engine(ins: Instruction) -> int | None:
    e = ins.engine
    return None if e is None else int(e)


def token_pairs(instrs: list[Instruction]) -> list[tuple[int, int, int, int]]:
    """Matched token exchanges ``(signal_idx, wait_idx, sender, receiver)``: the k-th signal
    from sender to receiver (program order of the sender's instructions) with the k-th wait of
    the receiver on the sender. Unmatched signals or waits are not listed."""
    sig: dict[tuple[int, int], list[int]] = {}
    wait: dict[tuple[int, int], list[int]] = {}
    for i, ins in enumerate(instrs):
        e = _engine(ins)
        if e is None:
            continue
        for other in Engine:
            o = int(other)
            if ins.signal >> o & 1:
                sig.setdefault((e, o), []).append(i)
            if ins.wait >> o & 1:
                wait.setdefault((o, e), []).append(i)
    out = []
    for (s, r), sidx in sig.items():
        for a, b in zip(sidx, wait.get((s, r), [])):
            out.append((a, b, s, r))
    return out


def drop_instructions(instrs: list[Instruction], drop: set[int]) -> list[Instruction]:
    """``instrs`` without the indices in ``drop``, with the partner bit of every token the
    dropped instructions exchanged cleared (see the module docstring)."""
    clear_wait: dict[int, int] = {}
    clear_sig: dict[int, int] = {}
    for si, wi, s, r in token_pairs(instrs):
        if si in drop and wi not in drop:
            clear_wait[wi] = clear_wait.get(wi, 0) | 1 << s
        elif wi in drop and si not in drop:
            clear_sig[si] = clear_sig.get(si, 0) | 1 << r
    out = []
    for i, ins in enumerate(instrs):
        if i in drop:
            continue
        if i in clear_wait or i in clear_sig:
            ins = Instruction(ins.op, dict(ins.args), ins.wait & ~clear_wait.get(i, 0),
                              ins.signal & ~clear_sig.get(i, 0))
        out.append(ins)
    return out


def ddmin(items: list, fails: Callable[[list], bool], out_of_budget: Callable[[], bool] = lambda: False) -> list:
    """Zeller's ddmin: a 1-minimal sublist of ``items`` (order kept) for which ``fails`` holds
    (``fails(items)`` is assumed). Stops early, returning the best so far, when
    ``out_of_budget()`` becomes true."""
    n = 2
    while len(items) >= 2 and not out_of_budget():
        size = len(items)
        chunks = [items[size * k // n: size * (k + 1) // n] for k in range(n)]
        chunks = [c for c in chunks if c]
        for c in chunks:                         # reduce to a subset
            if out_of_budget():
                return items
            if len(c) < size and fails(c):
                items, n = c, 2
                break
        else:
            for k in range(len(chunks)):         # reduce to a complement
                if out_of_budget():
                    return items
                comp = [x for j, c in enumerate(chunks) if j != k for x in c]
                if len(comp) < size and fails(comp):
                    items, n = comp, max(n - 1, 2)
                    break
            else:
                if n >= size:
                    break
                n = min(size, 2 * n)
    if len(items) == 1 and not out_of_budget() and fails([]):
        return []                                # ddmin proper never tries the empty list
    return items


@dataclass
class MinResult:
    """``prog``: the minimised program; sizes before/after; predicate runs and wall seconds."""
    prog: object
    signature: Hashable
    before: ProgramSize
    after: ProgramSize
    tests: int = 0
    seconds: float = 0.0
    budget_exhausted: bool = False
    log: list = field(default_factory=list)

    def to_json(self) -> dict:
        return {"signature": list(self.signature) if isinstance(self.signature, tuple) else self.signature,
                "before": self.before.to_json(), "after": self.after.to_json(), "tests": self.tests,
                "seconds": round(self.seconds, 3), "budget_exhausted": self.budget_exhausted}


class _Search:
    def __init__(self, prog, cfg, predicate, validate, budget_s, max_tests):
        self.cfg, self.predicate, self.validate = cfg, predicate, validate
        self.deadline = None if budget_s is None else time.monotonic() + budget_s
        self.max_tests = max_tests
        self.tests = 0
        self.cache: dict = {}
        self.target = None
        self.best = prog

    def out_of_budget(self) -> bool:
        return ((self.deadline is not None and time.monotonic() > self.deadline)
                or (self.max_tests is not None and self.tests >= self.max_tests))

    def signature(self, prog):
        key = _key(prog.instrs)
        if key in self.cache:
            return self.cache[key]
        try:
            self.validate(prog, self.cfg)
        except TpuError:
            self.cache[key] = None
            return None
        self.tests += 1
        sig = self.predicate(prog)
        self.cache[key] = sig
        return sig

    def fails(self, prog) -> bool:
        ok = self.signature(prog) == self.target
        if ok and program_size(prog.instrs) < program_size(self.best.instrs):
            self.best = prog
        return ok


def _key(instrs) -> tuple:
    return tuple((i.op, tuple(sorted(getattr(i, "args", {}).items())), getattr(i, "word", b""),
                  i.wait, i.signal) for i in instrs)


def _with_instrs(prog, instrs):
    return dataclasses.replace(prog, instrs=list(instrs))


def _instruction_pass(s: _Search) -> bool:
    prog = s.best
    body = list(range(len(prog.instrs) - 1))          # never drop the final HALT
    n0 = len(prog.instrs)

    def candidate(keep):
        drop = set(body) - set(keep)
        return _with_instrs(prog, drop_instructions(prog.instrs, drop))

    keep = ddmin(body, lambda k: s.fails(candidate(k)), s.out_of_budget)
    if len(keep) < len(body):
        new = candidate(keep)
        if s.fails(new):
            s.best = new
    return len(s.best.instrs) < n0


def _size_candidates(op: str, name: str, v: int, word: int) -> list[int]:
    out = []
    if name.endswith("_bytes"):
        w = v // 2 - (v // 2) % word
        out = [word] if v > word else []
        while w >= word and w < v:
            out.append(w)
            w = w // 2 - (w // 2) % word
    else:
        out = [1] if v > 1 else []
        w = v // 2
        while 1 <= w < v:
            out.append(w)
            w //= 2
    return sorted(set(out))


def _size_pass(s: _Search, word: int) -> bool:
    changed = False
    i = 0
    while i < len(s.best.instrs) and not s.out_of_budget():
        ins = s.best.instrs[i]
        for name in SIZE_FIELDS.get(ins.op, ()):
            v = s.best.instrs[i].args[name]
            for cand in _size_candidates(ins.op, name, v, word):   # smallest first
                if s.out_of_budget():
                    return changed
                cur = s.best.instrs[i]
                args = dict(cur.args)
                args[name] = cand
                new = list(s.best.instrs)
                new[i] = Instruction(cur.op, args, cur.wait, cur.signal)
                p = _with_instrs(s.best, new)
                if s.fails(p):
                    s.best = p
                    changed = True
                    break
        i += 1
    return changed


def minimize(prog, cfg, predicate: Callable[[object], Hashable | None],
             validate: Callable | None = None, budget_s: float | None = None,
             max_tests: int | None = None, rounds: int = 4) -> MinResult:
    """Minimise ``prog`` (a StressProgram) keeping ``predicate``'s signature.

    ``validate(prog, cfg)`` (default ``stressgen.validate.validate``) rejects ill-formed candidates
    by raising a TpuError. ``budget_s`` / ``max_tests`` bound the search (wall seconds,
    predicate runs); the best reproducer found so far is returned when they run out.
    Raises MinimizeError if ``prog`` itself is invalid or does not fail.
    """
    if validate is None:
        validate = default_validate
    t0 = time.monotonic()
    s = _Search(prog, cfg, predicate, validate, budget_s, max_tests)
    try:
        validate(prog, cfg)
    except TpuError as e:
        raise MinimizeError(f"program seed {prog.seed} is not valid, cannot minimise it: {e}") from None
    s.target = predicate(prog)
    s.tests = 1
    if s.target is None:
        raise MinimizeError(f"program seed {prog.seed} passes: nothing to minimise")
    s.cache[_key(prog.instrs)] = s.target
    word = getattr(cfg, "array_rows", 1)
    log = []
    for r in range(rounds):
        a = _instruction_pass(s)
        b = _size_pass(s, word)
        log.append({"round": r, "size": program_size(s.best.instrs).to_json(), "tests": s.tests})
        if not (a or b) or s.out_of_budget():
            break
    if s.best is not prog:                      # the reproducer's own coverage, not the original's
        s.best = dataclasses.replace(s.best, bins=bins_of(s.best, cfg))
    return MinResult(s.best, s.target, program_size(prog.instrs), program_size(s.best.instrs),
                     s.tests, time.monotonic() - t0, s.out_of_budget(), log)


__all__ = ["minimize", "ddmin", "drop_instructions", "token_pairs", "program_size", "ProgramSize",
           "MinResult", "MinimizeError", "SIZE_FIELDS"]
