"""VPU: REQUANT / POOL / ADD / MUL / LUT / DWCONV against tpusim.arch.arith, quant registers, VPU timing.

Config 'small': C = W = 8 lanes; param_words = 9*8/8 = 9; core 1000 ps.
"""
import numpy as np
import pytest

from tpusim.arch.arith import (
    add_int8,
    add_multipliers,
    depthwise_acc,
    lut_int8,
    mul_int8,
    pool_avg,
    quantize_multiplier,
    requant_conv,
)
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import make
from tpusim.sim import run_program

CFG = load_config("small")
C = W = 8
MXU, VPU = 1 << 2, 1 << 3


def _i8(a) -> bytes:
    return np.ascontiguousarray(a, dtype=np.int8).tobytes()


def test_requant_vs_arith():
    rng = np.random.default_rng(2)
    wt = rng.integers(-128, 128, (C, C), dtype=np.int8)
    act = rng.integers(-128, 128, (12, W), dtype=np.int8)
    bias = rng.integers(-5000, 5000, C).astype("<i4")
    mq = [quantize_multiplier(r) for r in rng.uniform(0.001, 0.02, C)]
    mult = np.array([m for m, _ in mq], "<i4")
    shift = np.array([s for _, s in mq], np.int8)
    table = bias.tobytes() + mult.tobytes() + shift.tobytes()       # 72 bytes = 9 words
    sram = [(16 * W, _i8(wt.T)), (32 * W, _i8(act)), (600 * W, table)]
    prog = [make("LOAD_QREG", qreg=17, multiplier=0, shift=0, zero_point=-3),
            make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", signal=VPU, act_addr=32, count_x=12, stride_x=1, count_y=1, acc_addr=0),
            make("REQUANT", wait=MXU, acc_addr=0, count=12, param_addr=600, dst_addr=700,
                 qreg=17, relu=1),
            make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=sram)
    acc = act.astype(np.int64) @ wt.astype(np.int64)
    ref = requant_conv(acc, bias, mult, shift, -3, True)
    assert (tpu.sram.words[700:712] == ref).all()
    # MATMUL (dispatched 39 with line 1) starts 40, granted 41, c = 41 + 12 + 8 + 8 = 69;
    # its token is visible to the VPU at 70 = s of REQUANT; request visible 71, granted 71,
    # D = param_words + count = 9 + 12 -> c = 92.
    assert (64, "MXU", 69000) in run.retire and (96, "VPU", 92000) in run.retire
    assert run.counters["vpu_token_wait_cycles"] == 70 - 41


@pytest.mark.parametrize("mode", [0, 1])
def test_pool_vs_arith(mode):
    rng = np.random.default_rng(3 + mode)
    img = rng.integers(-128, 128, (6, 7, W), dtype=np.int8)       # H x W x lanes at word 100
    m, s = quantize_multiplier(1 / 9 * 0.8)
    prog = [make("LOAD_QREG", qreg=1, zero_point=4),
            make("LOAD_QREG", qreg=2, multiplier=m, shift=s, zero_point=-7),
            make("POOL", mode=mode, src_addr=100, win_w=3, win_h=3, win_stride_x=1,
                 win_stride_y=7, out_w=3, out_stride_x=2, out_h=2, out_stride_y=14,
                 dst_addr=900, qreg_in=1, qreg_out=2),
            make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=[(100 * W, _i8(img))])
    out = tpu.sram.words[900:906].reshape(2, 3, W)
    for y in range(2):
        for x in range(3):
            win = img[2 * y:2 * y + 3, 2 * x:2 * x + 3].reshape(9, W)
            if mode == 0:
                ref = win.max(axis=0)
            else:
                ref = pool_avg(win.astype(np.int32).sum(axis=0), 9, 4, m, s, -7)
            assert (out[y, x] == ref).all(), (y, x)
    # D = 6 * (9 + 1) = 60; POOL dispatched at 39 (line 1) -> start 40, grant 41, c = 101
    assert (64, "VPU", 101000) in run.retire


def test_add_vs_arith():
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (5, W), dtype=np.int8)
    b = rng.integers(-128, 128, (5, W), dtype=np.int8)
    (ma, sa), (mb, sb), (mo, so) = add_multipliers(0.02, 0.05, 0.06)
    prog = [make("LOAD_QREG", qreg=10, multiplier=ma, shift=sa, zero_point=5),
            make("LOAD_QREG", qreg=11, multiplier=mb, shift=sb, zero_point=-7),
            make("LOAD_QREG", qreg=12, multiplier=mo, shift=so, zero_point=-10),
            make("ADD", src_a=10, src_b=20, dst_addr=30, count=5, qreg_a=10, qreg_b=11,
                 qreg_out=12, relu=0),
            make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=[(10 * W, _i8(a)), (20 * W, _i8(b))])
    ref = add_int8(a, b, 5, ma, sa, -7, mb, sb, -10, mo, so, False)
    assert (tpu.sram.words[30:35] == ref).all()


