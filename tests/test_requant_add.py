"""REQUANT_ADD (docs/architecture.md, "VPU and quant registers"): REQUANT then the residual ADD
of its output and a skip region in one pass, on the ISA executor and the SimPy model, against
the REQUANT + ADD pair it replaces: values (square, wide planes, tall lane groups, in place),
cycles (D = param_words + 2*planes*count) and device errors; and the compiler's fused residual
Add lowering to it (no ADD left).
"""
import re

import numpy as np
import pytest

from tests.test_backend_ops import B, check
from tests.test_nonsquare_requant import _case as nonsquare_case
from tests.test_nonsquare_requant import _executor, _i8
from tpusim.arch.arith import add_int8, requant_conv
from tpusim.arch.config import load_config
from tpusim.arch.errors import DeviceError, SimulationError
from tpusim.arch.executor import Machine
from tpusim.arch.isa import decode_program, make
from tpusim.arch.operands import _reads_an_earlier_write, requant_table
from tpusim.sim import run_program

SMALL, WIDE, TALL = load_config("small"), load_config("small_wide"), load_config("small_tall")
MXU, VPU = 1 << 2, 1 << 3
QA, QB, QO = (5, -1 << 30 | 12345, -2, 4), (9, 1 << 30, -1, -20), (33, 1518500250, -1, 7)


def _case(cfg, seed: int, m: int):
    """test_nonsquare_requant's weights, activations and table, and the int8 conv output [m, C]
    (zero point QA's, no relu)."""
    wt, act, table, _ = nonsquare_case(cfg, seed, m)
    bias, mult, shift = requant_table(table, cfg.array_cols)
    conv = requant_conv(act.astype(np.int64) @ wt.astype(np.int64), bias, mult, shift, QA[3], False)
    return wt, act, table, conv


def _add(a, b, relu: bool):
    return add_int8(a, b, QA[3], QA[1], QA[2], QB[3], QB[1], QB[2], QO[3], QO[1], QO[2], relu)


def _qregs():
    return [make("LOAD_QREG", qreg=q, multiplier=m, shift=s, zero_point=z) for q, m, s, z in (QA, QB, QO)]


def _prog(m: int, op: str, **args):
    return [*_qregs(), make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", signal=VPU, act_addr=100, count_x=m, stride_x=1, count_y=1, acc_addr=0),
            make(op, wait=MXU, acc_addr=0, count=m, param_addr=600, qreg=QA[0], **args),
            make("HALT")]


def _fused(add_relu: int = 1, **args) -> dict:
    return dict(qreg_b=QB[0], qreg_out=QO[0], add_relu=add_relu, **args)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("add_relu", [0, 1])
def test_square_equals_requant_then_add(in_place, add_relu):
    """small (8x8): word 700 + i = add(conv row i, skip word i); the pair REQUANT -> buffer, ADD
    gives the same bytes. One SRAM transaction of D = 9 + 2*12 = 33 accesses, completing at
    g + D, against the pair's REQUANT (9 + 12) and ADD (3*12)."""
    W = SMALL.word_bytes
    wt, act, table, conv = _case(SMALL, 1 + in_place, 12)
    skip = np.random.default_rng(7).integers(-128, 128, (12, W), dtype=np.int8)
    sk = 700 if in_place else 800
    prog = _prog(12, "REQUANT_ADD", dst_addr=700, **_fused(add_relu, skip_addr=sk))
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (sk * W, _i8(skip))]
    run, tpu = run_program(prog, SMALL, sram_segments=segs)
    mach = _executor(SMALL, prog, segs)
    want = _add(conv, skip, bool(add_relu))
    pair = _prog(12, "REQUANT", dst_addr=900)[:-1] + [
        make("ADD", src_a=900, src_b=sk, dst_addr=700, count=12, qreg_a=QA[0], qreg_b=QB[0], qreg_out=QO[0],
             relu=add_relu), make("HALT")]
    prun, ptpu = run_program(pair, SMALL, sram_segments=segs)
    for words in (tpu.sram.words, mach.sram, ptpu.sram.words):
        assert (words[700:712] == want).all()
    (_, g, d), = [x for x in run.sram_grants if x[0] == 3]
    assert d == 33 and (160, "VPU", g + 33000) in run.retire
    assert [x[2] for x in prun.sram_grants if x[0] == 3] == [21, 36]


def test_wide_planes_read_the_skip_in_the_destination_layout():
    """small_wide (8x16): 2 planes 40 words apart in both the destination and the skip; D = 18 +
    2*2*12 = 66, c = g + D."""
    W = WIDE.word_bytes
    wt, act, table, conv = _case(WIDE, 3, 12)
    skip = np.random.default_rng(8).integers(-128, 128, (52, W), dtype=np.int8)
    prog = _prog(12, "REQUANT_ADD", dst_addr=700, dst_plane_stride=40, **_fused(skip_addr=900))
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (900 * W, _i8(skip)),
            (712 * W, bytes([7] * W))]
    run, tpu = run_program(prog, WIDE, sram_segments=segs)
    mach = _executor(WIDE, prog, segs)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:712] == _add(conv[:, :8], skip[:12], True)).all()
        assert (words[740:752] == _add(conv[:, 8:], skip[40:52], True)).all()
        assert (words[712] == 7).all()
    (_, g, d), = [x for x in run.sram_grants if x[0] == 3]
    assert d == 66 and (160, "VPU", g + 66000) in run.retire


