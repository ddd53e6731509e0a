"""Control-path RTL against the SimPy model, program by program ('small' config, Verilator).

Each test assembles a small program that stresses one part of the control path (fetch and the
line buffers, dispatch against full queues, cross-domain tokens and queues, HALT and the
reserved-opcode error, the DMA descriptor walk and burst splitting, DDR round robin with all
three requesters busy, SRAM bank conflicts) and requires the RTL to match the SimPy model
exactly: total cycles, every retire (PC, engine, time in ps), every performance counter, and
the output data where the program is race-free.

    .venv/bin/python -m pytest cocotb_tests/unit/test_ctrl_cosim.py -q
"""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from cocotb_tests.harness import run_rtl
from tpusim.arch import isa
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.device_checks import ddr_align_bytes
from tpusim.arch.errors import SimulationError
from tpusim.sim import run_binary

pytestmark = pytest.mark.rtl

# CTRL_CONFIG=<name or YAML path> runs the config-generic tests on another chip (seed: 128x128,
# a long first build)
CFG = load_config(os.environ.get("CTRL_CONFIG", "small"))
small_only = pytest.mark.skipif(CFG.name != "small", reason="program written for the small config")
CODE_ADDR = 0x100000


def _binary(text: str, inputs=(), outputs=(), consts=()) -> TpuBinary:
    code = isa.encode_program(isa.assemble(text))
    return TpuBinary(CFG.hash_bytes(), CODE_ADDR, code, consts=list(consts), inputs=list(inputs),
                     outputs=list(outputs))


def _run_both(tmp_path, binary: TpuBinary, inputs: dict, expect_error: bool = False):
    path = tmp_path / "prog.tpubin"
    binary.write(path)
    rtl = run_rtl(path, CFG, inputs, tmp_path / "rtl", max_cycles=200_000)
    if expect_error:
        with pytest.raises(SimulationError) as ei:
            run_binary(TpuBinary.read(path), CFG, inputs)
        sim = ei.value.run
        assert rtl.status == "error", rtl.message
    else:
        assert rtl.ok, rtl.message
        sim = run_binary(TpuBinary.read(path), CFG, inputs)
    assert rtl.cycles == sim.cycles
    _same_retires(rtl.retire, sim.retire)
    assert rtl.counters == sim.counters
    return rtl, sim


def _same_retires(rtl: list, sim: list) -> None:
    """Same multiset of (pc, engine, t); report the first difference in time order."""
    a, b = sorted(rtl, key=lambda r: (r[2], r[0])), sorted(sim, key=lambda r: (r[2], r[0]))
    for i, (x, y) in enumerate(zip(a, b)):
        assert x == y, f"retire #{i}: RTL {x} != SimPy {y}"
    assert len(a) == len(b), f"{len(a)} RTL retires, {len(b)} SimPy retires"


def test_token_ring_and_full_queues(tmp_path):
    """Tokens around LOAD -> MXU -> STORE -> VPU -> LOAD (every crossing: dma->core, core->dma,
    dma->dma, core->core), then runs of NOPs that fill the async (LOAD) and sync (MXU) queues,
    over 11 fetch lines (both line buffers recycled)."""
    n = 6
    lines = []
    for i in range(n):
        lines.append(f"NOP engine=0 {'wait=VPU' if i else ''} signal=MXU")
        lines.append("NOP engine=2 wait=LOAD signal=STORE")
        lines.append("NOP engine=1 wait=MXU signal=VPU")
        lines.append(f"NOP engine=3 wait=STORE {'signal=LOAD' if i < n - 1 else ''}")
    lines += ["NOP engine=0"] * 10 + ["NOP engine=2"] * 10 + ["NOP engine=1 signal=STORE"] * 3
    lines += ["NOP engine=1 wait=STORE"] * 3 + ["HALT"]
    rtl, _ = _run_both(tmp_path, _binary("\n".join(lines)), {})
    assert rtl.raw["retired"] == {"LOAD": n + 10, "STORE": n + 6, "MXU": n + 10, "VPU": n,
                                  "HALT": 1}


