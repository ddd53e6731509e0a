"""tpusim.arch.arith: gemmlowp fixed-point arithmetic, hand-checked values and exact-rational checks."""
import math
from fractions import Fraction

import numpy as np
import pytest

from tpusim.arch import arith
from tpusim.arch.arith import (
    INT32_MAX,
    INT32_MIN,
    add_int8,
    matmul_acc,
    pool_avg,
    quantize_multiplier,
    rdbpot,
    requant,
    requant_conv,
    sat32,
    srdhm,
)


# ---- quantize_multiplier -------------------------------------------------------------------
@pytest.mark.parametrize("real, expect", [
    (0.5, (2 ** 30, 0)),
    (0.25, (2 ** 30, -1)),
    (1.0, (2 ** 30, 1)),
    (1.5, (3 * 2 ** 29, 1)),
    (3.0, (3 * 2 ** 29, 2)),
    (1000.0, (round(1000 / 1024 * 2 ** 31), 10)),
    (0.75, (3 * 2 ** 29, 0)),
    (2.0 ** -32, (2 ** 30, -31)),
])
def test_quantize_multiplier_hand_values(real, expect):
    assert quantize_multiplier(real) == expect


@pytest.mark.parametrize("real", [0.0, 1e-40, 5e-324, 2.0 ** -33, 2.0 ** -32 * 0.999])
def test_quantize_multiplier_tiny_flushes_to_zero(real):
    assert quantize_multiplier(real) == (0, 0)


def test_quantize_multiplier_rounds_up_to_next_power():
    # f*2**31 rounds to 2**31 -> halve and bump the exponent
    real = (2 ** 31 - 0.4) / 2 ** 31 * 0.5       # just below 0.5
    assert quantize_multiplier(real) == (2 ** 30, 0)


def test_quantize_multiplier_half_away_tie():
    real = (2 ** 30 + 0.5) / 2 ** 31             # f*2**31 = 2**30 + 0.5 exactly
    assert quantize_multiplier(real) == (2 ** 30 + 1, 0)


@pytest.mark.parametrize("real", [2.0 ** 30, 2.0 ** 31, 1e12, (2 ** 31 - 0.4) / 2])
def test_quantize_multiplier_too_large_raises(real):
    with pytest.raises(ValueError, match="unsupported"):
        quantize_multiplier(real)


@pytest.mark.parametrize("real", [float("nan"), float("inf"), -0.5])
def test_quantize_multiplier_bad_values_raise(real):
    with pytest.raises(ValueError, match="finite and >= 0"):
        quantize_multiplier(real)


def test_quantize_multiplier_ranges_random():
    rng = np.random.default_rng(1)
    for real in np.exp(rng.uniform(math.log(2.0 ** -32), math.log(2.0 ** 30 * 0.99), 2000)):
        m, s = quantize_multiplier(real)
        assert 2 ** 30 <= m <= 2 ** 31 - 1 and -31 <= s <= 30
        assert abs(m * 2.0 ** (s - 31) - real) <= real * 2.0 ** -30


# ---- primitives ----------------------------------------------------------------------------
def test_sat32():
    x = np.array([2 ** 40, -(2 ** 40), 5, INT32_MAX + 1, INT32_MIN - 1])
    assert sat32(x).tolist() == [INT32_MAX, INT32_MIN, 5, INT32_MAX, INT32_MIN]


def test_srdhm_hand_values():
    assert srdhm(INT32_MIN, INT32_MIN) == INT32_MAX
    assert srdhm(1, 2 ** 30) == 1          # 0.5 -> 1 (tie up)
    assert srdhm(-1, 2 ** 30) == 0         # -0.5 -> 0 (tie toward +inf)
    assert srdhm(3, 2 ** 30) == 2          # 1.5 -> 2
    assert srdhm(-3, 2 ** 30) == -1        # -1.5 -> -1
    assert srdhm(100, 2 ** 31 - 1) == 100
    assert srdhm(INT32_MIN, INT32_MAX) == -(2 ** 31 - 1)
    assert srdhm(INT32_MAX, INT32_MAX) == INT32_MAX - 1


