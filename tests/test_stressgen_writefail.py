"""Out of disk for waves: files that cannot be written (EFBIG under a real RLIMIT_FSIZE, set in
the child process with SIGXFSZ ignored, as a full disk would give ENOSPC) make the program an
"error" whose reason names the file, keep the results database consistent, and a rerun without
the limit redoes exactly those programs (stressgen.writefail, stressgen.db.done_indices).
"""
from __future__ import annotations

import json
import re
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stressgen.db import Campaign, ProgramRow, ResultsDb
from stressgen.writefail import WRITE_FAILED, cut_files, is_write_failure

REPO = Path(__file__).resolve().parent.parent


def _limited(limit_bytes: int):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # writes fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return pre


def _run(args, limit_bytes: int | None = None, timeout_s: float = 900):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, preexec_fn=_limited(limit_bytes) if limit_bytes else None)


# ------------------------------------------------------------------------------- primitives
def test_atomic_write_failure_names_the_file(tmp_path):
    code = f"""
import json, os
from tpusim.arch.fileio import write_text_atomic
from stressgen.writefail import write_failure, cut_files
p = {str(tmp_path / 'big.txt')!r}
try:
    write_text_atomic(p, 'x' * 5000)
    print(json.dumps({{'raised': False}}))
except OSError as e:
    print(json.dumps({{'raised': True, 'errno': e.errno, 'filename': e.filename, 'str': str(e),
                      'reason': write_failure(e), 'left': sorted(os.listdir({str(tmp_path)!r}))}}))
fd = os.open({str(tmp_path / 'raw.bin')!r}, os.O_WRONLY | os.O_CREAT)   # as C stdio: cut silently
try:
    while True:
        os.write(fd, b'y' * 700)
except OSError:
    pass
os.close(fd)
print(json.dumps({{'cut': cut_files({str(tmp_path)!r})}}))
"""
    r = _run(["-c", code], limit_bytes=1000)
    assert r.returncode == 0, r.stderr
    first, second = (json.loads(x) for x in r.stdout.splitlines())
    assert first["raised"] and first["errno"] == 27 and first["filename"] == str(tmp_path / "big.txt")
    assert first["reason"] == f"{WRITE_FAILED}{tmp_path / 'big.txt'}: File too large (EFBIG)"
    assert first["left"] == []                          # no temporary file left behind
    assert second["cut"] == (f"{WRITE_FAILED}{tmp_path / 'raw.bin'}: file-size limit of 1000 bytes "
                             "reached (EFBIG)")
    assert cut_files(tmp_path) is None                  # no limit here, and the disk is not full


def test_done_indices_redo_write_failures(tmp_path):
    with ResultsDb(tmp_path / "s.db") as db:
        cid = db.ensure_campaign(Campaign(1, "small", None, 0.0, False))
        rows = [ProgramRow(0, 10, "small", None, "pass"),
                ProgramRow(1, 11, "small", None, "fail", "simpy_vs_rtl"),
                ProgramRow(2, 12, "small", None, "error", "timeout in rtl"),
                ProgramRow(3, 13, "small", None, "error", f"{WRITE_FAILED}/x/model.vcd: File too "
                                                          "large (EFBIG)")]
        for r in rows:
            db.record(cid, None, r)
        assert db.done_indices(cid) == {0, 1, 2}
        db.record(cid, None, ProgramRow(3, 13, "small", None, "pass"))       # the rerun
        assert db.done_indices(cid) == {0, 1, 2, 3}
        assert [r["idx"] for r in db.programs(cid)] == [0, 1, 2, 3]
    assert is_write_failure(rows[3].reason) and not is_write_failure(rows[2].reason)


