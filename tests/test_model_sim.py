"""run_binary end to end: a hand-built 1x1 convolution .tpubin on the 'small' config, checked
against numpy + tpusim.arch.arith; VCD output; input checking."""
import numpy as np
import pytest

from tpusim.arch.arith import quantize_multiplier, requant_conv
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError
from tpusim.arch.isa import encode_program, make
from tpusim.arch.perf import COUNTERS
from tpusim.sim import run_binary

CFG = load_config("small")
LOAD, STORE, MXU, VPU = 1, 2, 4, 8       # engine mask bits
K = N = 8                                 # channels (one block) on the 8x8 array


def build_conv_binary(cfg=CFG, seed=0):
    """1x1 conv, 8 -> 8 channels on a 4x4 image, requantised with ReLU; returns (binary, ref_fn).

    DDR: x at 0x10000 (16 words), weights (8 words, word n = W[:, n]) + requant table (9 words)
    at 0x30000, y at 0x20000. SRAM words: x 0..15, weights 16..23, table 24..32, y 40..55."""
    rng = np.random.default_rng(seed)
    wt = rng.integers(-128, 128, (K, N), dtype=np.int8)
    bias = rng.integers(-3000, 3000, N).astype("<i4")
    mq = [quantize_multiplier(r) for r in rng.uniform(0.002, 0.01, N)]
    mult = np.array([m for m, _ in mq], "<i4")
    shift = np.array([s for _, s in mq], np.int8)
    const = wt.T.tobytes() + bias.tobytes() + mult.tobytes() + shift.tobytes()    # 136 bytes
    x_desc = TensorDesc("x", (1, K, 4, 4), 0.05, 3, 0x10000, 8)
    y_desc = TensorDesc("y", (1, N, 4, 4), 0.1, -5, 0x20000, 8)
    dma = dict(count1=1, count2=1)
    prog = [
        make("LOAD_QREG", qreg=0, zero_point=-5),
        make("DMA_LOAD", signal=MXU, ddr_addr=0x30000, sram_addr=16 * 8, inner_bytes=136, **dma),
        make("DMA_LOAD", signal=MXU, ddr_addr=0x10000, sram_addr=0, inner_bytes=128, **dma),
        make("LOAD_WEIGHTS", wait=LOAD, sram_addr=16),
        make("MATMUL", wait=LOAD, signal=VPU, act_addr=0, count_x=16, stride_x=1, count_y=1),
        make("REQUANT", wait=MXU, signal=STORE, acc_addr=0, count=16, param_addr=24, dst_addr=40,
             qreg=0, relu=1),
        make("DMA_STORE", wait=VPU, ddr_addr=0x20000, sram_addr=40 * 8, inner_bytes=128, **dma),
        make("HALT"),
    ]
    binary = TpuBinary(cfg.hash_bytes(), 0x0, encode_program(prog), consts=[(0x30000, const)],
                       inputs=[x_desc], outputs=[y_desc])

    def ref(x):
        xw = x[0].reshape(K, 16).T.astype(np.int64)               # word h*4+w = x[:, h, w]
        y = requant_conv(xw @ wt.astype(np.int64), bias, mult, shift, -5, True)   # [16, N]
        return y.T.reshape(1, N, 4, 4)
    return binary, ref


def test_conv_end_to_end(tmp_path):
    binary, ref = build_conv_binary()
    x = np.random.default_rng(9).integers(-128, 128, (1, K, 4, 4), dtype=np.int8)
    res = run_binary(binary, CFG, {"x": x}, vcd=tmp_path / "run.vcd")
    assert res.outputs["y"].dtype == np.int8
    assert (res.outputs["y"] == ref(x)).all()
    assert list(res.counters) == list(COUNTERS)
    assert res.counters["cycles"] == res.cycles
    assert [eng for _, eng, _ in res.retire].count("LOAD") == 2
    assert res.retire[-1][1] == "HALT" and res.retire[-1][2] == res.cycles * 1000
    times = [t for _, _, t in res.retire]
    assert times == sorted(times)
    assert res.counters["ddr_read_bytes"] == 136 + 128 and res.counters["ddr_write_bytes"] == 128
    vcd = (tmp_path / "run.vcd").read_text()
    assert "$var wire 1" in vcd and "$scope module mxu $end" in vcd and " busy $end" in vcd
    assert "$scope module ddr $end" in vcd and " grant $end" in vcd


def test_deterministic():
    binary, _ = build_conv_binary()
    x = np.zeros((1, K, 4, 4), np.int8)
    a = run_binary(binary, CFG, {"x": x})
    b = run_binary(binary, CFG, {"x": x})
    assert a.retire == b.retire and a.counters == b.counters


def test_input_errors():
    binary, _ = build_conv_binary()
    with pytest.raises(SimulationError, match="missing input 'x'"):
        run_binary(binary, CFG, {})
    with pytest.raises(SimulationError, match="input 'x' has dtype int32, expected int8"):
        run_binary(binary, CFG, {"x": np.zeros((1, K, 4, 4), np.int32)})
    with pytest.raises(SimulationError, match=r"unknown input\(s\) \['z'\]"):
        run_binary(binary, CFG, {"x": np.zeros((1, K, 4, 4), np.int8), "z": 0})
