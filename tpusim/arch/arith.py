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
           "shift_amounts", "requant", "requant_conv", "pool_avg", "add_int8", "add_sum_int32", "add_output_int8", "add_multipliers", "mul_int8", "lut_int8",
           "matmul_acc", "depthwise_acc", "exp2_neg", "softmax_valid", "softmax_exp", "softmax_stats",
           "softmax_out", "isqrt_floor", "layernorm_stats", "layernorm_acc", "layernorm_out"]

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


def _clamp(x, lo: int, hi: int) -> np.ndarray:
    """``np.clip(x, lo, hi)`` for integer arrays, as two ufuncs (np.clip's Python wrapper cost
    more than the clipping on the simulator's small arrays)."""
    return np.minimum(np.maximum(x, lo), hi)


def sat32(x) -> np.ndarray:
    """Saturate to the int32 range; returns int64."""
    return _clamp(np.asarray(x, dtype=np.int64), INT32_MIN, INT32_MAX)


def wrap32(x) -> np.ndarray:
    """Two's-complement wrap-around to int32 (what a 32-bit adder does); returns int64."""
    x = np.asarray(x, dtype=np.int64)
    return ((x - INT32_MIN) & 0xFFFFFFFF) + INT32_MIN


def srdhm(a, b) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int32 values: a*b / 2**31, ties toward +inf.

    INT32_MAX if a == b == INT32_MIN; else ab = a*b (int64), nudge = 2**30 if ab >= 0 else
    1 - 2**30, result (ab + nudge) / 2**31 truncated toward zero.

    Computed as ``min((ab + 2**30) >> 31, INT32_MAX)`` (floor shift), the same for every int32
    a, b: for ab >= 0 both are floor((ab + 2**30) / 2**31); for ab < 0, ab + nudge < 0 and its
    truncation toward zero is floor((ab + nudge + 2**31 - 1) / 2**31) = floor((ab + 2**30) / 2**31);
    only a = b = INT32_MIN reaches 2**31 (ab = 2**62; int64 holds ab + 2**30), so the cap is
    applied only when both operands hold an INT32_MIN.
    """
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    ab = a * b
    ab += 1 << 30
    ab >>= 31
    if (b == INT32_MIN).any() and (a == INT32_MIN).any():
        ab = np.minimum(ab, INT32_MAX)
    return ab


def rdbpot(x, e) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT: x / 2**e rounded half away from zero, exact for any e >= 0.

    gemmlowp's steps: mask = 2**e - 1, rem = x & mask, thr = (mask >> 1) + (x < 0), result
    (x >> e) + (rem > thr); computed as the one floor shift (x + (mask >> 1) + (x >= 0 and
    e > 0)) >> e, equal for every x and e (x >= 0: +1 iff rem >= 2**(e-1); x < 0: iff rem >
    2**(e-1); e = 0: x), tested against the steps.
    gemmlowp defines e in [0, 31]; here e is capped at 62 internally, which is exact for every
    |x| < 2**61 (every int32 x): for int32 x, e >= 33 gives 0 and e = 32 gives 0 except -1 for
    x = INT32_MIN. Raises ValueError if any e < 0.
    """
    x = np.asarray(x, dtype=np.int64)
    e = np.asarray(e, dtype=np.int64)
    if e.size and e.min() < 0:
        raise ValueError(f"rdbpot exponent must be >= 0, got {e.min()}")
    e = np.minimum(e, 62)
    y = x + (((np.int64(1) << e) - 1) >> 1)           # + mask >> 1 (2**(e-1) - 1, 0 for e = 0)
    if e.size and e.min() > 0:
        y += x >= 0
    else:
        y += (x >= 0) & (e > 0)
    y >>= e
    return y


