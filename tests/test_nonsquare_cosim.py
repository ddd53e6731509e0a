"""Non-square arrays end to end: ONNX graph -> compiler -> golden, SimPy model (and the Verilator
RTL) on 'small_wide' (8x16: a REQUANT row fills 2 planes) and 'small_tall' (16x8: two N tiles
fill the two 8-byte lane groups of a word).

Every layer golden = SimPy bit-exact; with the RTL also SimPy = RTL outputs, total cycles, every
retire time and every counter (tests/test_cosim_rtl.py's ``_check``).
"""
from __future__ import annotations

import pytest

from tests import qnets
from tests.test_cosim_rtl import _check
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import SimulationError, flag_of
from tpusim.arch.isa import decode_program, encode_program, make
from tpusim.flow.cosim import run
from tpusim.sim import run_binary

HW = ("small_wide", "small_tall")

#: SimPy only: conv / pool / add / Gemm / Concat with gap lanes / DWCONV / MUL / wide FC
SIMPY_GRAPHS = {
    "conv_maxpool": qnets.conv_maxpool,
    "residual_add": qnets.residual_add,
    "gemm_head": qnets.gemm_head,
    "fire_odd_maxpool": lambda: qnets.fire(e1=5, e3=6, pool=True),
    "grouped_dilated": qnets.grouped_dilated,
    "se_block": qnets.se_block,
    "wide_fc": lambda: qnets.wide_fc(n_out=100),
}

#: three-way with the RTL (a Verilator build of each config, cached under build/rtl/)
RTL_GRAPHS = {
    "conv_bn_relu": qnets.conv_bn_relu,
    "fire_odd_maxpool": lambda: qnets.fire(e1=5, e3=6, pool=True),
    "mobilenet_block": qnets.mobilenet_block,
}


def _run(build, hw, tmp_path, name, rtl):
    model = build()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    return run(model, hw, tmp_path, rtl=rtl, data=(xs[0], xs[1:]), name=name)


@pytest.mark.parametrize("hw", HW)
@pytest.mark.parametrize("graph", sorted(SIMPY_GRAPHS))
def test_nonsquare_golden_equals_simpy(graph, hw, tmp_path):
    v = _run(SIMPY_GRAPHS[graph], hw, tmp_path, graph, rtl=False)
    assert v.passed and v.layers_compared >= 1, (v.notes, v.mismatches)
    assert all(m["golden_vs_simpy"] == 0 for m in v.mismatches.values()), v.mismatches
    assert sum(v.layer_mismatches.values()) == 0, v.layer_mismatches
    assert v.accuracy["cosine"] > 0.98


def test_nonsquare_requant_fields_in_the_binary(tmp_path):
    """The compiler's REQUANTs use the new fields: planes on small_wide, both lane groups on
    small_tall (and neither on small)."""
    seen = {}
    for hw in ("small", *HW):
        _run(qnets.conv_bn_relu, hw, tmp_path / hw, "conv_bn_relu", rtl=False)
        b = TpuBinary.read(tmp_path / hw / "conv_bn_relu.tpubin")
        rq = [i for i in decode_program(b.code) if i.op == "REQUANT"]
        seen[hw] = ({i["dst_plane_stride"] == i["count"] for i in rq}, {i["lane_group"] for i in rq})
    assert seen == {"small": ({False}, {0}), "small_wide": ({True}, {0}), "small_tall": ({False}, {0, 1})}


@pytest.mark.rtl
@pytest.mark.parametrize("hw", HW)
@pytest.mark.parametrize("graph", sorted(RTL_GRAPHS))
def test_nonsquare_three_way(graph, hw, tmp_path):
    v = _run(RTL_GRAPHS[graph], hw, tmp_path, graph, rtl=True)
    _check(v)
    assert v.accuracy["cosine"] > 0.98


@pytest.mark.rtl
@pytest.mark.parametrize("hw, requant", [
    ("small_tall", dict(lane_group=2, dst_addr=100)),              # lanes 16..23 of a 16-byte word
    ("small_wide", dict(lane_group=1, dst_addr=100)),              # one lane group: must be 0
    ("small_wide", dict(dst_addr=2000, dst_plane_stride=40)),      # the second plane past word 2047
    ("small_wide", dict(dst_addr=2000, dst_plane_stride=20)),      # ... ends on the last word: valid
])
def test_nonsquare_requant_range_on_the_rtl(hw, requant, tmp_path):
    """REQUANT's non-square range rules (tpu_vpu_check) flag what the SimPy model raises: the same
    outcome (vpu_sram_range at the same pc and cycle, or a clean run) and the same cycles."""
    from cocotb_tests.harness import run_rtl  # as tests/test_device_errors_rtl.py: cocotb only here
    cfg = load_config(hw)
    prog = [make("LOAD_QREG", qreg=0), make("REQUANT", count=10, qreg=0, **requant), make("HALT")]
    b = TpuBinary(cfg.hash_bytes(), 0x100000, encode_program(prog))
    b.write(tmp_path / "p.tpubin")
    try:
        sim = run_binary(b, cfg, {})
    except SimulationError as e:
        sim = e
    rtl = run_rtl(tmp_path / "p.tpubin", cfg, {}, tmp_path / "rtl", max_cycles=20_000)
    assert flag_of(rtl) == flag_of(sim), rtl.message
    valid = requant.get("dst_plane_stride") == 20
    assert flag_of(sim)[:2] == (("ok",) if valid else ("error", "vpu_sram_range"))
    assert rtl.cycles == (sim.cycles if valid else sim.run.cycles)
