"""Random data, requant scales and DDR / SRAM / accumulator placement for the generator.

DDR placement classes (``DdrSpace.place``): ``low`` (below 2^32), ``cross4g`` (a region that
spans 2^32), ``high`` (at or above 2^36, so a 36-bit address path aliases it), ``top`` (ending
within the last 64 KiB below 2^40, possibly exactly at 2^40), each starting so that runs often
cross a 4 KiB page. Regions never overlap each other or the code.
"""
from __future__ import annotations

import random

import numpy as np

from stressgen.program import CODE_ADDR, CODE_SPAN_BYTES
from tpusim.arch.arith import quantize_multiplier
from tpusim.arch.device_checks import ddr_align_bytes
from tpusim.arch.limits import DDR_ADDR_LIMIT

PLACE_WEIGHTS = (("low", 3), ("cross4g", 2), ("high", 4), ("top", 2))


def round_up(n: int, a: int) -> int:
    return -(-n // a) * a


class DdrSpace:
    """Non-overlapping DDR regions (byte intervals), code excluded."""

    def __init__(self, cfg, rng):
        self.cfg, self.rng = cfg, rng
        self.used = [(CODE_ADDR, CODE_ADDR + CODE_SPAN_BYTES)]

    def _free(self, lo: int, hi: int) -> bool:
        return lo >= 0 and hi <= DDR_ADDR_LIMIT and all(hi <= a or lo >= b for a, b in self.used)

    def place(self, size: int, kind: str | None = None) -> int:
        """Start address (aligned) of a new region of ``size`` bytes."""
        r, al = self.rng, ddr_align_bytes(self.cfg)
        size = round_up(size, al)
        if kind is None:
            kind = r.choices([k for k, _ in PLACE_WEIGHTS], [w for _, w in PLACE_WEIGHTS])[0]
        for _ in range(200):
            if kind == "cross4g":
                lo = (1 << 32) - al * r.randint(1, max(1, size // al - 1))
            elif kind == "top":
                lo = DDR_ADDR_LIMIT - size - al * r.choice([0, 0, 1, r.randint(0, 2000)])
            else:
                base, span = ((1 << 20, (1 << 32) - (1 << 21)) if kind == "low"
                              else (1 << 36, DDR_ADDR_LIMIT - (1 << 36) - (1 << 21)))
                page = (base + r.randrange(span)) // 4096 * 4096
                off = r.choice([0, 4096 - al * r.randint(1, 8), al * r.randint(0, 127)])
                lo = page + off % 4096
            lo -= lo % al
            if self._free(lo, lo + size):
                self.used.append((lo, lo + size))
                return lo
            kind = "high"
        raise RuntimeError(f"stressgen: no free DDR room for {size} bytes")


class Ring:
    """Ring allocator of contiguous ranges in [0, total) (SRAM words or accumulator rows).
    Reuse after wrap-around is what makes double buffering: the Emitter orders the reuse."""

    def __init__(self, total: int, rng):
        self.total, self.rng, self.pos = total, rng, rng.randrange(total)

    def take(self, n: int, align: int = 1) -> int:
        if n > self.total:
            raise RuntimeError(f"stressgen: {n} units do not fit a ring of {self.total}")
        if self.rng.random() < 0.3:
            self.pos += self.rng.randint(0, 7)            # random gaps shift bank boundaries
        start = round_up(self.pos, align)
        if start + n > self.total:
            start = 0
        self.pos = start + n
        return start


def rand_i8(nrng, shape, mode: str = "any") -> np.ndarray:
    """int8 data: ``any`` mixes uniform, extremes and small values; ``small`` in [-3, 3]."""
    if mode == "small":
        return nrng.integers(-3, 4, shape).astype(np.int8)
    x = nrng.integers(-128, 128, shape)
    pick = nrng.random(shape)
    x = np.where(pick < 0.08, -128, np.where(pick < 0.16, 127, x))
    x = np.where((pick > 0.16) & (pick < 0.3), nrng.integers(-4, 5, shape), x)
    return x.astype(np.int8)


def rand_bias(nrng, n: int, mode: str) -> np.ndarray:
    if mode == "small":
        return nrng.integers(-40, 41, n).astype("<i4")
    v = nrng.integers(-(1 << 16), 1 << 16, n)
    pick = nrng.random(n)
    v = np.where(pick < 0.1, nrng.integers(-(1 << 31), 1 << 31, n), v)
    v = np.where((pick > 0.1) & (pick < 0.15), np.where(pick < 0.125, -(1 << 31), (1 << 31) - 1), v)
    return v.astype("<i4")


#: scale classes -> sampler; zero and denormal map to multiplier 0, shift 0 as in the compiler
SCALES = {
    "normal": lambda r: 10 ** r.uniform(-5, -0.5),
    "zero": lambda r: 0.0,
    "denormal": lambda r: r.choice([5e-324, 1e-310, 2.2e-308, 2.0 ** -40]),
    "pow2": lambda r: 2.0 ** r.randint(-4, 0),
    "ge1": lambda r: r.choice([1.0, 1.5, 2.0, 3.75, 100.0, 2.0 ** 12 + 1]),
    "extreme": lambda r: r.choice([2.0 ** -31, 1.5 * 2.0 ** -32, 1.999 * 2.0 ** -32, 2.0 ** 29.5]),
}


def scale_to_qm(scale: float) -> tuple[int, int]:
    """(multiplier, shift) exactly as the compiler does (tpusim.arch.arith.quantize_multiplier);
    scales >= 2^30 are refused there, so they are clamped just below."""
    return quantize_multiplier(min(scale, 2.0 ** 30 * (1 - 2 ** -40)))


def rand_scale_class(r, tie_bias: bool = False) -> str:
    w = {"normal": 4, "zero": 1, "denormal": 1, "pow2": 4 if tie_bias else 2, "ge1": 1.5, "extreme": 1}
    return r.choices(list(w), list(w.values()))[0]


#: shifts outside the compiler's [-31, 30]: defined arithmetic (docs/isa.md, "Requant
#: arithmetic"; left >= 31 saturates, right >= 32 gives 0), used in a few tables and registers
EXTREME_SHIFTS = (-128, -127, -100, -64, -33, -32, 31, 32, 33, 64, 100, 126, 127)
EXTREME_TABLE_P = 0.06          # per requant table: 1-3 channels get an extreme shift
EXTREME_QREG_P = 0.03           # per LOAD_QREG (stressgen.ctx.Ctx.load_qreg)


def extreme_shift(side: random.Random, shift: int, p: float) -> int:
    """``shift``, or with probability ``p`` one of EXTREME_SHIFTS. ``side`` is a random stream of
    its own, so the rest of the program is what it would be without extreme shifts."""
    return side.choice(EXTREME_SHIFTS) if side.random() < p else shift


def requant_table(cfg, r, nrng, mode: str, channels: int | None = None) -> tuple[bytes, str]:
    """(9C-byte per-channel table, scale class): bias int32[C], mult int32[C], shift int8[C];
    C = ``channels`` (default array_cols: REQUANT's; DWCONV's has word_bytes). A few tables
    (EXTREME_TABLE_P, decided by a stream seeded with the table itself) have 1-3 channels with a
    shift from EXTREME_SHIFTS."""
    c = cfg.array_cols if channels is None else channels
    cls = rand_scale_class(r, mode == "small")
    per = [cls if r.random() < 0.75 else rand_scale_class(r) for _ in range(c)]
    qm = [scale_to_qm(SCALES[k](r)) for k in per]
    mult = np.array([m for m, _ in qm], "<i4")
    shift = np.array([s for _, s in qm], np.int8)
    bias = rand_bias(nrng, c, mode).tobytes()
    side = random.Random(b"tpusim-stress-extreme-shift" + bias + mult.tobytes() + shift.tobytes())
    if side.random() < EXTREME_TABLE_P:
        for ch in side.sample(range(c), min(c, side.randint(1, 3))):
            shift[ch] = extreme_shift(side, 0, 1.0)
    return bias + mult.tobytes() + shift.tobytes(), cls


def rand_qreg(r, pow2_n: int | None = None) -> tuple[int, int, int]:
    """(multiplier, shift, zero_point) for LOAD_QREG; ``pow2_n``: scale 1/n (ties for avg pools)."""
    zp = r.choice([0, 0, -128, 127, r.randint(-128, 127), r.randint(-10, 10)])
    if pow2_n is not None:
        m, s = scale_to_qm(1.0 / pow2_n)
    else:
        m, s = scale_to_qm(SCALES[rand_scale_class(r)](r))
    return m, s, zp


__all__ = ["DdrSpace", "Ring", "rand_i8", "rand_bias", "requant_table", "rand_qreg", "scale_to_qm",
           "extreme_shift", "EXTREME_SHIFTS", "EXTREME_TABLE_P", "EXTREME_QREG_P",
           "round_up", "SCALES"]