def test_database_at_the_limit_fails_whole_rows(tmp_path):
    """The database itself cannot grow: DbError naming it; every row recorded before is intact
    (integrity check) and the failed row is absent, never half written."""
    code = f"""
from stressgen.db import Campaign, DbError, ProgramRow, ResultsDb
db = ResultsDb({str(tmp_path / 's.db')!r})
cid = db.ensure_campaign(Campaign(1, 'small', None, 0.0, False))
s = db.start_session(cid, 1)
for i in range(1000):
    try:
        db.record(cid, s, ProgramRow(i, i, 'small', None, 'fail', 'x', divergence='y' * 3000))
    except DbError as e:
        print(i)
        print(e)
        break
"""
    r = _run(["-c", code], limit_bytes=64 * 1024)
    assert r.returncode == 0, r.stderr
    n, msg = r.stdout.splitlines()[:2]
    assert 3 <= int(n) < 1000
    assert msg == (f"{tmp_path / 's.db'}: cannot write the results database (disk I/O error: disk "
                   "full or file-size limit?); the programs recorded so far are kept, run again to "
                   "resume")
    with ResultsDb(tmp_path / "s.db") as db:
        rows = db.programs()
        assert [x["idx"] for x in rows] == list(range(int(n)))
        assert all(x["divergence"] == "y" * 3000 for x in rows)
        assert db.sessions()[0]["programs"] == int(n)
    assert _integrity(tmp_path / "s.db")


def _integrity(path: Path) -> bool:
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        con.close()


def test_cosim_under_a_file_size_limit_then_resume(tmp_path):
    """A cosim run (reduced ResNet-50, SimPy) whose binary cannot be written: one line naming
    the file, exit 2; the same command without the limit then passes."""
    out = tmp_path / "run"
    cmd = ["-m", "tpusim.flow.cosim", "--model", "resnet50-reduced", "--hw", "small", "--no-rtl",
           "--calib", "2", "--out", str(out)]
    r = _run(cmd, limit_bytes=300_000)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (f"cosim: error: {out / 'resnet50-reduced.tpubin'}: "
                                                 "File too large")
    assert "Traceback" not in r.stderr
    r = _run(cmd)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "verdict.json").read_text())["passed"]


# ------------------------------------------------------------------------------ RTL runs
def _sizes(seeds, cfg, tmp: Path) -> list[tuple[int, int, int]]:
    """(model.vcd, program.asm, program.tpubin) bytes of each seed's program."""
    from stressgen import generate
    from tpusim.sim import run_binary
    out = []
    for s in seeds:
        p = generate(s, cfg)
        b = p.to_binary(cfg)
        run_binary(b, cfg, {}, vcd=tmp / "m.vcd")
        out.append(((tmp / "m.vcd").stat().st_size, len(p.asm()), len(b.to_bytes())))
    return out


def _rows(db: Path) -> list[tuple]:
    assert _integrity(db)
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT idx, seed, status, reason, bundle FROM programs ORDER BY idx").fetchall()
    finally:
        con.close()


