"""SOFTMAX / LAYERNORM on the SimPy VPU: bit-exact with the golden executor (tpusim.arch.rowops
on tpusim.arch.arith), timing D = rows*4n / rows*9n, device checks.

Config 'small': W = 8 lanes; the first instruction starts at core edge 20."""
import math

import numpy as np
import pytest

from tpusim.arch import executor
from tpusim.arch.arith import quantize_multiplier
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import decode, encode, make
from tpusim.arch.rowops import ln_param_words
from tpusim.sim import run_program

CFG = load_config("small")
W = 8


def _i8(a) -> bytes:
    return np.ascontiguousarray(a, dtype=np.int8).tobytes()


def _segments(rng):
    x = rng.integers(-128, 128, (60, W), dtype=np.int8)
    x[0] = 9                                          # an all-equal word (rows below start here)
    x[3, :5] = -128                                   # masked logits
    table = ln_param_words(rng.integers(-32768, 32768, 21), rng.integers(-2 ** 31, 2 ** 31, 21), W)
    return [(100 * W, _i8(x)), (400 * W, _i8(table))], x


def _golden(prog, segments):
    m = executor.Machine(CFG)
    flat = m.sram.reshape(-1)
    for addr, data in segments:
        flat[addr:addr + len(data)] = np.frombuffer(data, np.int8)
    executor.run_tokens(prog, executor.dispatch(prog), m.execute, None)
    return m


@pytest.mark.parametrize("op, extra, per_word", [
    ("SOFTMAX", dict(exp_mult=round(0.07 * math.log2(math.e) * 2 ** 20), mask=1), 4),
    ("LAYERNORM", dict(param_addr=400, eps=5 << 16), 9),
])
def test_rowop_simpy_equals_golden_and_timing(op, extra, per_word):
    rng = np.random.default_rng(3)
    segs, _ = _segments(rng)
    m, s = quantize_multiplier(2.0 ** -30 * 256 if op == "SOFTMAX" else 0.003)
    ins = make(op, src_addr=100, dst_addr=200, row_len=21, rows=6, src_stride=4, dst_stride=3,
               qreg_out=33, **extra)
    assert decode(encode(ins)) == ins
    prog = [make("LOAD_QREG", qreg=33, multiplier=m, shift=s, zero_point=-7), ins, make("HALT")]
    run, tpu = run_program(prog, CFG, sram_segments=segs)
    gold = _golden(prog, segs)
    assert (tpu.sram.words == gold.sram).all()
    assert not (tpu.sram.words[200:218] == 0).all()
    # LOAD_QREG s = 20, c = 21; the row op starts at 22 (idle after c), is granted at 23:
    # c = 23 + rows * n * per_word
    assert (32, "VPU", (23 + 6 * 3 * per_word) * 1000) in run.retire


@pytest.mark.parametrize("op", ["SOFTMAX", "LAYERNORM"])
def test_rowop_in_place_simpy_equals_golden(op):
    rng = np.random.default_rng(4)
    segs, _ = _segments(rng)
    extra = dict(exp_mult=70000, mask=0) if op == "SOFTMAX" else dict(param_addr=400, eps=0)
    prog = [make("LOAD_QREG", qreg=2, multiplier=1 << 30, shift=-20, zero_point=5),
            make(op, src_addr=100, dst_addr=101, row_len=16, rows=3, src_stride=1, dst_stride=1,
                 qreg_out=2, **extra),
            make("HALT")]
    _, tpu = run_program(prog, CFG, sram_segments=segs)
    assert (tpu.sram.words == _golden(prog, segs).sram).all()


def test_rowop_no_rows_is_quick_and_not_checked():
    prog = [make("SOFTMAX", src_addr=2040, dst_addr=0, row_len=0, rows=5, qreg_out=9), make("HALT")]
    run, _ = run_program(prog, CFG)
    assert (0, "VPU", 21000) in run.retire                 # c = s + 1, no range or qreg error


@pytest.mark.parametrize("fields, match", [
    (dict(src_addr=2046, row_len=17, rows=1), r"src_addr=0x7fe \(2046\) \+ 3 words"),
    (dict(dst_addr=2000, row_len=8, rows=3, dst_stride=24), r"dst_addr=0x7d0 \(2000\) \+ 49 words"),
    (dict(param_addr=2040, row_len=16, rows=1), r"param_addr=0x7f8 \(2040\) \+ 12 words"),
    (dict(row_len=16, rows=1, qreg_out=5), r"qreg_out=0x5 \(5\) \(bank 0, entry 5\)"),
])
def test_layernorm_device_checks(fields, match):
    prog = [make("LOAD_QREG", qreg=0), make("LAYERNORM", **fields), make("HALT")]
    with pytest.raises(SimulationError, match=match):
        run_program(prog, CFG)
