"""Requant shifts outside the compiler's [-31, 30] (docs/architecture.md clarification 10): every
int8 shift, from a per-channel REQUANT table and from LOAD_QREG (POOL average, ADD), gives the
same bytes on golden (stressgen.golden), SimPy and the RTL ('small' config: W = C = 8).

The program loads one block (weights, activations, two tables, ADD operands), runs a MATMUL,
two REQUANTs, six average POOLs and three ADDs with extreme shifts and stores everything to one
output region.
"""
from __future__ import annotations

import numpy as np
import pytest

from stressgen.program import OutputRegion, StressProgram
from stressgen.runner import run_one
from stressgen.validate import validate
from tpusim.arch import arith
from tpusim.arch.arith import INT32_MAX, INT32_MIN
from tpusim.arch.config import load_config
from tpusim.arch.isa import make

CFG = load_config("small")
W = C = 8
LOAD, STORE, MXU, VPU = 1, 2, 4, 8
DDR_IN, DDR_OUT = 0x20000, 0x40000
# SRAM word layout of the loaded block
WTS, ACT, TAB_A, TAB_B, SRC_A, SRC_B, N_IN = 0, 8, 24, 33, 42, 58, 74
ROWS = 16
DST = 100                                     # outputs: words DST .. DST + N_OUT - 1
N_OUT = 2 * ROWS + 6 * 4 + 3 * ROWS

SHIFT_A = [-128, -33, -32, -31, 30, 31, 32, 127]
MULT_A = [INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 2 ** 30, -(2 ** 30), INT32_MIN, 2 ** 30 + 7]
SHIFT_B = [127, 64, 31, -1, 0, -32, -100, -64]
#: POOL average output quant registers (multiplier, shift, zero point)
POOL_Q = [(2 ** 30, 127, 1), (INT32_MAX, 31, -2), (2 ** 30, 32, 0), (INT32_MAX, -32, 4),
          (-(2 ** 30), -128, 0), (INT32_MIN, 100, 0)]
#: ADD quant registers: (qreg_a, qreg_b, qreg_out), each (multiplier, shift, zero point)
ADD_Q = [((2 ** 30, 127, 0), (INT32_MAX, -128, -128), (2 ** 30, 31, 5)),
         ((-(2 ** 30), 64, 7), (2 ** 30, 30, 0), (INT32_MAX, -32, 0)),
         ((INT32_MIN, 31, 0), (INT32_MIN, -31, 0), (2 ** 30, -128, -7))]


def _table(bias, mult, shift) -> bytes:
    return (np.asarray(bias, "<i4").tobytes() + np.asarray(mult, "<i4").tobytes()
            + np.asarray(shift, np.int8).tobytes())


def _data():
    rng = np.random.default_rng(5)
    wts = rng.integers(-128, 128, (C, W), dtype=np.int8)
    act = rng.integers(-128, 128, (ROWS, W), dtype=np.int8)
    act[0], act[1], act[2] = 127, -128, 0
    bias_a = [INT32_MAX - 5, INT32_MAX, 2 ** 30, INT32_MAX - 100, 0, -7, INT32_MIN, 3]
    mult_b = rng.integers(INT32_MIN, INT32_MAX + 1, C)
    bias_b = rng.integers(-(2 ** 31), 2 ** 31, C)
    a = rng.integers(-128, 128, (ROWS, W), dtype=np.int8)
    b = rng.integers(-128, 128, (ROWS, W), dtype=np.int8)
    a[0], b[0], a[1], b[1] = 0, 0, 7, -128       # x - zp = 0 cases: a saturating shift keeps 0
    block = (wts.tobytes() + act.tobytes() + _table(bias_a, MULT_A, SHIFT_A)
             + _table(bias_b, mult_b, SHIFT_B) + a.tobytes() + b.tobytes())
    assert len(block) == N_IN * W
    return block


