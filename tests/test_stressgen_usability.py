"""`python -m stressgen` usability fixes: a huge --count runs in flat memory, out-of-range seeds,
bad --asm files, invalid hand-written programs, default --invalid-rate shared by run and replay,
unwrapped log lines, throughput without minimisation, the RTL hang line in divergence.txt."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stressgen.cli import main

REPO = Path(__file__).resolve().parent.parent
BIG_SEED = 99999999999999999999999


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


# ------------------------------------------------------------------------------ 1: huge --count
def test_count_cap(tmp_path, capsys):
    args = ["run", "--seed", "1", "--db", str(tmp_path / "s.db"), "--no-rtl", "--quiet", "--count"]
    assert main(args + ["10000000000"]) == 2
    err = capsys.readouterr().err
    assert err == ("stressgen: error: --count must be at most 1000000000 (10**9) per campaign, "
                   "got 10000000000\n")


def test_pending_indices_lazy():
    from stressgen.campaign import pending_indices
    it = pending_indices(10**9, {0, 2})
    assert [next(it) for _ in range(3)] == [1, 3, 4]


def _recorded(db: Path) -> bool:
    """Whether the campaign database ``db`` holds a finished program yet (read-only)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return c.execute("SELECT COUNT(*) FROM programs").fetchone()[0] > 0
    except sqlite3.Error:       # not created yet, or locked by the writer for a moment
        return False


def test_huge_count_memory_stays_flat(tmp_path):
    cmd = [sys.executable, "-m", "stressgen", "run", "--seed", "1", "--count", str(10**9), "--jobs", "1",
           "--no-rtl", "--quiet", "--no-minimize", "--db", str(tmp_path / "s.db")]
    # SIGINT's default action in the campaign, whatever the test runner inherited (a shell's
    # background job without job control starts with SIGINT ignored, and so would it)
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        peak = 0
        t = time.monotonic()
        # at least 5 s, and until programs are recorded: the SIGINT must find the campaign running,
        # not its cluster starting (a Ctrl-C then is ignored: stressgen.cluster.local_cluster),
        # which takes longer than 5 s on a loaded machine
        while time.monotonic() - t < 5 or (not _recorded(tmp_path / "s.db") and time.monotonic() - t < 180):
            time.sleep(0.25)
            assert p.poll() is None, p.communicate()[1]
            peak = max(peak, _rss_bytes(p.pid))
        assert 0 < peak < 300 * 2**20, f"parent RSS {peak / 2**20:.0f} MB"
        assert _recorded(tmp_path / "s.db"), "no program recorded within 180 s"
    finally:
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:      # never leave the campaign running after the test
            p.kill()
            _, err = p.communicate()
            err = f"did not stop within 60 s of SIGINT: {err}"
    assert p.returncode == 130, err
    assert "of 1000000000 programs are recorded" in err


# ------------------------------------------------------------------------------ 2: seed range
@pytest.mark.parametrize("cmd", [["run", "--count", "2", "--no-rtl"], ["replay", "--no-rtl"]])
def test_seed_too_large(tmp_path, capsys, cmd):
    assert main([*cmd, "--seed", str(BIG_SEED), *(["--db", str(tmp_path / "s.db")] if cmd[0] == "run" else [])]) == 2
    assert capsys.readouterr().err == (f"stressgen: error: --seed must be below 2**63 = {2**63} "
                                       f"(a 63-bit seed), got {BIG_SEED}\n")
    assert not (tmp_path / "s.db").exists()


def test_largest_seed_accepted_for_replay(tmp_path, capsys):
    assert main(["replay", "--seed", str(2**63 - 1), "--no-rtl", "--out", str(tmp_path / "r")]) in (0, 1)
    assert f"seed {2**63 - 1} on small" in capsys.readouterr().out


