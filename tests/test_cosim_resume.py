"""A cosim run killed part-way (kill -9 included) and restarted resumes its finished stages.

Real runs of `python -m tpusim.flow.cosim` on the reduced ResNet-50 (small config, SimPy only), killed
with SIGKILL from outside, then restarted with the same arguments.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests import qnets
from tpusim.flow.cosim import run
from tpusim.flow.stagecache import StageCache, make_key

REPO = Path(__file__).resolve().parent.parent
CMD = [sys.executable, "-m", "tpusim.flow.cosim", "--model", "resnet50-reduced", "--hw", "small",
       "--no-rtl", "--calib", "2"]
RESUMED = "SimPy result resumed"


def _verdict(out: Path) -> dict:
    return json.loads((out / "verdict.json").read_text())


def _start(out: Path) -> subprocess.Popen:
    return subprocess.Popen(CMD + ["--out", str(out)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    t_end = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None or path.exists(), f"run ended (rc {proc.returncode}) before {path}"
        assert time.monotonic() < t_end, f"{path} did not appear in {timeout_s} s"
        time.sleep(0.05)


def test_kill9_after_simpy_stage_resumes(tmp_path):
    out = tmp_path / "run"
    p = _start(out)
    _wait_for(out / "stages" / "simpy.pkl", p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = subprocess.run(CMD + ["--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    v = _verdict(out)
    assert v["passed"] and v["cycles_simpy"] == 331_483
    assert any(RESUMED in n for n in v["notes"]), v["notes"]


def test_kill9_before_any_stage_recomputes(tmp_path):
    out = tmp_path / "run"
    p = _start(out)
    _wait_for(out / "ir", p)          # compiling: no stage finished yet
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not (out / "stages" / "simpy.pkl").exists()
    r = subprocess.run(CMD + ["--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    v = _verdict(out)
    assert v["passed"] and not any(RESUMED in n for n in v["notes"])


def _small_run(tmp_path: Path, seed: int = 3, **kw):
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=seed)
    return run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="conv_bn_relu", **kw)


def test_resume_reuses_only_a_matching_result(tmp_path):
    v1 = _small_run(tmp_path)
    assert not v1.notes or not any(RESUMED in n for n in v1.notes)
    v2 = _small_run(tmp_path)
    assert any(RESUMED in n for n in v2.notes)
    assert (v2.cycles_simpy, v2.counters, v2.mismatches) == (v1.cycles_simpy, v1.counters, v1.mismatches)
    v3 = _small_run(tmp_path, seed=4)          # another input: the stored result does not apply
    assert not any(RESUMED in n for n in v3.notes)
    v4 = _small_run(tmp_path, seed=4, resume=False)
    assert not any(RESUMED in n for n in v4.notes)


def test_damaged_stage_file_is_recomputed(tmp_path):
    _small_run(tmp_path)
    pkl = tmp_path / "stages" / "simpy.pkl"
    pkl.write_bytes(pkl.read_bytes()[: len(pkl.read_bytes()) // 2])   # torn by hand
    v = _small_run(tmp_path)
    assert v.passed and not any(RESUMED in n for n in v.notes)
    assert _small_run(tmp_path).notes                                   # rewritten, resumes again


def test_stage_cache_keys(tmp_path):
    c = StageCache(tmp_path)
    assert make_key("ab", "c") != make_key("a", "bc")
    c.save("x", "k1", {"a": 1})
    assert c.load("x", "k1") == {"a": 1}
    assert c.load("x", "k2") is None and c.load("y", "k1") is None
    assert StageCache(tmp_path, enabled=False).load("x", "k1") is None
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert os.listdir(tmp_path) == ["x.pkl"]
