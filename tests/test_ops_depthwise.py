"""Depthwise Conv on the vector unit (DWCONV, tpucompile.ops.depthwise): the same integers as the
dense conv it replaces, golden = SimPy through the whole flow, no MATMUL for a depthwise layer,
the dense fallback for depth multipliers and dilations, and the refusals naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ops.conv import QConv, conv_int8
from tpucompile.ops.depthwise import QDwConv, dwconv_int8, dwconv_qop
from tpucompile.passes.pipeline import run_passes
from tpucompile.qgraph import QTensor
from tpusim.arch import arith
from tpusim.arch.binary import TpuBinary
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import INSTR_BYTES, decode
from tpusim.flow.cosim import run


@pytest.mark.parametrize("k, strides, pads", [(3, (1, 1), (1, 1, 1, 1)), (5, (2, 2), (2, 2, 2, 2)),
                                              (3, (2, 1), (0, 1, 2, 0)), (1, (1, 1), (0, 0, 0, 0))])
def test_same_integers_as_the_dense_conv(k, strides, pads):
    """QDwConv (bias without the zero-point correction, zp subtracted per tap) gives the int8
    output of the dense QConv with the diagonal weight and the corrected bias, bit for bit."""
    rng = np.random.default_rng(k)
    c = 11
    w = rng.integers(-128, 128, (c, k, k), dtype=np.int8)
    bias = rng.integers(-30000, 30000, c).astype(np.int32)
    ms = [arith.quantize_multiplier(s) for s in rng.uniform(1e-4, 2e-2, c)]
    mult = np.array([m for m, _ in ms], np.int32)
    shift = np.array([s for _, s in ms], np.int32)
    x_zp, y_zp = -37, 12
    dw = QDwConv("dw", "x", "y", w, bias, mult, shift, strides, pads, True, x_zp, y_zp)
    dense = np.zeros((c, c, k, k), np.int8)
    dense[np.arange(c), np.arange(c)] = w
    corr = (bias.astype(np.int64) - x_zp * w.reshape(c, -1).astype(np.int64).sum(1)).astype(np.int32)
    conv = QConv("conv", "x", "y", dense, corr, mult, shift, strides, pads, True, x_zp, y_zp)
    x = rng.integers(-128, 128, (2, c, 9, 8), dtype=np.int8)
    assert np.array_equal(dwconv_int8(dw, x), conv_int8(conv, x))


def test_mobilenet_block_golden_equals_simpy_without_matmuls(tmp_path):
    """The inverted residual (1x1, depthwise 3x3 + BN + ReLU6, 1x1, Add) and a depthwise 5x5 stride 2:
    every layer golden = SimPy; the depthwise layers are QDwConv, emit DWCONVs and no MATMUL, and
    BN / ReLU6 fold into them."""
    model = qnets.mobilenet_block()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="mb")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    b = TpuBinary.read(tmp_path / "mb.tpubin")
    dws = [L for L in b.meta["layers"] if L["op"] == "QDwConv"]
    assert [L["name"] for L in dws] == ["dw3x3", "dw5x5s2"] and all(L["relu"] for L in dws)
    for L in dws:
        ops = [decode(b.code[i * INSTR_BYTES:(i + 1) * INSTR_BYTES], i * INSTR_BYTES).op
               for i in range(L["instr_begin"], L["instr_end"])]
        assert "DWCONV" in ops and "MATMUL" not in ops and "LOAD_WEIGHTS" not in ops, (L["name"], set(ops))
        assert L["macs"] == 24 * 10 * 10 * 9 or L["macs"] == 12 * 5 * 5 * 25, L


def _dw_graph(group_mult=1, dil=(1, 1), c=6):
    rng = np.random.default_rng(0)
    inits = {"w": qnets.conv_w(rng, c * group_mult, 1, 3)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=c, pads=[1, 1, 1, 1],
                              dilations=list(dil))]
    out_hw = 8 + 2 - 2 * dil[0]
    return qnets.make_model(nodes, inits, (1, c, 8, 8), "y", (1, c * group_mult, out_hw, 8 + 2 - 2 * dil[1]))


def test_depthwise_becomes_depthwise_conv_others_stay_dense():
    assert [n.op for n in run_passes(import_onnx(_dw_graph())).nodes] == ["DepthwiseConv"]
    assert [n.op for n in run_passes(import_onnx(_dw_graph(group_mult=2))).nodes] == ["Conv"]
    assert [n.op for n in run_passes(import_onnx(_dw_graph(dil=(2, 1)))).nodes] == ["Conv"]


@pytest.mark.parametrize("kw", [dict(group_mult=2), dict(dil=(2, 1))])
def test_dense_fallbacks_are_bit_exact(kw, tmp_path):
    model = _dw_graph(**kw)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=1)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="d")
    assert v.passed and v.accuracy["cosine"] > 0.99, (v.accuracy, v.notes)


def test_bias_outside_int32_is_refused_naming_the_node():
    qt = QTensor("x", (1, 2, 4, 4), 1e-6, 0)
    out = QTensor("y", (1, 2, 4, 4), 0.1, 0)
    w = np.full((2, 1, 3, 3), 1e-3, np.float32)
    with pytest.raises(CompileError, match=r"node 'big' \(Conv, depthwise\): bias \d+ does not fit int32"):
        dwconv_qop("big", qt, w, np.array([1e9, 0.0]), out, (1, 1), (1, 1, 1, 1), False)


def test_depthwise_reading_a_shuffle_runs_on_the_vector_unit():
    """ShuffleNet's depthwise Conv on a channel shuffle: a DepthwiseConv on the shuffle's input
    (filters permuted) whose output the grouped 1x1 Conv after it reads with the shuffle absorbed;
    no Reshape, Transpose or ChannelPermute is left. Bit-exactness: test_cosim_rtl's shuffle_unit."""
    g = run_passes(import_onnx(qnets.shuffle_unit()))
    ops = {nd.name: nd for nd in g.nodes}
    assert ops["dwconv"].op == "DepthwiseConv" and ops["dwconv"].inputs[0] == "g1r"
    assert ops["gconv2"].inputs[0] == ops["dwconv"].outputs[0]
    assert not {"Reshape", "Transpose", "ChannelPermute"} & {nd.op for nd in g.nodes}


def test_depthwise_on_a_shuffle_read_by_an_add_stays_dense(tmp_path):
    """When a node other than a Conv reads the depthwise output, the shuffle cannot move after it:
    the depthwise Conv absorbs it as a dense Conv (exact), golden = SimPy."""
    model = qnets.shuffle_unit()
    g = model.graph
    bn2 = next(nd for nd in g.node if nd.name == "bn2")
    g.node.append(helper.make_node("Add", ["dwb", "dwb"], ["dd"], name="dw_twice"))
    g.node.append(helper.make_node("GlobalAveragePool", ["dd"], ["gp"], name="gp"))
    g.output.append(helper.make_tensor_value_info("gp", 1, None))
    assert bn2.output[0] == "dwb"
    passed = run_passes(import_onnx(model))
    assert next(nd for nd in passed.nodes if nd.name == "dwconv").op == "Conv"
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="shd")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