def test_unloaded_quant_register_is_an_error():
    prog = [make("LOAD_QREG", qreg=10), make("ADD", src_a=0, src_b=8, dst_addr=16, count=1,
                                             qreg_a=10, qreg_b=33, qreg_out=10), make("HALT")]
    with pytest.raises(SimulationError) as ei:
        run_program(prog, CFG)
    msg = str(ei.value)
    assert "instruction #1 at pc 0x20 (ADD): qreg_b=0x21 (33) (bank 2, entry 1)" in msg
    assert "never loaded" in msg


def test_requant_table_past_end_is_an_error():
    prog = [make("LOAD_QREG", qreg=0),
            make("REQUANT", acc_addr=0, count=1, param_addr=2045, dst_addr=0, qreg=0),
            make("HALT")]
    with pytest.raises(SimulationError, match=r"\(REQUANT\): param_addr=0x7fd \(2045\) \+ 9 words"):
        run_program(prog, CFG)


def test_lut_vs_arith_and_timing():
    """LUT on small (W = 8): table of 256/8 = 32 words; D = 32 + 2*count; in place works."""
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, (6, W), dtype=np.int8)
    x[0] = [-128, -1, 0, 1, 127, -127, 64, -64]
    table = rng.integers(-128, 128, 256, dtype=np.int8)
    assert CFG.lut_words == 32
    prog = [make("LUT", src_addr=40, dst_addr=40, count=6, table_addr=300), make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=[(40 * W, _i8(x)), (300 * W, _i8(table))])
    got = tpu.sram.words[40:46]
    assert (got == lut_int8(x, table)).all()
    assert got[0].tolist() == [table[128], table[255], table[0], table[1], table[127], table[129],
                               table[64], table[192]]
    # granted at 21 (the first instruction starts at 20 on small), c = 21 + 32 + 2*6 = 65
    assert (0, "VPU", 65000) in run.retire
    run2, _ = run_program([make("LUT", src_addr=40, dst_addr=40, count=0, table_addr=300), make("HALT")], CFG)
    assert (0, "VPU", 65000 - 12000) in run2.retire


def test_lut_table_past_end_is_an_error_even_for_count_0():
    prog = [make("LUT", src_addr=0, dst_addr=0, count=0, table_addr=2030), make("HALT")]
    with pytest.raises(SimulationError, match=r"\(LUT\): table_addr=0x7ee \(2030\) \+ 32 words"):
        run_program(prog, CFG)


def test_lut_arith_refuses_bad_tables():
    with pytest.raises(ValueError, match=r"LUT table has shape \(255,\), need \(256,\)"):
        lut_int8([1], np.zeros(255, np.int8))
    with pytest.raises(ValueError, match="LUT input 200 is outside int8"):
        lut_int8([200], np.zeros(256, np.int8))


@pytest.mark.parametrize("stride_b", [1, 0])
def test_mul_vs_arith_and_broadcast(stride_b):
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (7, W), dtype=np.int8)
    b = rng.integers(-128, 128, (7 if stride_b else 1, W), dtype=np.int8)
    mo, so = quantize_multiplier(0.004)
    prog = [make("LOAD_QREG", qreg=1, multiplier=123, shift=9, zero_point=3),
            make("LOAD_QREG", qreg=2, zero_point=-9),
            make("LOAD_QREG", qreg=3, multiplier=mo, shift=so, zero_point=-20),
            make("MUL", src_a=10, src_b=30, dst_addr=50, count=7, stride_b=stride_b, qreg_a=1, qreg_b=2,
                 qreg_out=3, relu=1),
            make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=[(10 * W, _i8(a)), (30 * W, _i8(b))])
    want = mul_int8(a, b, 3, -9, -20, mo, so, True)
    assert (tpu.sram.words[50:57] == want).all()
    assert want.min() == -20                       # relu clamps at the output zero point
    # count 0 completes at s + 1, count 7 at g + 3*7 = s + 1 + 21 (same start: the same LOAD_QREGs before)
    empty = run_program(prog[:3] + [make("MUL", qreg_a=1, qreg_b=2, qreg_out=3), make("HALT")], CFG)[0]
    c7, c0 = ([c for pc, e, c in r.retire if pc == 96][0] for r in (run, empty))
    assert c7 - c0 == 3 * 7 * 1000


