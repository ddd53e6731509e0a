"""The RTL server (cocotb_tests/rtl_server.py): a program run on the server leaves the same files
as a program run in a fresh simulator process (harness.run_rtl), whatever ran on the server
before it, and a dead server is reported and replaced."""
from __future__ import annotations

import base64
import json
import os
import random
import signal
from pathlib import Path

import numpy as np
import pytest

from cocotb_tests import rtl_server
from cocotb_tests.harness import run_rtl
from cocotb_tests.rtl_server import RtlServer
from stressgen.gen import generate
from stressgen.invalid import make_invalid
from stressgen.program import parse_asm
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError

CFG = load_config("small")
_DMA = "inner_bytes=256 count1=1 ddr_stride1=0 sram_stride1=0 count2=1 ddr_stride2=0 sram_stride2=0"
_DATA = base64.b64encode(bytes((i * 7 + 3) % 256 for i in range(256))).decode()
#: writes 256 non-zero bytes into SRAM 0x0 (and stores them back)
DIRTY_SRAM = f"""# stressgen seed=0 hw=small invalid=none
# output out0 0x300000 256
# data 0x100000 {_DATA}
DMA_LOAD ddr_addr=0x100000 sram_addr=0x0 {_DMA} signal=STORE
DMA_STORE ddr_addr=0x300000 sram_addr=0x0 {_DMA} wait=LOAD
HALT
"""
#: stores SRAM 0x0 without writing it first: zeros in a fresh simulator
READ_SRAM = f"""# stressgen seed=1 hw=small invalid=none
# output out0 0x200000 256
DMA_STORE ddr_addr=0x200000 sram_addr=0x0 {_DMA}
HALT
"""
VOLATILE = ("sim_wall_s", "sim_cycles_per_s")      # wall-clock figures of rtl_result.json


def _programs():
    """(name, StressProgram): a program that dirties SRAM, quant registers, DDR and the
    testbench's books, then programs that would see any of it (unwritten SRAM, an unloaded
    quant register, a deadlock, a device error)."""
    valid = generate(11, CFG)
    qreg = generate(11, CFG)
    assert make_invalid(qreg, CFG, random.Random(0), "qreg_unloaded") == "qreg_unloaded"
    dead = generate(12, CFG)
    assert make_invalid(dead, CFG, random.Random(0), "deadlock") == "deadlock"
    return [("dirty_sram", parse_asm(DIRTY_SRAM)), ("read_sram", parse_asm(READ_SRAM)),
            ("valid", valid), ("qreg_unloaded", qreg), ("deadlock", dead), ("read_sram_again", parse_asm(READ_SRAM))]


def _files(d: Path) -> dict:
    raw = json.loads((d / "rtl_result.json").read_text())
    out = {"result": {k: v for k, v in raw.items() if k not in VOLATILE},
           "retire.trace": (d / "retire.trace").read_bytes(), "arch.vcd": (d / "arch.vcd").read_bytes()}
    out.update({p.name: np.load(p).tobytes() for p in sorted(d.glob("*.npy"))})
    return out


@pytest.mark.rtl
def test_server_runs_equal_fresh_runs_and_nothing_leaks(tmp_path):
    srv = RtlServer(CFG, waves="arch")
    try:
        for name, prog in _programs():
            d = tmp_path / name
            d.mkdir()
            prog.to_binary(CFG).write(d / "program.tpubin")
            served = srv.run(d / "program.tpubin", {}, d / "server")
            fresh = run_rtl(d / "program.tpubin", CFG, {}, d / "fresh", waves="arch")
            assert served.status == fresh.status and served.cycles == fresh.cycles, name
            a, b = _files(d / "server"), _files(d / "fresh")
            assert a.keys() == b.keys(), name
            for k in a:
                assert a[k] == b[k], f"{name}: {k} differs between the server and a fresh simulator"
        assert served.status == "ok" and not served.outputs["out0"].any()    # SRAM unwritten: zeros
        assert srv.runs == 6
    finally:
        srv.close()
    assert not srv.alive


@pytest.mark.rtl
def test_dead_server_is_reported_and_replaced(tmp_path):
    prog = parse_asm(READ_SRAM)
    prog.to_binary(CFG).write(tmp_path / "p.tpubin")
    srv = rtl_server.shared(CFG, (), "arch")
    assert srv.run(tmp_path / "p.tpubin", {}, tmp_path / "a").status == "ok"
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait()
    with pytest.raises(SimulationError, match="the RTL server stopped"):
        srv.run(tmp_path / "p.tpubin", {}, tmp_path / "b")
    again = rtl_server.shared(CFG, (), "arch")
    assert again is not srv and again.run(tmp_path / "p.tpubin", {}, tmp_path / "c").status == "ok"
    rtl_server.close_shared()


def test_server_refuses_other_dump_modes():
    with pytest.raises(ValueError, match="'vcd'"):
        RtlServer(CFG, waves="vcd")


def test_shared_servers_are_per_rtl_source_folder(monkeypatch, tmp_path):
    """A mutant tree (TPU_RTL_DIR) and the clean rtl/ never share a server: stressgen.mutants
    checks a mutant's failures against the clean RTL in the same process."""
    class Fake:
        alive = True

        def __init__(self, *a):
            pass

        def close(self):
            pass

    monkeypatch.setattr(rtl_server, "RtlServer", Fake)
    monkeypatch.setattr(rtl_server, "_SHARED", {})
    cfg = load_config("small")
    monkeypatch.delenv("TPU_RTL_DIR", raising=False)
    clean = rtl_server.shared(cfg)
    monkeypatch.setenv("TPU_RTL_DIR", str(tmp_path))
    mutant = rtl_server.shared(cfg)
    monkeypatch.delenv("TPU_RTL_DIR")
    assert mutant is not clean and rtl_server.shared(cfg) is clean