def test_srdhm_equals_gemmlowp_formula():
    """srdhm's floor-shift form against gemmlowp's own steps (nudge by the product's sign,
    division truncated toward zero, INT32_MIN * INT32_MIN saturated) on edge values, ties
    (ab = odd * 2**30) and random int32 pairs."""
    def gemmlowp(a, b):
        ab = a * b
        x = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
        res = np.where(x >= 0, x >> 31, -((-x) >> 31))
        return np.where((a == INT32_MIN) & (b == INT32_MIN), INT32_MAX, res)
    rng = np.random.default_rng(12)
    edge = np.array([INT32_MIN, INT32_MIN + 1, -2 ** 30 - 1, -2 ** 30, -3, -1, 0, 1, 3, 2 ** 30,
                     INT32_MAX - 1, INT32_MAX], dtype=np.int64)
    odd = 2 * rng.integers(-2 ** 20, 2 ** 20, 10_000) + 1
    a = np.concatenate([edge.repeat(len(edge)), odd, rng.integers(INT32_MIN, INT32_MAX, 200_000)])
    b = np.concatenate([np.tile(edge, len(edge)), np.full(len(odd), 2 ** 30),
                        rng.integers(INT32_MIN, INT32_MAX, 200_000)])
    np.testing.assert_array_equal(srdhm(a, b), gemmlowp(a, b))
    # the INT32_MAX cap is skipped when only one side holds an INT32_MIN (per-channel b)
    no_min = np.where(b == INT32_MIN, INT32_MIN + 1, b)
    np.testing.assert_array_equal(srdhm(a, no_min), gemmlowp(a, no_min))
    np.testing.assert_array_equal(srdhm(no_min, a), gemmlowp(no_min, a))


def test_rdbpot_hand_values():
    x = np.array([5, 6, 7, -5, -6, -7, 4, -4, 0])
    # x / 4: 1.25 1.5 1.75 -1.25 -1.5 -1.75 1 -1 0 -> half away from zero
    assert rdbpot(x, 2).tolist() == [1, 2, 2, -1, -2, -2, 1, -1, 0]
    assert rdbpot(x, 0).tolist() == x.tolist()
    assert rdbpot(np.array([INT32_MIN, INT32_MAX]), 31).tolist() == [-1, 1]
    # beyond gemmlowp's 31 the exact value: -0.5 -> -1 (away from zero), everything else 0
    assert rdbpot(np.array([INT32_MIN, INT32_MAX, -(2 ** 30)]), 32).tolist() == [-1, 0, 0]
    assert rdbpot(np.array([INT32_MIN, INT32_MAX]), 33).tolist() == [0, 0]
    assert rdbpot(np.array([INT32_MIN, INT32_MAX]), 200).tolist() == [0, 0]
    with pytest.raises(ValueError, match="-1"):
        rdbpot(1, -1)


def test_rdbpot_equals_gemmlowp_steps():
    """rdbpot's one floor shift against gemmlowp's steps (remainder against the threshold) for
    every exponent 0..62, per element and per column (some columns 0, and all columns > 0),
    on ties, edge values and random int32 and |x| < 2**61 values."""
    def steps(x, e):
        mask = (np.int64(1) << e) - 1
        return (x >> e) + ((x & mask) > ((mask >> 1) + (x < 0)))
    rng = np.random.default_rng(5)
    e = np.arange(63, dtype=np.int64)
    ties = (2 * rng.integers(-2 ** 20, 2 ** 20, (200, 1)) + 1) << np.minimum(e, 40) >> 1
    x = np.concatenate([ties, np.tile([[INT32_MIN], [INT32_MIN + 1], [-1], [0], [1], [INT32_MAX]], (1, 63)),
                        rng.integers(INT32_MIN, INT32_MAX, (300, 63)),
                        rng.integers(-2 ** 61 + 1, 2 ** 61, (300, 63))])
    np.testing.assert_array_equal(rdbpot(x, e), steps(x, e))              # some exponents 0
    np.testing.assert_array_equal(rdbpot(x[:, 1:], e[1:]), steps(x[:, 1:], e[1:]))   # all > 0
    for k in (0, 1, 31, 62):                                               # scalar exponents
        np.testing.assert_array_equal(rdbpot(x, k), steps(x, np.int64(k)))


