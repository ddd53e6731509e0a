"""REQUANT on non-square arrays (docs/architecture.md, "Non-square arrays"), ISA executor and
SimPy model, values and cycles.

small_wide: R = W = 8, C = 16: an accumulator row is 2 words (planes), param_words = 18.
small_tall: R = W = 16, C = 8: an accumulator row fills one 8-byte lane group, param_words =
ceil(72 / 16) = 5.
"""
import re

import numpy as np
import pytest

from tpusim.arch.arith import quantize_multiplier, requant_conv
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError, SimulationError
from tpusim.arch.executor import Machine
from tpusim.arch.isa import make
from tpusim.sim import run_program

WIDE, TALL = load_config("small_wide"), load_config("small_tall")
MXU, VPU = 1 << 2, 1 << 3


def _i8(a) -> bytes:
    return np.ascontiguousarray(a, dtype=np.int8).tobytes()


def _case(cfg, seed: int, m: int):
    """Weights [R, C], m activation vectors [R], a random requant table of C channels (padded
    to param_words words), the int8 reference [m, C]."""
    R, C = cfg.array_rows, cfg.array_cols
    rng = np.random.default_rng(seed)
    wt = rng.integers(-128, 128, (R, C), dtype=np.int8)
    act = rng.integers(-128, 128, (m, R), dtype=np.int8)
    bias = rng.integers(-5000, 5000, C).astype("<i4")
    mq = [quantize_multiplier(r) for r in rng.uniform(0.001, 0.02, C)]
    mult = np.array([q for q, _ in mq], "<i4")
    shift = np.array([s for _, s in mq], np.int8)
    table = bias.tobytes() + mult.tobytes() + shift.tobytes()
    table += bytes(cfg.param_words * cfg.word_bytes - len(table))
    ref = requant_conv(act.astype(np.int64) @ wt.astype(np.int64), bias, mult, shift, -3, True)
    return wt, act, table, ref


def _prog(m: int, **requant):
    return [make("LOAD_QREG", qreg=17, multiplier=0, shift=0, zero_point=-3),
            make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", signal=VPU, act_addr=100, count_x=m, stride_x=1, count_y=1, acc_addr=0),
            make("REQUANT", wait=MXU, acc_addr=0, count=m, param_addr=600, qreg=17, relu=1, **requant),
            make("HALT")]


def _executor(cfg, prog, segments) -> Machine:
    mach = Machine(cfg)
    flat = mach.sram.reshape(-1)
    for addr, data in segments:
        flat[addr:addr + len(data)] = np.frombuffer(data, np.int8)
    for i, ins in enumerate(prog[:-1]):
        mach.execute(i, ins)
    return mach


def test_wide_requant_writes_planes():
    """m = 2 planes 40 words apart: row i's channels 0..7 at word 700 + i, 8..15 at 740 + i;
    the words between keep their bytes. Timing: MATMUL starts 40, granted 41, c = 41 + 12 + 8 +
    16 = 77; the REQUANT starts at 78, is granted at 79, D = 18 + 2*12 = 42, c = 121."""
    W = WIDE.word_bytes
    wt, act, table, ref = _case(WIDE, 3, 12)
    prog = _prog(12, dst_addr=700, dst_plane_stride=40)
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (712 * W, bytes([7] * W))]
    run, tpu = run_program(prog, WIDE, sram_segments=segs)
    mach = _executor(WIDE, prog, segs)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:712] == ref[:, :8]).all()
        assert (words[740:752] == ref[:, 8:]).all()
        assert (words[712] == 7).all()                  # between the planes: untouched
    assert (64, "MXU", 77000) in run.retire and (96, "VPU", 121000) in run.retire


def test_wide_overlapping_planes_later_write_wins():
    """dst_plane_stride 1 < count: writes in the order i outer, j inner; word 701 gets (i=0,
    j=1) then (i=1, j=0), word 702 (i=1, j=1) then (i=2, j=0): the later ones stay."""
    W = WIDE.word_bytes
    wt, act, table, ref = _case(WIDE, 4, 3)
    prog = _prog(3, dst_addr=700, dst_plane_stride=1)
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table)]
    _, tpu = run_program(prog, WIDE, sram_segments=segs)
    mach = _executor(WIDE, prog, segs)
    expect = np.stack([ref[0, :8], ref[1, :8], ref[2, :8], ref[2, 8:]])
    assert (tpu.sram.words[700:704] == expect).all()
    assert (mach.sram[700:704] == expect).all()


