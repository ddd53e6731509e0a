"""MXU: LOAD_WEIGHTS + MATMUL against numpy, timing c = g + M + R + C, double-buffered weights,
address errors.

Config 'small': R = C = 8, SRAM words of 8 int8 lanes, 512-row accumulator, core 1000 ps.
"""
import numpy as np
import pytest

from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import make
from tpusim.sim import run_program

CFG = load_config("small")
R = C = 8
W = CFG.word_bytes


def _words(arr: np.ndarray) -> bytes:
    return np.ascontiguousarray(arr, dtype=np.int8).tobytes()


def test_matmul_strided_accumulate_vs_numpy():
    rng = np.random.default_rng(1)
    wt = rng.integers(-128, 128, (R, C), dtype=np.int8)      # W[k][n]
    sram = rng.integers(-128, 128, (256, W), dtype=np.int8)   # words 0..255 (bank 0)
    sram[16:16 + C] = wt.T                                    # word 16 + n = W[:, n]
    prog = [make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", act_addr=40, count_x=3, stride_x=2, count_y=2, stride_y=10, acc_addr=5),
            make("MATMUL", act_addr=100, count_x=6, stride_x=1, count_y=1, acc_addr=5, accumulate=1),
            make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=[(0, _words(sram))])
    idx = [40 + x * 2 + y * 10 for y in range(2) for x in range(3)]
    ref = sram[idx].astype(np.int64) @ wt.astype(np.int64)
    ref += sram[100:106].astype(np.int64) @ wt.astype(np.int64)
    assert (tpu.acc.rows[5:11] == ref).all()
    assert (tpu.acc.rows[:5] == 0).all() and (tpu.acc.rows[11:] == 0).all()


def test_matmul_timing():
    """LOAD_WEIGHTS dispatched 19 -> start 20, request visible 21, granted 21, c = 21 + C = 29.
    MATMUL dispatched 20 (visible 21) starts at 30 (idle from c + 1), request visible 31,
    granted 31, M = 6: c = 31 + 6 + R + C = 53. HALT (line 1, valid 39) at 39: h = 54."""
    prog = [make("LOAD_WEIGHTS", sram_addr=16),
            make("MATMUL", act_addr=40, count_x=3, stride_x=2, count_y=2, stride_y=10),
            make("HALT")]
    run, _ = run_program(prog, CFG)
    assert run.retire == [(0, "MXU", 29000), (32, "MXU", 53000), (64, "HALT", 54000)]
    assert run.counters["mxu_busy_cycles"] == (29 - 20) + (53 - 30)


def test_empty_matmul_follows_rtl_contract():
    """count_x * count_y == 0: no SRAM request, c = s + 1 + R + C (docs/rtl_interfaces.md)."""
    run, _ = run_program([make("MATMUL", count_x=0, count_y=4), make("HALT")], CFG)
    assert run.retire[0] == (0, "MXU", (20 + 1 + R + C) * 1000)


@pytest.mark.parametrize("ins, field, value", [
    (make("MATMUL", act_addr=2040, count_x=4, stride_x=3, count_y=1), "act_addr", 2040),
    (make("MATMUL", act_addr=0, count_x=8, stride_x=1, count_y=1, acc_addr=508), "acc_addr", 508),
    (make("LOAD_WEIGHTS", sram_addr=2044), "sram_addr", 2044),
])
def test_address_past_end_is_an_error(ins, field, value):
    with pytest.raises(SimulationError) as ei:
        run_program([ins, make("HALT")], CFG)
    msg = str(ei.value)
    assert f"instruction #0 at pc 0x0 ({ins.op}): {field}={value:#x}" in msg
    assert "past" in msg



def _stream(ms, weights_at):
    """LOAD_WEIGHTS + MATMUL pairs: tile k at word ``weights_at[k]``, MATMUL k reads ``ms[k]``
    consecutive words from bank 1 (word bank_words + 64k) into accumulator rows 64k.."""
    prog = []
    for k, (m, wa) in enumerate(zip(ms, weights_at)):
        prog += [make("LOAD_WEIGHTS", sram_addr=wa),
                 make("MATMUL", act_addr=CFG.bank_words + 64 * k, count_x=m, stride_x=1, count_y=1,
                      acc_addr=64 * k)]
    return prog + [make("HALT")]


def test_double_buffered_stream():
    """Double-buffered weights (docs/architecture.md, "MXU"), tiles in bank 0, vectors in bank 1;
    instructions arrive two per fetch line (~20 cycles): LW0 s 20, g 21, L = c = 29. MM0 (M 40)
    s 30, g 31, A 71, P(plane 0) 79, c 87. LW1 (plane 1) s 40 during MM0's reads, L 49,
    c = max(49, 87 + 1) = 88. MM1 (M 4) waits for A: s 72, g 73, free 74, c 93. LW2 (plane 0)
    waits for P(0) = 79: s 80, L 89, c = max(89, 94) = 94. MM2 s 90, g 91, c 147; HALT 148.
    Each MATMUL multiplies by the tile of the LOAD_WEIGHTS before it."""
    rng = np.random.default_rng(2)
    sram = rng.integers(-128, 128, (2 * CFG.bank_words, W), dtype=np.int8)
    ms, at = (40, 4, 40), (16, 24, 32)
    run, tpu = run_program(_stream(ms, at), CFG, sram_segments=[(0, _words(sram))])
    for k, (m, wa) in enumerate(zip(ms, at)):
        x = sram[CFG.bank_words + 64 * k:CFG.bank_words + 64 * k + m].astype(np.int64)
        assert (tpu.acc.rows[64 * k:64 * k + m] == x @ sram[wa:wa + C].T.astype(np.int64)).all(), k
    assert [r[3] // 1000 for r in run.timeline] == [20, 30, 40, 72, 80, 90]
    assert [t // 1000 for _, _, t in run.retire] == [29, 87, 88, 93, 94, 147, 148]
    assert run.counters["sram_conflicts"] == 0


def test_weight_load_waits_for_a_shared_bank():
    """LW1's tile in bank 1, which MM0 reads: its request (visible 41) waits for MM0's 40 reads
    (g 31: bank free at 71), 30 conflict cycles, L 79, c 88; MM1 s 80, g 81, c 101; LW2 after
    MM1's free edge 82: s 83, c = max(92, 102); MM2 s 93, c 150."""
    run, _ = run_program(_stream((40, 4, 40), (16, CFG.bank_words + 300, 32)), CFG)
    assert [t // 1000 for _, _, t in run.retire] == [29, 87, 88, 101, 102, 150, 151]
    assert run.counters["sram_conflicts"] == 1
    assert run.counters["sram_conflict_cycles"] == 30