def _exact(x: int, m: int, s: int) -> Fraction:
    return Fraction(x) * m * Fraction(2) ** (s - 31)


def _round_half_up(q: Fraction) -> int:
    return math.floor(q + Fraction(1, 2))


def test_requant_vs_exact_rational_random():
    rng = np.random.default_rng(7)
    x = rng.integers(-2 ** 20, 2 ** 20, 400)
    for real in [0.0123, 0.05, 0.3, 0.999, 1.7, 37.0, 1e-6]:
        m, s = quantize_multiplier(real)
        y = requant(x, m, s)
        exact = [_round_half_up(_exact(int(v), m, s)) for v in x]
        diff = np.abs(y - np.array(exact))
        assert diff.max() <= 1, (real, diff.max())


@pytest.mark.parametrize("j", [-1, 0, 1, 3, 10])
def test_requant_power_of_two_exact(j):
    rng = np.random.default_rng(j + 100)
    x = rng.integers(-2 ** 19, 2 ** 19, 1000)
    m, s = quantize_multiplier(2.0 ** j)
    y = requant(x, m, s)
    exact = [_round_half_up(Fraction(int(v)) * Fraction(2) ** j) for v in x]
    assert y.tolist() == exact


def test_requant_small_power_of_two_double_rounding_documented():
    # gemmlowp double rounding: 1 * 0.25 -> SRDHM gives round(0.5) = 1, then RDBPOT(1, 1) = 1
    m, s = quantize_multiplier(0.25)
    assert requant(1, m, s) == 1
    x = np.arange(-4096, 4096)
    diff = requant(x, m, s) - np.floor(x / 4 + 0.5)
    assert np.abs(diff).max() == 1


def test_requant_left_shift_saturates():
    m, s = quantize_multiplier(1000.0)
    assert requant(2 ** 30, m, s) == srdhm(INT32_MAX, m) >> 0


def test_requant_per_channel_broadcast():
    x = np.array([[100, 100], [-100, -100]])
    (m0, s0), (m1, s1) = quantize_multiplier(0.5), quantize_multiplier(2.0)
    y = requant(x, np.array([m0, m1]), np.array([s0, s1]))
    assert y.tolist() == [[50, 200], [-50, -200]]


def test_requant_zero_multiplier():
    assert requant(np.array([123456, -5]), 0, 0).tolist() == [0, 0]


# ---- every int8 shift: extremes against a plain Python-int reference ------------------------
def _ref_requant(x: int, m: int, s: int) -> int:
    """gemmlowp MultiplyByQuantizedMultiplier with unbounded Python ints: saturating multiply by
    2**s (s > 0), SRDHM, exact x / 2**-s rounded half away from zero (s < 0)."""
    t = min(max(x * 2 ** s, INT32_MIN), INT32_MAX) if s > 0 else x
    if t == m == INT32_MIN:
        v = INT32_MAX
    else:
        ab = t * m
        num = ab + (2 ** 30 if ab >= 0 else 1 - 2 ** 30)
        v = abs(num) // 2 ** 31 * (1 if num >= 0 else -1)         # truncate toward zero
    if s >= 0:
        return v
    q = Fraction(v, 2 ** -s)
    return math.floor(q + Fraction(1, 2)) if q >= 0 else -math.floor(-q + Fraction(1, 2))


