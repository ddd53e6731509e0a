"""ResNet-50 (tpucompile.realdata) through the back end for 'seed': compile time and sanity of the
plan; with ``pytest --slow`` also the full SimPy run, bit-exact against the golden model (~80 s)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tpusim.arch.config import load_config

pytest.importorskip("skimage")


@pytest.fixture(scope="module")
def r50():
    from tpucompile.quantize import compile_model
    from tpucompile.realdata import calibration_images, resnet50_model
    qg, _ = compile_model(resnet50_model(), calibration_images(2))
    return qg


def test_resnet50_compiles_within_budget(r50):
    from tpucompile.backend.compile import compile_qgraph
    cfg = load_config("seed")
    t = time.perf_counter()
    b = compile_qgraph(r50, cfg, model_name="resnet50")
    dt = time.perf_counter() - t
    assert dt < 30
    s = b.meta["stats"]
    assert s["ddr_footprint"] < 1 << 40
    assert len([L for L in b.meta["layers"] if L["op"] == "QConv"]) == 37      # 54 convs, 16 of them
    assert len([L for L in b.meta["layers"] if L["op"] == "QConvAdd"]) == 16   # fused with their residual Add
    assert [L["fused"] for L in b.meta["layers"] if L["op"] == "QConvPool"] == [["n0", "n3"]]   # the stem + pool
    assert b.meta["host_ops"][0]["op"] == "Softmax"
    assert b.meta["input_transforms"][0]["kind"] == "im2col"
    # DDR reads within 1.25x of compulsory (weights once + every op input once), stores exact
    assert s["ddr_load_bytes"] < 1.25 * s["compulsory_load_bytes"]
    assert s["ddr_store_bytes"] == s["compulsory_store_bytes"]


@pytest.mark.slow
def test_resnet50_bit_exact_on_sim(r50):
    from tpucompile.backend.compile import compile_qgraph
    from tpucompile.golden import quantize_input, run_golden
    from tpucompile.realdata import test_image
    from tpusim.arch.host_transforms import host_input_transform
    from tpusim.sim import run_binary
    cfg = load_config("seed")
    b = compile_qgraph(r50, cfg)
    x = quantize_input(r50, test_image())
    env = run_golden(r50, x)
    r = run_binary(b, cfg, {b.inputs[0].name: host_input_transform(b.meta, b.inputs[0].name, x)})
    for o in b.outputs:
        assert np.array_equal(r.outputs[o.name], env[r50.resolve(o.name)])