def shift_amounts(shift) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) shift amounts (int64 arrays) of requant's exponent ``shift`` (any integer).

    left = clip(shift, 0, 31), right = clip(-shift, 0, 32). Capping is exact for int32 inputs
    (module docstring): a left shift by 31 already saturates every non-zero int32, and a right
    shift of an SRDHM result by 32 already gives 0. The RTL (rtl/tpu_vpu.sv ``requant``) does the
    same: left shift > 31 saturates, right shift > 31 returns 0.
    """
    shift = np.asarray(shift, dtype=np.int64)
    return _clamp(shift, 0, 31), _clamp(-shift, 0, 32)


def requant(x, mult, shift) -> np.ndarray:
    """gemmlowp MultiplyByQuantizedMultiplier: ~ x * mult * 2**(shift - 31), int64 result.

    x: int32 values; mult: int32 (Q31); shift: any integer (an int8 on the device), positive =
    left. (left, right) = shift_amounts(shift); t = sat32(x * 2**left) (gemmlowp's saturating
    multiply by 2**left, before SaturatingRoundingDoublingHighMul); result =
    rdbpot(srdhm(t, mult), right). Every shift is defined (module docstring): shift >= 31
    saturates any x != 0, shift <= -32 gives 0. mult/shift broadcast against x (per
    element/channel). Raises ValueError if x or mult is outside the int32 range.
    """
    return _requant_int32(_int32(x, "requant input x"), mult, shift)


def _requant_int32(x: np.ndarray, mult, shift) -> np.ndarray:
    """``requant`` of an int64 array ``x`` already known to hold int32 values (saturated by the
    caller, or checked by ``requant``)."""
    mult = _int32(mult, "requant multiplier")
    left, right = shift_amounts(shift)
    if left.any():
        t = sat32(x * (np.int64(1) << left))      # |x| <= 2**31, left <= 31: no int64 overflow
    else:
        t = x                                     # sat32(x * 1) is x
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
    y = _requant_int32(v, mult, shift)
    y += int(zp)
    lo = int(zp) if relu else -128
    return _clamp(y, lo, 127).astype(np.int8)


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
    y = _requant_int32(v, mult, shift) + int(zp_out)
    return _clamp(y, -128, 127).astype(np.int8)


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
    y = requant(s, mo, so) + zp_o, clamp [zp_o if relu else -128, 127]: ``add_output_int8`` of
    ``add_sum_int32``.
    """
    return add_output_int8(add_sum_int32(a, b, zp_a, ma, sa, zp_b, mb, sb), zp_o, mo, so, relu)


def add_sum_int32(a, b, zp_a, ma, sa, zp_b, mb, sb) -> np.ndarray:
    """``add_int8``'s int32 sum s = sat32(requant((a - zp_a) << 20, ma, sa) + requant((b - zp_b)
    << 20, mb, sb)) (int64 array holding int32 values)."""
    a2 = (np.asarray(a, dtype=np.int64) - int(zp_a)) << ADD_LEFT_SHIFT
    b2 = (np.asarray(b, dtype=np.int64) - int(zp_b)) << ADD_LEFT_SHIFT
    return sat32(requant(a2, ma, sa) + requant(b2, mb, sb))


def add_output_int8(s, zp_o, mo, so, relu: bool) -> np.ndarray:
    """``add_int8``'s output from its sum ``s`` (``add_sum_int32``): requant(s, mo, so) + zp_o,
    clamped to [zp_o if relu else -128, 127], int8."""
    y = _requant_int32(s, mo, so) + int(zp_o)
    lo = int(zp_o) if relu else -128
    return _clamp(y, lo, 127).astype(np.int8)