@pytest.mark.rtl
def test_campaign_under_a_file_size_limit_then_resume(tmp_path):
    """`python -m stressgen run` under RLIMIT_FSIZE: the programs whose model VCD is larger than
    the limit are errors naming that VCD (no bundle, nothing left in the work folder), the
    others pass, the database stays readable; the same command without the limit redoes only
    the errors and every seed is then present exactly once and passes."""
    from stressgen.campaign import derive_seed
    from tpusim.arch.config import load_config
    cfg = load_config("small")
    count = 6
    # the first campaign root whose 6 programs split cleanly: each model VCD either above the
    # limit or so far below that the other dumps (RTL arch.vcd ~1.2x, merged.vcd ~2.2x the model
    # VCD) fit; the limit is above every program file and the database (< 100 KB)
    for root in range(11, 60):
        sizes = _sizes([derive_seed(root, i) for i in range(count)], cfg, tmp_path)
        limit = max(100_000, max(max(a, t) for _, a, t in sizes) + 4096)
        too_big = {i for i, (v, _, _) in enumerate(sizes) if v >= limit}
        fits = {i for i, (v, _, _) in enumerate(sizes) if 3 * v < limit}
        if 1 <= len(too_big) and len(fits) >= 1 and len(too_big | fits) == count:
            break
    else:
        pytest.fail(f"no campaign root in 11..59 splits its programs around the limit ({sizes}, {limit})")
    db, home = tmp_path / "s.db", tmp_path / "runs"
    cmd = ["-m", "stressgen", "run", "--seed", str(root), "--count", str(count), "--jobs", "2",
           "--db", str(db), "--bundles", str(home / "bundles"), "--no-minimize", "--quiet"]
    r = _run(cmd, limit_bytes=limit)
    assert r.returncode == 1, r.stderr[-3000:]
    rows = _rows(db)
    assert [x[0] for x in rows] == list(range(count))
    for idx, seed, status, reason, bundle in rows:
        assert seed == derive_seed(root, idx)
        if idx in too_big:
            work = re.escape(str(Path(f"/{seed}/model.vcd")))
            assert status == "error" and re.fullmatch(
                rf"cannot write /\S+{work}: File too large \(EFBIG\)", reason), reason
            assert bundle is None
        else:
            assert status == "pass", (idx, reason)
    assert f"{len(too_big)} programs could not write their files" in r.stdout
    assert not list(tmp_path.rglob("model.vcd")), "a run folder was left behind"
    r = _run(cmd)                          # exit 1 only for coverage bins 6 programs miss
    assert f"this run: {len(too_big)} programs in " in r.stdout, r.stdout + r.stderr[-3000:]
    rows2 = _rows(db)
    assert [(x[0], x[1], x[2]) for x in rows2] == [(i, derive_seed(root, i), "pass") for i in range(count)]
    assert "programs: 6  pass 6  fail 0  error 0" in r.stdout


@pytest.mark.rtl
def test_replay_with_the_rtl_dump_cut_by_the_limit(tmp_path):
    """The RTL's arch.vcd ($fwrite ignores the failed write) is cut at the limit: the replay is
    an error naming it, not a waveform mismatch; `waves diff` reads the cut dump's complete
    prefix and says so, and a dump cut inside its header is a one-line error."""
    from tpusim.arch.config import load_config
    cfg = load_config("small")
    seed = 5
    (vcd, asm, tpubin), = _sizes([seed], cfg, tmp_path)
    limit = vcd + 1024                     # the model VCD fits; the RTL's arch VCD is larger
    out = tmp_path / "r"
    r = _run(["-m", "stressgen", "replay", "--seed", str(seed), "--hw", "small", "--out", str(out)],
             limit_bytes=limit)
    assert r.returncode == 1, r.stderr[-3000:]
    assert (out / "rtl" / "arch.vcd").stat().st_size == limit
    verdict = next(x for x in r.stdout.splitlines() if x.startswith("verdict:"))
    assert verdict.startswith(f"verdict: ERROR (cannot write {out / 'rtl' / 'arch.vcd'}"), verdict
    assert verdict.endswith(f"file-size limit of {limit} bytes reached (EFBIG))"), verdict
    d = _run(["-m", "waves", "diff", str(out / "model.vcd"), str(out / "rtl" / "arch.vcd"),
              "--map", str(REPO / "waves" / "arch_map.yaml")])
    assert d.returncode == 3, d.stdout + d.stderr        # identical only up to the cut
    assert d.stdout.startswith("no divergence up to ") and "where B ends (cut short: killed run?)" in d.stdout
    head = tmp_path / "head.vcd"
    head.write_bytes((out / "rtl" / "arch.vcd").read_bytes()[:300])
    d = _run(["-m", "waves", "diff", str(out / "model.vcd"), str(head)])
    assert d.returncode == 2 and d.stderr.strip() == (
        f"waves: error: {head}: truncated VCD: the header ends before $enddefinitions (300 bytes)")
