"""The accelerator's integer arithmetic, bit-exact, vectorised numpy (int64 internally).

The RTL, the SimPy model, the compiler and the golden model all use exactly these steps.
Source: gemmlowp ``fixedpoint/fixedpoint.h`` (SaturatingRoundingDoublingHighMul,
RoundingDivideByPOT) and TFLite ``kernels/internal/quantization_util.cc`` (QuantizeMultiplier),
``reference/add.h`` (quantized Add with ``left_shift = 20``).

Rounding used (documented because it matters for 1-LSB agreement): the multiplier is rounded
half away from zero to Q31; the product is rounded by SRDHM (half up, away from zero for
negatives) and then again by RoundingDivideByPOT (half away from zero) - gemmlowp's *double*
rounding. SRDHM rounds ties toward +infinity (0.5 -> 1, -0.5 -> 0). The double rounding
differs from exact rounding by at most 1 LSB, and NOT only on ties: even a power-of-two
multiplier 2**-k with k >= 2 is inexact (requant(1, 0.25) == 1, exact 0.25 -> 0), because SRDHM
by 2**30 first rounds x/2 up. Multipliers 2**j with j >= -1 are exact (ties toward +infinity).

Shifts (``shift``, the exponent of a requant step; an int8 in the ISA: LOAD_QREG and the
per-channel table) are defined for EVERY value, not only quantize_multiplier's [-31, 30]:
``shift > 0`` is a saturating left shift of the int32 input before SRDHM (gemmlowp
``SaturatingRoundingMultiplyByPOT``: ``sat32(x * 2**shift)``), ``shift < 0`` a rounding right shift
of the SRDHM result (gemmlowp ``RoundingDivideByPOT(v, -shift)``, which gemmlowp only defines for
exponents 0..31). Beyond 31 both keep their exact meaning, which hardware gets cheaply:
a left shift >= 31 saturates every non-zero input (to INT32_MAX if x > 0, INT32_MIN if x < 0),
so the shift amount may be capped at 31; a right shift >= 32 gives 0, because
|SRDHM result| <= 2**31 - 1 < 2**31 is less than half of 2**32. (Not the same as capping the
right shift at 31: ``x >> 31`` with rounding gives +-1 for |x| >= 2**30.)

All array arguments are integer numpy arrays (any int dtype); results are int64 unless stated.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["INT32_MIN", "INT32_MAX", "quantize_multiplier", "sat32", "wrap32", "srdhm", "rdbpot",
           "shift_amounts", "requant", "requant_conv", "pool_avg", "add_int8", "add_multipliers", "mul_int8", "lut_int8",
           "matmul_acc", "depthwise_acc"]

INT32_MIN = -(2 ** 31)
INT32_MAX = 2 ** 31 - 1
ADD_LEFT_SHIFT = 20


def quantize_multiplier(real: float) -> tuple[int, int]:
    """Real multiplier -> (mult, shift) with real ~= mult * 2**(shift - 31).

    mult is a Q31 int32 in [2**30, 2**31 - 1] (or 0); shift in [-31, 30], positive = left.
    real == 0 or real < 2**-32 (incl. denormals) -> (0, 0): the multiplier flushes to zero.
    Raises ValueError for NaN, infinity, negative values, and real >= 2**30 (unsupported).
    """
    real = float(real)
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"multiplier must be finite and >= 0, got {real!r}")
    if real == 0.0 or real < 2.0 ** -32:
        return 0, 0
    f, e = math.frexp(real)
    m = math.floor(f * 2.0 ** 31 + 0.5)     # f > 0: round half away from zero; exact in float64
    if m == 2 ** 31:
        m //= 2
        e += 1
    if e < -31:
        return 0, 0
    if e > 30:
        raise ValueError(f"multiplier {real!r} >= 2**30 is unsupported (shift {e} > 30)")
    return int(m), int(e)


def sat32(x) -> np.ndarray:
    """Saturate to the int32 range; returns int64."""
    return np.clip(np.asarray(x, dtype=np.int64), INT32_MIN, INT32_MAX)


def wrap32(x) -> np.ndarray:
    """Two's-complement wrap-around to int32 (what a 32-bit adder does); returns int64."""
    x = np.asarray(x, dtype=np.int64)
    return ((x - INT32_MIN) & 0xFFFFFFFF) + INT32_MIN


def _trunc_div_pow2(x: np.ndarray, n: int) -> np.ndarray:
    """x / 2**n truncated toward zero (C integer division)."""
    return np.where(x >= 0, x >> n, -((-x) >> n))