def mul_int8(a, b, zp_a, zp_b, zp_o, mo, so, relu: bool) -> np.ndarray:
    """TFLite-style int8 element-wise multiply (``reference_ops::Mul`` / ``MulElementwise`` for
    int8): p = (a - zp_a) * (b - zp_b) (|p| <= 255 * 255, exact in int32),
    y = requant(p, mo, so) + zp_o, clamp [zp_o if relu else -128, 127]. mo/so =
    quantize_multiplier(s_a * s_b / s_out). a and b broadcast (numpy rules)."""
    p = (np.asarray(a, dtype=np.int64) - int(zp_a)) * (np.asarray(b, dtype=np.int64) - int(zp_b))
    y = requant(p, mo, so) + int(zp_o)
    lo = int(zp_o) if relu else -128
    return _clamp(y, lo, 127).astype(np.int8)


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


# ------------------------------------------------------------------ row operations (SOFTMAX, LAYERNORM)
# Integer-only Softmax and LayerNorm over a row of int8 values (docs/integer_nonlinear.md: the
# derivation, the alternatives considered and the measured error bounds). Sources: I-BERT (Kim,
# Gholami, Yao, Mahoney, Keutzer, ICML 2021: i-exp by range reduction + polynomial, integer
# Newton square root, Algorithm 4) and Softermax (Stevens et al., DAC 2021: base-2 exponent, the
# log2(e) folded into the input scale). Every step is an integer operation with the rounding
# stated; the RTL (rtl/tpu_vpu.sv) does exactly these steps.

#: SOFTMAX: z = d * exp_mult is Q20 (d = max - x, exp_mult = round(S_in * log2(e) * 2**20))
SOFTMAX_EXP_FRAC_BITS = 20
#: 2**-r for r in [0, 1) (Q15 in, Q15 out): 32768 + r*(C1 + r*(C2 + r*C3)) in Horner form with
#: floor shifts by 15; a minimax-fitted cubic, max error 3.3 Q15 units (1.0e-4) over all 32768 r
EXP2_POLY_Q15 = (-22667, 7597, -1315)
#: SOFTMAX: the exponentials are Q22 (e(0) = 2**22): 2**-r from the Q15 polynomial, shifted left
#: by 7 and rounded right by the integer part q (0 for q >= 23)
SOFTMAX_E_BITS = 22
#: SOFTMAX: reciprocal 2**53 // sum (sum of Q22 exponentials in [2**22, 2**38) when a lane is
#: unmasked, so the reciprocal is in (2**15, 2**31])
SOFTMAX_RECIP_BITS = 53
#: SOFTMAX: p = round(e * recip / 2**23), the probability in Q30 (<= 2**30)
SOFTMAX_P_SHIFT = 23
#: LAYERNORM: den = max(isqrt(((N*sumsq - sum**2) << 16) + eps), 256) (sqrt with 8 fraction bits)
LAYERNORM_VAR_SHIFT = 16
LAYERNORM_DEN_MIN = 256
#: LAYERNORM: reciprocal 2**47 // den (<= 2**39, >= 2**15.5)
LAYERNORM_RECIP_BITS = 47
#: LAYERNORM: normalised value xn = round((N*x - sum) * recip / 2**27), Q12 ((x - mean) / std * 2**12)
LAYERNORM_N_SHIFT = 27
LAYERNORM_N_FRAC_BITS = 12
#: LAYERNORM per-channel table: words per row word (gamma int16: 2 byte planes, beta int32: 4)
LAYERNORM_PARAM_PLANES = 6


def _rnd_shift(p: np.ndarray, s: int) -> np.ndarray:
    """floor((p + 2**(s-1)) / 2**s): round half up (toward +inf), an add and an arithmetic shift."""
    return (p + (np.int64(1) << (s - 1))) >> s


