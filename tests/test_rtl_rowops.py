"""SOFTMAX and LAYERNORM on the RTL (small config, W = 8): outputs, cycles, retire trace and
counters equal the SimPy model's, over random and edge rows (all-equal rows, a single huge logit,
masked and fully masked rows, zero variance, saturation, rows ending mid-word, in place)."""
import math

import numpy as np
import pytest

from tpusim.arch import isa
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.rowops import ln_param_words

pytestmark = pytest.mark.rtl

CODE_ADDR = 0x100000
ROWS_WORDS = 64         # the input region: 64 words at SRAM word 0
TABLE_WORDS = 36        # LAYERNORM table of a 43-element row: 6 * ceil(43/8) words at word 100


def _words_tensor(name, words, ddr, w):
    return TensorDesc(name, (1, w, 1, words), 0.1, 0, ddr, w)


def _as_tensor(words_arr):
    """int8 [words, W] -> the (1, W, 1, words) tensor whose DDR image is those words."""
    return np.ascontiguousarray(words_arr.T[None, :, None, :])


def _program(w):
    sm_mult, sm_shift = 1 << 30, -21          # p (Q30) / 2^22: S_out = 1/256
    em = round(0.09 * math.log2(math.e) * 2 ** 20)
    text = f"""
        DMA_LOAD ddr_addr=0x200000 sram_addr=0 inner_bytes={ROWS_WORDS * w} count1=1 count2=1
        DMA_LOAD ddr_addr=0x210000 sram_addr={100 * w} inner_bytes={TABLE_WORDS * w} count1=1 count2=1 signal=VPU
        LOAD_QREG qreg=3 multiplier={sm_mult} shift={sm_shift} zero_point=-128 wait=LOAD
        LOAD_QREG qreg=40 multiplier=1518500250 shift=-24 zero_point=5
        SOFTMAX src_addr=0 dst_addr=200 row_len=21 rows=6 src_stride=3 dst_stride=3 qreg_out=3 exp_mult={em} mask=1
        SOFTMAX src_addr=20 dst_addr=220 row_len=16 rows=4 src_stride=2 dst_stride=2 qreg_out=3 exp_mult={8 * em} mask=0
        LAYERNORM src_addr=30 dst_addr=240 row_len=43 rows=5 src_stride=6 dst_stride=6 qreg_out=40 param_addr=100 eps=70000
        LAYERNORM src_addr=30 dst_addr=30 row_len=43 rows=2 src_stride=6 dst_stride=6 qreg_out=40 param_addr=100 eps=0
        SOFTMAX src_addr=0 dst_addr=1 row_len=24 rows=1 src_stride=0 dst_stride=0 qreg_out=40 exp_mult=5000000 mask=1 signal=STORE
        DMA_STORE ddr_addr=0x300000 sram_addr=0 inner_bytes={300 * w} count1=1 count2=1 wait=VPU
        HALT
    """
    return isa.encode_program(isa.assemble(text))


def _inputs(w):
    rng = np.random.default_rng(17)
    x = rng.integers(-128, 128, (ROWS_WORDS, w), dtype=np.int8)
    x[0:3] = 7                                   # SOFTMAX row 0: all equal
    x[3:6] = -90
    x[4, 2] = 127                                # row 1: a single huge logit
    x[6:9] = -128
    x[7, 5] = 3                                  # row 2: masked but one lane
    x[9:12] = -128                               # row 3: fully masked
    x[30:36] = -17                               # LAYERNORM row 0: zero variance
    x[36:42] = np.where(np.arange(6 * w).reshape(6, w) % 2, 127, -128)   # row 1: largest variance
    gamma = rng.integers(-32768, 32768, 43)
    beta = rng.integers(-2 ** 28, 2 ** 28, 43)
    gamma[:4], beta[:4] = 32767, 2 ** 31 - 1     # saturation of acc
    return x, ln_param_words(gamma, beta, w)


def test_rowops_rtl_equals_simpy(tmp_path):
    from cocotb_tests.harness import run_rtl
    from tpusim.sim import run_binary
    cfg = load_config("small")
    w = cfg.word_bytes
    x, table = _inputs(w)
    assert table.shape == (TABLE_WORDS, w)
    ins = [_words_tensor("x", ROWS_WORDS, 0x200000, w), _words_tensor("t", TABLE_WORDS, 0x210000, w)]
    outs = [_words_tensor("y", 300, 0x300000, w)]
    b = TpuBinary(cfg.hash_bytes(), CODE_ADDR, _program(w), inputs=ins, outputs=outs)
    path = tmp_path / "rowops.tpubin"
    b.write(path)
    inputs = {"x": _as_tensor(x), "t": _as_tensor(table)}
    rtl = run_rtl(path, cfg, inputs, tmp_path / "rtl", max_cycles=200_000)
    assert rtl.ok, rtl.message
    sim = run_binary(TpuBinary.read(path), cfg, inputs)
    np.testing.assert_array_equal(rtl.outputs["y"], sim.outputs["y"])
    y = sim.outputs["y"][0, :, 0, :].T                       # [300 words, W]
    assert (y[200:218] != 0).any() and (y[240:270] != 0).any()
    assert rtl.cycles == sim.cycles
    assert rtl.retire == sim.retire
    assert rtl.counters == sim.counters


def test_rowop_invalid_paths_rtl_flag_like_simpy(tmp_path):
    """Every SOFTMAX / LAYERNORM checker path of stressgen.invalid (unused bits, qreg_out never
    loaded, source / destination / table past the SRAM) stops the RTL with the same device
    error, pc and cycle as SimPy (tpu_vpu_check against tpusim.arch.device_checks)."""
    from stressgen.gen import generate
    from stressgen.invalid import INVALID_PATHS, invalid_path_of
    from stressgen.runner import run_one
    cfg = load_config("small")

    def rowop_path(p) -> bool:
        cls, path = p
        name = path[0] if isinstance(path, tuple) else path
        return name in ("SOFTMAX", "LAYERNORM") or str(name).startswith(("vpu_sram_sm_", "vpu_sram_ln_"))
    want = {p for p in INVALID_PATHS if rowop_path(p)}
    assert len(want) == 9
    seen = {}
    for seed in range(4 * len(INVALID_PATHS)):
        p = invalid_path_of(seed, 0.5)
        if p is not None and p in want and p not in seen:
            seen[p] = seed
    assert set(seen) == want
    for p, seed in seen.items():
        prog = generate(seed, cfg, invalid_rate=0.5)
        o = run_one(prog, cfg, tmp_path / str(seed), rtl=True, bugs=(), waves=False)
        assert o.passed, (p, seed, o.details)
        assert o.details["rtl_flag"] == o.details["simpy_flag"] and o.details["rtl_flag"][0] == "error"