# ------------------------------------------------------------------------------ 3: --asm files
@pytest.mark.parametrize("content, message", [
    (bytes([0x41, 0x0a, 0xff, 0xfe, 0x00]), "line 2: not a text program (byte 0xff at offset 2 is not UTF-8)"),
    (b"", "line 1: no instructions (a stress program is instruction lines ending with HALT)"),
    (b"# stressgen seed=3 hw=small invalid=none\nNOP\nNOP\n",
     "line 3: the program has no HALT (its last instruction must be HALT)"),
    (b"NOP\nFOO x=1\nHALT\n", "line 2: unknown opcode 'FOO'"),
    (b"NOP wait=BAD\nHALT\n", "line 1: "),
])
def test_replay_bad_asm(tmp_path, capsys, content, message):
    f = tmp_path / "p.asm"
    f.write_bytes(content)
    assert main(["replay", "--no-rtl", "--asm", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stressgen: error: --asm {f}: {message}") and err.count("\n") == 1, err
    assert "line 1: line" not in err and "line 2: line" not in err


def test_replay_user_program_failing_validation_is_invalid(tmp_path, capsys):
    f = tmp_path / "dl.asm"
    f.write_text("NOP wait=MXU\nHALT\n")
    assert main(["replay", "--no-rtl", "--asm", str(f), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert (f"--asm {f}: invalid program (deadlock), the assembler refuses it: instruction #0 at pc 0x0 "
            "(NOP): wait=0x4 (4) waits for a token from MXU that no earlier instruction sends to LOAD: "
            "deadlock") in out
    assert "2 instructions, invalid (deadlock)" in out and "verdict: PASS" in out
    assert "exception" not in out


@pytest.mark.rtl
def test_replay_user_program_failing_validation_rtl(tmp_path, capsys):
    f = tmp_path / "dl.asm"
    f.write_text("NOP wait=MXU\nHALT\n")
    assert main(["replay", "--no-waves", "--asm", str(f), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "invalid (deadlock)" in out and "verdict: PASS" in out
    o = json.loads((tmp_path / "o" / "outcome.json").read_text())
    assert o["details"]["simpy_flag"] == o["details"]["rtl_flag"] and o["details"]["rtl_flag"][0] == "deadlock"


def test_replay_program_without_outputs_warns(tmp_path, capsys):
    f = tmp_path / "n.asm"
    f.write_text("NOP\nHALT\n")
    assert main(["replay", "--no-rtl", "--asm", str(f), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert (f"stressgen: warning: --asm {f}: no output regions: only retire times, counters and waves "
            "are compared\n") in err


def test_parse_asm_line_number_not_doubled():
    from stressgen.program import parse_asm
    from tpusim.arch.errors import IsaError
    with pytest.raises(IsaError) as e:
        parse_asm("# c\nFOO\n")
    assert str(e.value).startswith("line 2: unknown opcode 'FOO'")


# ---------------------------------------------------------------- 4: default --invalid-rate
def test_default_campaign_seed_replays_identically(tmp_path, capsys):
    """The first root seed whose program 0 is invalid at the default rate 0.05 (invalid_path_of):
    the campaign records its class, and ``replay --seed`` with the defaults regenerates it."""
    from stressgen.campaign import derive_seed
    from stressgen.db import ResultsDb
    from stressgen.gen import generate
    from stressgen.invalid import invalid_path_of
    from tpusim.arch.config import load_config
    root = next(r for r in range(1, 1000) if invalid_path_of(derive_seed(r, 0), 0.05))
    cls = generate(derive_seed(root, 0), load_config("small"), 0.05).invalid
    db = tmp_path / "s.db"
    assert main(["run", "--seed", str(root), "--count", "2", "--jobs", "1", "--db", str(db), "--no-rtl",
                 "--quiet", "--no-minimize"]) in (0, 1)
    with ResultsDb(db, create=False) as d:
        (c,) = d.campaigns()
        assert c["invalid_rate"] == 0.05 and c["id"] == f"s{root}-small-clean-simpy-inv0.05"
        row = d.programs(c["id"])[0]
    assert cls and row["invalid"] == cls
    capsys.readouterr()
    out_dir = tmp_path / "r"
    main(["replay", "--seed", str(row["seed"]), "--no-rtl", "--out", str(out_dir)])
    out = capsys.readouterr().out
    assert f"seed {row['seed']} on small: {row['n_instrs']} instructions, invalid ({cls})" in out
    assert (out_dir / "program.asm").read_text() == generate(row["seed"], load_config("small"), 0.05).asm()


def test_replay_command_of_a_zero_rate_campaign_passes_the_rate():
    from stressgen.campaign import RunSpec, replay_command
    assert replay_command(RunSpec(hw="small", root_seed=1, invalid_rate=0.0), 7)[-2:] == ["--invalid-rate", "0.0"]
    assert "--invalid-rate" not in replay_command(RunSpec(hw="small", root_seed=1, invalid_rate=0.05), 7)


# ------------------------------------------------------------------------- 5: no line wrapping
def test_piped_progress_lines_do_not_wrap(tmp_path):
    """A program killed by a tiny --timeout leaves a bundle; its log line keeps the path whole."""
    deep = tmp_path / ("a-rather-long-folder-name-for-the-database" * 2) / "nightly"
    db = deep / "s.db"
    cmd = [sys.executable, "-m", "stressgen", "run", "--seed", "1", "--count", "1", "--jobs", "1",
           "--no-rtl", "--no-minimize", "--timeout", "0.01", "--db", str(db)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error program 0 seed ")]
    assert len(lines) == 1, r.stderr
    bundle = str(deep / "bundles" / "s1-small-clean-simpy-inv0.05")
    assert bundle in lines[0] and lines[0].endswith(")"), r.stderr


# --------------------------------------------------------------------- 6: throughput in report
def test_report_throughput_excludes_minimisation(tmp_path):
    from stressgen.db import Campaign, ProgramRow, ResultsDb
    from stressgen.report import render, summarize
    with ResultsDb(tmp_path / "s.db") as db:
        cid = db.ensure_campaign(Campaign(1, "small", None, 0.05, False))
        db.record(cid, None, ProgramRow(0, 11, "small", None, "pass", wall_s=2.0, timings={"simpy": 1.5}))
        db.record(cid, None, ProgramRow(1, 12, "small", None, "fail", reason="retire", wall_s=94.0,
                                        timings={"simpy": 1.5, "minimize": 90.0}))
        (s,) = summarize(db)
    assert s.program_s == pytest.approx(6.0) and s.minimize_s == pytest.approx(90.0)
    text = render(s)
    assert ("throughput: 1,200 programs/hour, 3.00 s per program (per worker, run time without "
            "minimisation); 0.0 s of run sessions\n") in text
    assert "minimisation: 90.0 s over 1 failing programs (90.0 s each)" in text


# ---------------------------------------------------------------------- 7: hang line on top
def test_rtl_hang_line_tops_the_divergence():
    from cocotb_tests.harness import RtlResult
    from stressgen.runner import Outcome, _note_hang
    o = Outcome()
    o.fail("flag_mismatch", "dma_misaligned: SimPy flags ('error', 'DMA_MISALIGNED', 0, 3), RTL flags ('timeout',)")
    _note_hang(o, RtlResult(status="timeout", cycles=None,
                            message="no halt within 10040 core cycles; last retired pc per engine: LOAD=none"))
    lines = o.finish().first_divergence.splitlines()
    assert lines[0] == "RTL status timeout: no halt within 10040 core cycles; last retired pc per engine: LOAD=none"
    assert lines[1].startswith("[flag_mismatch] ")
    o2 = Outcome()                       # the rtl_status check already says it first: not twice
    res = RtlResult(status="timeout", cycles=None, message="no halt within 5 core cycles")
    o2.fail("rtl_status", f"RTL status timeout: {res.message}")
    _note_hang(o2, res)
    assert o2.finish().first_divergence == "[rtl_status] RTL status timeout: no halt within 5 core cycles"
