"""The stress results database: schema, one row per program, errors, and resume after kill -9."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from stressgen.campaign import derive_seed
from stressgen.db import Campaign, DbError, Owner, ProgramRow, ResultsDb, process_start

REPO = Path(__file__).resolve().parent.parent


def _camp(**kw):
    d = dict(root_seed=5, hw="small", bug=None, invalid_rate=0.0, rtl=False)
    d.update(kw)
    return Campaign(**d)


def test_record_and_read_back(tmp_path):
    with ResultsDb(tmp_path / "r.db") as db:
        cid = db.ensure_campaign(_camp())
        s = db.start_session(cid, jobs=2)
        db.record(cid, s, ProgramRow(0, 11, "small", None, "pass", bins={"b1": 2}, timings={"simpy": 0.5}))
        db.record(cid, s, ProgramRow(1, 12, "small", None, "fail", reason="simpy_vs_rtl", signal="sig",
                                     divergence="x", bundle="/b/12"))
        assert db.done_indices(cid) == {0, 1}
        rows = db.programs(cid)
        assert [(r["idx"], r["status"], r["reason"], r["signal"]) for r in rows] == \
            [(0, "pass", "", None), (1, "fail", "simpy_vs_rtl", "sig")]
        assert rows[0]["bins"] == {"b1": 2} and rows[0]["timings"] == {"simpy": 0.5}
        assert db.sessions(cid)[0]["programs"] == 2
        # WAL mode
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_transaction_left_open_by_an_interrupt_is_rolled_back_by_the_next(tmp_path):
    """Ctrl-C between BEGIN and the block (no __exit__ runs): the next write still works, and the
    interrupted transaction's partial write is not kept."""
    with ResultsDb(tmp_path / "r.db") as db:
        cid = db.ensure_campaign(_camp())
        db.conn.execute("BEGIN IMMEDIATE")
        db.conn.execute("DELETE FROM programs")          # a write that must not survive
        db.record(cid, None, ProgramRow(4, 1, "small", None, "pass"))
        assert db.done_indices(cid) == {4} and not db.conn.in_transaction


def test_rerecord_replaces(tmp_path):
    with ResultsDb(tmp_path / "r.db") as db:
        cid = db.ensure_campaign(_camp())
        db.record(cid, None, ProgramRow(3, 1, "small", None, "error", reason="timeout"))
        db.record(cid, None, ProgramRow(3, 1, "small", None, "pass"))
        assert [r["status"] for r in db.programs(cid)] == ["pass"]


def test_campaign_identity_conflict(tmp_path):
    with ResultsDb(tmp_path / "r.db") as db:
        db.ensure_campaign(_camp(params='{"cfg_sha256": "aa"}'))
        db.ensure_campaign(_camp(params='{"cfg_sha256": "aa"}'))          # same: fine
        with pytest.raises(DbError, match="campaign s5-small-clean-simpy exists with other parameters"):
            db.ensure_campaign(_camp(params='{"cfg_sha256": "bb"}'))


def test_claims_split_expire_and_follow_their_owner(tmp_path):
    """A program with a row or another live owner's claim is not claimed; a claim whose lease
    ran out, or whose owner process is gone (a real process that exited), is free; recording
    drops the claim; a program recorded by another owner keeps that row."""
    a, b = Owner.me(), Owner.me()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = Owner("dead", a.host, gone.pid, "1")                  # the pid of a process that exited
    assert process_start(gone.pid) != "1"                        # (or reused by a later process)
    with ResultsDb(tmp_path / "s.db") as db:
        cid = db.ensure_campaign(_camp())
        db.record(cid, None, ProgramRow(0, 10, "small", None, "pass"))
        assert db.claim(cid, a, [0, 1, 2], 60) == ([1, 2], [])
        assert db.claim(cid, b, [1, 2, 3], 60) == ([3], [1, 2])
        assert db.claim(cid, a, [1], 60) == ([1], [])            # its own claim again
        assert db.claim(cid, b, [4], -1) == ([4], [])            # a lease already over
        assert db.claim(cid, a, [4], 60) == ([4], [])
        assert db.claim(cid, dead, [5], 60) == ([5], [])
        assert db.claim(cid, a, [5], 60) == ([5], [])            # its owner is gone: free now
        assert db.record(cid, None, ProgramRow(1, 11, "small", None, "pass"), a)
        assert [c["idx"] for c in db.claims(cid) if c["owner"] == a.token] == [2, 4, 5]
        assert not db.record(cid, None, ProgramRow(1, 11, "small", None, "fail", reason="x"), b)
        assert db.programs(cid)[1]["status"] == "pass"
        db.release(a)
        assert [c["idx"] for c in db.claims(cid)] == [3]
        assert db.claim(cid, a, [2, 3], 60) == ([2], [3])


def test_bad_status_is_refused():
    with pytest.raises(DbError, match="status 'maybe' is not one of"):
        ProgramRow(0, 1, "small", None, "maybe")


def test_corrupt_and_unwritable(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(DbError, match=f"{bad}: not a stressgen results database"):
        ResultsDb(bad)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DbError, match="cannot create its folder"):
        ResultsDb(f / "sub" / "r.db")
    with pytest.raises(DbError, match="is a folder"):
        ResultsDb(tmp_path)
    with pytest.raises(DbError, match="no such results database"):
        ResultsDb(tmp_path / "missing.db", create=False)


def test_other_schema_is_refused(tmp_path):
    p = tmp_path / "r.db"
    ResultsDb(p).close()
    c = sqlite3.connect(p)
    c.execute("UPDATE meta SET value='99' WHERE key='schema'")
    c.commit()
    c.close()
    with pytest.raises(DbError, match="schema '99'"):
        ResultsDb(p)