@pytest.mark.parametrize("group", [0, 1])
def test_tall_requant_fills_one_lane_group(group):
    """Lanes group*8 .. group*8 + 7 of words 700.. get the row; the other group keeps 0x55.
    MATMUL c = 41 + 5 + 16 + 8 = 70; REQUANT s = 71, g = 72, D = 5 + 5 = 10, c = 82."""
    W = TALL.word_bytes
    wt, act, table, ref = _case(TALL, 5 + group, 5)
    prog = _prog(5, dst_addr=700, lane_group=group)
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (700 * W, bytes([0x55] * 5 * W))]
    run, tpu = run_program(prog, TALL, sram_segments=segs)
    mach = _executor(TALL, prog, segs)
    lanes = slice(8 * group, 8 * group + 8)
    other = slice(8 - 8 * group, 16 - 8 * group)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:705, lanes] == ref).all()
        assert (words[700:705, other] == 0x55).all()
    assert (64, "MXU", 70000) in run.retire and (96, "VPU", 82000) in run.retire


def test_tall_two_groups_make_one_word():
    """Two REQUANTs of two N tiles (two accumulator regions) into the two groups of the same words."""
    W = TALL.word_bytes
    wt, act, table, ref = _case(TALL, 9, 4)
    prog = [make("LOAD_QREG", qreg=1, zero_point=-3),
            make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", act_addr=100, count_x=4, stride_x=1, count_y=1, acc_addr=0),
            make("MATMUL", signal=VPU, act_addr=100, count_x=4, stride_x=1, count_y=1, acc_addr=8),
            make("REQUANT", wait=MXU, acc_addr=0, count=4, param_addr=600, dst_addr=700, qreg=1, relu=1),
            make("REQUANT", acc_addr=8, count=4, param_addr=600, dst_addr=700, qreg=1, relu=1,
                 lane_group=1),
            make("HALT")]
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table)]
    _, tpu = run_program(prog, TALL, sram_segments=segs)
    mach = _executor(TALL, prog, segs)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:704] == np.concatenate([ref, ref], axis=1)).all()


def test_lane_group_past_the_word_is_a_device_error():
    prog = [make("LOAD_QREG", qreg=0),
            make("REQUANT", acc_addr=0, count=1, param_addr=0, dst_addr=100, qreg=0, lane_group=2),
            make("HALT")]
    msg = re.escape("instruction #1 at pc 0x20 (REQUANT): lane_group=0x2 (2) writes lanes 16..23, past the "
           "16-byte word (2 lane group(s) of 8 bytes)")
    with pytest.raises(SimulationError, match=msg):
        run_program(prog, TALL)
    mach = Machine(TALL)
    mach.execute(0, prog[0])
    with pytest.raises(DeviceError, match=msg) as e:
        mach.execute(1, prog[1])
    assert e.value.code == "vpu_sram_range"
    # square and wide arrays have one lane group: lane_group must be 0
    with pytest.raises(SimulationError, match=r"lane_group=0x1 \(1\) writes lanes 8\.\.15, past the 8-byte word"):
        run_program([prog[0], make("REQUANT", count=1, qreg=0, lane_group=1), prog[2]], WIDE)


def test_last_plane_past_the_sram_is_a_device_error():
    """small_wide: 2048 words; planes at 2000 and 2000 + 40: the second runs past the end."""
    prog = [make("LOAD_QREG", qreg=0),
            make("REQUANT", acc_addr=0, count=10, param_addr=0, dst_addr=2000, dst_plane_stride=40, qreg=0),
            make("HALT")]
    with pytest.raises(SimulationError, match=r"dst_addr=0x7d0 \(2000\) \+ 50 words reaches SRAM word "
                                              r"0x801, past the last word 0x7ff"):
        run_program(prog, WIDE)