def extreme_shift_program() -> StressProgram:
    ins = [make("DMA_LOAD", signal=MXU | VPU, ddr_addr=DDR_IN, sram_addr=0, inner_bytes=N_IN * W,
                count1=1, count2=1),
           make("LOAD_WEIGHTS", wait=LOAD, sram_addr=WTS),
           make("MATMUL", signal=VPU, act_addr=ACT, count_x=ROWS, stride_x=1, count_y=1, acc_addr=0),
           make("LOAD_QREG", wait=LOAD, qreg=0, multiplier=0, shift=0, zero_point=3),
           make("LOAD_QREG", qreg=1, multiplier=0, shift=-128, zero_point=-5)]
    for i, (m, s, z) in enumerate(POOL_Q):
        ins.append(make("LOAD_QREG", qreg=2 + i, multiplier=m, shift=s, zero_point=z))
    for i, regs in enumerate(ADD_Q):
        for j, (m, s, z) in enumerate(regs):
            ins.append(make("LOAD_QREG", qreg=16 + 3 * i + j, multiplier=m, shift=s, zero_point=z))
    dst = DST
    for tab in (TAB_A, TAB_B):
        ins.append(make("REQUANT", wait=MXU if tab == TAB_A else 0, acc_addr=0, count=ROWS,
                        param_addr=tab, dst_addr=dst, qreg=0, relu=0))
        dst += ROWS
    for i in range(len(POOL_Q)):
        ins.append(make("POOL", mode=1, src_addr=ACT, win_w=2, win_h=2, win_stride_x=1,
                        win_stride_y=4, out_w=2, out_stride_x=2, out_h=2, out_stride_y=8,
                        dst_addr=dst, qreg_in=1, qreg_out=2 + i))
        dst += 4
    for i in range(len(ADD_Q)):
        ins.append(make("ADD", src_a=SRC_A, src_b=SRC_B, dst_addr=dst, count=ROWS,
                        qreg_a=16 + 3 * i, qreg_b=17 + 3 * i, qreg_out=18 + 3 * i, relu=i == 2))
        dst += ROWS
    ins[-1] = make(ins[-1].op, signal=STORE, **ins[-1].args)       # the last VPU op frees STORE
    assert dst == DST + N_OUT
    ins += [make("DMA_STORE", wait=VPU, ddr_addr=DDR_OUT, sram_addr=DST * W, inner_bytes=N_OUT * W,
                 count1=1, count2=1),
            make("HALT")]
    return StressProgram(0, "small", ins, [(DDR_IN, _data())], [OutputRegion("out", DDR_OUT, N_OUT * W)])


def _expected_lane_a(out: bytes) -> None:
    """Hand-checked lanes of REQUANT table A (zero point 3): shift -32 with bias INT32_MAX gives
    0 (+3), where a right shift capped at 31 would give 1 (+3); shift 127 saturates."""
    y = np.frombuffer(out, np.int8).reshape(-1, W)[:ROWS]          # REQUANT A rows
    acc = np.frombuffer(_data(), np.int8)[ACT * W:(ACT + ROWS) * W].reshape(ROWS, W).astype(np.int64) \
        @ np.frombuffer(_data(), np.int8)[:C * W].reshape(C, W).T.astype(np.int64)
    assert (y[:, 2] == 3).all()                  # bias 2**30, mult INT32_MAX, shift -32 -> 0
    v = arith.sat32(acc[:, 1] + INT32_MAX)
    assert (y[v >= 2 ** 30, 1] == 3).all()       # shift -33: 0 as well
    assert (y[:, 0] == 3).all()                  # shift -128
    ref = arith.requant_conv(acc, np.array([INT32_MAX - 5, INT32_MAX, 2 ** 30, INT32_MAX - 100, 0,
                                            -7, INT32_MIN, 3]), np.array(MULT_A),
                             np.array(SHIFT_A), 3, False)
    assert (y == ref).all()


def test_program_is_valid():
    validate(extreme_shift_program(), CFG)      # extreme shifts are no longer refused


def test_golden_and_simpy_agree(tmp_path):
    prog = extreme_shift_program()
    o = run_one(prog, CFG, tmp_path, rtl=False, waves=False)
    assert o.passed, o.first_divergence
    from tpusim.sim import run_binary
    run = run_binary(prog.to_binary(CFG), CFG, {}, keep_ddr=True)
    _expected_lane_a(run.read_ddr(DDR_OUT, N_OUT * W))


@pytest.mark.rtl
def test_simpy_and_rtl_agree(tmp_path):
    """golden == SimPy == RTL bytes, and the same retire trace, counters and waveforms."""
    o = run_one(extreme_shift_program(), CFG, tmp_path, rtl=True, waves=True)
    assert o.passed, o.first_divergence
    assert o.details["rtl_status"] == "ok" and o.details["cycles_rtl"] == o.details["cycles_simpy"]