def test_derive_seed_rule():
    import hashlib
    d = hashlib.sha256(b"tpusim-stress:7:3").digest()
    assert derive_seed(7, 3) == int.from_bytes(d[:8], "little") >> 1
    seeds = {derive_seed(7, i) for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(8, 3) != derive_seed(7, 3)


# ------------------------------------------------------------------ kill -9 and resume, for real
COUNT = 120


def _cmd(db: Path) -> list[str]:
    return [sys.executable, "-m", "stressgen", "run", "--seed", "11", "--count", str(COUNT), "--hw", "small",
            "--jobs", "2", "--db", str(db), "--no-rtl", "--quiet", "--no-minimize"]


def _rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    c = sqlite3.connect(db, timeout=30)
    try:
        return c.execute("SELECT idx, seed, status, reason, signal, bins FROM programs ORDER BY idx").fetchall()
    except sqlite3.OperationalError:       # tables not created yet
        return []
    finally:
        c.close()


def _marked(marker: str) -> list[int]:
    """pids of live processes carrying the test's environment marker (the run and its workers)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "environ").read_bytes():
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def _kill_after(db: Path, env: dict, min_rows: int, extra_s: float) -> None:
    p = subprocess.Popen(_cmd(db), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = time.monotonic()
    while len(_rows(db)) < min_rows and p.poll() is None and time.monotonic() - t < 120:
        time.sleep(0.05)
    time.sleep(extra_s)
    p.send_signal(signal.SIGKILL)
    p.wait()


def test_kill9_and_resume_loses_nothing(tmp_path):
    marker = f"STRESS_TEST_{uuid.uuid4().hex}"
    env = dict(os.environ, **{marker: "1"})
    ref_db, db = tmp_path / "ref" / "s.db", tmp_path / "k" / "s.db"
    r = subprocess.run(_cmd(ref_db), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    ref = _rows(ref_db)
    assert [x[0] for x in ref] == list(range(COUNT))
    assert [x[1] for x in ref] == [derive_seed(11, i) for i in range(COUNT)]

    # kill at several moments: right after start (before any row), mid-run twice
    _kill_after(db, env, 0, 0.3)
    _kill_after(db, env, 3, 0.0)
    n_mid = len(_rows(db))
    _kill_after(db, env, n_mid + 4, 0.37)
    n_before = len(_rows(db))
    assert 0 < n_before < COUNT, "the kills came too late to test anything"
    # the workers die with their parent (no orphan keeps running)
    t = time.monotonic()
    while _marked(marker) and time.monotonic() - t < 10:
        time.sleep(0.1)
    assert _marked(marker) == []
    r = subprocess.run(_cmd(db), cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode in (0, 1), r.stderr
    assert f"{COUNT - n_before} programs in" in r.stdout and f"({n_before} already done)" in r.stdout
    got = _rows(db)
    assert [x[0] for x in got] == list(range(COUNT))           # every seed exactly once
    diff = [(a[:5], b[:5]) for a, b in zip(got, ref) if a != b]
    assert not diff, f"{len(diff)} programs differ from the uninterrupted run, e.g. {diff[:3]}"
    c = sqlite3.connect(db)
    sessions = c.execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    c.close()
    assert sessions >= 2


# ------------------------------------------------------------------ report from a read-only place
def _as_unprivileged() -> list[str]:
    """A command prefix that drops root (root writes through chmod -w): util-linux setpriv to
    nobody; [] if not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and no setpriv (util-linux) to drop to an unprivileged user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_report_reads_a_read_only_folder_and_file():
    """`stressgen report` on a database whose folder and file are chmod -w (as a user they bind:
    root ignores the bits). SQLite's plain open wants to write (WAL): `mode=ro`, then `immutable=1`."""
    base = Path(tempfile.mkdtemp(prefix="ro-report-"))
    try:
        base.chmod(0o755)
        db_path = base / "d" / "s.db"
        with ResultsDb(db_path) as db:
            cid = db.ensure_campaign(_camp())
            db.record(cid, db.start_session(cid, jobs=1), ProgramRow(0, 11, "small", None, "pass"))
            db.record(cid, None, ProgramRow(1, 12, "small", None, "fail", reason="simpy_vs_rtl"))
        assert sorted(p.name for p in db_path.parent.iterdir()) == ["s.db"]   # no -wal/-shm left
        db_path.chmod(0o444)
        db_path.parent.chmod(0o555)
        pre, env = _as_unprivileged(), dict(os.environ, PYTHONPATH=str(REPO))
        probe = subprocess.run([*pre, sys.executable, "-c", "import stressgen"], cwd=base,
                               capture_output=True, text=True, env=env)
        if probe.returncode:
            pytest.skip(f"the unprivileged user cannot run this checkout's Python: {probe.stderr[-300:]!r}")
        r = subprocess.run([*pre, sys.executable, "-m", "stressgen", "report", "--db", str(db_path)],
                           cwd=base, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 1, r.stderr          # one failing program: exit 1, not an error (2)
        assert r.stdout.startswith("campaign s5-small-clean-simpy") and "programs: 2  pass 1  fail 1" in r.stdout
        assert r.stderr == ""
        assert sorted(p.name for p in db_path.parent.iterdir()) == ["s.db"]   # nothing created
        # the library call too, and a read-only open of a missing file names it
        with ResultsDb(db_path, read_only=True) as db:
            assert [p["status"] for p in db.programs()] == ["pass", "fail"]
        with pytest.raises(DbError, match=f"{base / 'd' / 'none.db'}: no such results database"):
            ResultsDb(base / "d" / "none.db", read_only=True)
    finally:
        db_path.parent.chmod(0o755)
        shutil.rmtree(base)