def test_reserved_opcode(tmp_path):
    """A reserved opcode halts like HALT once the outstanding DMA NOPs have retired."""
    code = isa.encode_program(isa.assemble("NOP engine=0\nNOP engine=1\nNOP engine=2"))
    code += bytes([0xEE]) + bytes(31)
    code += isa.encode_program(isa.assemble("NOP engine=0\nHALT"))
    b = TpuBinary(CFG.hash_bytes(), CODE_ADDR, code)
    rtl, sim = _run_both(tmp_path, b, {}, expect_error=True)
    assert rtl.raw.get("error_code", 1) == 1
    assert sim.error_pc == 96


@small_only
def test_dma_strided_burst_split(tmp_path):
    """3-D walks with DDR runs that start mid-burst (split at 64-byte boundaries), SRAM ranges
    that straddle a bank boundary, and the DMA read/write channels and fetch all competing for
    the DDR channel (LOAD #2 runs while STORE #1 runs: the NOP before it starts only once LOAD #1
    completed, so LOAD #2 does not overlap LOAD #1 and finish before STORE #1 starts)."""
    x = TensorDesc("x", (1, 8, 8, 8), 0.05, 0, 0x200000, 8)     # 512 bytes
    y = TensorDesc("y", (1, 8, 6, 8), 0.05, 0, 0x300000, 8)     # 384 bytes
    z = TensorDesc("z", (1, 8, 8, 8), 0.05, 0, 0x400000, 8)     # 512 bytes
    b = _binary(f"""
        DMA_LOAD  ddr_addr={x.ddr_addr + 32:#x} sram_addr=0xfc0 inner_bytes=96 count1=2 ddr_stride1=128 sram_stride1=96 count2=2 ddr_stride2=256 sram_stride2=192 signal=STORE
        DMA_STORE ddr_addr={y.ddr_addr:#x} sram_addr=0xfc0 inner_bytes=96 count1=4 ddr_stride1=96 sram_stride1=96 count2=1 wait=LOAD
        NOP engine=0
        DMA_LOAD  ddr_addr={x.ddr_addr:#x} sram_addr=0x2000 inner_bytes=512 count1=1 count2=1 signal=STORE
        DMA_STORE ddr_addr={z.ddr_addr:#x} sram_addr=0x2000 inner_bytes=64 count1=2 ddr_stride1=64 sram_stride1=64 count2=4 ddr_stride2=128 sram_stride2=128 wait=LOAD
        HALT
    """, inputs=[x], outputs=[y, z])
    xv = np.random.default_rng(3).integers(-128, 128, size=x.shape, dtype=np.int8)
    rtl, sim = _run_both(tmp_path, b, {"x": xv})
    raw = x.to_blocked(xv, 0)
    want_y = b"".join(raw[32 + o:32 + o + 96] for o in (0, 128, 256, 384))
    np.testing.assert_array_equal(rtl.outputs["y"], y.from_blocked(want_y))
    np.testing.assert_array_equal(rtl.outputs["z"], xv)
    for k in ("y", "z"):
        np.testing.assert_array_equal(rtl.outputs[k], sim.outputs[k])
    assert rtl.counters["ddr_arb_wait_cycles"] > 0


@small_only
def test_sram_conflicts_dma_vs_mxu(tmp_path):
    """LOAD writes and MATMUL reads the same bank at the same time (no token between them: the
    data race is intended, only timing and counters are compared)."""
    x = TensorDesc("x", (1, 8, 16, 8), 0.05, 0, 0x200000, 8)    # 1 KiB
    b = _binary(f"""
        DMA_LOAD ddr_addr={x.ddr_addr:#x} sram_addr=0 inner_bytes=1024 count1=1 count2=1 signal=MXU
        LOAD_WEIGHTS sram_addr=0 wait=LOAD
        DMA_LOAD ddr_addr={x.ddr_addr:#x} sram_addr=0x400 inner_bytes=1024 count1=1 count2=1
        MATMUL act_addr=0 count_x=64 stride_x=1 count_y=2 stride_y=64 acc_addr=0
        MATMUL act_addr=0x40 count_x=32 stride_x=2 count_y=1 stride_y=0 acc_addr=128 accumulate=1
        HALT
    """, inputs=[x])
    xv = np.random.default_rng(5).integers(-128, 128, size=x.shape, dtype=np.int8)
    rtl, _ = _run_both(tmp_path, b, {"x": xv})
    assert rtl.counters["sram_conflicts"] > 0