EXTREME_X = [INT32_MIN, INT32_MIN + 1, -(2 ** 30) - 1, -(2 ** 30), -3, -1, 0, 1, 3, 2 ** 30,
             2 ** 30 + 1, INT32_MAX - 1, INT32_MAX]
EXTREME_M = [INT32_MIN, -(2 ** 30), -1, 0, 1, 2 ** 30, 2 ** 30 + 1, INT32_MAX]


@pytest.mark.parametrize("shift", [-128, -127, -64, -33, -32, -31, -30, -1, 0, 1, 29, 30, 31, 32,
                                   33, 62, 63, 64, 126, 127])
def test_requant_every_shift_matches_python_int_reference(shift):
    x = np.array(EXTREME_X * len(EXTREME_M))
    m = np.repeat(EXTREME_M, len(EXTREME_X))
    got = requant(x, m, shift)
    want = [_ref_requant(int(a), int(b), shift) for a, b in zip(x, m)]
    assert got.tolist() == want
    assert np.all((got >= INT32_MIN) & (got <= INT32_MAX))


def test_requant_all_int8_shifts_random_values():
    rng = np.random.default_rng(11)
    shifts = np.arange(-128, 128)
    x = rng.integers(INT32_MIN, INT32_MAX + 1, (256, 40))
    m = rng.integers(INT32_MIN, INT32_MAX + 1, (256, 40))
    got = requant(x, m, shifts[:, None])
    for i, s in enumerate(shifts):
        assert got[i].tolist() == [_ref_requant(int(a), int(b), int(s)) for a, b in zip(x[i], m[i])], s


def test_requant_extreme_shifts_hand_values():
    # left: no numpy overflow (the old x * 2**40 wrapped); saturates before SRDHM
    assert requant(INT32_MAX, 2 ** 30, 40) == srdhm(INT32_MAX, 2 ** 30) == 2 ** 30
    assert requant(-1, 2 ** 30, 127) == srdhm(INT32_MIN, 2 ** 30) == -(2 ** 30)
    assert requant(0, INT32_MAX, 127) == 0
    # right: from 32 on the result is 0 (a right shift capped at 31 would give 1 here)
    assert requant(INT32_MAX, INT32_MAX, -31) == 1
    assert requant(INT32_MAX, INT32_MAX, -32) == 0
    assert requant(INT32_MIN, INT32_MIN, -128) == 0


def test_shift_amounts_caps():
    left, right = arith.shift_amounts(np.array([-128, -33, -32, -31, 0, 30, 31, 32, 127]))
    assert left.tolist() == [0, 0, 0, 0, 0, 30, 31, 31, 31]
    assert right.tolist() == [32, 32, 32, 31, 0, 0, 0, 0, 0]


def test_requant_refuses_values_outside_int32():
    with pytest.raises(ValueError, match="input x 2147483648 is outside the int32 range"):
        requant(np.array([0, 2 ** 31]), 1, 0)
    with pytest.raises(ValueError, match="multiplier -2147483649"):
        requant(1, -(2 ** 31) - 1, 0)


def test_output_stages_with_extreme_shifts():
    acc = np.array([[INT32_MAX, INT32_MIN, 5, -5]], dtype=np.int64).T      # [4, 1]
    y = requant_conv(acc, np.array([0]), np.array([2 ** 30]), np.array([127]), 3, False)
    assert y[:, 0].tolist() == [127, -128, 127, -128]
    y = requant_conv(acc, np.array([0]), np.array([INT32_MAX]), np.array([-128]), 3, False)
    assert y[:, 0].tolist() == [3, 3, 3, 3]
    assert pool_avg(np.array([8, -8]), 4, 0, 2 ** 30, 100, -1).tolist() == [127, -128]
    assert pool_avg(np.array([8, -8]), 4, 0, 2 ** 30, -100, -1).tolist() == [-1, -1]
    # ADD: operand a scaled by a huge left shift saturates the sum
    y = add_int8(np.int8(1), np.int8(0), 0, 2 ** 30, 127, 0, 2 ** 30, 0, 0, 2 ** 30, -10, False)
    assert y == 127