def srdhm(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values: a*b / 2**31, ties toward +inf.

    INT32_MAX if a == b == INT32_MIN; else ab = a*b (int64), nudge = 2**30 if ab >= 0 else
    1 - 2**30, result (ab + nudge) / 2**31 truncated toward zero.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    ab = a * b
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    res = _trunc_div_pow2(ab + nudge, 31)
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), res)


def rdbpot(x, e) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2**e rounded half away from zero, exact for any e >= 0.

    mask = 2**e - 1, rem = x & mask, thr = (mask >> 1) + (x < 0), result (x >> e) + (rem > thr).
    gemmlowp defines e in [0, 31]; here e is capped at 62 internally, which is exact for every
    |x| < 2**61 (every int32 x): for int32 x, e >= 33 gives 0 and e = 32 gives 0 except -1 for
    x = INT32_MIN. Raises ValueError if any e < 0.
    """
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    if e.size and e.min() < 0:
        raise ValueError(f"rdbpot exponent must be >= 0, got {e.min()}")
    e = np.minimum(e, 62)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)


def shift_amounts(shift) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) shift amounts (int64 arrays) of requant's exponent ``shift`` (any integer).

    left = clip(shift, 0, 31), right = clip(-shift, 0, 32). Capping is exact for int32 inputs
    (module docstring): a left shift by 31 already saturates every non-zero int32, and a right
    shift of an SRDHM result by 32 already gives 0. The RTL (rtl/tpu_vpu.sv ``requant``) does the
    same: left shift > 31 saturates, right shift > 31 returns 0.
    """
    shift = np.asarray(shift, dtype=np.int64)
    return np.clip(shift, 0, 31), np.clip(-shift, 0, 32)


def requant(x, mult, shift) -> np.ndarray:
    """gemmlowp MultiplyByQuantizedMultiplier: ~ x * mult * 2**(shift - 31), int64 result.

    x: int32 values; mult: int32 (Q31); shift: any integer (an int8 on the device), positive =
    left. (left, right) = shift_amounts(shift); t = sat32(x * 2**left) (gemmlowp's saturating
    multiply by 2**left, before SaturatingRoundingDoublingHighMul); result =
    rdbpot(srdhm(t, mult), right). Every shift is defined (module docstring): shift >= 31
    saturates any x != 0, shift <= -32 gives 0. mult/shift broadcast against x (per
    element/channel). Raises ValueError if x or mult is outside the int32 range.
    """
    x = _int32(x, "requant input x")
    mult = _int32(mult, "requant multiplier")
    left, right = shift_amounts(shift)
    t = sat32(x * (np.int64(1) << left))          # |x| <= 2**31, left <= 31: no int64 overflow
    return rdbpot(srdhm(t, mult), right)


def _int32(v, what: str) -> np.ndarray:
    v = np.asarray(v, dtype=np.int64)
    if v.size and (v.min() < INT32_MIN or v.max() > INT32_MAX):
        bad = int(v[(v < INT32_MIN) | (v > INT32_MAX)].flat[0])
        raise ValueError(f"{what} {bad} is outside the int32 range")
    return v


def requant_conv(acc, bias, mult, shift, zp: int, relu: bool) -> np.ndarray:
    """Conv/FC output stage. acc int32 [..., N]; bias, mult, shift int [N]; zp scalar.

    v = sat32(acc + bias); y = requant(v, mult, shift) + zp; clamp [zp if relu else -128, 127].
    Returns int8 [..., N].
    """
    v = sat32(np.asarray(acc, dtype=np.int64) + np.asarray(bias, dtype=np.int64))
    y = requant(v, mult, shift) + int(zp)
    lo = int(zp) if relu else -128
    return np.clip(y, lo, 127).astype(np.int8)


def depthwise_acc(taps, weights, zp_in: int) -> np.ndarray:
    """Depthwise-convolution accumulator, lane-wise (TFLite ``reference_integer_ops::
    DepthwiseConvPerChannel`` with depth multiplier 1 and weight zero point 0).

    taps: int8 [..., T, L] (the T window taps of each output, L lanes = channels); weights: int8
    [T, L]; returns int32 [..., L] = sum over t of (taps[t] - zp_in) * weights[t]. Exact in int32
    for T <= 255 * 255 (the largest window): |sum| <= 65025 * 255 * 128 < 2^31. The output stage
    is ``requant_conv`` (bias, per-channel mult and shift, zero point, relu)."""
    x = np.asarray(taps, dtype=np.int64) - int(zp_in)
    return (x * np.asarray(weights, dtype=np.int64)).sum(axis=-2)


