"""Issue 9: a global average pool (GlobalAveragePool, ReduceMean over H and W, AveragePool with
a kernel equal to the map) over a map too large for the config's SRAM (for any shipped config
when quantized without one) runs in two stages: row partials (one average per row, each the same W pixels, in the
input's scale and zero point), then the average of the H partials. Golden == SimPy bit-exact,
and vs onnxruntime; the rounding stays within half an input LSB plus half an output LSB of the
exact mean of the quantized input."""
from __future__ import annotations

import numpy as np
import pytest

from tests import qnets
from tpucompile.backend.compile import compile_qgraph
from tpucompile.backend.estimate import Estimator
from tpucompile.golden import quantize_input, run_golden
from tpucompile.quantize.quantize import compile_model
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.flow.cosim import run


def pool_model(hw: int, op: str = "gap", c: int = 64):
    return qnets.large_gap(hw, c, op)


@pytest.mark.parametrize("hw,cfg,op", [(56, "small", "gap"), (112, "small", "gap"), (53, "small", "gap"),
                                       (56, "small", "reduce_mean"), (56, "small", "avgpool"),
                                       (56, "seed", "gap"), (112, "seed", "gap")])
def test_large_global_pool_runs_in_two_stages(tmp_path, hw, cfg, op):
    model = pool_model(hw, op)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=2)
    v = run(model, cfg, tmp_path, rtl=False, data=(xs[0], xs[1:]), name="gap")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, v.layer_mismatches
    assert v.accuracy["cosine"] > 0.99 and v.accuracy["max_abs"] < 0.005, v.accuracy
    pools = [L for L in TpuBinary.read(tmp_path / "gap.tpubin").meta["layers"] if L["op"] == "QAvgPool"]
    assert [L["kernel"] for L in pools] == [[1, hw], [hw, 1]]


@pytest.mark.parametrize("hw", [56, 53, 112])
def test_two_stage_rounding_bound(hw):
    """|device mean - exact mean of the int8 input| <= s_x / 2 (the row partials' rounding,
    averaged) + s_y / 2 (the final rounding), plus the multipliers' Q31 error."""
    model = pool_model(hw)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=3)
    qg, _ = compile_model(model, xs[1:])
    x, y = qg.tensors[qg.inputs[0]], qg.tensors[qg.resolve("y")]
    xq = quantize_input(qg, xs[0])
    got = (run_golden(qg, xq)[y.name].astype(np.float64) - y.zero_point) * y.scale
    exact = (xq.astype(np.float64) - x.zero_point).mean(axis=(2, 3), keepdims=True) * x.scale
    err = np.abs(got - exact).max()
    assert err <= 0.5 * x.scale + 0.5 * y.scale + 1e-6, (err, x.scale, y.scale)


@pytest.mark.parametrize("hw,cfg,stages", [(28, None, 1), (32, None, 2), (40, "small", 1), (48, "small", 2),
                                           (56, "medium", 1), (64, "medium", 2), (90, "narrow", 1), (32, "seed", 2)])
def test_a_map_that_fits_the_sram_stays_one_stage(hw, cfg, stages):
    """Maps that compiled before (in one stage) keep their program: split only when the whole
    map does not fit the config's SRAM (any shipped config's without one)."""
    model = pool_model(hw, c=16)
    qg, _ = compile_model(model, qnets.inputs(qnets.in_shape(model), 2, seed=2),
                          cfg=load_config(cfg) if cfg else None)
    assert len(qg.ops) == stages


@pytest.mark.parametrize("hw,cfg", [(56, "small"), (53, "small"), (112, "seed"), (56, "small_tall")])
def test_estimated_bytes_of_both_stages_are_the_programs(hw, cfg):
    """The pool's work hook gives each stage's LOAD and STORE bytes of the compiled program."""
    model = pool_model(hw)
    qg, _ = compile_model(model, qnets.inputs(qnets.in_shape(model), 2, seed=2))
    c = load_config(cfg)
    layers = {L["name"]: L for L in compile_qgraph(qg, c).meta["layers"]}
    est = Estimator(qg).estimate(c)
    assert {e.name for e in est.layers} == set(layers) == {"gap__partial", "gap"}
    for e in est.layers:
        assert (e.load_bytes, e.store_bytes) == (layers[e.name]["ddr_bytes_in"], layers[e.name]["ddr_bytes_out"])