def exp2_neg(z) -> np.ndarray:
    """2**(-z / 2**20) in Q22 (int64 in [0, 2**22]) for unsigned Q20 z < 2**32 (Softermax's
    base-2 exponential; I-BERT's i-exp range reduction with ln 2 replaced by 1).

    q = z >> 20 (integer part), r = (z >> 5) & 0x7FFF (fraction, Q15); Horner with floor shifts:
    t = C3; t = C2 + (t*r >> 15); t = C1 + (t*r >> 15); t = 32768 + (t*r >> 15) (= 2**-r in Q15,
    t in [16384, 32768]); e = ((t << 7) + (2**q >> 1)) >> q (round half up) for q <= 22, 0 for
    q >= 23. z = 0 gives exactly 2**22."""
    z = np.asarray(z, dtype=np.int64)
    q = z >> SOFTMAX_EXP_FRAC_BITS
    r = (z >> (SOFTMAX_EXP_FRAC_BITS - 15)) & 0x7FFF
    c1, c2, c3 = EXP2_POLY_Q15
    t = np.full_like(z, c3)
    t = c2 + ((t * r) >> 15)
    t = c1 + ((t * r) >> 15)
    t = 32768 + ((t * r) >> 15)
    qs = np.minimum(q, 23)
    e = ((t << (SOFTMAX_E_BITS - 15)) + ((np.int64(1) << qs) >> 1)) >> qs
    return np.where(q >= 23, 0, e)


def softmax_valid(x, lanes_valid, mask: bool) -> np.ndarray:
    """Lanes that take part in a SOFTMAX row: inside the row (``lanes_valid``) and, with ``mask``,
    not equal to -128 (an attention-masked logit: probability 0)."""
    x = np.asarray(x, dtype=np.int64)
    v = np.asarray(lanes_valid, dtype=bool)
    return v & (x != -128) if mask else v


def softmax_exp(x, xmax, exp_mult: int, valid) -> np.ndarray:
    """Q22 exponentials of a SOFTMAX row: d = clamp(xmax - x, 0, 255), e = exp2_neg(d *
    exp_mult) (exp_mult: 24-bit unsigned), 0 on lanes not ``valid``. x int8 [..., L], xmax int
    [...] (broadcast against x's last axis)."""
    x = np.asarray(x, dtype=np.int64)
    d = np.clip(np.asarray(xmax, dtype=np.int64)[..., None] - x, 0, 255)
    return np.where(valid, exp2_neg(d * int(exp_mult)), 0)


def softmax_stats(x, lanes_valid, exp_mult: int, mask: bool) -> tuple[np.ndarray, np.ndarray]:
    """Row reductions of SOFTMAX (passes 1 and 2): (xmax, sum). x int8 [rows, L]; xmax = the max
    over valid lanes (-128 if none), sum = the sum of ``softmax_exp`` (< 2**38 for L < 2**16)."""
    x = np.asarray(x, dtype=np.int64)
    valid = softmax_valid(x, lanes_valid, mask)
    xmax = np.where(valid, x, -128).max(axis=-1, initial=-128)
    return xmax, softmax_exp(x, xmax, exp_mult, valid).sum(axis=-1)


def softmax_out(x, lanes_valid, xmax, total, exp_mult: int, mask: bool, mult, shift, zp: int) -> np.ndarray:
    """SOFTMAX output (pass 3), int8 [rows, L]: recip = 2**53 // sum (0 if sum = 0: a fully
    masked row), p = (e*recip + 2**22) >> 23 (Q30, <= 2**30), y = clamp(requant(p, mult, shift)
    + zp, -128, 127); lanes outside the row and masked lanes have p = 0 (y = clamp(zp + 0)).
    mult/shift/zp: the output quant register (quantize_multiplier(2**-30 / S_out))."""
    x = np.asarray(x, dtype=np.int64)
    total = np.asarray(total, dtype=np.int64)
    valid = softmax_valid(x, lanes_valid, mask)
    e = softmax_exp(x, xmax, exp_mult, valid)
    recip = np.where(total > 0, (np.int64(1) << SOFTMAX_RECIP_BITS) // np.maximum(total, 1), 0)
    p = (e * recip[..., None] + (np.int64(1) << (SOFTMAX_P_SHIFT - 1))) >> SOFTMAX_P_SHIFT
    return np.clip(requant(p, mult, shift) + int(zp), -128, 127).astype(np.int8)


def isqrt_floor(v) -> np.ndarray:
    """floor(sqrt(v)) exactly for integers 0 <= v < 2**63 (int64 array). The hardware's integer
    square root (I-BERT Algorithm 4 iterates Newton to this same floor; the RTL uses the
    equivalent digit-by-digit method, one result bit per step)."""
    v = np.asarray(v, dtype=np.int64)
    if v.size and v.min() < 0:
        raise ValueError(f"isqrt of negative value {int(v.min())}")
    s = np.minimum(np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64), 3037000499)
    for _ in range(2):     # the float estimate is within 1 of the root; s <= isqrt(2**63 - 1)
        s = np.where(s * s > v, s - 1, s)
        s = np.where((s < 3037000499) & ((s + 1) * (s + 1) <= v), s + 1, s)
    return s


