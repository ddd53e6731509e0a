"""Race-free instruction emission: the Emitter appends instructions and adds exactly the tokens
that order every pair of conflicting accesses (stressgen.analysis.footprint) in program order.

Token discipline (keeps programs deadlock-free and within the 8-bit counters): a token is only
created for the instruction being emitted, by setting a signal bit on the *latest* instruction
of the sender engine (or, if that bit is already used, on a NOP inserted on the sender engine);
the new instruction waits on it. Every token is therefore sent earlier in program order and
consumed by the next instruction of the receiver that waits on that sender, so at most one token
per counter is ever outstanding. The program's results equal sequential program-order execution.
"""
from __future__ import annotations

from stressgen.analysis import footprint, overlaps
from stressgen.program import instruction_from
from tpusim.arch.isa import make


class Emitter:
    """Builds ``instrs`` (mutable records until ``finish``). ``chain_p``: probability of an extra
    (unneeded) dependency per emitted instruction, for long dependency chains."""

    def __init__(self, cfg, rng, chain_p: float = 0.0):
        self.cfg, self.rng, self.chain_p = cfg, rng, chain_p
        self.recs: list[list] = []          # [op, args, wait, signal, engine]
        self.feet: list[list] = []
        self.seq: list[int] = []
        self.done: list[list[int]] = []     # vector clock at completion
        self.last: list[int | None] = [None] * 4   # index of the latest instruction per engine
        self.count = [0] * 4
        self.extra_tokens = 0

    def __len__(self) -> int:
        return len(self.recs)

    def _engine(self, op: str, args: dict) -> int:
        return {"DMA_LOAD": 0, "DMA_STORE": 1, "LOAD_WEIGHTS": 2, "MATMUL": 2}.get(
            op, args.get("engine", 3) if op == "NOP" else 3)

    def _append(self, op, args, e, wait, vc, feet) -> int:
        i = len(self.recs)
        self.recs.append([op, dict(args), wait, 0, e])
        self.feet.append(feet)
        self.seq.append(self.count[e])
        d = list(vc)
        d[e] = self.count[e] + 1
        self.done.append(d)
        self.last[e] = i
        self.count[e] += 1
        return i

    def _token_from(self, x: int, e: int) -> int:
        """Index of an instruction on engine x (the latest one, or a new NOP) that signals e."""
        j = self.last[x]
        if self.recs[j][3] >> e & 1:
            vc = self.done[j]
            j = self._append("NOP", {"engine": x}, x, 0, vc, [])
        self.recs[j][3] |= 1 << e
        return j

    def emit(self, op: str, wait_on: tuple = (), **args) -> int:
        """Append ``op`` with ``args``; tokens are added for every conflict with an earlier
        instruction of another engine (plus ``wait_on`` engines and random chain links).
        Returns the instruction's index."""
        e = self._engine(op, args)
        ins = instruction_from(op, args)
        feet = footprint(ins, self.cfg)
        vc = list(self.done[self.last[e]]) if self.last[e] is not None else [0] * 4
        wait = 0
        want = set(x for x in wait_on if x != e and self.last[x] is not None)
        if self.chain_p and self.rng.random() < self.chain_p:
            cands = [x for x in range(4) if x != e and self.last[x] is not None]
            if cands:
                want.add(self.rng.choice(cands))
                self.extra_tokens += 1
        while True:
            need = set(want)
            want = set()
            if feet:
                for j in range(len(self.recs)):
                    x = self.recs[j][4]
                    if x != e and vc[x] <= self.seq[j] and self.feet[j] and overlaps(self.feet[j], feet):
                        need.add(x)
            need = {x for x in need if not wait >> x & 1}
            if not need:
                break
            x = min(need)
            j = self._token_from(x, e)
            wait |= 1 << x
            vc = [max(p, q) for p, q in zip(vc, self.done[j])]
        return self._append(op, args, e, wait, vc, feet)

    def finish(self) -> list:
        """The Instructions (range-checked by tpusim.arch.isa.make) followed by HALT."""
        out = [make(op, wait, sig, **args) for op, args, wait, sig, _ in self.recs]
        out.append(make("HALT"))
        return out


__all__ = ["Emitter"]
