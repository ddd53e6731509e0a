"""Model architectural dump vs the RTL probe's dump (run_rtl(..., waves="arch")): identical at
every ps for hand programs and a compiled graph; a planted difference is found and triaged; real
dumps cut short (truncation, kill -9 of a running run_rtl) read as a prefix or fail cleanly;
windowed arch dumps and scoped/windowed Verilator dumps."""
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import qnets
from tests.test_waves_model import rewrite
from tpusim.arch import isa
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.sim import run_binary
from waves.archmap import MAP_PATH, arch_map
from waves.diff import diff_dumps, load_map
from waves.reader import WaveError, read_dump
from waves.triage import triage

pytestmark = pytest.mark.rtl

REPO = Path(__file__).resolve().parents[1]
CFG = load_config("small")
CODE_ADDR = 0x100000
RNG = np.random.default_rng(5)
DATA = RNG.integers(-20, 20, size=8192, dtype=np.int8).tobytes()
TABLE = (struct.pack("<8i", *RNG.integers(-50, 50, 8).tolist()) + struct.pack("<8i", *[1 << 30] * 8)
         + struct.pack("<8b", -3, -2, -4, -1, -3, -2, -5, -1))
CONSTS = [(0x200000, DATA), (0x210000, TABLE)]

P_DMA = """
    LOAD_QREG qreg=3 multiplier=5 shift=0 zero_point=1
    DMA_LOAD ddr_addr=0x200000 sram_addr=0 inner_bytes=256 count1=1 count2=1 signal=MXU|STORE
    NOP engine=2 wait=LOAD
    DMA_STORE ddr_addr=0x300000 sram_addr=0 inner_bytes=128 count1=1 count2=1 wait=LOAD
    HALT
"""
# every engine and opcode, multi-run DMA with strides, an SRAM bank conflict (the third LOAD
# writes bank 0 while the 64-vector MATMUL reads it: double-buffered weights let the two short
# MATMULs finish their reads before the LOAD's data arrives), tokens across the domains
P_ALL = """
    DMA_LOAD ddr_addr=0x200000 sram_addr=0 inner_bytes=256 count1=2 ddr_stride1=1024 sram_stride1=256 count2=1 signal=MXU
    DMA_LOAD ddr_addr=0x210000 sram_addr=4800 inner_bytes=72 count1=1 count2=1 signal=VPU
    LOAD_QREG qreg=0 multiplier=1073741824 shift=-2 zero_point=0
    LOAD_QREG qreg=1 multiplier=1500000000 shift=0 zero_point=3
    LOAD_QREG qreg=17 multiplier=1200000000 shift=-1 zero_point=-2
    LOAD_WEIGHTS sram_addr=0 wait=LOAD
    DMA_LOAD ddr_addr=0x201000 sram_addr=1600 inner_bytes=320 count1=1 count2=2 ddr_stride2=64 sram_stride2=512
    MATMUL act_addr=8 count_x=16 stride_x=1 count_y=2 stride_y=20 acc_addr=0 accumulate=0
    MATMUL act_addr=9 count_x=16 stride_x=1 count_y=2 stride_y=20 acc_addr=0 accumulate=1 signal=VPU
    MATMUL act_addr=8 count_x=64 stride_x=1 count_y=1 acc_addr=64 accumulate=0
    REQUANT wait=MXU|LOAD acc_addr=0 count=32 param_addr=600 dst_addr=1100 qreg=0 relu=1
    POOL mode=0 src_addr=1100 win_w=2 win_h=2 win_stride_x=1 win_stride_y=4 out_w=2 out_stride_x=2 out_h=2 out_stride_y=8 dst_addr=1200
    POOL mode=1 src_addr=1100 win_w=2 win_h=2 win_stride_x=1 win_stride_y=4 out_w=2 out_stride_x=2 out_h=2 out_stride_y=8 dst_addr=1210 qreg_in=0 qreg_out=1
    ADD src_a=1100 src_b=1116 dst_addr=1300 count=16 qreg_a=0 qreg_b=1 qreg_out=17 relu=0 signal=STORE
    NOP engine=2 signal=STORE
    DMA_STORE wait=VPU|MXU ddr_addr=0x300000 sram_addr=8800 inner_bytes=256 count1=1 count2=1
    DMA_STORE ddr_addr=0x301000 sram_addr=9600 inner_bytes=40 count1=2 ddr_stride1=512 sram_stride1=80 count2=2 ddr_stride2=4096 sram_stride2=800 signal=LOAD
    DMA_STORE ddr_addr=0x302000 sram_addr=10400 inner_bytes=128 count1=1 count2=1
    NOP engine=0 wait=STORE
    HALT
"""


