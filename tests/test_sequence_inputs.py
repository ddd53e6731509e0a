"""3-D (1, C, L) graph inputs (tpucompile.frontend.lift_1d): a 1-D CNN compiles as the 2-D network
it equals on (1, C, 1, L), golden = SimPy, close to onnxruntime; ops the lifting cannot carry are
refused naming the node."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile import realdata
from tpucompile.driver import compile_onnx
from tpucompile.frontend.lift_1d import lift_sequence_model
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.inputs import model_data
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def test_conv1d_net_golden_equals_simpy_and_tracks_fp32(tmp_path):
    model = qnets.conv1d_net()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=5)
    assert xs[0].shape == (1, 4, 48)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="seq")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.98, v.accuracy


def test_lifted_graph_is_2d_with_the_same_tensor_names():
    model = qnets.conv1d_net()
    g = import_onnx(model)
    assert g.tensors["x"].shape == (1, 4, 1, 48)
    assert g.tensors["p"].shape == (1, 8, 1, 24) and g.tensors["c2"].shape == (1, 12, 1, 12)
    conv1 = next(nd for nd in g.nodes if nd.name == "conv1")
    assert conv1.attrs["kernel_shape"] == (1, 5) and conv1.attrs["pads"] == (0, 2, 0, 2)
    image = qnets.conv_bn_relu()
    assert lift_sequence_model(image) is image                          # a 4-D model: itself


def test_other_ops_on_a_sequence_are_refused_naming_the_node():
    model = qnets.conv1d_net()
    model.graph.node.insert(0, helper.make_node("Transpose", ["x"], ["xt"], name="to_nlc", perm=[0, 2, 1]))
    model.graph.node[1].input[0] = "xt"
    with pytest.raises(CompileError, match=r"node 'to_nlc' \(Transpose\) reads the 3-D tensor 'x' of a sequence "
                                           r"model \(input 'x' \(1, 4, 48\)\)"):
        import_onnx(model)


@pytest.mark.rtl
def test_conv1d_net_three_way_on_the_rtl(tmp_path):
    model = qnets.conv1d_net()
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=5)
    v = run(model, "small", tmp_path, rtl=True, data=(xs[0], xs[1:]), name="seq")
    assert v.passed and v.cycles_simpy == v.cycles_rtl and not v.counter_diffs, (v.notes, v.counter_diffs)
    assert np.isfinite(v.accuracy["cosine"])


def test_causal_pad_before_a_conv1d_is_absorbed(tmp_path):
    """F.pad(x, (2, 0)) before a Conv1d (causal padding): the Pad's pads, computed by a Cast of a
    Constant as TorchScript writes them, become the 4-D pads and the Conv absorbs them."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    pads = helper.make_tensor("pv", 7, [6], [0, 0, 2, 0, 0, 0])
    nodes = [n("Constant", [], ["pc"], name="pads_const", value=pads),
             n("Cast", ["pc"], ["pads"], name="pads_cast", to=7),
             n("Pad", ["x", "pads"], ["xp"], name="causal", mode="constant"),
             n("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3])]
    model = qnets.make_model(nodes, {"w": rng.normal(0, 0.3, (8, 4, 3)).astype(np.float32)}, (1, 4, 16),
                             "y", (1, 8, 16))
    g = import_onnx(model)
    assert g.tensors["xp"].shape == (1, 4, 1, 18)
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="causal")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("shape", [(1, 2, 4, 6, 6), (16,)])
def test_inputs_of_other_ranks_are_refused_before_any_node(shape):
    """A Conv3d's 5-D volume or a rank-1 vector: the input is named, not an attribute of a node."""
    rng = np.random.default_rng(0)
    k = (4, 2, 3, 3, 3) if len(shape) == 5 else (16, 4)
    op = helper.make_node("Conv", ["x", "w"], ["y"], name="c3d", pads=[1] * 6) if len(shape) == 5 else \
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = qnets.make_model([op], {"w": rng.normal(0, 0.1, k).astype(np.float32)}, shape, "y", None)
    with pytest.raises(CompileError, match=rf"graph input 'x' shape {re.escape(str(shape))} \({len(shape)}-D\) "
                                           r"unsupported \(only NCHW images, \(1, C, L\) sequences"):
        import_onnx(model)


def test_input_size_on_a_sequence_model_is_a_note():
    x, cal, notes = model_data(qnets.conv1d_net(), size=32)
    assert x.shape == (1, 4, 48) and any("--input-size 32 ignored" in n for n in notes), notes


def test_input_size_must_be_an_image_models_static_size():
    """A graph's input shape is static, so --input-size can only name it: the size it has is
    taken without a note; another is refused naming the option (it used to make photographs of
    that size, which the calibrator then refused without naming --input-size)."""
    x, cal, notes = model_data(qnets.conv_bn_relu(), size=16)
    assert x.shape == (1, 3, 16, 16) and cal[0].shape == (1, 3, 16, 16) and not notes, notes
    with pytest.raises(CompileError, match=re.escape(
            "--input-size 32: the model's input 'x' has the static shape (1, 3, 16, 16), its height and "
            "width are fixed at 16x16; leave --input-size out")):
        model_data(qnets.conv_bn_relu(), size=32)


def test_global_pool_longer_than_the_pool_window_runs_in_two_stages(tmp_path):
    """300 columns > POOL's 255: partial averages over 150 columns, then over 2; golden = SimPy."""
    model = qnets.long_sequence_gap()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="gap")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.98, v.accuracy
    pools = [L for L in TpuBinary.read(tmp_path / "gap.tpubin").meta["layers"] if L["op"] == "QAvgPool"]
    assert [L["kernel"] for L in pools] == [[1, 150], [1, 2]]


def test_global_pool_over_a_prime_length_above_the_window_is_refused():
    model = qnets.long_sequence_gap(length=257)
    with pytest.raises(CompileError, match=r"node 'gap' \(GlobalAveragePool\): a global pool over 257 pixels "
                                           r"exceeds POOL's win_w field \(255\) and 257 has no factor"):
        compile_onnx(model, load_config("small"), qnets.inputs(qnets.in_shape(model), 2, seed=2))


def test_average_pool_excluding_column_pads_on_a_sequence(tmp_path):
    """count_include_pad=0 with column pads on a (1, C, L) sequence on 'small': the first and last
    columns' divisors (2 taps) differ from the rest (3), and the middle run starts off a DDR
    granule (widened left, overwritten by the first column's run: ``pool._store_regions``)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1]),
             helper.make_node("AveragePool", ["c"], ["y"], name="avg", kernel_shape=[3], pads=[1, 1],
                              count_include_pad=0)]
    model = qnets.make_model(nodes, {"w": rng.normal(0, 0.3, (8, 4, 3)).astype(np.float32)}, (1, 4, 30), "y", None)
    xs = qnets.inputs(qnets.in_shape(model), 1, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs), name="avg")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, v.mismatches
    assert v.accuracy["max_lsb"] <= 2.5 and v.accuracy["cosine"] > 0.9995, v.accuracy


def test_transformer_linears_golden_equals_simpy_and_tracks_fp32(tmp_path):
    """The sweep's transformer proxy (realdata.transformer_linears: QKV, channel Slice, output
    projection, Erf-GELU FFN, residual Adds) at toy size: bit-exact golden = SimPy, close to FP32."""
    model = realdata.transformer_linears(d_model=16, d_ff=32, layers=2, seq=12)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    assert xs[0].shape == (1, 16, 12)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="tlin")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.98, v.accuracy
