"""A compiled binary depends only on the model, the calibration data and the config: the same
compile in two processes with different string-hash seeds gives the same device bytes (the stage
cache of cosim and the process replay key on them)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROGRAM = """
import dataclasses, hashlib
from tpucompile import driver
from tpusim.arch.config import load_config
m, x, calib = driver.load_model_and_data("resnet50-reduced", 2)
b = driver.compile_onnx(m, load_config("small"), calib).binary
print(hashlib.sha256(dataclasses.replace(b, meta={}).to_bytes()).hexdigest())
"""


def _digest(hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip()


def test_binary_does_not_depend_on_the_hash_seed():
    digests = {s: _digest(s) for s in ("1", "2", "3")}
    assert len(set(digests.values())) == 1, digests