def _token_ring(rounds: int = 6) -> str:
    """NOPs passing one token LOAD -> MXU -> STORE -> VPU -> LOAD across the two domains, then
    more MXU NOPs than the queue holds."""
    lines = []
    for r in range(rounds):
        lines += [f"NOP engine=0 signal=MXU{' wait=VPU' if r else ''}", "NOP engine=2 wait=LOAD signal=STORE",
                  "NOP engine=1 wait=MXU signal=VPU", "NOP engine=3 wait=STORE signal=LOAD"]
    lines += ["NOP engine=0 wait=VPU"] + ["NOP engine=2"] * 7 + ["HALT"]
    return "\n".join(lines)


PROGRAMS = {"dma": P_DMA, "all_ops": P_ALL, "token_ring": _token_ring()}


def run_both(out: Path, text: str, **rtl_kw):
    """Model dump and RTL arch dump of one hand program; returns (model.vcd, arch.vcd, sim, rtl)."""
    from cocotb_tests.harness import run_rtl
    out.mkdir(parents=True, exist_ok=True)
    code = isa.encode_program(isa.assemble(text))
    TpuBinary(CFG.hash_bytes(), CODE_ADDR, code, consts=CONSTS).write(out / "p.tpubin")
    sim = run_binary(TpuBinary.read(out / "p.tpubin"), CFG, {}, vcd=out / "model.vcd")
    rtl = run_rtl(out / "p.tpubin", CFG, {}, out / "rtl", waves="arch", max_cycles=400_000, **rtl_kw)
    assert rtl.ok, rtl.message
    assert rtl.cycles == sim.cycles
    return out / "model.vcd", out / "rtl" / "arch.vcd", sim, rtl


def assert_identical(model_vcd: Path, rtl_vcd: Path):
    a, b = read_dump(model_vcd), read_dump(rtl_vcd)
    mapping = load_map(MAP_PATH)
    res = diff_dumps(a, b, mapping)
    from waves.diff import report
    assert res.identical, report(res, a=a, b=b, mapping=mapping)
    assert res.compared == len(arch_map())
    return a, b


@pytest.fixture(scope="module")
def all_ops(tmp_path_factory):
    return run_both(tmp_path_factory.mktemp("all_ops"), P_ALL)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hand_program_dumps_identical(name, tmp_path, all_ops):
    model_vcd, rtl_vcd, sim, _ = all_ops if name == "all_ops" else run_both(tmp_path, PROGRAMS[name])
    a, _ = assert_identical(model_vcd, rtl_vcd)
    # the dumps carry the activity (not only reset values)
    retired = {e: a.changes(f"tpu.{e}.retired")[-1][1] for e in ("load", "store", "mxu", "vpu")}
    assert retired == {e.lower(): sum(1 for r in sim.retire if r[1] == e.upper())
                       for e in retired}, retired
    if name == "all_ops":
        for e in ("load", "store", "mxu", "vpu"):
            assert any(v for _, v in a.changes(f"tpu.{e}.retire_digest")), e
        assert a.changes("tpu.sram.conflicts")[-1][1] == sim.counters["sram_conflicts"] >= 1
        assert len(a.changes("tpu.qreg.rd")) >= 4 and a.changes("tpu.qreg.writes")[-1][1] == 3


