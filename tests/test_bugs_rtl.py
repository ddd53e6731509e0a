"""Injected RTL bugs (cocotb_tests/bugs.py): one directed hand-assembled program per bug that
passes on the clean RTL (outputs, cycles, retire trace and counters equal to the SimPy model)
and fails on the RTL built with that bug, in the way the bug predicts.

The clean-RTL runs share the default build. Each bug needs its own Verilator build (~1-2 min,
cached), so only ``addr36`` runs by default; the others are marked ``slow`` (``pytest --slow``,
``make test-slow``: the repository's one switch, conftest.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import yaml

from tpusim.arch import arith, isa
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import ConfigError

rtl = pytest.mark.rtl


def slow_bug(test):
    """A test that needs its own bug build (~1-2 min): marked rtl and slow (pytest --slow)."""
    return pytest.mark.rtl(pytest.mark.slow(test))


REPO = Path(__file__).resolve().parent.parent
CFG = load_config("small")
W = CFG.word_bytes                       # 8 bytes per SRAM word = array rows = cols
CODE_ADDR = 0x100000
STALL_CYCLES = 20_000                    # watchdog for the programs that hang on a buggy RTL
M = isa.Engine                           # token masks: 1 << M.LOAD ...


def _mask(*engines) -> int:
    return sum(1 << int(e) for e in engines)


@dataclass
class Directed:
    """A hand-assembled program: instructions, DDR constants and flat output regions."""
    instrs: list
    consts: list = field(default_factory=list)       # [(ddr_addr, bytes)]
    outputs: dict = field(default_factory=dict)      # name -> (ddr_addr, size_bytes)

    def binary(self) -> TpuBinary:
        outs = [TensorDesc(n, (1, W, 1, size // W), 1.0, 0, a, W) for n, (a, size) in self.outputs.items()]
        return TpuBinary(CFG.hash_bytes(), CODE_ADDR, isa.encode_program(self.instrs),
                         consts=list(self.consts), outputs=outs)


def _flat(x: np.ndarray) -> np.ndarray:
    """A flat output region's int8 NCHW (1, W, 1, n/W) array -> its n bytes in DDR order."""
    return x[0].transpose(1, 2, 0).reshape(-1)


@dataclass
class Runs:
    rtl: object          # cocotb_tests.harness.RtlResult
    sim: object          # tpusim.sim.SimResult

    def rtl_out(self, name: str) -> np.ndarray:
        return _flat(self.rtl.outputs[name])

    def sim_out(self, name: str) -> np.ndarray:
        return _flat(self.sim.outputs[name])


def _run(tmp_path, prog: Directed, bugs=(), tag="clean") -> Runs:
    from cocotb_tests.harness import run_rtl
    from tpusim.sim import run_binary
    path = tmp_path / f"{tag}.tpubin"
    prog.binary().write(path)
    rtl = run_rtl(path, CFG, {}, tmp_path / f"rtl-{tag}", max_cycles=200_000,
                  stall_cycles=STALL_CYCLES, bugs=bugs)
    sim = run_binary(TpuBinary.read(path), CFG, {})
    return Runs(rtl, sim)


def _assert_equal(r: Runs) -> None:
    """The RTL run agrees with the SimPy model in everything."""
    assert r.rtl.ok, r.rtl.message
    for name in r.sim.outputs:
        np.testing.assert_array_equal(r.rtl.outputs[name], r.sim.outputs[name], err_msg=name)
    assert r.rtl.cycles == r.sim.cycles
    assert r.rtl.retire == r.sim.retire
    assert r.rtl.counters == r.sim.counters


def _retire_ps(retire, engine: str, pc: int) -> int:
    return next(t for p, e, t in retire if e == engine and p == pc)


# ------------------------------------------------------------------------------ programs
HI_SRC = (0x8 << 36) | 0x20_0000         # bits 39:36 set: the DMA must keep them
HI_DST = (0xA << 36) | 0x30_0000
LOW36 = (1 << 36) - 1