def test_mul_broadcast_reads_one_b_word_so_b_at_the_last_word_is_valid():
    last = CFG.sram_words - 1
    prog = [make("LOAD_QREG", qreg=0), make("MUL", src_a=0, src_b=last, dst_addr=8, count=4, stride_b=0),
            make("HALT")]
    run_program(prog, CFG)
    bad = [make("LOAD_QREG", qreg=0), make("MUL", src_a=0, src_b=last, dst_addr=8, count=4, stride_b=1),
           make("HALT")]
    with pytest.raises(SimulationError, match=r"\(MUL\): src_b=0x7ff \(2047\) \+ 4 words"):
        run_program(bad, CFG)


def test_dwconv_vs_arith_and_timing():
    """DWCONV: a 3x3 window with strided outputs over an image of words, one weight word per
    tap, a per-channel table (bias, mult, shift per lane): the SimPy model writes
    requant_conv(depthwise_acc(taps, w, zp_in), ...) and takes D = P + outs * (2 * taps + 1)."""
    rng = np.random.default_rng(5)
    h, wd = 5, 7
    img = rng.integers(-128, 128, (h * wd, W), dtype=np.int8)
    wts = rng.integers(-128, 128, (9, W), dtype=np.int8)
    bias = rng.integers(-5000, 5000, W).astype("<i4")
    ms = [quantize_multiplier(s) for s in rng.uniform(1e-4, 1e-2, W)]
    mult = np.array([m for m, _ in ms], "<i4")
    shift = np.array([s for _, s in ms], np.int8)
    table = np.frombuffer(bias.tobytes() + mult.tobytes() + shift.tobytes(), np.int8)
    args = dict(relu=1, src_addr=100, win_w=3, win_h=3, win_stride_x=1, win_stride_y=wd, out_w=3,
                out_stride_x=2, out_h=2, out_stride_y=2 * wd, dst_addr=300, qreg_in=4, qreg_out=5,
                wt_addr=200, param_addr=250)
    prog = [make("LOAD_QREG", qreg=4, zero_point=-3), make("LOAD_QREG", qreg=5, zero_point=10),
            make("DWCONV", **args), make("HALT")]
    segs = [(100 * W, _i8(img)), (200 * W, _i8(wts)), (250 * W, table.tobytes())]
    run, tpu = run_program(prog, CFG, sram_segments=segs)
    x = img.reshape(h, wd, W)
    taps = np.array([x[2 * oy:2 * oy + 3, 2 * ox:2 * ox + 3].reshape(9, W) for oy in range(2) for ox in range(3)])
    want = requant_conv(depthwise_acc(taps, wts, -3), bias, mult, shift, 10, True)
    assert (tpu.sram.words[300:306] == want).all()
    empty = run_program(prog[:2] + [make("DWCONV", **{**args, "out_h": 0}), make("HALT")], CFG, sram_segments=segs)[0]
    c6, c0 = ([c for pc, e, c in r.retire if pc == 64][0] for r in (run, empty))
    assert c6 - c0 == (CFG.param_words + 6 * (2 * 9 + 1)) * 1000


@pytest.mark.parametrize("field", ["param_addr", "src_addr", "wt_addr", "dst_addr"])
def test_dwconv_range_faults_name_the_field(field):
    """Each DWCONV range check names its field: the table, the source's last tap, the weights,
    the destination (in that order); an unloaded quant register after them."""
    last = CFG.sram_words
    a = dict(src_addr=0, win_w=3, win_h=3, win_stride_x=1, win_stride_y=4, out_w=2, out_stride_x=1, out_h=2,
             out_stride_y=4, dst_addr=100, qreg_in=0, qreg_out=0, wt_addr=200, param_addr=300)
    a[field] = {"param_addr": last - CFG.param_words + 1, "src_addr": last - 10, "wt_addr": last - 8,
                "dst_addr": last - 3}[field]
    prog = [make("LOAD_QREG", qreg=0), make("DWCONV", **a), make("HALT")]
    with pytest.raises(SimulationError, match=rf"\(DWCONV\): {field}=0x[0-9a-f]+ \(\d+\) \+ \d+ words reaches SRAM word"):
        run_program(prog, CFG)
    ok = {**a, field: {"param_addr": 300, "src_addr": 0, "wt_addr": 200, "dst_addr": 100}[field]}
    with pytest.raises(SimulationError, match=r"\(DWCONV\): qreg_out=0x7 \(7\) \(bank 0, entry 7\) reads a quant register"):
        run_program([make("LOAD_QREG", qreg=0), make("DWCONV", **{**ok, "qreg_out": 7}), make("HALT")], CFG)