@small_only
def test_conv_end_to_end(tmp_path):
    """The 1x1 convolution of tests/test_model_sim.py: every engine, tokens both ways."""
    import importlib.util
    from pathlib import Path
    p = Path(__file__).resolve().parents[2] / "tests" / "test_model_sim.py"
    spec = importlib.util.spec_from_file_location("_model_sim", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    binary, ref = mod.build_conv_binary()
    xv = np.random.default_rng(9).integers(-128, 128, (1, 8, 4, 4), dtype=np.int8)
    rtl, _ = _run_both(tmp_path, binary, {"x": xv})
    np.testing.assert_array_equal(rtl.outputs["y"], ref(xv))


def _rand_walk(rng: random.Random, base: int, limit: int, sram_lo: int, sram_hi: int):
    """A legal random DMA descriptor reading/writing DDR inside [base, base+limit) and SRAM
    inside [sram_lo, sram_hi), or None."""
    w, bb = CFG.word_bytes, CFG.dma_burst_bytes
    al = ddr_align_bytes(CFG)
    inner = w * rng.randint(1, max(1, 3 * bb // w))
    c1, c2 = rng.randint(1, 3), rng.randint(1, 3)
    ds1 = al * rng.randint(0, (inner + bb) // al)
    ds2 = al * rng.randint(0, 3 * (inner + bb) // al)
    ss1 = inner + w * rng.randint(0, 2)
    ss2 = c1 * ss1 + w * rng.randint(0, 2)
    dd = base + al * rng.randint(0, bb // al * 2)
    sa = sram_lo + w * rng.randint(0, 8)
    if dd + (c2 - 1) * ds2 + (c1 - 1) * ds1 + inner > base + limit:
        return None
    if sa + (c2 - 1) * ss2 + (c1 - 1) * ss1 + inner > sram_hi:
        return None
    return (f"ddr_addr={dd:#x} sram_addr={sa:#x} inner_bytes={inner} count1={c1} "
            f"ddr_stride1={ds1} sram_stride1={ss1} count2={c2} ddr_stride2={ds2} "
            f"sram_stride2={ss2}")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_dma_random_walks(tmp_path, seed):
    """Random legal 3-D gathers (LOAD) and scatters (STORE) chained by tokens, with a second
    LOAD/STORE pair overlapping in time; outputs, retires and counters equal SimPy's."""
    rng = random.Random(seed)
    w = CFG.word_bytes
    x = TensorDesc("x", (1, w, 8, 8), 0.05, 0, 0x200000, w)
    y = TensorDesc("y", (1, w, 8, 8), 0.05, 0, 0x300000, w)
    half = CFG.sram_size_bytes // 2
    lines = []
    for i in range(4):
        lo, hi = (0, half) if i % 2 == 0 else (half, 2 * half)
        ld = st = None
        while ld is None:
            ld = _rand_walk(rng, x.ddr_addr, x.size_bytes, lo, hi)
        while st is None:
            st = _rand_walk(rng, y.ddr_addr, y.size_bytes, lo, hi)
        lines.append(f"DMA_LOAD {ld} signal=STORE" + (" wait=STORE" if i >= 2 else ""))
        lines.append(f"DMA_STORE {st} wait=LOAD" + (" signal=LOAD" if i < 2 else ""))
    lines.append("HALT")
    b = _binary("\n".join(lines), inputs=[x], outputs=[y])
    xv = np.random.default_rng(seed).integers(-128, 128, size=x.shape, dtype=np.int8)
    rtl, sim = _run_both(tmp_path, b, {"x": xv})
    np.testing.assert_array_equal(rtl.outputs["y"], sim.outputs["y"])
