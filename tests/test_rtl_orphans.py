"""A kill -9 of the process that runs the Verilator simulator kills the simulator too, and a rerun
into the same folder takes over the dead run's lock (cocotb_tests/procguard.py).

Real runs on the small config: `python -m tpusim.flow.cosim` (reduced ResNet-50) and a
`python -m stressgen run` worker, each SIGKILLed from outside while its `Vtop` (tb_top) runs.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cocotb_tests.build import TOPLEVEL
from cocotb_tests.procguard import LOCK_NAME, RunLock, RunLockedError

pytestmark = pytest.mark.rtl
REPO = Path(__file__).resolve().parent.parent
SIM_EXE = TOPLEVEL            # the simulator executable (tb_top)


def _alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sims(marker: str) -> list[tuple[int, int]]:
    """(pid, parent pid) of live simulators carrying the test's environment marker."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if Path(os.readlink(p / "exe")).name != SIM_EXE or marker.encode() not in (p / "environ").read_bytes():
                continue
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if _alive(int(p.name)):
            out.append((int(p.name), ppid))
    return out


def _wait_sim(marker: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> tuple[int, int]:
    t_end = time.monotonic() + timeout_s
    while True:
        sims = _sims(marker)
        if sims:
            return sims[0]
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before its simulator was seen"
        assert time.monotonic() < t_end, f"no {SIM_EXE} seen in {timeout_s} s"
        time.sleep(0.02)


def _gone_within(pid: int, seconds: float) -> bool:
    t_end = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < t_end:
        time.sleep(0.01)
    return not _alive(pid)


def _env(marker: str) -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), **{marker: "1"})


COSIM = [sys.executable, "-m", "tpusim.flow.cosim", "--model", "resnet50-reduced", "--hw", "small",
         "--calib", "2"]


def test_kill9_of_cosim_kills_tb_top_and_rerun_takes_over(tmp_path):
    marker = f"ORPHAN_TEST_{uuid.uuid4().hex}"
    out = tmp_path / "run"
    p = subprocess.Popen(COSIM + ["--out", str(out)], cwd=REPO, env=_env(marker),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sim, parent = _wait_sim(marker, p)
        assert parent == p.pid                         # cosim runs the simulator itself
        # while it lives, the folder is locked: a second run is refused, naming the PIDs
        with pytest.raises(RunLockedError) as ei:
            with RunLock(out / "rtl"):
                pass
        msg = str(ei.value)   # the simulator's pid is in the lock once Popen has returned in cosim
        assert re.fullmatch(re.escape(f"{out / 'rtl'}: another RTL run is still using this folder (pid {p.pid}")
                            + r"( \(simulator pid \d+\))?"
                            + re.escape(f", lock {out / 'rtl' / LOCK_NAME}); wait for it to end or kill it, "
                                        "or use another output folder"), msg), msg
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert _gone_within(sim, 2.0), f"tb_top (pid {sim}) survived the kill -9 of its cosim"
    finally:
        p.kill()
        p.wait()
    assert not (out / "rtl" / "rtl_result.json").exists()        # it died mid-run
    assert (out / "rtl" / LOCK_NAME).exists()                     # the dead run's lock is left ...
    r = subprocess.run(COSIM + ["--out", str(out)], cwd=REPO, env=_env(marker), capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]  # ... and taken over by the rerun
    assert json.loads((out / "verdict.json").read_text())["passed"]
    assert not (out / "rtl" / LOCK_NAME).exists() and _sims(marker) == []


def test_kill9_of_a_stress_worker_kills_its_tb_top(tmp_path):
    """The campaign kills a dead worker's process group; here the campaign dies with it."""
    marker = f"ORPHAN_TEST_{uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "stressgen", "run", "--seed", "3", "--count", "6", "--hw", "small",
           "--jobs", "1", "--db", str(tmp_path / "s.db"), "--quiet", "--no-minimize", "--no-waves"]
    p = subprocess.Popen(cmd, cwd=REPO, env=_env(marker), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        sim, worker = _wait_sim(marker, p)
        folder = Path(os.readlink(f"/proc/{sim}/cwd"))  # the program's RTL run folder
        assert worker != p.pid                         # the simulator's parent is a worker process
        os.kill(worker, signal.SIGKILL)                # worker and campaign at once: nobody is
        os.kill(p.pid, signal.SIGKILL)                 # left to clean up after the worker
        assert _gone_within(sim, 2.0), f"tb_top (pid {sim}) survived the kill -9 of its worker {worker}"
        time.sleep(2.0)                                # an orphan would finish its run meanwhile
        assert not (folder / "rtl_result.json").exists(), "tb_top finished its run after its worker died"
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    t_end = time.monotonic() + 10
    while _sims(marker) and time.monotonic() < t_end:
        time.sleep(0.1)
    assert _sims(marker) == []
