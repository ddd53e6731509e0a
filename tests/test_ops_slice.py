"""Slice and Split on the channels (tpucompile.ops.slice): views of the input's buffer that emit
no instruction, golden = SimPy through the whole flow and close to onnxruntime (Split by attribute,
by input and by num_outputs; a slice not on a block boundary; a slice as the graph output; a
sequence model's channel slice), a view that is a Concat part copied; refusals naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def _run(model, tmp_path, hw="small", name="sl"):
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=5)
    v = run(model, hw, tmp_path, rtl=False, data=(xs[0], xs[1:]), name=name)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches, v.layer_mismatches)
    return v, TpuBinary.read(tmp_path / f"{name}.tpubin")


@pytest.mark.parametrize("opset", [11, 13])
def test_csp_split_views_and_copies(opset, tmp_path):
    """Split and Slice outputs are views (no instruction); the two Split outputs that are Concat
    parts are copied by a table lookup; every layer golden = SimPy, the output close to FP32."""
    v, b = _run(qnets.csp_split(opset=opset), tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    layers = {L["name"]: L for L in b.meta["layers"]}
    slices = [L for L in b.meta["layers"] if L["op"] == "QSlice"]
    assert sorted(L["name"] for L in slices) == ["mid", "split__0", "split__1"]
    assert all(L["instr_end"] == L["instr_begin"] for L in slices)
    assert {"cat__requant_s0", "cat__requant_s1"} <= set(layers), sorted(layers)
    assert layers["mid"]["start"] == 3 and layers["mid"]["count"] == 8


def _slice_out(starts, ends, c=20, opset=13, axes=(1,), steps=None):
    """A 3x3 conv (c channels) + Relu, then the Slice as the graph output."""
    rng = np.random.default_rng(1)
    inits = {"w": qnets.conv_w(rng, c, 3, 3), "s": np.array(starts, np.int64), "e": np.array(ends, np.int64),
             "a": np.array(axes, np.int64)}
    ins = ["r", "s", "e", "a"]
    if steps is not None:
        inits["st"] = np.array(steps, np.int64)
        ins.append("st")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Slice", ins, ["y"], name="sl")]
    return qnets.make_model(nodes, inits, (1, 3, 6, 7), "y", None, opset=opset)


@pytest.mark.parametrize("starts, ends", [([3], [17]), ([8], [16]), ([-5], [1000]), ([0], [20])])
@pytest.mark.parametrize("hw", ["small", "medium"])
def test_slice_as_graph_output(starts, ends, hw, tmp_path):
    """Off and on block boundaries (8 channels on small, 32 on medium), negative and clamped
    bounds, and the whole range (an alias): the output read back through its channel map."""
    v, b = _run(_slice_out(starts, ends), tmp_path, hw=hw)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    want = len(range(20)[slice(starts[0], ends[0])])
    assert b.meta["outputs"][0]["shape"][1] == want if "outputs" in b.meta else True


def test_split_num_outputs_opset18(tmp_path):
    """Opset 18's num_outputs: ceil(13 / 3) = 5, 5, 3 channels, each through its own 1x1 conv and summed."""
    rng = np.random.default_rng(2)
    n = helper.make_node
    inits = {"w": qnets.conv_w(rng, 13, 3, 1), **{f"w{i}": qnets.conv_w(rng, 4, k, 1) for i, k in enumerate((5, 5, 3))}}
    nodes = [n("Conv", ["x", "w"], ["a"], name="conv"),
             n("Split", ["a"], ["p0", "p1", "p2"], name="split", axis=-3, num_outputs=3)] + \
            [n("Conv", [f"p{i}", f"w{i}"], [f"q{i}"], name=f"c{i}") for i in range(3)] + \
            [n("Add", ["q0", "q1"], ["s01"], name="add1"), n("Add", ["s01", "q2"], ["y"], name="add2")]
    model = qnets.make_model(nodes, inits, (1, 3, 5, 5), "y", None, opset=18)
    v, b = _run(model, tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    counts = [L["count"] for L in b.meta["layers"] if L["op"] == "QSlice"]
    assert counts == [5, 5, 3]


def test_split_of_constants_folds():
    rng = np.random.default_rng(3)
    n = helper.make_node
    inits = {"w": qnets.conv_w(rng, 6, 3, 1), "sp": np.array([2, 4], np.int64)}
    nodes = [n("Split", ["w", "sp"], ["wa", "wb"], name="split_w", axis=0),
             n("Conv", ["x", "wb"], ["y"], name="conv")]
    g = run_passes(import_onnx(qnets.make_model(nodes, inits, (1, 3, 5, 5), "y", None)))
    assert [nd.op for nd in g.nodes] == ["Conv"]
    assert np.array_equal(g.const(g.nodes[0].inputs[1]), inits["w"][2:])


def test_sequence_model_channel_slice(tmp_path):
    """A (1, C, L) model: Conv1d, Slice of channels on axis -2 (the rank-3 channel axis) and a
    Split on axis 1, lifted to 2-D, golden = SimPy."""
    rng = np.random.default_rng(4)
    n = helper.make_node
    inits = {"w": rng.normal(0, 0.3, (10, 4, 3)).astype(np.float32), "s": np.array([2], np.int64),
             "e": np.array([9], np.int64), "a": np.array([-2], np.int64),
             "w2": rng.normal(0, 0.3, (5, 10, 1)).astype(np.float32)}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1]),
             n("Slice", ["c", "s", "e", "a"], ["m"], name="mid"),
             n("Split", ["c"], ["h0", "h1"], name="halves", axis=1),
             n("Concat", ["h1", "m", "h0"], ["cat"], name="cat", axis=1),
             n("Conv", ["cat", "w2"], ["y"], name="head")]
    inits["w2"] = rng.normal(0, 0.3, (5, 17, 1)).astype(np.float32)
    model = qnets.make_model(nodes, inits, (1, 4, 24), "y", None)
    v, _ = _run(model, tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("kw, msg", [
    (dict(starts=[4], ends=[0], axes=(2,), steps=[-1]), r"node 'sl' \(Slice\): a slice of axis 2 of \(1, 20, 6, 7\) "
                                                       r"\(4:0:-1\) is unsupported: only the channels \(a view\) and "
                                                       r"H, W with positive steps"),
    (dict(starts=[0], ends=[20], axes=(1,), steps=[2]), r"node 'sl' \(Slice\): channel step 2 unsupported"),
    (dict(starts=[7], ends=[7]), r"tensor 'y' has a dynamic/unknown dimension"),      # empty: caught at import
])
def test_refusals_name_the_node(kw, msg):
    model = _slice_out(**kw)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=4)
    with pytest.raises(CompileError, match=msg):
        compile_onnx(model, load_config("small"), xs)


