"""waves/: pywellen-backed reader, `python -m waves diff`, GTKWave triage save files."""
import subprocess
import sys
from pathlib import Path

import pytest
from vcd import VCDWriter

from tpusim.arch.config import load_config
from tpusim.arch.isa import assemble
from tpusim.sim import run_program
from waves.__main__ import main
from waves.diff import diff_dumps, load_map
from waves.gtkw import write_triage
from waves.reader import WaveError, read_dump

REPO = Path(__file__).resolve().parents[1]


def write_vcd(path, *, inject=None, prefix="top", timescale="1 ps"):
    """Small dump: clk (1 bit, period 1000 ps), a 16-bit counter, an 8-bit bus and a 1-bit flag in
    a sub-scope, 20 cycles. ``inject=(signal, time_ps, value)`` overrides one change."""
    scale = 1000 if timescale == "1 ns" else 1
    with open(path, "w") as fh, VCDWriter(fh, timescale=timescale) as w:
        clk = w.register_var(prefix, "clk", "wire", size=1, init=0)
        cnt = w.register_var(prefix, "count", "wire", size=16, init=0)
        bus = w.register_var(prefix, "bus", "wire", size=8, init=0)
        flag = w.register_var(f"{prefix}.core", "flag", "wire", size=1, init=0)
        sigs = {"clk": clk, "count": cnt, "bus": bus, "flag": flag}
        events = []
        for c in range(20):
            events += [(c * 1000 + 500, "clk", 1), (c * 1000 + 1000, "clk", 0),
                       (c * 1000 + 500, "count", c + 1), (c * 1000 + 500, "bus", (c * 37) & 0xFF)]
        events += [(7500, "flag", 1), (9500, "flag", 0)]
        if inject:
            events.append(inject)
        final = {}
        for t, s, v in sorted(events, key=lambda e: e[0]):
            final[(t, s)] = v
        for (t, s), v in sorted(final.items()):
            w.change(sigs[s], t // scale, v)
    return path


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "waves", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_reader_names_and_ps(tmp_path):
    d = read_dump(write_vcd(tmp_path / "a.vcd", timescale="1 ns"))
    assert set(d.names()) == {"top.clk", "top.count", "top.bus", "top.core.flag"}
    assert d.info("top.count").width == 16
    assert d.changes("top.core.flag") == [(0, 0), (7000, 1), (9000, 0)]   # 7500 ps -> tick 7 at 1 ns
    # init 0 and the 500 ps change both land on tick 0 at 1 ns: the last value at a time wins
    assert d.changes("top.count")[:3] == [(0, 1), (1000, 2), (2000, 3)]


def test_reader_drops_repeats(tmp_path):
    p = tmp_path / "r.vcd"
    with open(p, "w") as fh, VCDWriter(fh, timescale="1 ps") as w:
        v = w.register_var("t", "v", "wire", size=4, init=1)
        w.change(v, 10, 1)      # pyvcd itself may drop this; the reader must too
        w.change(v, 20, 2)
        w.change(v, 30, "x")
    assert read_dump(p).changes("t.v") == [(0, 1), (20, 2), (30, "xxxx")]


def test_diff_finds_first_divergence_and_count(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    b = write_vcd(tmp_path / "b.vcd", inject=(12500, "count", 99))
    res = diff_dumps(read_dump(a), read_dump(b))
    assert res.compared == 4 and len(res.divergences) == 1
    d = res.first
    assert (d.time_ps, d.signal_a, d.value_a, d.value_b) == (12500, "top.count", 13, 99)
    r = run_cli("diff", a, b, "--core-period-ps", 1250)
    assert r.returncode == 1, r.stderr
    assert "first divergence at 12500 ps = core cycle 10: top.count: A=13 (0xd) B=99 (0x63)" in r.stdout
    assert "1 of 4 compared signals differ" in r.stdout


def test_diff_two_diverging_signals_orders_by_time(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    b = tmp_path / "b.vcd"
    text = a.read_text().replace("#7500", "#7400")       # flag rises (and clk/count/bus move) earlier
    b.write_text(text)
    res = diff_dumps(read_dump(a), read_dump(b))
    assert res.first.time_ps == 7400
    assert {d.signal_a for d in res.divergences} == {"top.clk", "top.count", "top.bus", "top.core.flag"}
    assert main(["diff", str(a), str(b)]) == 1


def test_identical_dumps_exit_0(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    b = write_vcd(tmp_path / "b.vcd", timescale="1 ps")
    r = run_cli("diff", a, b)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "identical: 4 signals compared" in r.stdout


def test_map_file_renames(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    b = write_vcd(tmp_path / "b.vcd", prefix="dut", inject=(3500, "bus", 0))
    m = tmp_path / "map.yaml"
    m.write_text("top.clk: dut.clk\ntop.count: dut.count\ntop.core.flag: dut.core.flag\n")
    r = run_cli("diff", a, b)                                     # no common names
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr == (f"waves: error: {a}, {b}: no signal names in common: pass --map (e.g. "
                        "--map waves/arch_map.yaml for model vs RTL arch dumps)\n")
    assert main(["diff", str(a), str(b), "--map", str(m)]) == 0   # bus not mapped: not compared
    m.write_text("signals:\n  top.bus: dut.bus\n  top.clk: dut.clk\n")
    res = diff_dumps(read_dump(a), read_dump(b), load_map(m))
    assert res.compared == 2 and res.first.signal_b == "dut.bus" and res.first.time_ps == 3500
    m.write_text("top.nothere: dut.clk\n")
    r = run_cli("diff", a, b, "--map", m)
    assert r.returncode == 2 and "top.nothere" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("kind", ["missing", "garbage", "broken_body", "directory"])
def test_bad_file_exit_2_one_line(tmp_path, kind):
    a = write_vcd(tmp_path / "a.vcd")
    bad = tmp_path / "bad.vcd"
    if kind == "garbage":
        bad.write_text("this is not a waveform\n")
    elif kind == "broken_body":
        head = a.read_text().split("#0")[0]
        bad.write_text(head + "#zz\nqq!\n")
    elif kind == "directory":
        bad.mkdir()
    r = run_cli("diff", a, bad)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("waves: error: ") and str(bad) in lines[0], r.stderr
    assert r.stdout == ""


def test_gtkw_triage(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    out = write_triage(a, ["top.count", "top.core.flag"], 12500, tmp_path / "t.gtkw",
                       other_signals=["top.clk"])
    text = out.read_text()
    # every trace under an unambiguous alias: its whole hierarchy, "/"-separated
    assert "\n+{top/count} top.count[15:0]\n" in text and "\n+{top/core/flag} top.core.flag\n" in text
    assert "\n+{top/clk} top.clk\n" in text
    assert text.index("-diverging") < text.index("top.count[15:0]") < text.index("top.clk")
    # Signals pane: the longest alias + "=" + value, 8 px a character + 24: (13 + 2 + 1) * 8 + 24
    assert "\n[sst_expanded] 0\n[signals_width] 152\n" in text
    marker_line = next(line for line in text.splitlines() if line.startswith("*"))
    # 40 cycles = 40000 ps (1 ps ticks) on the 733-px pane left of 960 px (960 - 45 - 152 - 30):
    # 40000 * 200 / 733 = 10914 ps per 200-px frame, rounded up to 2**14: zoom -14, a 60047-ps
    # span; the dump ends at 20000 ps, so the start is clamped to 0
    assert marker_line.split()[:2] == ["*-14.000000", "12500"]
    assert "\n[timestart] 0\n" in text
    assert '[dumpfile] "a.vcd"' in text and f'[savefile] "{tmp_path / "t.gtkw"}"' in text
    sub = tmp_path / "sub"
    sub.mkdir()
    # 4000 ps on a 741-px pane (signals 144 px): 1080 ps per frame -> zoom -11 (a 7587-ps
    # span), start a quarter window before
    text = write_triage(a, ["top.count"], 12000, sub / "u.gtkw", window_ps=4000).read_text()
    assert '[dumpfile] "../a.vcd"' in text
    assert "\n[timestart] 11000\n" in text and "\n*-11.000000 12000 " in text
    # near the end the start is clamped so the span ends at 20000 ps (else GTKWave ignores it)
    text = write_triage(a, ["top.count"], 19000, sub / "u.gtkw", window_ps=4000).read_text()
    assert "\n[timestart] 12413\n" in text
    with pytest.raises(WaveError):
        write_triage(a, ["top.nope"], 0, tmp_path / "x.gtkw")


def test_cli_writes_gtkw(tmp_path):
    a = write_vcd(tmp_path / "a.vcd")
    b = write_vcd(tmp_path / "b.vcd", inject=(4500, "bus", 1))
    assert main(["diff", str(a), str(b), "--gtkw", str(tmp_path / "t.gtkw")]) == 1
    text = (tmp_path / "t.gtkw").read_text()
    assert "top.bus[7:0]" in text and "\n*-14.000000 4500 " in text


PROG = """
    LOAD_QREG qreg=3 multiplier=5 shift=0 zero_point=1
    DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=64 count1=1 count2=1 signal=MXU
    NOP engine=2 wait=LOAD
    HALT
"""


def test_simpy_dumps_of_same_program_are_identical(tmp_path):
    cfg = load_config("small")
    for name in ("a.vcd", "b.vcd"):
        run_program(assemble(PROG), cfg, vcd=tmp_path / name)
    a, b = read_dump(tmp_path / "a.vcd"), read_dump(tmp_path / "b.vcd")
    assert "tpu.dec.halted" in a.names()
    assert [v for _, v in a.changes("tpu.dec.halt_retire")] == [0, 1, 0]
    res = diff_dumps(a, b)
    assert res.identical and res.compared == len(a.names()) and res.divergences == []
    assert main(["diff", str(tmp_path / "a.vcd"), str(tmp_path / "b.vcd")]) == 0


def test_truncated_dump_compared_up_to_its_cut(tmp_path):
    """B killed mid-run: no false divergence after its cut; exit 3 and the cut time in the
    headline; a real divergence before the cut is still reported (exit 1)."""
    a = write_vcd(tmp_path / "a.vcd")
    text = a.read_text()
    cut = text[:text.index("#12500") + 8]            # cut inside the #12500 step
    b = tmp_path / "b.vcd"
    b.write_text(cut)
    d = read_dump(b)
    assert d.truncated and d.end_ps == 12000          # its last complete time step
    res = diff_dumps(read_dump(a), d)
    assert res.divergences == [] and res.cut_ps == 12000 and res.exit_code == 3
    r = run_cli("diff", a, b)
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout == ("no divergence up to 12000 ps, where B ends (cut short: killed run?): "
                        "4 signals compared\n")
    assert main(["diff", str(a), str(b), "--gtkw", str(tmp_path / "c.gtkw")]) == 3
    assert "\n*-14.000000 12000 " in (tmp_path / "c.gtkw").read_text()      # marker at the cut
    r = run_cli("diff", b, b)
    assert r.returncode == 3 and "up to 12000 ps, where A and B end (cut" in r.stdout
    bad = write_vcd(tmp_path / "bad.vcd", inject=(4500, "bus", 1)).read_text()
    b.write_text(bad[:bad.index("#12500") + 8])
    r = run_cli("diff", a, b, "--gtkw", tmp_path / "t.gtkw")
    assert r.returncode == 1
    assert r.stdout.splitlines()[:2] == [
        "first divergence at 4500 ps = core cycle 4 + 500 ps: top.bus: A=148 (0x94) B=1",
        "  note: compared only up to 12000 ps, where B ends (cut short: killed run?)"]
    assert "1 of 4 compared signals differ" in r.stdout
    assert "\n*-14.000000 4500 " in (tmp_path / "t.gtkw").read_text()
