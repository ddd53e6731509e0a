"""Integer Softmax / LayerNorm / GELU (docs/integer_nonlinear.md) against float, over random and
adversarial rows, within the documented error bounds; the row sequencing of tpusim.arch.rowops.

Errors are measured in output LSBs against the float function of the same int8 inputs (and, for
LayerNorm, the same quantized gamma/beta), clipped to the int8 range like the device output."""
import math

import numpy as np
import pytest

from tpusim.arch import arith
from tpusim.arch.rowops import ln_param_words, rowop_accesses, run_rowop

#: documented bounds (docs/integer_nonlinear.md, "Error bounds"), output LSBs
SOFTMAX_BOUND_LSB = 0.51
LAYERNORM_BOUND_LSB = 0.55


def _exp_mult(s_in: float) -> int:
    return round(s_in * math.log2(math.e) * 2 ** arith.SOFTMAX_EXP_FRAC_BITS)


def _softmax_dev(x, s_in, s_out, zp, mask):
    m, s = arith.quantize_multiplier(2.0 ** -30 / s_out)
    valid = np.ones(x.shape[1], bool)
    xmax, total = arith.softmax_stats(x, valid, _exp_mult(s_in), mask)
    return arith.softmax_out(x, valid, xmax, total, _exp_mult(s_in), mask, m, s, zp)


def _softmax_float(x, s_in, mask):
    z = s_in * x.astype(np.float64)
    if mask:
        z = np.where(x == -128, -np.inf, z)
    zmax = z.max(axis=-1, keepdims=True)
    e = np.where(np.isfinite(z), np.exp(z - np.where(np.isfinite(zmax), zmax, 0)), 0.0)
    tot = e.sum(axis=-1, keepdims=True)
    return np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)


def _adversarial_logits(rng, rows, n):
    x = rng.integers(-128, 128, (rows, n)).astype(np.int8)
    x[0] = 5                                   # all equal: uniform 1/N
    x[1] = -100
    x[1, n // 2] = 127                         # a single huge logit: p = 1 (saturation)
    x[2] = 127                                 # all at the maximum
    x[3, : max(n - 1, 1)] = -128               # masked row: one live lane (mask=1)
    x[4] = -128                                # fully masked row (mask=1: all p = 0)
    x[5] = rng.integers(120, 128, n)           # clustered at the top
    return x


def test_exp2_poly_vs_float():
    z = np.concatenate([np.arange(0, 1 << 21, 7), np.random.default_rng(0).integers(0, 1 << 32, 20000)])
    e = arith.exp2_neg(z)
    ref = 2.0 ** (-z / 2.0 ** 20) * 2 ** 22
    assert arith.exp2_neg(0) == 2 ** 22
    # the polynomial: 3.3 Q15 units (2.0e-4 relative at r -> 1); the floor of r (2**-15 of the exponent,
    # 2.2e-5 relative); the final rounding (0.5)
    assert (np.abs(e - ref) <= ref * (2.02e-4 + 2.2e-5) + 0.5).all()
    assert (e[z >= 23 << 20] == 0).all() and (e >= 0).all()


def test_isqrt_exact():
    rng = np.random.default_rng(1)
    v = np.concatenate([np.arange(100000), rng.integers(0, 2 ** 63 - 1, 50000, dtype=np.int64),
                        [2 ** 63 - 1, 3037000499 ** 2, 3037000499 ** 2 - 1]]).astype(np.int64)
    assert (arith.isqrt_floor(v) == np.array([math.isqrt(int(a)) for a in v])).all()


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7, 64, 128, 768])
def test_softmax_vs_float(n, mask):
    rng = np.random.default_rng(n + 1000 * mask)
    x = _adversarial_logits(rng, 64, n)
    for s_in in (0.005, 0.05, 0.3, 3.0):
        for s_out, zp in ((1 / 256, -128), (1 / 255, -128), (1 / 128, 0)):
            q = _softmax_dev(x, s_in, s_out, zp, mask).astype(np.float64)
            ref = np.clip(_softmax_float(x, s_in, mask) / s_out + zp, -128, 127)
            err = np.abs(q - ref)
            assert err.max() <= SOFTMAX_BOUND_LSB, (s_in, s_out, np.unravel_index(err.argmax(), err.shape))
    if mask:        # fully masked row: p = 0 everywhere (float: 0/0 here defined as 0)
        assert (_softmax_dev(x[4:5], 0.1, 1 / 256, -128, True) == -128).all()


