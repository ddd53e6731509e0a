"""MXU + systolic array + accumulator vs numpy (tpusim.arch.arith.matmul_acc); MATMUL completion edge.

pytest builds dp_tb_top with Verilator (8x8 'small' config and a 4x4 variant) and runs the cocotb
tests below. Seeds are logged; DP_SEED=<n> replays.
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

try:
    import cocotb
    from cocotb.triggers import RisingEdge
except ImportError:  # pragma: no cover
    cocotb = None

from tpusim.arch import isa
from tpusim.arch.arith import matmul_acc, wrap32

if cocotb is not None and os.environ.get("COCOTB_TEST_MODULES"):
    from dp_tb import DpTb

    def _seed():
        s = int(os.environ.get("DP_SEED", random.randrange(1 << 30)))
        cocotb.log.info(f"DP_SEED={s}")
        return s

    async def _setup(dut):
        tb = DpTb(dut)
        await tb.start(int(os.environ["DP_SRAM_WORDS"]))
        return tb

    @cocotb.test()
    async def matmul_random(dut):
        """Random weights/activations, strided 2-D activation addressing, accumulate/overwrite."""
        tb = await _setup(dut)
        rng = np.random.default_rng(_seed())
        R, C = tb.W, tb.C
        acc_ref = {}
        for trial in range(6):
            w = rng.integers(-128, 128, size=(R, C), dtype=np.int64)
            if trial == 0:
                w[:] = -128
            w_addr = int(rng.integers(0, tb.sram_words - C))
            # word n = column n = W[0..R-1][n]
            await tb.write_words(w_addr, [tb.word_int(w[:, n]) for n in range(C)])
            s, g, c = await tb.run("mxu", isa.make("LOAD_WEIGHTS", sram_addr=w_addr))
            assert c == g + C, (s, g, c)
            cx, cy = int(rng.integers(1, 6)), int(rng.integers(1, 5))
            sx = int(rng.integers(1, 4))
            sy = cx * sx + int(rng.integers(0, 5))
            span = (cx - 1) * sx + (cy - 1) * sy + 1
            act_addr = int(rng.integers(0, tb.sram_words - span))
            x = rng.integers(-128, 128, size=(cy, cx, R), dtype=np.int64)
            if trial == 0:
                x[:] = -128
            img = {}
            for yy in range(cy):
                for xx in range(cx):
                    img[act_addr + xx * sx + yy * sy] = x[yy, xx]
            lo = min(img)
            words = [tb.word_int(img.get(a, np.zeros(R))) for a in range(lo, max(img) + 1)]
            await tb.write_words(lo, words)
            acc_addr = int(rng.integers(0, 40))
            accumulate = int(trial > 0 and rng.integers(0, 2))
            M = cx * cy
            s, g, c = await tb.run("mxu", isa.make(
                "MATMUL", act_addr=act_addr, count_x=cx, stride_x=sx, count_y=cy, stride_y=sy,
                acc_addr=acc_addr, accumulate=accumulate))
            assert g == s + 1, (s, g)
            assert c == g + M + R + C, f"MATMUL c={c} g={g} M={M} R={R} C={C}"
            res = matmul_acc(x.reshape(M, R), w)
            for i in range(M):
                row = acc_addr + i
                old = acc_ref.get(row, np.zeros(C, dtype=np.int64)) if accumulate else 0
                acc_ref[row] = wrap32(old + res[i].astype(np.int64))
            for row in sorted(acc_ref):
                got = await tb.read_acc(row)
                assert np.array_equal(got, acc_ref[row].astype(np.int32)), \
                    f"trial {trial} acc row {row}: got {got} want {acc_ref[row]}"
        dut._log.info(f"matmul_random: {len(acc_ref)} accumulator rows checked")

    @cocotb.test()
    async def matmul_wraparound_and_timing_under_conflict(dut):
        """int32 wrap-around over many accumulates; MATMUL delayed by a DMA burst on its banks."""
        tb = await _setup(dut)
        R, C = tb.W, tb.C
        await tb.write_words(0, [tb.word_int(np.full(R, -128))] * C)
        await tb.run("mxu", isa.make("LOAD_WEIGHTS", sram_addr=0))
        await tb.write_words(C, [tb.word_int(np.full(R, -128))])
        ref = np.zeros(C, dtype=np.int64)
        n_acc = (2 ** 31) // (R * 2 ** 14) + 2     # enough to wrap past INT32_MAX
        for i in range(n_acc):
            await tb.run("mxu", isa.make("MATMUL", act_addr=C, count_x=1, stride_x=1, count_y=1,
                                         stride_y=1, acc_addr=7, accumulate=int(i > 0)))
            ref = wrap32(ref + R * 2 ** 14)
        got = await tb.read_acc(7)
        assert np.array_equal(got, ref.astype(np.int32)), (got, ref)
        # conflict: a 30-word DMA write burst on bank 0 started just before the MATMUL
        d = dut
        dma = cocotb.start_soon(tb.write_words(0, [0] * 30))
        await RisingEdge(d.clk_i)
        await RisingEdge(d.clk_i)
        s, g, c = await tb.run("mxu", isa.make("MATMUL", act_addr=C, count_x=3, stride_x=0,
                                               count_y=1, stride_y=0, acc_addr=0, accumulate=0))
        await dma
        assert g > s + 1, (s, g)
        assert c == g + 3 + R + C, (s, g, c)
        # M == 0: no request, behaves as granted at s+1
        s, g2, c = await tb.run("mxu", isa.make("MATMUL", act_addr=0, count_x=0, count_y=3))
        assert c == s + 1 + R + C, (s, c)

    @cocotb.test()
    async def matmul_speed(dut):
        """Event-driven long MATMUL (Python awaits only done): simulated cycles per second."""
        import time
        tb = await _setup(dut)
        R, C = tb.W, tb.C
        M = int(os.environ.get("DP_SPEED_M", "60000"))
        await tb.write_words(0, [tb.word_int(np.arange(R) % 7 - 3)] * (C + 1))
        await tb.run("mxu", isa.make("LOAD_WEIGHTS", sram_addr=0))
        cnt0 = int(dut.mxu_done_cnt_o.value)
        t0 = time.time()
        await tb.run("mxu", isa.make("MATMUL", act_addr=C, count_x=M, stride_x=0, count_y=1,
                                     acc_addr=0), wait_done=False)
        while int(dut.mxu_done_cnt_o.value) == cnt0:
            await dut.mxu_done_cnt_o.value_change
        dt = time.time() - t0
        s, g, c = (int(getattr(dut, f"mxu_{k}_o").value) for k in "sgc")
        assert c == g + M + R + C
        dut._log.info(f"SPEED {R}x{C}: {c - s} cycles in {dt:.2f} s = {(c - s) / dt:.0f} cycles/s")


def _params(rows):
    from dp_harness import cfg_params
    return cfg_params(rows=rows)


@pytest.mark.rtl
@pytest.mark.parametrize("rows", [8, 4])
def test_dp_mxu(rows):
    from dp_harness import UNIT, build_and_test
    p = _params(rows)
    t = build_and_test(f"mxu{rows}", "dp_tb_top", "test_dp_mxu", p,
                       extra_sources=[UNIT / "dp_tb_top.sv"])
    print(f"build {rows}x{rows}: {t:.1f} s")


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("rows", [32, 128])
def test_dp_mxu_speed(rows):
    """Build time and simulation speed of a large array (MATMUL timing checked too)."""
    from dp_harness import UNIT, build_and_test
    p = _params(rows)
    t = build_and_test(f"mxu{rows}", "dp_tb_top", "test_dp_mxu", p,
                       extra_sources=[UNIT / "dp_tb_top.sv"], testcase="matmul_speed",
                       extra_env={"DP_SPEED_M": "20000" if rows < 128 else "3000"})
    print(f"build {rows}x{rows}: {t:.1f} s")
