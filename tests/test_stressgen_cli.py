"""`python -m stressgen`: user mistakes are one line and exit 2; Ctrl-C keeps results, exit 130;
report verdicts; replay from a seed and from a saved program."""
from __future__ import annotations

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


def _run(tmp_path, *extra):
    return ["run", "--seed", "1", "--count", "3", "--db", str(tmp_path / "s.db"), "--no-rtl", "--quiet", *extra]


@pytest.mark.parametrize("extra, message", [
    (["--hw", "nosuch"], "hardware config 'nosuch' not found"),
    (["--count", "0"], "--count must be at least 1, got 0"),
    (["--jobs", "0"], "--jobs must be at least 1, got 0"),
    (["--seed", "-4"], "--seed must be non-negative, got -4"),
    (["--invalid-rate", "1.5"], "--invalid-rate must be between 0 and 1, got 1.5"),
    (["--timeout", "0"], "--timeout must be positive seconds, got 0.0"),
    (["--stop-after-fails", "0"], "--stop-after-fails must be at least 1, got 0"),
    (["--bug", "nosuch"], "unknown injected bug 'nosuch'; known bugs: addr36"),
    (["--bug", "addr36"], "--bug addr36 injects an RTL bug: it needs the RTL (drop --no-rtl)"),
])
def test_run_user_errors(tmp_path, capsys, extra, message):
    assert main(_run(tmp_path, *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("stressgen: error: ") and message in err and err.count("\n") == 1


def test_unwritable_and_corrupt_db(tmp_path, capsys):
    f = tmp_path / "plainfile"
    f.write_text("x")
    args = ["run", "--seed", "1", "--count", "2", "--no-rtl", "--quiet", "--db"]
    assert main(args + [str(f / "s.db")]) == 2
    assert f"stressgen: error: {f / 's.db'}: cannot create its folder" in capsys.readouterr().err
    assert main(args + ["/proc/stress.db"]) == 2          # not writable, even for root
    assert "stressgen: error: /proc/stress.db: cannot open or write the results database" \
        in capsys.readouterr().err
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(os.urandom(4096))
    assert main(args + [str(bad)]) == 2
    assert f"stressgen: error: {bad}: not a stressgen results database" in capsys.readouterr().err
    assert main(["report", "--db", str(bad)]) == 2
    assert "not a stressgen results database" in capsys.readouterr().err
    assert main(["report", "--db", str(tmp_path / "none.db")]) == 2
    assert f"{tmp_path / 'none.db'}: no such results database" in capsys.readouterr().err
    assert main(args + [str(tmp_path), ]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_replay_needs_one_source(capsys, tmp_path):
    assert main(["replay", "--no-rtl"]) == 2
    assert "replay needs exactly one of --seed P or --asm FILE" in capsys.readouterr().err
    assert main(["replay", "--no-rtl", "--asm", str(tmp_path / "x.asm")]) == 2
    assert f"--asm {tmp_path / 'x.asm'}: no such file" in capsys.readouterr().err


def test_subprocess_user_error_has_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "stressgen", *_run(tmp_path, "--hw", "nosuch")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_ctrl_c_keeps_partial_results(tmp_path):
    db = tmp_path / "s.db"
    cmd = [sys.executable, "-m", "stressgen", "run", "--seed", "2", "--count", "200", "--jobs", "2",
           "--db", str(db), "--no-rtl", "--quiet", "--no-minimize"]
    # SIGINT's default action in the campaign, whatever the test runner inherited (a shell's
    # background job without job control starts with SIGINT ignored, and so would it)
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t = time.monotonic()
    n = 0
    while n < 3 and time.monotonic() - t < 120:
        time.sleep(0.2)
        if db.exists():
            try:
                c = sqlite3.connect(db, timeout=30)
                n = c.execute("SELECT COUNT(*) FROM programs").fetchone()[0]
                c.close()
            except sqlite3.OperationalError:
                pass
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    c = sqlite3.connect(db)
    kept = c.execute("SELECT COUNT(*) FROM programs").fetchone()[0]
    c.close()
    assert 3 <= kept < 200
    assert f"stressgen: interrupted: {kept} of 200 programs are recorded in {db}" in err


def test_report_verdicts_and_content(tmp_path, capsys):
    """A SimPy-only campaign: the report lists status counts, every bin of ALL_BINS with its hit
    count, programs/hour, and fails (exit 1) while a bin is empty."""
    from stressgen.coverage import ALL_BINS
    db = tmp_path / "s.db"
    rc = main(["run", "--seed", "3", "--count", "4", "--jobs", "1", "--db", str(db), "--no-rtl", "--quiet"])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    assert "programs: 4" in out and "programs/hour" in out
    for b in ALL_BINS:
        assert f"  {b} " in out
    rc2 = main(["report", "--db", str(db)])
    rep = capsys.readouterr().out
    empty = "EMPTY: " in rep
    failing = "failing seeds" in rep
    assert rc2 == (1 if empty or failing else 0) == rc
    assert ("verdict: PASS" in rep) == (rc2 == 0)


def test_nightly_script(tmp_path):
    """scripts/nightly_stress.sh: dated campaign in $STRESS_HOME, report beside the DB, exit code
    = verdict (5 programs leave some coverage bin empty: 1), a usage error keeps the report."""
    script = REPO / "scripts" / "nightly_stress.sh"
    env = dict(os.environ, STRESS_HOME=str(tmp_path), N="5", STRESS_DATE="20250101",
               STRESS_ARGS="--no-rtl", PY=sys.executable)
    r = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=300)
    report = tmp_path / "report-20250101.txt"
    assert r.returncode == 1, r.stdout + r.stderr
    text = report.read_text()
    assert "campaign s20250101-small-clean-simpy-inv0.2" in text and "programs: 5" in text and "EMPTY:" in text
    assert (tmp_path / "report-latest.txt").read_text() == text and (tmp_path / "stress.db").exists()
    r = subprocess.run([str(script)], env=dict(env, HW="nosuch"), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "hardware config 'nosuch' not found" in r.stderr
    assert report.read_text() == text


@pytest.mark.parametrize("window, message", [
    ("abc", "--dump-window must be T0:T1 in ps (integers), got 'abc'"),
    ("10:5", "--dump-window needs 0 <= T0 < T1, got '10:5'"),
])
def test_replay_bad_dump_window(capsys, tmp_path, window, message):
    assert main(["replay", "--seed", "3", "--out", str(tmp_path), "--dump-window", window]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stressgen: error: ") and message in err and err.count("\n") == 1


def test_replay_scoped_dump_needs_the_rtl(capsys, tmp_path):
    assert main(["replay", "--seed", "3", "--out", str(tmp_path), "--no-rtl",
                 "--dump-scope", "tb_top.u_tpu.u_ddr_arb"]) == 2
    assert "--dump-scope / --dump-window dump the RTL: drop --no-rtl" in capsys.readouterr().err


@pytest.mark.rtl
def test_replay_with_scoped_windowed_dump(capsys, tmp_path):
    """The deep-triage dump: every signal under one scope, only inside the window (model ps)."""
    from waves.reader import read_dump
    rc = main(["replay", "--seed", "3", "--out", str(tmp_path), "--dump-scope", "tb_top.u_tpu.u_ddr_arb",
               "--dump-window", "20000:40000"])
    assert rc == 0, capsys.readouterr()
    vcd = tmp_path / "rtl_full" / "waves.vcd"
    assert f"scoped RTL dump: {vcd}" in capsys.readouterr().out
    d = read_dump(vcd)
    assert d.names() and all(n.startswith("tb_top.u_tpu.u_ddr_arb.") for n in d.names())
    times = [t for n in d.names() for t, _ in d.changes(n)]
    assert min(times) >= d.to_ticks(20000) and max(times) < d.to_ticks(40000)


def test_report_on_a_database_damaged_mid_file(tmp_path, capsys):
    """Pages past the schema overwritten: `report` gives one line naming the file, exit 2."""
    db = tmp_path / "s.db"
    assert main(["run", "--seed", "4", "--count", "12", "--no-rtl", "--db", str(db), "--quiet"]) in (0, 1)
    raw = bytearray(db.read_bytes())
    assert len(raw) > 12288
    raw[8192:12288] = bytes(range(256)) * 16
    db.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["report", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stressgen: error: {db}: ") and "Traceback" not in err and err.count("\n") == 1, err


def test_run_refuses_a_foreign_sqlite_database(tmp_path, capsys):
    import sqlite3
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE foo (x)")
    before = db.read_bytes()
    assert main(["run", "--seed", "1", "--count", "2", "--no-rtl", "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{db}: an SQLite database of something else (tables: foo)" in err and err.count("\n") == 1
    assert db.read_bytes() == before


def test_db_that_is_a_device_is_named_so(capsys):
    assert main(["report", "--db", "/dev/null"]) == 2
    assert "/dev/null: not a regular file (a device or a pipe)" in capsys.readouterr().err