# ---- output stages -------------------------------------------------------------------------
def test_requant_conv_relu_and_clamp():
    m, s = quantize_multiplier(0.5)
    acc = np.array([[0, 10, -10, 1000, -1000]], dtype=np.int32).T.repeat(2, axis=1)
    y = requant_conv(acc, np.array([0, 4]), np.array([m, m]), np.array([s, s]), zp=3,
                     relu=False)
    assert y.dtype == np.int8
    assert y[:, 0].tolist() == [3, 8, -2, 127, -128]
    assert y[:, 1].tolist() == [5, 10, 0, 127, -128]
    yr = requant_conv(acc, np.array([0, 4]), np.array([m, m]), np.array([s, s]), zp=3, relu=True)
    assert yr[:, 0].tolist() == [3, 8, 3, 127, 3]


def test_requant_conv_bias_saturates():
    m, s = quantize_multiplier(2.0 ** -24)
    y = requant_conv(np.array([[INT32_MAX]]), np.array([INT32_MAX]), np.array([m]), np.array([s]),
                     0, False)
    assert y[0, 0] == 127      # sat32(2**32-2) = INT32_MAX -> 128 -> clamp 127


def test_pool_avg():
    m, s = quantize_multiplier(1.0 / 4)
    sums = np.array([4 * 10, 4 * 10 + 2, -4 * 200])
    y = pool_avg(sums, 4, 10, m, s, -5)
    assert y.dtype == np.int8
    assert y.tolist() == [-5, -4, -128]


def test_add_int8_matches_float():
    rng = np.random.default_rng(3)
    s_a, s_b, s_o = 0.02, 0.05, 0.06
    zp_a, zp_b, zp_o = 5, -7, -10
    (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(s_a, s_b, s_o)
    a = rng.integers(-128, 128, 5000).astype(np.int8)
    b = rng.integers(-128, 128, 5000).astype(np.int8)
    y = add_int8(a, b, zp_a, ma, sa, zp_b, mb, sb, zp_o, mo, so, relu=False)
    ai, bi = a.astype(int), b.astype(int)
    ref = np.clip(np.round(((ai - zp_a) * s_a + (bi - zp_b) * s_b) / s_o) + zp_o, -128, 127)
    assert np.abs(y.astype(int) - ref).max() <= 1
    yr = add_int8(a, b, zp_a, ma, sa, zp_b, mb, sb, zp_o, mo, so, relu=True)
    assert yr.min() >= zp_o


def test_add_int8_hand_value():
    (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(1.0, 1.0, 1.0)
    assert add_int8(np.int8(3), np.int8(4), 0, ma, sa, 0, mb, sb, 0, mo, so, False) == 7
    assert add_int8(np.int8(100), np.int8(100), 0, ma, sa, 0, mb, sb, 0, mo, so, False) == 127


def test_matmul_acc_exact_and_wraps():
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (7, 300)).astype(np.int8)
    w = rng.integers(-128, 128, (300, 5)).astype(np.int8)
    ref = x.astype(np.int64) @ w.astype(np.int64)
    out = matmul_acc(x, w)
    assert out.dtype == np.int32 and (out == ref).all()
    # wrap-around: 140000 * (-128 * -128) = 2293760000 > INT32_MAX
    k = 140000
    xb = np.full((1, k), -128, np.int8)
    wb = np.full((k, 1), -128, np.int8)
    assert matmul_acc(xb, wb)[0, 0] == np.int64(k * 16384 - 2 ** 32)
    with pytest.raises(ValueError, match="do not match"):
        matmul_acc(x, x)