def prog_addr36() -> tuple[Directed, np.ndarray, np.ndarray]:
    """Copy 64 bytes from DDR HI_SRC to HI_DST, both above 2^36; different bytes sit at the
    2^36-aliases of HI_SRC. Outputs: 'hi' (HI_DST) and 'lo' (its alias)."""
    rng = np.random.default_rng(36)
    x = rng.integers(-128, 128, 64, dtype=np.int8)
    alias = rng.integers(-128, 128, 64, dtype=np.int8)
    instrs = [
        isa.make("DMA_LOAD", signal=_mask(M.STORE), ddr_addr=HI_SRC, sram_addr=0, inner_bytes=64,
                 count1=1, count2=1),
        isa.make("DMA_STORE", wait=_mask(M.LOAD), ddr_addr=HI_DST, sram_addr=0, inner_bytes=64,
                 count1=1, count2=1),
        isa.make("HALT"),
    ]
    prog = Directed(instrs, consts=[(HI_SRC, x.tobytes()), (HI_SRC & LOW36, alias.tobytes())],
                    outputs={"hi": (HI_DST, 64), "lo": (HI_DST & LOW36, 64)})
    return prog, x, alias


# DDR and SRAM layout of the one-layer programs (DDR byte addresses, SRAM word addresses)
D_W, D_X, D_P, D_OUT = 0x20_0000, 0x20_1000, 0x20_2000, 0x30_0000
S_W, S_X, S_P, S_OUT = 0, 16, 64, 128
P_WORDS = CFG.param_words


def _table(bias, mult, shift) -> bytes:
    return (np.asarray(bias, "<i4").tobytes() + np.asarray(mult, "<i4").tobytes()
            + np.asarray(shift, np.int8).tobytes())


def prog_layer(x, w, bias, mult, shift, zp, qreg=5) -> Directed:
    """One dense layer: x int8 [m, 8] @ w int8 [8, 8] (+ bias) requantised by per-channel
    (mult, shift) to int8 with zero point zp -> output 'y' (m words). DMA, LOAD_WEIGHTS, MATMUL
    (count_x = m), LOAD_QREG, REQUANT, DMA_STORE, tokens between them."""
    m = x.shape[0]
    wcols = np.ascontiguousarray(w.T).astype(np.int8)      # word n = column n = w[0..7][n]
    table = _table(bias, mult, shift)
    assert len(table) == P_WORDS * W
    instrs = [
        isa.make("DMA_LOAD", signal=_mask(M.MXU), ddr_addr=D_W, sram_addr=S_W * W, inner_bytes=8 * W,
                 count1=1, count2=1),
        isa.make("DMA_LOAD", signal=_mask(M.MXU), ddr_addr=D_X, sram_addr=S_X * W, inner_bytes=m * W,
                 count1=1, count2=1),
        isa.make("DMA_LOAD", signal=_mask(M.VPU), ddr_addr=D_P, sram_addr=S_P * W, inner_bytes=len(table),
                 count1=1, count2=1),
        isa.make("LOAD_WEIGHTS", wait=_mask(M.LOAD), sram_addr=S_W),
        isa.make("MATMUL", wait=_mask(M.LOAD), signal=_mask(M.VPU), act_addr=S_X, count_x=m,
                 stride_x=1, count_y=1, stride_y=0, acc_addr=0, accumulate=0),
        isa.make("LOAD_QREG", qreg=qreg, multiplier=1 << 30, shift=0, zero_point=zp),
        isa.make("REQUANT", wait=_mask(M.LOAD, M.MXU), signal=_mask(M.STORE), acc_addr=0, count=m,
                 param_addr=S_P, dst_addr=S_OUT, qreg=qreg, relu=0),
        isa.make("DMA_STORE", wait=_mask(M.VPU), ddr_addr=D_OUT, sram_addr=S_OUT * W, inner_bytes=m * W,
                 count1=1, count2=1),
        isa.make("HALT"),
    ]
    consts = [(D_W, wcols.tobytes()), (D_X, x.astype(np.int8).tobytes()), (D_P, table)]
    return Directed(instrs, consts, {"y": (D_OUT, m * W)})


def layer_ref(x, w, bias, mult, shift, zp) -> np.ndarray:
    acc = arith.matmul_acc(x, w)
    return arith.requant_conv(acc, np.asarray(bias), np.asarray(mult), np.asarray(shift), zp, False)