def layernorm_stats(x, lanes_valid) -> tuple[np.ndarray, np.ndarray]:
    """Row reductions of LAYERNORM (pass 1): (sum, sum of squares) of the valid lanes (int64
    [rows]; |sum| < 2**23, sumsq < 2**30 for rows < 2**16 lanes)."""
    x = np.where(lanes_valid, np.asarray(x, dtype=np.int64), 0)
    return x.sum(axis=-1), (x * x).sum(axis=-1)


def layernorm_acc(x, total, sumsq, n: int, eps: int, gamma, beta) -> np.ndarray:
    """LAYERNORM's int32 accumulator before the output requant, int64 [rows, L]. n = row_len
    (N), eps: 48-bit unsigned (round(eps_real * N**2 / S_in**2 * 2**16)); gamma int16 [L], beta int32
    [L] (per lane of this word); total, sumsq: ``layernorm_stats``.

    var = N*sumsq - sum**2 (= N**2 * variance, exact, < 2**46); den = max(isqrt_floor((var << 16)
    + eps), 256) (N * sqrt(variance + eps_real/S_in**2) with 8 fraction bits; 256 = 1.0 only matters
    for a constant row with eps = 0, whose N*x - sum is 0); recip = 2**47 // den (<= 2**39);
    xn = round((N*x - sum) * recip / 2**27) (Q12 of (x - mean) / sqrt(variance +
    eps_real/S_in**2), half up; |N*x - sum| < 2**24, so the product fits int64);
    acc = sat32(xn*gamma + beta)."""
    x = np.asarray(x, dtype=np.int64)
    total = np.asarray(total, dtype=np.int64)
    var = int(n) * np.asarray(sumsq, dtype=np.int64) - total * total
    den = np.maximum(isqrt_floor((var << LAYERNORM_VAR_SHIFT) + int(eps)), LAYERNORM_DEN_MIN)
    recip = (np.int64(1) << LAYERNORM_RECIP_BITS) // den
    xc = int(n) * x - total[..., None]
    xn = _rnd_shift(xc * recip[..., None], LAYERNORM_N_SHIFT)
    return sat32(xn * np.asarray(gamma, dtype=np.int64) + np.asarray(beta, dtype=np.int64))


def layernorm_out(x, lanes_valid, total, sumsq, n: int, eps: int, gamma, beta, mult, shift,
                  zp: int) -> np.ndarray:
    """LAYERNORM output (pass 2), int8 [rows, L]: y = clamp(requant(layernorm_acc(...), mult,
    shift) + zp, -128, 127); lanes outside the row give clamp(zp). mult/shift/zp: the output
    quant register (quantize_multiplier(S_gamma * 2**-12 / S_out) for gamma at scale S_gamma and
    beta at S_gamma * 2**-12)."""
    acc = layernorm_acc(x, total, sumsq, n, eps, gamma, beta)
    y = np.where(lanes_valid, requant(acc, mult, shift), 0) + int(zp)
    return np.clip(y, -128, 127).astype(np.int8)
