"""A compiled binary depends only on the model, the calibration data and the config: the same
compile in two processes with different string-hash seeds gives the same device bytes (the stage
cache of cosim and the process replay key on them)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import qnets
from tpucompile import driver
from tpusim.arch.config import load_config
from tpusim.arch.isa import INSTR_BYTES, decode_as_hardware, unused_bits

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


def test_compiled_code_leaves_every_unused_bit_zero():
    """The device rejects a set bit above an opcode's fields (device error unused_bits): every
    instruction the compiler writes for the reduced ResNet-50 and the small test graphs has none."""
    cfg = load_config("small")
    m, _, calib = driver.load_model_and_data("resnet50-reduced", 2)
    models = [m] + [g() for g in (qnets.conv_bn_relu, qnets.conv_maxpool, qnets.residual_add,
                                  lambda: qnets.gemm_head(softmax=True))]
    for model in models:
        if model is not m:
            calib = qnets.inputs(qnets.in_shape(model), 2, seed=3)
        code = driver.compile_onnx(model, cfg, calib).binary.code
        words = [code[i:i + INSTR_BYTES] for i in range(0, len(code), INSTR_BYTES)]
        assert len(words) > 10
        assert [i for i, w in enumerate(words) if unused_bits(w)] == []
        assert all(decode_as_hardware(w) is not None for w in words)