def test_softmax_single_huge_logit_saturates():
    x = np.full((1, 16), -100, np.int8)
    x[0, 3] = 127
    q = _softmax_dev(x, 1.0, 1 / 256, -128, False)
    assert q[0, 3] == 127 and (np.delete(q[0], 3) == -128).all()   # p = 1 clamps at 127 (255/256)


def _ln_quant(gamma_f, beta_f, s_out):
    s_g = np.abs(gamma_f).max() / 32767
    g = np.round(gamma_f / s_g).astype(np.int64)
    s_b = s_g * 2.0 ** -arith.LAYERNORM_N_FRAC_BITS
    b = np.clip(np.round(beta_f / s_b), -2 ** 31, 2 ** 31 - 1).astype(np.int64)
    return g, b, arith.quantize_multiplier(s_b / s_out), g * s_g, b * s_b


def _eps_field(eps, n, s_in):
    return round(eps * n * n / s_in ** 2 * 2 ** arith.LAYERNORM_VAR_SHIFT)


@pytest.mark.parametrize("n", [2, 7, 64, 128, 768])
def test_layernorm_vs_float(n):
    rng = np.random.default_rng(n)
    gamma, beta = rng.uniform(0.2, 2.0, n), rng.uniform(-1, 1, n)
    for s_in in (0.01, 0.1, 1.0):
        for spread in (1, 20, 128):
            x = rng.integers(-spread, spread, (48, n)).clip(-128, 127).astype(np.int8)
            x[0] = 7                           # zero variance: y = beta
            x[1] = -3
            x[1, 0] = 127                      # one outlier
            x[2] = np.where(np.arange(n) % 2, 127, -128)    # the largest variance
            for s_out, zp in ((1 / 16, 3), (1 / 64, -5)):
                g, b, (m, s), gq, bq = _ln_quant(gamma, beta, s_out)
                valid = np.ones(n, bool)
                tot, sq = arith.layernorm_stats(x, valid)
                q = arith.layernorm_out(x, valid, tot, sq, n, _eps_field(1e-5, n, s_in), g, b, m, s, zp)
                z = s_in * x.astype(np.float64)
                mu, var = z.mean(axis=-1, keepdims=True), z.var(axis=-1, keepdims=True)
                ref = np.clip(((z - mu) / np.sqrt(var + 1e-5) * gq + bq) / s_out + zp, -128, 127)
                err = np.abs(q - ref)
                assert err.max() <= LAYERNORM_BOUND_LSB, (s_in, spread, s_out, np.unravel_index(err.argmax(), err.shape))


def test_layernorm_zero_variance_eps0_gives_beta():
    n = 24
    x = np.full((2, n), -9, np.int8)
    beta = np.arange(n) * 4096 - 40000
    tot, sq = arith.layernorm_stats(x, np.ones(n, bool))
    acc = arith.layernorm_acc(x, tot, sq, n, 0, np.full(n, 30000), beta)
    assert (acc == beta).all()


def test_layernorm_saturation():
    n = 64
    x = np.zeros((1, n), np.int8)
    x[0, 0] = 127                           # xn = sqrt(63) * 2**12 ~ 32510
    tot, sq = arith.layernorm_stats(x, np.ones(n, bool))
    acc = arith.layernorm_acc(x, tot, sq, n, 0, np.full(n, 32767), np.full(n, 2 ** 31 - 1))
    assert acc[0, 0] == arith.INT32_MAX     # sat32(xn*gamma + beta)


def test_gelu_is_a_lut():
    """GELU (erf form) runs on LUT: the table tabulates it exactly on the 256 int8 inputs."""
    s_in, z_in, s_out, z_out = 0.05, 3, 0.03, -60
    k = np.arange(256)
    xin = np.where(k < 128, k, k - 256)
    real = s_in * (xin - z_in)
    gelu = 0.5 * real * (1 + np.vectorize(math.erf)(real / math.sqrt(2)))
    table = np.clip(np.round(gelu / s_out) + z_out, -128, 127).astype(np.int8)
    x = np.arange(-128, 128)
    ref = np.clip(0.5 * s_in * (x - z_in) * (1 + np.vectorize(math.erf)(s_in * (x - z_in) / math.sqrt(2)))
                  / s_out + z_out, -128, 127)
    assert np.abs(arith.lut_int8(x, table) - ref).max() <= 0.5


