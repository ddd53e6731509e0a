"""SimPy architectural dump (tpusim/models/trace.py), the arch map, scope/window filtering,
atomic writes, truncated dumps, triage on model dumps, dump requests. No RTL needed."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vcd import VCDWriter

from cocotb_tests.rtl_dump import dump_request
from tpusim.arch.config import load_config
from tpusim.arch.isa import assemble
from tpusim.models.trace import Trace, digest_bytes, fold32, signal_table
from tpusim.sim import run_program
from waves.archmap import MAP_PATH, arch_map, map_text
from waves.diff import diff_dumps, load_map
from waves.reader import WaveError, read_dump
from waves.triage import triage

REPO = Path(__file__).resolve().parents[1]
CFG = load_config("small")
DATA = bytes((np.arange(4096) * 7 + 3) % 256)

PROG = """
    LOAD_QREG qreg=3 multiplier=5 shift=-1 zero_point=1
    DMA_LOAD ddr_addr=0x1000 sram_addr=0 inner_bytes=128 count1=1 count2=1 signal=MXU|STORE
    NOP engine=2 wait=LOAD
    DMA_STORE ddr_addr=0x3000 sram_addr=0 inner_bytes=64 count1=1 count2=1 wait=LOAD
    HALT
"""


@pytest.fixture(scope="module")
def model_vcd(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "model.vcd"
    run, _ = run_program(assemble(PROG), CFG, ddr_segments=[(0x1000, DATA)], vcd=path)
    return path, run


def rewrite(src: Path, dst: Path, signal: str | None = None, time_ps=None, flip: int = 1) -> Path:
    """Copy a dump with the pyvcd writer; the value of ``signal`` changed at ``time_ps`` gets
    ``^ flip``."""
    d = read_dump(src)
    events = []
    with open(dst, "w") as fh:
        w = VCDWriter(fh, timescale="1 ps", date=None)
        for n in d.names():
            scope, leaf = n.rsplit(".", 1)
            var = w.register_var(scope, leaf, "wire", size=d.info(n).width)
            for t, v in d.changes(n):
                if n == signal and t == time_ps:
                    v ^= flip
                events.append((t, len(events), var, v))
        for t, _, var, v in sorted(events, key=lambda e: (e[0], e[1])):
            w.change(var, t, v)
        w.close()
    return dst


def test_arch_map_file_is_generated_and_complete():
    assert MAP_PATH.read_text() == map_text(), "run: python -m waves.archmap"
    assert list(arch_map()) == list(signal_table(CFG)), "model signals and map keys differ"
    assert load_map(MAP_PATH) == arch_map()
    assert len(set(arch_map().values())) == len(arch_map())      # one to one


def test_contract_times(model_vcd):
    """Edges worked out by hand from docs/architecture.md for the small config (core 1000 ps,
    DDR 1250 ps phase 100, DMA 2500 ps phase 50, L = 8, BEAT 16, BB 64)."""
    path, run = model_vcd
    d = read_dump(path)
    ch = d.changes
    # fetch line 0 launched at core edge 0, granted at DDR edge 2 = 2600 (visible: 3rd DDR edge
    # after 0), B = 4: bus held [2600, 7600), beat commands registered at 2600 + i*1250
    assert ch("tpu.ddr.grant")[:3] == [(0, 3), (2600, 0), (7600, 3)]
    assert ch("tpu.ddr.cmd_addr")[:4] == [(0, 0), (3850, 16), (5100, 32), (6350, 48)]
    assert ch("tpu.ddr.cmd_valid")[:3] == [(0, 0), (2600, 1), (7600, 0)]
    # done = g + L + B - 1 = 2600 + 11 * 1250 = 16350; line valid at cdc(16350 -> core) = 19000:
    # LOAD_QREG dispatched at 19000, on the VPU (visible 20000) s = 20000, c = s + 1 = 21000
    assert ch("tpu.ddr.fetch_done")[1] == (16350, 1)
    assert ch("tpu.dec.pc")[1] == (19000, 32)
    assert ch("tpu.vpu.busy") == [(0, 0), (20000, 1), (21000, 0)]
    assert ch("tpu.qreg.wr_idx") == [(0, 0), (21000, 3)]
    assert ch("tpu.qreg.wr_val")[1] == (21000, (5 << 16) | (0xFF << 8) | 1)
    assert ch("tpu.vpu.retired") == [(0, 0), (21000, 1)]
    # HALT retires at h = the run's halt edge, pulse one core cycle
    assert ch("tpu.dec.halt_retire") == [(0, 0), (run.halt_ps, 1), (run.halt_ps + 1000, 0)]
    assert ch("tpu.dec.halted")[-1] == (run.halt_ps, 1)
    # the LOAD digest is the hash sum of the 128 bytes it wrote at SRAM 0
    assert ch("tpu.load.retire_digest")[-1][1] == fold32(digest_bytes(1, 0, DATA[:128]))
    store_digest = ch("tpu.store.retire_digest")[-1][1]
    assert store_digest == fold32(digest_bytes(2, 0x3000, DATA[:64]))
    # every retire time of the run appears in the matching engine's retired counter
    for pc, eng, t in run.retire:
        if eng != "HALT":
            assert t in [c[0] for c in ch(f"tpu.{eng.lower()}.retired")], (pc, eng, t)


def test_window_and_scopes(tmp_path, model_vcd):
    path, _ = model_vcd
    full = read_dump(path)
    _, tpu = run_program(assemble(PROG), CFG, ddr_segments=[(0x1000, DATA)], vcd=tmp_path / "x.vcd")
    t0, t1 = 20000, 47600
    tpu.trace.write(tmp_path / "w.vcd", scopes=["tpu.vpu", "tpu.ddr.grant"], window_ps=(t0, t1))
    w = read_dump(tmp_path / "w.vcd")
    assert set(w.names()) == {n for n in full.names() if n.startswith(("tpu.vpu", "tpu.ddr.grant"))}
    for n in w.names():
        got = w.changes(n)
        assert got[0][0] == t0 and all(t0 < t <= t1 for t, _ in got[1:]), (n, got)
        inside = [c for c in full.changes(n) if t0 < c[0] <= t1]
        before = [c for c in full.changes(n) if c[0] <= t0][-1][1]
        assert got == [(t0, before)] + inside, n


def test_model_dump_is_atomic(tmp_path):
    path = tmp_path / "m.vcd"
    path.write_text("previous dump\n")
    tr = Trace()
    tr.bind(CFG, type("C", (), {"core": type("D", (), {"period_ps": 1000}),
                                "ddr": type("D", (), {"period_ps": 1250})})())
    tr._set(10, "tpu.no_such_signal", 1)          # fails while the dump is being built
    with pytest.raises(KeyError):
        tr.write(path)
    assert path.read_text() == "previous dump\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.vcd"]      # no temporary left behind


def test_truncated_model_dump_reads_prefix_or_errors(tmp_path, model_vcd):
    path, _ = model_vcd
    data = path.read_bytes()
    full = read_dump(path).signals()
    seen = {"whole": 0, "prefix": 0, "error": 0}
    cut = tmp_path / "cut.vcd"
    for off in list(range(0, len(data), max(1, len(data) // 300))) + [len(data) - 1]:
        cut.write_bytes(data[:off])
        try:
            d = read_dump(cut)
            got = d.signals()
        except WaveError as exc:
            assert str(cut) in str(exc)
            seen["error"] += 1
            continue
        seen["prefix" if d.truncated else "whole"] += 1
        for n, ch in got.items():            # a prefix, except the last value of a cut time step
            assert ch[:-1] == full[n][:max(len(ch) - 1, 0)], (off, n)
    assert seen["prefix"] > 50 and seen["error"] > 5, seen


def test_truncated_header_message(tmp_path, model_vcd):
    path, _ = model_vcd
    cut = tmp_path / "h.vcd"
    cut.write_bytes(path.read_bytes()[:300])
    with pytest.raises(WaveError, match=r"truncated VCD: the header ends before \$enddefinitions"):
        read_dump(cut)


def test_triage_planted_difference_on_model_dumps(tmp_path, model_vcd):
    path, _ = model_vcd
    t = 21000
    bad = rewrite(path, tmp_path / "bad.vcd", "tpu.qreg.wr_idx", t, flip=4)
    res = triage(path, bad, None, tmp_path / "tri")
    assert not res.identical and res.first.time_ps == t and res.first.signal_a == "tpu.qreg.wr_idx"
    assert (res.first.value_a, res.first.value_b) == (3, 7)
    assert "first divergence at 21000 ps = core cycle 21: tpu.qreg.wr_idx: model=3 rtl=7" in res.report
    assert "VPU pc 0x0 (#0) since 20000 ps, retires here" in res.report
    assert "1 of " in res.report
    assert (tmp_path / "tri" / "divergence.txt").read_text().startswith("first divergence at 21000")


def test_triage_cli(tmp_path, model_vcd):
    path, _ = model_vcd
    r = subprocess.run([sys.executable, "-m", "waves", "triage", str(path), str(path), "--out",
                        str(tmp_path / "t")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "identical:" in r.stdout and (tmp_path / "t" / "triage.gtkw").exists()
    r = subprocess.run([sys.executable, "-m", "waves", "triage", str(path), str(tmp_path / "none.vcd"),
                        "--out", str(tmp_path / "t")], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "none.vcd: no such file" in r.stderr and "Traceback" not in r.stderr


def test_identical_model_dumps_diff_clean(model_vcd):
    path, _ = model_vcd
    res = diff_dumps(read_dump(path), read_dump(path), arch_map() and None)
    assert res.identical and res.compared == len(signal_table(CFG))


@pytest.mark.parametrize("waves,scopes,window,msg", [
    ("arch", None, (5, 5), r"0 <= t0 < t1, got \(5, 5\)"),
    ("vcd", None, (10,), r"dump_window_ps must be \(t0_ps, t1_ps\), got \(10,\)"),
    ("vcd", "tb_top.u_tpu", None, r"list of hierarchical names, got 'tb_top.u_tpu'"),
    ("arch", ["tb_top.u_tpu"], None, "arch dump has fixed signals"),
    (False, ["tb_top.u_tpu"], None, "need waves='vcd'"),
    ("wave", None, None, r"got 'wave'"),
    ("fst", ["tb_top"], None, "VCD only"),
])
def test_dump_request_errors(tmp_path, waves, scopes, window, msg):
    with pytest.raises(WaveError, match=msg):
        dump_request(tmp_path, waves, scopes, window)


def test_dump_request_modes(tmp_path):
    arch = dump_request(tmp_path, "arch", None, (100, 200))
    assert arch.build_waves == "" and not arch.full and arch.path == tmp_path / "arch.vcd"
    assert f"+tpu_arch_vcd={tmp_path / 'arch.vcd'}" in arch.plusargs
    assert "+tpu_arch_w0=100" in arch.plusargs and "+tpu_arch_w1=200" in arch.plusargs
    scoped = dump_request(tmp_path, "vcd", ["tb_top.u_tpu.u_vpu"], None)
    assert scoped.build_waves == "vcd" and not scoped.full and scoped.env["TPU_DUMP_VCD"]
    assert dump_request(tmp_path, "vcd").full and dump_request(tmp_path, False).build_waves is None


def test_triage_that_cannot_write_names_the_file(tmp_path, model_vcd):
    """Out of space for the merged dump (a real file-size limit, SIGXFSZ ignored so writes fail
    with EFBIG): one line naming the file, exit 2, no partial or temporary file left."""
    import resource
    import signal as sig
    path, _ = model_vcd
    bad = rewrite(path, tmp_path / "bad.vcd", "tpu.qreg.wr_idx", 21000, flip=4)
    out = tmp_path / "tri"
    out.mkdir()

    def limit():
        sig.signal(sig.SIGXFSZ, sig.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))

    r = subprocess.run([sys.executable, "-m", "waves", "triage", str(path), str(bad), "--out", str(out)],
                       capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("waves: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "merged.vcd" in r.stderr and "Traceback" not in r.stderr
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp") or p.name == "merged.vcd"]


def test_triage_on_a_cut_dump_stops_at_the_cut(tmp_path, model_vcd):
    """The RTL side killed mid-run: triage compares up to its last complete step only (no false
    divergence after it), says so, puts the marker at the cut; the CLI exits 3."""
    path, _ = model_vcd
    data = path.read_bytes()
    steps = [i for i in range(len(data)) if data.startswith(b"\n#", i)]
    off = steps[len(steps) // 2] + 4                  # inside a time step halfway through
    cut = tmp_path / "cut.vcd"
    cut.write_bytes(data[:off])
    end = int(data[steps[len(steps) // 2 - 1] + 2:steps[len(steps) // 2]].split(b"\n")[0])
    assert read_dump(cut).truncated and read_dump(cut).end_ps == end
    res = triage(path, cut, None, tmp_path / "tri")
    assert res.divergences == [] and res.cut_ps == end and not res.identical and res.exit_code == 3
    assert res.report.startswith(f"no divergence up to {end} ps, where rtl ends (cut short: "
                                 "killed run?): ")
    marker = next(x for x in res.gtkw.read_text().splitlines() if x.startswith("*"))
    assert marker.split()[1] == str(end)
    r = subprocess.run([sys.executable, "-m", "waves", "triage", str(path), str(cut), "--out",
                        str(tmp_path / "t")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.startswith(f"no divergence up to {end} ps, where rtl ends")