def prog_kstall(m: int) -> tuple[Directed, np.ndarray]:
    rng = np.random.default_rng(m)
    x = rng.integers(-128, 128, (m, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    bias = rng.integers(-5000, 5000, 8)
    mult = np.full(8, 1 << 30)
    shift = np.full(8, -6)
    return prog_layer(x, w, bias, mult, shift, zp=3), layer_ref(x, w, bias, mult, shift, 3)


def _rdbpot_half_up(x, e):
    """The requant_round bug's rounding: RoundingDivideByPOT without the '+ (x < 0)' term."""
    x = np.asarray(x, dtype=np.int64)
    mask = (np.int64(1) << e) - 1
    return (x >> e) + ((x & mask) > (mask >> 1))


def prog_requant_round() -> tuple[Directed, np.ndarray, np.ndarray]:
    """Identity weights, so acc = x; mult 2^30 (0.5) and shift -1: y = rdbpot(srdhm(x, 2^30), 1),
    i.e. x/4 twice rounded; x = 4k+2 < 0 (srdhm gives an odd negative) are ties of the second
    rounding. Returns (program, clean reference, bug reference)."""
    x = np.arange(-30, 34, dtype=np.int64).reshape(8, 8).astype(np.int8)
    w = np.eye(8, dtype=np.int8)
    bias, mult, shift = np.zeros(8, int), np.full(8, 1 << 30), np.full(8, -1)
    clean = layer_ref(x, w, bias, mult, shift, 0)
    t = arith.srdhm(x.astype(np.int64), 1 << 30)
    buggy = np.clip(_rdbpot_half_up(t, 1), -128, 127).astype(np.int8)
    return prog_layer(x, w, bias, mult, shift, zp=0), clean, buggy


ADD_A = arith.add_multipliers(0.05, 0.08, 0.1)     # ((ma, sa), (mb, sb), (mo, so))
ADD_B = arith.add_multipliers(0.02, 0.03, 0.25)


def prog_qreg_wrap() -> tuple[Directed, np.ndarray, np.ndarray]:
    """ADD with quant registers 8, 9, 10; register 40 (= 8 + 32) is loaded with other values
    afterwards (a second, live layer) and used by a second ADD. Outputs 'y1' (the ADD reading
    register 8) and 'y2'. Returns (program, clean y1, y1 if register 8 reads entry 40)."""
    rng = np.random.default_rng(32)
    a = rng.integers(-128, 128, 64, dtype=np.int8)
    b = rng.integers(-128, 128, 64, dtype=np.int8)
    (ma, sa), (mb, sb), (mo, so) = ADD_A
    (m2, s2), _, _ = ADD_B
    zpa, zpb, zpo, zp2 = -3, 4, 1, 17
    ld = lambda q, m, s, z: isa.make("LOAD_QREG", qreg=q, multiplier=m, shift=s, zero_point=z)  # noqa: E731
    instrs = [
        isa.make("DMA_LOAD", signal=_mask(M.VPU), ddr_addr=D_X, sram_addr=0, inner_bytes=128,
                 count1=1, count2=1),
        ld(8, ma, sa, zpa), ld(9, mb, sb, zpb), ld(10, mo, so, zpo),
        ld(40, m2, s2, zp2),
        isa.make("ADD", wait=_mask(M.LOAD), src_a=0, src_b=8, dst_addr=16, count=8, qreg_a=8,
                 qreg_b=9, qreg_out=10, relu=0),
        isa.make("ADD", signal=_mask(M.STORE), src_a=0, src_b=8, dst_addr=24, count=8, qreg_a=40,
                 qreg_b=9, qreg_out=10, relu=0),
        isa.make("DMA_STORE", wait=_mask(M.VPU), ddr_addr=D_OUT, sram_addr=16 * W, inner_bytes=128,
                 count1=1, count2=1),
        isa.make("HALT"),
    ]
    prog = Directed(instrs, [(D_X, a.tobytes() + b.tobytes())],
                    {"y1": (D_OUT, 64), "y2": (D_OUT + 64, 64)})
    clean = arith.add_int8(a, b, zpa, ma, sa, zpb, mb, sb, zpo, mo, so, False)
    wrapped = arith.add_int8(a, b, zp2, m2, s2, zpb, mb, sb, zpo, mo, so, False)
    return prog, clean, wrapped


def prog_arb_starve() -> Directed:
    """A 2 KiB DMA_STORE runs while a 2 KiB DMA_LOAD streams: both channels compete for the DDR
    bus. The three LOAD NOPs keep the second load from overlapping the first one (a NOP starts
    with none in flight) and start it 6 DMA edges after the store, where their requests meet
    at the bus (on the spec's round robin 10 arbitration wait cycles). Outputs: 'st' (the stored
    copy of the first load) and 'ld' (a copy of the second)."""
    rng = np.random.default_rng(4)
    n = 2048
    a0 = rng.integers(-128, 128, n, dtype=np.int8)
    a1 = rng.integers(-128, 128, n, dtype=np.int8)
    src0, src1, dst0, dst1 = 0x20_0000, 0x21_0000, 0x30_0000, 0x31_0000
    dma = dict(count1=1, count2=1, inner_bytes=n)
    instrs = [
        isa.make("DMA_LOAD", signal=_mask(M.STORE), ddr_addr=src0, sram_addr=8192, **dma),
        isa.make("DMA_STORE", wait=_mask(M.LOAD), ddr_addr=dst0, sram_addr=8192, **dma),  # pc 32
        *[isa.make("NOP", engine=int(M.LOAD))] * 3,                                         # pc 64..128
        isa.make("DMA_LOAD", signal=_mask(M.STORE), ddr_addr=src1, sram_addr=0, **dma),    # pc 160
        isa.make("DMA_STORE", wait=_mask(M.LOAD), ddr_addr=dst1, sram_addr=0, **dma),
        isa.make("HALT"),
    ]
    return Directed(instrs, [(src0, a0.tobytes()), (src1, a1.tobytes())],
                    {"st": (dst0, n), "ld": (dst1, n)})


def prog_bank_off1() -> Directed:
    """A 32-vector MATMUL (MXU) and an 8-word ADD (VPU) start together on SRAM bank 0: one of
    them waits for the other's banks (a bank conflict). Output 'y': the ADD result."""
    rng = np.random.default_rng(5)
    data = rng.integers(-128, 128, 64 * W, dtype=np.int8)    # words 0..63: weights, vectors, a, b
    (ma, sa), (mb, sb), (mo, so) = ADD_A
    instrs = [
        isa.make("DMA_LOAD", signal=_mask(M.MXU, M.VPU), ddr_addr=D_X, sram_addr=0,
                 inner_bytes=64 * W, count1=1, count2=1),
        isa.make("LOAD_QREG", qreg=1, multiplier=ma, shift=sa, zero_point=0),
        isa.make("LOAD_QREG", qreg=2, multiplier=mb, shift=sb, zero_point=0),
        isa.make("LOAD_QREG", qreg=3, multiplier=mo, shift=so, zero_point=0),
        isa.make("LOAD_WEIGHTS", wait=_mask(M.LOAD), sram_addr=0),
        isa.make("MATMUL", act_addr=8, count_x=32, stride_x=1, count_y=1, stride_y=0, acc_addr=0),
        isa.make("ADD", wait=_mask(M.LOAD), signal=_mask(M.STORE), src_a=40, src_b=48,
                 dst_addr=56, count=8, qreg_a=1, qreg_b=2, qreg_out=3),
        isa.make("DMA_STORE", wait=_mask(M.VPU), ddr_addr=D_OUT, sram_addr=56 * W, inner_bytes=64,
                 count1=1, count2=1),
        isa.make("HALT"),
    ]
    return Directed(instrs, [(D_X, data.tobytes())], {"y": (D_OUT, 64)})


# ------------------------------------------------------------------------------ registry
def test_registry_names_and_flags():
    from cocotb_tests.bugs import BUGS, check_bugs, define_flags, folder_suffix
    assert set(BUGS) == {"addr36", "kstall", "qreg_wrap", "arb_starve", "bank_off1", "requant_round"}
    for b in BUGS.values():
        assert b.define == f"TPU_BUG_{b.name.upper()}"
        text = (REPO / b.module).read_text()
        assert f"`ifdef {b.define}" in text, b.module
    arch = yaml.safe_load((REPO / "waves" / "arch_map.yaml").read_text())["signals"]
    for b in BUGS.values():       # the signal is an architectural one the stress flow compares
        assert f"tb_top.{b.signal}" in arch.values(), b.signal
    assert check_bugs(["kstall", "addr36", "kstall"]) == ("addr36", "kstall")
    assert define_flags("addr36") == ["+define+TPU_BUG_ADDR36"]
    assert folder_suffix(()) == "" and folder_suffix(("qreg_wrap", "addr36")) == "-bug-addr36-qreg_wrap"
    with pytest.raises(ConfigError, match="'nosuch'"):
        check_bugs(["nosuch"])


# ------------------------------------------------------------------------------ clean RTL
@rtl
def test_clean_addr36(tmp_path):
    prog, x, _ = prog_addr36()
    r = _run(tmp_path, prog)
    _assert_equal(r)
    np.testing.assert_array_equal(r.rtl_out("hi"), x)
    assert not r.rtl_out("lo").any()


@rtl
@pytest.mark.parametrize("m", [3, 4])
def test_clean_kstall(tmp_path, m):
    prog, ref = prog_kstall(m)
    r = _run(tmp_path, prog)
    _assert_equal(r)
    np.testing.assert_array_equal(r.rtl_out("y").reshape(m, 8), ref)


@rtl
def test_clean_requant_round(tmp_path):
    prog, clean, buggy = prog_requant_round()
    assert (clean != buggy).sum() >= 4                 # the program does contain negative ties
    r = _run(tmp_path, prog)
    _assert_equal(r)
    np.testing.assert_array_equal(r.rtl_out("y").reshape(8, 8), clean)


@rtl
def test_clean_qreg_wrap(tmp_path):
    prog, clean, wrapped = prog_qreg_wrap()
    assert (clean != wrapped).any()
    r = _run(tmp_path, prog)
    _assert_equal(r)
    np.testing.assert_array_equal(r.rtl_out("y1"), clean)


@rtl
def test_clean_arb_starve(tmp_path):
    r = _run(tmp_path, prog_arb_starve())
    _assert_equal(r)


@rtl
def test_clean_bank_off1(tmp_path):
    r = _run(tmp_path, prog_bank_off1())
    _assert_equal(r)
    assert r.sim.counters["sram_conflicts"] >= 1      # the program does make a bank conflict


# ------------------------------------------------------------------------------ buggy RTL
@rtl
def test_bug_addr36(tmp_path):
    """The copy reads the alias below 2^36 and writes to the alias: 'hi' stays zero, 'lo' holds
    the alias bytes."""
    prog, x, alias = prog_addr36()
    r = _run(tmp_path, prog, bugs=("addr36",), tag="bug")
    assert r.rtl.ok, r.rtl.message
    assert r.rtl.raw["bugs"] == ["addr36"]
    assert r.rtl.out_dir.parent == tmp_path
    np.testing.assert_array_equal(r.sim_out("hi"), x)
    assert not r.rtl_out("hi").any()
    np.testing.assert_array_equal(r.rtl_out("lo"), alias)


@pytest.mark.parametrize("m", [3, 4])
@slow_bug
def test_bug_kstall(tmp_path, m):
    """Odd M: the MXU never completes the MATMUL (watchdog, LOAD_WEIGHTS was its last retire);
    even M: still correct."""
    prog, ref = prog_kstall(m)
    r = _run(tmp_path, prog, bugs=("kstall",), tag=f"bug{m}")
    if m % 2 == 0:
        _assert_equal(r)
        return
    assert r.rtl.status == "timeout", r.rtl.message
    assert f"no instruction retired for {STALL_CYCLES} core cycles" in r.rtl.message
    assert r.rtl.raw["retired"]["MXU"] == 1 and r.rtl.raw["retired"]["VPU"] == 1
    assert r.rtl.raw["last_pc"]["MXU"] == 3 * 32       # the LOAD_WEIGHTS before the MATMUL


@slow_bug
def test_bug_requant_round(tmp_path):
    prog, clean, buggy = prog_requant_round()
    r = _run(tmp_path, prog, bugs=("requant_round",), tag="bug")
    assert r.rtl.ok, r.rtl.message
    np.testing.assert_array_equal(r.sim_out("y").reshape(8, 8), clean)
    np.testing.assert_array_equal(r.rtl_out("y").reshape(8, 8), buggy)
    assert r.rtl.cycles == r.sim.cycles and r.rtl.retire == r.sim.retire   # data-only bug


@slow_bug
def test_bug_qreg_wrap(tmp_path):
    prog, clean, wrapped = prog_qreg_wrap()
    r = _run(tmp_path, prog, bugs=("qreg_wrap",), tag="bug")
    assert r.rtl.ok, r.rtl.message
    np.testing.assert_array_equal(r.sim_out("y1"), clean)
    np.testing.assert_array_equal(r.rtl_out("y1"), wrapped)     # register 8 read entry 40's values
    np.testing.assert_array_equal(r.rtl_out("y2"), r.sim_out("y2"))


@slow_bug
def test_bug_arb_starve(tmp_path):
    """Same bytes, but the DMA_STORE (pc 32) waits behind every DMA_LOAD read: it retires later
    than on the spec's round robin, and the DDR arbitration wait grows."""
    r = _run(tmp_path, prog_arb_starve(), bugs=("arb_starve",), tag="bug")
    assert r.rtl.ok, r.rtl.message
    for name in ("st", "ld"):
        np.testing.assert_array_equal(r.rtl.outputs[name], r.sim.outputs[name])
    st_rtl, st_sim = _retire_ps(r.rtl.retire, "STORE", 32), _retire_ps(r.sim.retire, "STORE", 32)
    ld_rtl, ld_sim = _retire_ps(r.rtl.retire, "LOAD", 160), _retire_ps(r.sim.retire, "LOAD", 160)
    assert st_rtl > st_sim and ld_rtl <= ld_sim
    assert r.rtl.counters["ddr_arb_wait_cycles"] != r.sim.counters["ddr_arb_wait_cycles"]


@slow_bug
def test_bug_bank_off1(tmp_path):
    """Same bytes, but every waiting transaction is granted at least one core cycle late (a wait
    behind two holders loses two): at least one more conflict cycle per conflict, later retires.
    A late grant can also make a requester wait that would not have waited (since the
    double-buffered MXU's own LOAD_WEIGHTS requester: 3 conflicts on the RTL against 2), so the RTL
    may count more conflicts."""
    r = _run(tmp_path, prog_bank_off1(), bugs=("bank_off1",), tag="bug")
    assert r.rtl.ok, r.rtl.message
    np.testing.assert_array_equal(r.rtl.outputs["y"], r.sim.outputs["y"])
    conf = r.sim.counters["sram_conflicts"]
    assert conf >= 1 and r.rtl.counters["sram_conflicts"] >= conf
    extra = r.rtl.counters["sram_conflict_cycles"] - r.sim.counters["sram_conflict_cycles"]
    assert extra >= conf
    assert r.rtl.cycles > r.sim.cycles and r.rtl.retire != r.sim.retire


# ------------------------------------------------------------------------------ mutants CLI
def test_mutants_cli_rejects_bad_input(capsys):
    from stressgen.mutants import main
    assert main(["--bug", "nosuch"]) == 2
    assert "unknown injected bug 'nosuch'" in capsys.readouterr().err
    assert main(["--max-programs", "0"]) == 2
    assert "--max-programs must be >= 1, got 0" in capsys.readouterr().err


def test_mutants_table_and_signal_match():
    from stressgen.mutants import Row, format_table, names_bug_signal
    group = [("tpu.ddr.cmd_addr", "tb_top.u_tpu.u_ddr_arb.cmd_addr_q"),
             ("tpu.ddr.grant_addr", "tb_top.u_arch_probe.ddr_grant_addr")]
    assert names_bug_signal(group, "u_tpu.u_ddr_arb.cmd_addr_q")
    assert not names_bug_signal(group, "u_arch_probe.ddr_grant")
    text = format_table([Row("addr36", True, 1, 4.4, 72.5, 0, "simpy_vs_rtl", "tpu.ddr.cmd_addr",
                             ("u_tpu.u_ddr_arb.cmd_addr_q",), True),
                         Row("kstall", False, 200, 300.0, 0.0)])
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["bug", "caught", "programs"]
    assert lines[2].split() == ["addr36", "yes", "1", "4.4", "72.5", "simpy_vs_rtl", "tpu.ddr.cmd_addr",
                                "yes", "0"]
    assert lines[3].split() == ["kstall", "no", "200", "300.0", "0.0", "-", "-", "-", "-"]