def pool_avg(sum_, n: int, zp_in: int, mult, shift, zp_out: int) -> np.ndarray:
    """Average-pool output stage. sum_: int32 window sums of the raw int8 inputs; n taps.

    v = sat32(sum - n*zp_in); y = requant(v, mult, shift) + zp_out; clamp [-128, 127] -> int8.
    mult/shift come from quantize_multiplier(s_in / (n * s_out)).
    """
    v = sat32(np.asarray(sum_, dtype=np.int64) - int(n) * int(zp_in))
    y = requant(v, mult, shift) + int(zp_out)
    return np.clip(y, -128, 127).astype(np.int8)


def add_multipliers(s_a: float, s_b: float, s_out: float) -> tuple:
    """TFLite Add multipliers: ((ma, sa), (mb, sb), (mo, so)) for scales s_a, s_b, s_out.

    real_a = s_a / (2 max), real_b = s_b / (2 max), real_o = 2 max / (2**20 s_out).
    """
    twice_max = 2.0 * max(s_a, s_b)
    return (quantize_multiplier(s_a / twice_max), quantize_multiplier(s_b / twice_max),
            quantize_multiplier(twice_max / (2.0 ** ADD_LEFT_SHIFT * s_out)))


def add_int8(a, b, zp_a, ma, sa, zp_b, mb, sb, zp_o, mo, so, relu: bool) -> np.ndarray:
    """TFLite-style int8 residual add (int8 a, b of equal shape -> int8).

    a2 = (a - zp_a) << 20, b2 = (b - zp_b) << 20, s = sat32(requant(a2, ma, sa) + requant(b2, mb, sb)),
    y = requant(s, mo, so) + zp_o, clamp [zp_o if relu else -128, 127].
    """
    a2 = (np.asarray(a, dtype=np.int64) - int(zp_a)) << ADD_LEFT_SHIFT
    b2 = (np.asarray(b, dtype=np.int64) - int(zp_b)) << ADD_LEFT_SHIFT
    s = sat32(requant(a2, ma, sa) + requant(b2, mb, sb))
    y = requant(s, mo, so) + int(zp_o)
    lo = int(zp_o) if relu else -128
    return np.clip(y, lo, 127).astype(np.int8)


def mul_int8(a, b, zp_a, zp_b, zp_o, mo, so, relu: bool) -> np.ndarray:
    """TFLite-style int8 element-wise multiply (``reference_ops::Mul`` / ``MulElementwise`` for
    int8): p = (a - zp_a) * (b - zp_b) (|p| <= 255 * 255, exact in int32),
    y = requant(p, mo, so) + zp_o, clamp [zp_o if relu else -128, 127]. mo/so =
    quantize_multiplier(s_a * s_b / s_out). a and b broadcast (numpy rules)."""
    p = (np.asarray(a, dtype=np.int64) - int(zp_a)) * (np.asarray(b, dtype=np.int64) - int(zp_b))
    y = requant(p, mo, so) + int(zp_o)
    lo = int(zp_o) if relu else -128
    return np.clip(y, lo, 127).astype(np.int8)


def matmul_acc(x, w) -> np.ndarray:
    """int8 x [M, K] @ int8 w [K, N] -> int32 [M, N] with 32-bit wrap-around accumulation.

    Computed in float64 BLAS: every partial sum is an integer of magnitude <= K * 2**14 < 2**53
    (for K < 2**39), so it is exact in any summation order; then wrapped to int32. Falls back to
    an int64 matmul beyond that bound.
    """
    x = np.asarray(x)
    w = np.asarray(w)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[0]:
        raise ValueError(f"matmul_acc shapes {x.shape} @ {w.shape} do not match")
    k = x.shape[1]
    if k * (1 << 14) < (1 << 53):
        acc = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
    else:
        acc = x.astype(np.int64) @ w.astype(np.int64)
    return wrap32(acc).astype(np.int32)


def lut_int8(x, table) -> np.ndarray:
    """The LUT instruction, lane-wise: ``table[x & 0xFF]``, i.e. the input int8 byte read as an
    unsigned index into a 256-entry int8 table (entry k is the output for input value k for
    k < 128, k - 256 for k >= 128). x: any int array of int8 values; table: int8[256]. Returns
    int8 of x's shape. Any unary function of an int8 value is exact this way: the compiler
    tabulates f over the 256 inputs with the input and output quantization (TFLite's LUT
    kernels for Logistic/Tanh/HardSwish on int8 do the same). ValueError if the table does not
    have 256 entries or x holds a value outside int8."""
    table = np.asarray(table)
    if table.shape != (256,):
        raise ValueError(f"LUT table has shape {table.shape}, need (256,)")
    x = np.asarray(x, dtype=np.int64)
    if x.size and (x.min() < -128 or x.max() > 127):
        raise ValueError(f"LUT input {int(x[(x < -128) | (x > 127)].flat[0])} is outside int8")
    return table.astype(np.int8)[x & 0xFF]