def test_compiled_graph_dumps_identical(tmp_path):
    from cocotb_tests.harness import run_rtl
    from tpucompile import driver, golden
    from tpusim.arch.host_transforms import host_input_transform
    model = qnets.residual_add()
    xs = qnets.inputs(qnets.in_shape(model), 5, seed=3)
    res = driver.compile_onnx(model, CFG, xs[1:])
    res.binary.write(tmp_path / "g.tpubin")
    name = res.binary.inputs[0].name
    x = host_input_transform(res.binary.meta, name, golden.quantize_input(res.qgraph, xs[0]))
    sim = run_binary(TpuBinary.read(tmp_path / "g.tpubin"), CFG, {name: x}, vcd=tmp_path / "model.vcd")
    rtl = run_rtl(tmp_path / "g.tpubin", CFG, {name: x}, tmp_path / "rtl", waves="arch")
    assert rtl.ok and rtl.cycles == sim.cycles, rtl.message
    a, _ = assert_identical(tmp_path / "model.vcd", tmp_path / "rtl" / "arch.vcd")
    assert a.changes("tpu.vpu.retired")[-1][1] > 5


def test_planted_difference_is_reported_and_triaged(tmp_path, all_ops):
    model_vcd, rtl_vcd, _, _ = all_ops
    sig = "tb_top.u_arch_probe.vpu_retire_digest"
    t = read_dump(rtl_vcd).changes(sig)[2][0]
    bad = rewrite(rtl_vcd, tmp_path / "bad.vcd", sig, t, flip=1)
    res = triage(model_vcd, bad, MAP_PATH, tmp_path / "tri")
    assert not res.identical and len(res.divergences) == 1
    d = res.first
    assert (d.time_ps, d.signal_a, d.signal_b) == (t, "tpu.vpu.retire_digest", sig)
    assert d.value_b == d.value_a ^ 1
    lines = res.report.splitlines()
    assert lines[0].startswith(f"first divergence at {t} ps = core cycle {t // 1000}: "
                               f"tpu.vpu.retire_digest / {sig}: model={d.value_a} ")
    assert "retires here" in lines[1] and lines[1].startswith("  in flight on model: ")
    assert lines[2].startswith("  in flight on rtl: ") and lines[1][21:] == lines[2][19:]
    assert f"1 of {len(arch_map())} compared signals differ" in res.report
    # the GTKWave save file: the diverging pair first, side by side, marker at the divergence
    text = res.gtkw.read_text().splitlines()
    marker = next(line for line in text if line.startswith("*"))
    assert marker.split()[1] == str(t)
    traces = [line.split("} ", 1)[1] for line in text if line.startswith("+{")]
    assert traces[:2] == ["model.tpu.vpu.retire_digest[31:0]", f"rtl.{sig}[31:0]"]
    assert traces[2:4] == ["model.tpu.load.busy", "rtl.tb_top.u_tpu.g_eng[0].u_ctrl.busy_q"]
    # the names GTKWave shows: whole hierarchies (without the shared tpu / tb_top), all distinct
    shown = [line[2:].split("} ", 1)[0] for line in text if line.startswith("+{")]
    assert shown[:4] == ["model/vpu/retire_digest", "rtl/" + sig.split(".", 1)[1].replace(".", "/"),
                         "model/load/busy", "rtl/u_tpu/g_eng[0]/u_ctrl/busy_q"]
    assert len(set(shown)) == len(shown)
    first = next(i for i, line in enumerate(text) if line.endswith(" " + traces[0]))
    assert text.index("-diverging") < first < text.index("-context")
    merged = read_dump(res.merged_vcd)
    assert merged.changes(f"rtl.{sig}") == read_dump(bad).changes(sig)
    assert merged.changes("model.tpu.vpu.retire_digest") == read_dump(model_vcd).changes(
        "tpu.vpu.retire_digest")
    r = subprocess.run([sys.executable, "-m", "waves", "diff", str(model_vcd), str(bad), "--map",
                        str(MAP_PATH)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1                       # waves diff names the sides A and B
    assert r.stdout.splitlines()[0] == lines[0].replace(" model=", " A=").replace(" rtl=", " B=")


def test_truncated_real_rtl_dump(tmp_path, all_ops):
    model_vcd, rtl_vcd, _, _ = all_ops
    data = rtl_vcd.read_bytes()
    model = read_dump(model_vcd)
    mapping = arch_map()
    kinds = {"prefix": 0, "error": 0}
    cut = tmp_path / "cut.vcd"
    for off in range(0, len(data), max(1, len(data) // 120)):
        cut.write_bytes(data[:off])
        try:
            d = read_dump(cut)
            got = {m: d.changes(r) for m, r in mapping.items()}
        except WaveError:
            kinds["error"] += 1
            continue
        kinds["prefix"] += 1
        for m, ch in got.items():          # agrees with the model up to where it was cut
            assert ch[:-1] == model.changes(m)[:max(len(ch) - 1, 0)], (off, m)
    assert kinds["prefix"] > 60 and kinds["error"] > 5, kinds


def test_kill_9_mid_dump_leaves_a_readable_prefix(tmp_path):
    """A run_rtl subprocess killed with SIGKILL (with its simulator) while the probe writes."""
    text = "\n".join(["DMA_LOAD ddr_addr=0x200000 sram_addr=0 inner_bytes=8192 count1=1 count2=1"] * 300
                     + ["HALT"])
    code = isa.encode_program(isa.assemble(text))
    TpuBinary(CFG.hash_bytes(), CODE_ADDR, code, consts=CONSTS).write(tmp_path / "p.tpubin")
    run_binary(TpuBinary.read(tmp_path / "p.tpubin"), CFG, {}, vcd=tmp_path / "model.vcd")
    from cocotb_tests.build import build
    build(CFG, waves="")                                 # not timed: the run below is
    arch = tmp_path / "rtl" / "arch.vcd"
    script = ("from cocotb_tests.harness import run_rtl\n"
              f"run_rtl({str(tmp_path / 'p.tpubin')!r}, 'small', {{}}, {str(tmp_path / 'rtl')!r}, "
              "waves='arch')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if arch.exists() and arch.stat().st_size > 100_000:
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    size = arch.stat().st_size
    d = read_dump(arch)                                   # readable: a cut-off prefix
    model = read_dump(tmp_path / "model.vcd")
    n = 0
    for m, r in arch_map().items():
        ch = d.changes(r)
        assert ch[:-1] == model.changes(m)[:max(len(ch) - 1, 0)], m
        n += len(ch)
    assert n > 1000, (size, n)
    r = subprocess.run([sys.executable, "-m", "waves", "diff", str(tmp_path / "model.vcd"), str(arch),
                        "--map", str(MAP_PATH)], cwd=REPO, capture_output=True, text=True, timeout=60)
    # cut inside a line: compared up to the cut, no divergence before it (exit 3); cut at a line
    # end the dump reads as whole and simply ends early (exit 1)
    assert r.returncode == (3 if d.truncated else 1) and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(f"no divergence up to {d.end_ps} ps, where B ends (cut short: "
                               "killed run?)") == d.truncated, r.stdout


def test_arch_window_matches_model_window(tmp_path):
    from cocotb_tests.harness import run_rtl
    from tpusim.sim import run_program
    t0, t1 = 200_000, 400_000
    code = isa.encode_program(isa.assemble(P_ALL))
    TpuBinary(CFG.hash_bytes(), CODE_ADDR, code, consts=CONSTS).write(tmp_path / "p.tpubin")
    rtl = run_rtl(tmp_path / "p.tpubin", CFG, {}, tmp_path / "rtl", waves="arch", dump_window_ps=(t0, t1))
    assert rtl.ok
    _, tpu = run_program(isa.assemble(P_ALL), CFG, ddr_segments=CONSTS, code_addr=CODE_ADDR,
                         vcd=tmp_path / "full.vcd")
    tpu.trace.write(tmp_path / "model_w.vcd", window_ps=(t0, t1))
    assert_identical(tmp_path / "model_w.vcd", tmp_path / "rtl" / "arch.vcd")
    b = read_dump(tmp_path / "rtl" / "arch.vcd")
    times = {t for n in b.names() for t, _ in b.changes(n)}
    assert min(times) == t0 and max(times) <= t1 and len(times) > 50


def test_scoped_windowed_verilator_dump(tmp_path, all_ops):
    """waves='vcd' with scopes and a window: only those scopes, only that window, model time
    base; the arch-map signals it contains equal the model's over the window."""
    from cocotb_tests.harness import run_rtl
    t0, t1 = 280_000, 330_000
    scopes = ["tb_top.u_tpu.u_sram.u_arbiter", "tb_top.u_tpu.g_eng[2]"]
    p = all_ops[0].parent / "p.tpubin"
    rtl = run_rtl(p, CFG, {}, tmp_path / "rtl", waves="vcd", dump_scopes=scopes, dump_window_ps=(t0, t1))
    assert rtl.ok, rtl.message
    d = read_dump(tmp_path / "rtl" / "waves.vcd")
    assert d.names() and all(n.startswith(tuple(scopes)) for n in d.names())
    times = {t for n in d.names() for t, _ in d.changes(n)}
    assert min(times) == t0 and max(times) <= t1
    assert not (tmp_path / "rtl" / "dump.vcd").exists()
    mapping = {m: r for m, r in arch_map().items() if r in d}
    assert set(mapping) >= {"tpu.sram.wait", "tpu.sram.gnt", "tpu.sram.conflicts", "tpu.mxu.busy"}
    from tpusim.sim import run_program
    _, tpu = run_program(isa.assemble(P_ALL), CFG, ddr_segments=CONSTS, code_addr=CODE_ADDR,
                         vcd=tmp_path / "full.vcd")
    tpu.trace.write(tmp_path / "model_w.vcd", window_ps=(t0, t1))
    res = diff_dumps(read_dump(tmp_path / "model_w.vcd"), d, mapping)
    assert res.identical and res.compared == len(mapping), res.divergences


def test_scoped_dump_refuses_unknown_scope_and_late_window(tmp_path, capsys):
    """A scope matching no RTL scope is refused before the run, naming it and listing the
    scopes under tb_top.u_tpu; a window after the end of the run says there is no dump."""
    import json

    from cocotb_tests.harness import run_rtl
    from stressgen.cli import main as stress_main
    with pytest.raises(WaveError) as exc:           # checked on the build, before any run
        run_rtl(tmp_path / "never_read.tpubin", CFG, {}, tmp_path / "rtl", waves="vcd", dump_scopes=["tb_top.nonexistent"])
    assert str(exc.value) == (
        "dump scope 'tb_top.nonexistent' matches no scope of the RTL; top-level scopes under "
        "tb_top.u_tpu: g_eng[0], g_eng[1], g_eng[2], g_eng[3], u_ddr_arb, u_decoder, u_dma, "
        "u_fetch, u_mxu, u_perf, u_sram, u_tokens, u_vpu")
    assert not (tmp_path / "rtl" / "waves.vcd").exists()
    out = tmp_path / "replay"
    assert stress_main(["replay", "--seed", "3", "--hw", "small", "--out", str(out),
                        "--dump-scope", "tb_top.u_tpu.u_ddr_arb",
                        "--dump-window", "900000000:900001000"]) == 0, capsys.readouterr()
    end = json.loads((out / "rtl_full" / "rtl_result.json").read_text())["halted_o_time_ps"]
    assert end < 900_000_000 and not (out / "rtl_full" / "waves.vcd").exists()
    assert (f"no dump: the run ended at {end} ps, before the window [900000000, 900001000)"
            in capsys.readouterr().out.splitlines())