# ---- tpusim.arch.rowops: operands, access order --------------------------------------------
W = 8


def _sram(rng, words=256):
    return rng.integers(-128, 128, (words, W)).astype(np.int8)


def _sm_args(**kw):
    a = dict(src_addr=10, dst_addr=100, row_len=19, rows=5, src_stride=3, dst_stride=4, qreg_out=0,
             exp_mult=_exp_mult(0.08), mask=1)
    a.update(kw)
    return a


def test_rowop_softmax_matches_arith_and_pads():
    rng = np.random.default_rng(5)
    mem = _sram(rng)
    a = _sm_args()
    q = arith.quantize_multiplier(2.0 ** -30 * 256) + (-128,)
    ref = mem.copy()
    run_rowop("SOFTMAX", mem, a, q)
    assert rowop_accesses("SOFTMAX", a, W) == 5 * 3 * 4
    for r in range(5):
        x = ref[10 + 3 * r:13 + 3 * r].reshape(-1)[None, :19]
        out = _softmax_dev(x, 0.08, 1 / 256, -128, True)
        got = mem[100 + 4 * r:103 + 4 * r].reshape(-1)
        assert (got[:19] == out[0]).all() and (got[19:] == -128).all()   # padding lanes: zp
        assert (mem[103 + 4 * r] == ref[103 + 4 * r]).all()                # gap word untouched


@pytest.mark.parametrize("op", ["SOFTMAX", "LAYERNORM"])
def test_rowop_in_place_equals_out_of_place(op):
    """dst == src takes the word-by-word path; each word is read before it is written, so the
    result equals the vectorised out-of-place run."""
    rng = np.random.default_rng(6)
    mem = _sram(rng)
    a = _sm_args(src_stride=3, dst_stride=3, param_addr=200, eps=12345)
    if op == "LAYERNORM":
        mem[200:218] = ln_param_words(rng.integers(-30000, 30000, 19), rng.integers(-2 ** 30, 2 ** 30, 19), W)
    q = (1 << 30, -9, 4)
    out_of_place = mem.copy()
    run_rowop(op, out_of_place, a, q)
    in_place = mem.copy()
    run_rowop(op, in_place, dict(a, dst_addr=a["src_addr"]), q)
    assert (in_place[10:25] == out_of_place[100:115]).all() or (
        (in_place[10:23].reshape(-1) == np.concatenate([out_of_place[100 + 4 * r:103 + 4 * r] for r in range(5)]).reshape(-1)[:13 * W]).all())


def test_rowop_overlap_reads_own_writes():
    """dst = src + 1 (overlapping rows): pass 3 of word j re-reads word j, which the write of
    word j-1 has replaced; the statistics come from the first passes."""
    rng = np.random.default_rng(7)
    mem = _sram(rng)
    a = _sm_args(src_addr=10, dst_addr=11, rows=1, row_len=3 * W)
    q = (1 << 30, -13, 0)
    ref = mem.copy()
    run_rowop("SOFTMAX", mem, a, q)
    x0 = ref[10:13].reshape(1, -1)
    valid = np.ones(W, bool)
    xmax, total = arith.softmax_stats(x0, np.ones(3 * W, bool), a["exp_mult"], True)
    cur = ref.copy()
    for j in range(3):
        cur[11 + j] = arith.softmax_out(cur[10 + j][None], valid, xmax, total, a["exp_mult"], True, *q)[0]
    assert (mem == cur).all()


def test_ln_param_words_layout():
    gamma = np.array([0x1234, -2] + [0] * 7)
    beta = np.array([0x0A0B0C0D, -1] + [0] * 7)
    t = ln_param_words(gamma, beta, W).view(np.uint8)
    assert t.shape == (12, W)
    assert list(t[:6, 0]) == [0x34, 0x12, 0x0D, 0x0C, 0x0B, 0x0A]
    assert list(t[:6, 1]) == [0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
    assert (t[6:, 0] == 0).all()          # channel 8 (word 1, lane 0)