@pytest.mark.parametrize("kw", [
    dict(starts=[1], ends=[4], axes=(2,)),                                  # rows
    dict(starts=[1, 2], ends=[6, 7], axes=(2, 3), steps=[2, 2]),            # strided, off the granule
    dict(starts=[3, 0, 5], ends=[11, 5, 6], axes=(1, 2, 3)),                 # channels (a view) and H, W
])
def test_slice_of_h_and_w_is_a_copy(kw, tmp_path):
    """A QSpatialSlice (DMA of the kept rows from a granule, POOL 1x1 picking strided columns,
    STORE), then a channel view if the channels are cut: golden = SimPy, close to onnxruntime."""
    v, b = _run(_slice_out(**kw), tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    assert "QSpatialSlice" in [L["op"] for L in b.meta["layers"]]


def test_split_and_strided_slice_of_height_and_width_mid_graph(tmp_path):
    """qnets.spatial_slices: each Split output and the strided Slice a QSpatialSlice."""
    v, b = _run(qnets.spatial_slices(), tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    assert [L["name"] for L in b.meta["layers"] if L["op"] == "QSpatialSlice"] == ["cols__0", "cols__1", "rows__1",
                                                                                      "stride"]


@pytest.mark.parametrize("opset, how", [(13, "equal"), (11, "attr"), (18, "num_outputs")])
def test_split_with_an_unused_middle_output_keeps_every_part_in_place(opset, how, tmp_path):
    """Split outputs are positional: with s1 unused, s0 is still channels 0-3 and s2 channels 8-11
    (from the trial: the importer used to drop s1 and re-split 12 channels in two)."""
    rng = np.random.default_rng(6)
    n = helper.make_node
    kw = {"split": [4, 4, 4]} if how == "attr" else {"num_outputs": 3} if how == "num_outputs" else {}
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"),
             n("Split", ["c"], ["s0", "s1", "s2"], name="split", axis=1, **kw),
             n("Sigmoid", ["s0"], ["y0"], name="sig"), n("Conv", ["s2", "w2"], ["y2"], name="conv2"),
             n("Add", ["y0", "y2"], ["y"], name="add")]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 12, 3, 1), "w2": qnets.conv_w(rng, 4, 4, 1)},
                             (1, 3, 5, 5), "y", None, opset=opset)
    v, b = _run(model, tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    assert sorted((L["start"], L["count"]) for L in b.meta["layers"] if L["op"] == "QSlice") == [(0, 4), (8, 4)]


def test_relu_after_a_slice_is_a_table_lookup(tmp_path):
    rng = np.random.default_rng(7)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv"), n("Slice", ["c", "s", "e", "a"], ["m"], name="mid"),
             n("Relu", ["m"], ["r"], name="relu"), n("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2]),
             n("Relu", ["p"], ["y"], name="relu_after_pool")]
    inits = {"w": qnets.conv_w(rng, 10, 3, 1), "s": np.array([2], np.int64), "e": np.array([9], np.int64),
             "a": np.array([1], np.int64)}
    v, b = _run(qnets.make_model(nodes, inits, (1, 3, 6, 6), "y", None), tmp_path)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    assert [L["op"] for L in b.meta["layers"]] == ["QConv", "QSlice", "QLut", "QMaxPool", "QLut"]
