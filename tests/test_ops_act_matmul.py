"""MatMul of two activations on the systolic array (tpucompile.ops.act_matmul) on 'small': the
stationary operand's blocked layout used as the weight tiles, golden == SimPy == the ISA executor
bit-exactly, the golden against the integer matmul, refusals naming the op."""
from __future__ import annotations

import numpy as np
import pytest

from tests.test_backend_ops import B, check
from tpucompile.golden import run_golden
from tpucompile.ops.act_matmul import QActMatMul, act_matmul_qop
from tpusim.arch import arith
from tpusim.arch.errors import CompileError


def _attention_scores(k: int, tokens: int, seed=0, zp_b=0):
    """x (1, k, 1, tokens) -> Q = conv1x1(x), K = conv1x1(x) (zero points 0) -> Q.K^T:
    (1, tokens keys, 1, tokens queries)."""
    g = B((1, k, 1, tokens), seed=seed, zp=0)
    q = g.conv(g.x, k, 1, zp=0)
    kk = g.conv(g.x, k, 1, zp=zp_b)
    s = g.t((1, tokens, 1, tokens))
    Q, K, S = g.tensors[q], g.tensors[kk], g.tensors[s]
    m, sh = arith.quantize_multiplier(Q.scale * K.scale / (S.scale * 40))
    g.ops.append(act_matmul_qop("qk", Q, K, S, m, sh))
    return g, s, (q, kk)


@pytest.mark.parametrize("k,tokens", [(8, 8), (16, 12), (20, 19), (5, 30)])
def test_q_kt_is_bit_exact_on_the_device(k, tokens):
    """K in 1..3 channel blocks, key counts a multiple of the array width or with a partial last
    N tile, several query tiles."""
    g, s, _ = _attention_scores(k, tokens)
    b = check(g.graph([s]), g.input())
    layer = next(entry for entry in b.meta["layers"] if entry["name"] == "qk")
    assert layer["macs"] == k * tokens * tokens


def test_golden_is_the_integer_matmul():
    g, s, (q, kk) = _attention_scores(16, 12, seed=3)
    qg = g.graph([s, q, kk])
    env = run_golden(qg, g.input(5))
    a, bb = env[q].astype(np.int64)[0, :, 0, :], env[kk].astype(np.int64)[0, :, 0, :]     # [K, tokens]
    op = next(o for o in qg.ops if isinstance(o, QActMatMul))
    acc = bb.T @ a                                   # [keys, queries] = sum_k K[k, key] Q[k, query]
    want = np.clip(arith.requant(acc, int(op.mult[0]), int(op.shift[0])) + op.y_zp, -128, 127)
    assert np.array_equal(env[s][0, :, 0, :], want)


def test_an_operand_with_a_zero_point_is_refused_naming_the_op():
    g, s, _ = _attention_scores(8, 8, zp_b=3)
    with pytest.raises(CompileError, match=r"QActMatMul 'qk': operands 't1' \(zero point 0\) and 't2' \(zero point "
                                           r"3\) must be quantized symmetrically"):
        g.graph([s]).validate()


@pytest.mark.rtl
def test_q_kt_three_way_on_the_small_rtl(tmp_path):
    """Two channel blocks, a partial last N tile: golden == SimPy == RTL, same cycles and retire
    trace (the weight tiles read from an activation's DDR buffer)."""
    from cocotb_tests.harness import run_rtl
    from tests.test_backend_ops import CFG, run_device
    from tpusim.arch.binary import TpuBinary
    from tpusim.arch.retire import first_retire_difference
    from tpusim.sim import run_binary
    g, s, _ = _attention_scores(16, 12, seed=1)
    qg, x = g.graph([s]), g.input(2)
    b, results, env = run_device(qg, x)
    path = tmp_path / "qk.tpubin"
    b.write(path)
    rtl = run_rtl(path, CFG, {b.inputs[0].name: x}, tmp_path / "rtl", max_cycles=200_000)
    assert rtl.ok, rtl.message
    sim = run_binary(TpuBinary.read(path), CFG, {b.inputs[0].name: x})
    for o in b.outputs:
        assert np.array_equal(np.asarray(rtl.outputs[o.name]), env[qg.resolve(o.name)])
        assert np.array_equal(np.asarray(sim.outputs[o.name]), env[qg.resolve(o.name)])
    assert rtl.cycles == sim.cycles and len(rtl.retire) == len(sim.retire) > 10
    assert first_retire_difference(sim.retire, rtl.retire) is None