def test_tall_lane_groups_in_place_keep_the_other_groups_skip():
    """small_tall (16x8): two REQUANT_ADDs in place into the two lane groups of the same words:
    the second reads its group's skip lanes unchanged by the first (which wrote only its own)."""
    W = TALL.word_bytes
    wt, act, table, conv = _case(TALL, 9, 4)
    skip = np.random.default_rng(9).integers(-128, 128, (4, W), dtype=np.int8)
    prog = [*_qregs(), make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", act_addr=100, count_x=4, stride_x=1, count_y=1, acc_addr=0),
            make("MATMUL", signal=VPU, act_addr=100, count_x=4, stride_x=1, count_y=1, acc_addr=8),
            make("REQUANT_ADD", wait=MXU, acc_addr=0, count=4, param_addr=600, dst_addr=700, qreg=QA[0],
                 **_fused(skip_addr=700)),
            make("REQUANT_ADD", acc_addr=8, count=4, param_addr=600, dst_addr=700, qreg=QA[0], lane_group=1,
                 **_fused(skip_addr=700)),
            make("HALT")]
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (700 * W, _i8(skip))]
    _, tpu = run_program(prog, TALL, sram_segments=segs)
    mach = _executor(TALL, prog, segs)
    want = _add(np.concatenate([conv, conv], axis=1), skip, True)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:704] == want).all()


def test_skip_overlapping_the_destination_reads_earlier_writes():
    """skip_addr = dst_addr - 1: write i reads word dst + i - 1, written by write i - 1 (the
    sequence's order), on both models."""
    W = SMALL.word_bytes
    wt, act, table, conv = _case(SMALL, 4, 5)
    first = np.full((1, W), 3, np.int8)
    prog = _prog(5, "REQUANT_ADD", dst_addr=700, **_fused(0, skip_addr=699))
    segs = [(16 * W, _i8(wt.T)), (100 * W, _i8(act)), (600 * W, table), (699 * W, _i8(first))]
    _, tpu = run_program(prog, SMALL, sram_segments=segs)
    mach = _executor(SMALL, prog, segs)
    prev, want = first[0], []
    for i in range(5):
        prev = _add(conv[i], prev, False)
        want.append(prev)
    for words in (tpu.sram.words, mach.sram):
        assert (words[700:705] == np.stack(want)).all()


def test_only_a_skip_read_of_an_earlier_write_needs_the_write_order():
    """In place (each write reads its own word first) and reads of later writes take the one
    vector step; a read of a word an earlier write wrote takes the sequence (above)."""
    w = np.arange(700, 705)
    assert not _reads_an_earlier_write(w, w)                    # in place
    assert not _reads_an_earlier_write(w + 1, w)                # reads words written after
    assert not _reads_an_earlier_write(w + 100, w)              # apart
    assert _reads_an_earlier_write(w - 1, w)                    # write i reads write i - 1's word
    assert _reads_an_earlier_write(np.array([1, 2, 5]), np.array([5, 6, 7]))   # write 2 reads write 0's word
    assert not _reads_an_earlier_write(np.array([5, 2, 3]), np.array([5, 6, 7]))


@pytest.mark.parametrize("field,args,text", [
    ("skip_addr", dict(skip_addr=4094), "skip_addr=0xffe (4094) + 3 words reaches SRAM word 0x1000"),
    ("qreg_b", dict(skip_addr=0, qreg_b=40), "qreg_b=0x28 (40) (bank 2, entry 8) reads a quant register"),
    ("qreg_out", dict(skip_addr=0, qreg_b=QB[0], qreg_out=41), "qreg_out=0x29 (41) (bank 2, entry 9)"),
])
def test_device_errors(field, args, text):
    """The skip's last word past the SRAM (vpu_sram_range), then unloaded qreg_b / qreg_out
    (qreg_unloaded), named on both models."""
    a = dict(dict(qreg_b=QB[0], qreg_out=QO[0]), **args)
    prog = [*_qregs(), make("REQUANT_ADD", acc_addr=0, count=3, param_addr=0, dst_addr=100, qreg=QA[0], **a),
            make("HALT")]
    with pytest.raises(SimulationError, match=re.escape(text)):
        run_program(prog, SMALL)
    mach = Machine(SMALL)
    for i, ins in enumerate(prog[:3]):
        mach.execute(i, ins)
    with pytest.raises(DeviceError, match=re.escape(text)) as e:
        mach.execute(3, prog[3])
    assert e.value.field == field


@pytest.mark.parametrize("cfg", [SMALL, WIDE, TALL], ids=["small", "small_wide", "small_tall"])
@pytest.mark.parametrize("skip_first", [False, True])
def test_fused_residual_add_lowers_to_requant_add(cfg, skip_first):
    """A fused residual Add (either operand order) compiles to REQUANT_ADDs, one per REQUANT the
    conv alone would make, and no ADD; SimPy and the executor match the unfused golden model."""
    g = B((1, 16, 9, 9), seed=11)
    c = g.conv(g.x, 16, 1)
    y = g.add(g.x, c, relu=True) if skip_first else g.add(c, g.x, relu=True)
    b = check(g.graph([y]), g.input(), cfg=cfg)
    ops = [ins.op for ins in decode_program(b.code)]
    assert "ADD" not in ops and "REQUANT" not in ops and ops.count("REQUANT_ADD") > 0
