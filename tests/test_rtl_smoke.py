"""RTL smoke tests: build the 'small' config (cached) and run tiny hand-assembled programs through
``cocotb_tests.harness.run_rtl``; cycles and the retire trace must equal the SimPy model's."""
import numpy as np
import pytest

from tpusim.arch import isa
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config

pytestmark = pytest.mark.rtl

CODE_ADDR = 0x100000


def _binary(cfg, text, inputs=(), outputs=()):
    code = isa.encode_program(isa.assemble(text))
    return TpuBinary(cfg.hash_bytes(), CODE_ADDR, code, inputs=list(inputs), outputs=list(outputs))


def _run_both(tmp_path, cfg, binary, inputs):
    from cocotb_tests.harness import run_rtl
    from tpusim.sim import run_binary
    path = tmp_path / "prog.tpubin"
    binary.write(path)
    rtl = run_rtl(path, cfg, inputs, tmp_path / "rtl", max_cycles=100_000)
    assert rtl.ok, rtl.message
    sim = run_binary(TpuBinary.read(path), cfg, inputs)
    return rtl, sim


def test_qreg_nop_halt(tmp_path):
    cfg = load_config("small")
    b = _binary(cfg, """
        LOAD_QREG qreg=1 multiplier=1073741824 shift=-1 zero_point=3
        NOP engine=3
        NOP engine=0
        HALT
    """)
    rtl, sim = _run_both(tmp_path, cfg, b, {})
    assert rtl.raw["retired"] == {"LOAD": 1, "STORE": 0, "MXU": 0, "VPU": 2, "HALT": 1}
    assert [r[:2] for r in rtl.retire] == [(0, "VPU"), (32, "VPU"), (64, "LOAD"), (96, "HALT")]
    assert rtl.cycles == sim.cycles
    assert rtl.retire == sim.retire
    assert rtl.counters == sim.counters
    assert (tmp_path / "rtl" / "retire.trace").exists()


def test_dma_round_trip(tmp_path):
    cfg = load_config("small")
    w = cfg.word_bytes
    src = TensorDesc("x", (1, w, 2, 4), 0.05, -3, 0x200000, w)
    dst = TensorDesc("y", (1, w, 2, 4), 0.05, -3, 0x300000, w)
    n = src.size_bytes
    b = _binary(cfg, f"""
        DMA_LOAD  ddr_addr={src.ddr_addr:#x} sram_addr=0x40 inner_bytes={n} count1=1 count2=1 signal=STORE
        DMA_STORE ddr_addr={dst.ddr_addr:#x} sram_addr=0x40 inner_bytes={n} count1=1 count2=1 wait=LOAD
        HALT
    """, inputs=[src], outputs=[dst])
    x = np.random.default_rng(7).integers(-128, 128, size=src.shape, dtype=np.int8)
    rtl, sim = _run_both(tmp_path, cfg, b, {"x": x})
    np.testing.assert_array_equal(rtl.outputs["y"], x)
    assert rtl.counters["ddr_read_bytes"] == n and rtl.counters["ddr_write_bytes"] == n
    assert rtl.cycles == sim.cycles
    assert rtl.retire == sim.retire
    assert rtl.counters == sim.counters


def test_build_is_cached():
    from cocotb_tests.build import build
    cfg = load_config("small")
    first = build(cfg, waves="")
    again = build(cfg, waves="")
    assert again.build_dir == first.build_dir and not again.built


def test_watchdog_names_last_pc(tmp_path):
    """A STORE waiting for a token nobody sends: the stall watchdog stops the run and names the
    last retired PC per engine."""
    from cocotb_tests.harness import run_rtl
    cfg = load_config("small")
    b = _binary(cfg, """
        NOP engine=3
        DMA_STORE ddr_addr=0x300000 sram_addr=0 inner_bytes=8 count1=1 count2=1 wait=LOAD
        HALT
    """)
    b.write(tmp_path / "hang.tpubin")
    r = run_rtl(tmp_path / "hang.tpubin", cfg, {}, tmp_path / "rtl", stall_cycles=3000)
    assert r.status == "timeout"
    assert "no instruction retired for 3000 core cycles" in r.message
    assert "VPU=0x0 (1 retired)" in r.message and "STORE=none" in r.message
