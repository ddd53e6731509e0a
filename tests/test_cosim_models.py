"""cosim (SimPy only, small config) on graphs whose shape used to break the flow itself."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests import qnets
from tpucompile import realdata
from tpusim.arch.binary import TpuBinary
from tpusim.flow.cosim import is_classifier_shape, run


@pytest.mark.parametrize("name, build", [
    ("gemm_output", lambda: qnets.gemm_head(softmax=False)),   # the device output is 'logits__nchw'
    ("same_pad_dropout", qnets.same_pad_dropout),
    ("reshape_gemm", lambda: qnets.flatten_gemm(reshape=True)),
    ("caffe2_bn", qnets.caffe2_bn),
    ("preact_bn", qnets.preact_bn),
    ("avgpool_exclude_pad_s2", lambda: qnets.avgpool_pads(k=3, s=2, pads=(1, 0, 1, 2))),
    ("fire_odd_maxpool", lambda: qnets.fire(e1=5, e3=6, pool=True)),    # Concat with gap lanes
    ("fire_concat_output", lambda: qnets.fire(e1=13, e3=6, head=False)),  # ... as the graph output
    ("concat_fc", qnets.concat_fc),                                   # (1, C) vectors, axis 1
    ("grouped_dilated", qnets.grouped_dilated),    # group 2, dilation (2, 1), depthwise, Clips, ReduceMean
    ("clip_attrs_opset9", qnets.clip_attrs_opset9),
    ("shuffle_unit", qnets.shuffle_unit),          # channel shuffle, Relu(Concat), Add in its lanes
    ("mlp_784", qnets.mlp),                        # a (1, 784) vector input
    ("unary_lut", qnets.unary_lut),
    ("wide_fc_2008", qnets.wide_fc),               # 251 cout blocks on 'small': groups under the token limit                # 9 LUT ops incl. SiLU and x*HardSigmoid(x) patterns
])
def test_cosim_without_rtl_passes(name, build, tmp_path):
    model = build()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=name)
    assert v.passed and v.accuracy["cosine"] > 0.98, (v.accuracy, v.notes)


def test_light_squeezenet_seed_bit_exact(tmp_path):
    """The onnx wheel's light_squeezenet (SqueezeNet 1.1: 8 channel Concats, 64 + 64 and 192 + 192
    channels on blocks of 128: gap lanes) on 'seed': every layer golden = SimPy, no Concat moves a
    byte."""
    path = realdata.LIGHT_RESNET50.with_name("light_squeezenet.onnx")
    v = run(str(path), "seed", tmp_path, rtl=False, calib=2)
    assert v.passed and v.layers_compared >= 30, (v.notes, v.mismatches)
    assert sum(v.layer_mismatches.values()) == 0, v.layer_mismatches
    assert all(m["golden_vs_simpy"] == 0 for m in v.mismatches.values()), v.mismatches
    b = TpuBinary.read(tmp_path / "light_squeezenet.tpubin")
    views = [L for L in b.meta["layers"] if L.get("views")]
    assert len(views) == 8 and all(L["instr_begin"] == L["instr_end"] for L in views)
    assert b.version == 2       # its Concats of 64 + 64 and 192 + 192 channels have gap lanes


def test_shufflenet_seed_bit_exact(tmp_path):
    """The onnx wheel's ShuffleNet (v1, group 3 / depthwise Convs, 16 channel shuffles absorbed by
    the Convs reading them, Relu after a Concat, Adds of a Concat result and a conv output) with
    seeded synthetic weights on 'seed': every layer golden = SimPy."""
    v = run("shufflenet", "seed", tmp_path, rtl=False, calib=2)
    assert v.passed and v.layers_compared >= 55, (v.notes, v.mismatches)     # 13 Adds fused into their Convs
    assert sum(v.layer_mismatches.values()) == 0, v.layer_mismatches
    assert v.accuracy["cosine"] > 0.99, v.accuracy


def test_accuracy_rows_fit_the_output(tmp_path):
    """Top-k only for a classifier output, (1, N) or a Conv classifier's (1, N, 1, 1), not for a
    feature map; a constant FP32 output gets a note, no cosine."""
    assert [is_classifier_shape(s) for s in ((1, 1000), (1, 1000, 1, 1), (1, 8, 1), (1, 8, 2, 2), (2, 10), (1, 1))] \
        == [True, True, True, False, False, False]
    gp = qnets.conv_avgpool(global_pool=True)           # (1, 8, 1, 1)
    xs = qnets.inputs(qnets.in_shape(gp), 3, seed=3)
    v = run(gp, "small", tmp_path / "gp", rtl=False, data=(xs[0], xs[1:]), name="gp")
    assert v.passed and "top1_agree" in v.accuracy and v.accuracy["top5_overlap"] >= 3, v.accuracy
    fm = qnets.same_pad_dropout()
    xs = qnets.inputs(qnets.in_shape(fm), 3, seed=3)
    v = run(fm, "small", tmp_path / "fm", rtl=False, data=(xs[0], xs[1:]), name="fm")
    assert "top1_agree" not in v.accuracy and v.accuracy["sqnr_db"] > 20 and v.accuracy["cosine"] > 0.98
    head = qnets.gemm_head()
    xs = qnets.inputs(qnets.in_shape(head), 3, seed=3)
    v = run(head, "small", tmp_path / "head", rtl=False, data=(xs[0], xs[1:]), name="head")
    assert "top1_agree" in v.accuracy
    flat = qnets.gemm_head()
    for init in flat.graph.initializer:
        init.CopyFrom(onnx.numpy_helper.from_array(np.zeros_like(onnx.numpy_helper.to_array(init)), init.name))
    v = run(flat, "small", tmp_path / "flat", rtl=False, data=(xs[0], xs[1:]), name="flat")
    assert v.passed and v.accuracy.get("constant_fp32") and "cosine" not in v.accuracy
    assert any("FP32 output is constant" in n for n in v.notes)


def test_add_of_a_concat_and_an_operand_that_cannot_take_its_lanes(tmp_path):
    """Add(Concat(4 + 8 channels: gap lanes on 'small'), MaxPool(x)): a pool cannot write the
    Concat's lane layout, so an identity 1x1 Conv copies the pool's output onto those lanes
    (``add.two_operand_channels``, ``channels.remap_graph``); golden = SimPy on every layer."""
    from onnx import helper

    from tpusim.arch.binary import TpuBinary
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="ca"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="cb"),
             helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
             helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[1, 1]),
             helper.make_node("Add", ["cat", "p"], ["y"], name="add")]
    m = qnets.make_model(nodes, {"wa": qnets.conv_w(rng, 4, 12, 1), "wb": qnets.conv_w(rng, 8, 12, 1)},
                         (1, 12, 4, 4), "y", None)
    xs = qnets.inputs((1, 12, 4, 4), 3)
    v = run(m, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="lanes")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
    layers = TpuBinary.read(tmp_path / "lanes.tpubin").meta["layers"]
    # the lane copy is a Conv the Add alone reads: the two fuse (ops/conv_add.py)
    assert [(L["name"], L["op"]) for L in layers][-1:] == [("add__lanes_p+add", "QConvAdd")]


def test_layer_accuracy_compares_concat_parts_after_the_moved_relu(tmp_path):
    """Relu(Concat(BN, AveragePool)) (ShuffleNet's unit): fuse_relu moves the Relu into the parts'
    producers, so the device tensors 'g3b' (Conv + BN) and 'ap' hold clamped values while the
    ONNX tensors of those names do not. Each part is compared with its channels of the Relu's
    output 'catr' instead (it used to report 'gconv2' as the first layer below threshold, SQNR
    ~13 dB, max error = -fp32_min); the fire module's parts (Relu before the Concat) keep their
    own ONNX names."""
    import csv
    model = qnets.shuffle_unit()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    v = run(model, "small", tmp_path / "s", rtl=False, data=(xs[0], xs[1:]), name="s")
    rows = {r["layer"]: r for r in csv.DictReader(open(v.layer_accuracy["csv"]))}
    assert rows["gconv2"]["onnx_tensor"] == "catr[:, 0:4]" and rows["shortcut"]["onnx_tensor"] == "catr[:, 4:12]"
    assert all(float(rows[k]["fp32_min"]) == 0.0 and float(rows[k]["sqnr_db"]) > 30 for k in ("gconv2", "shortcut"))
    assert v.layer_accuracy["first_below"] is None, v.layer_accuracy
    fire = qnets.fire()
    xs = qnets.inputs(qnets.in_shape(fire), 3, seed=3)
    v = run(fire, "small", tmp_path / "f", rtl=False, data=(xs[0], xs[1:]), name="f")
    names = [r["onnx_tensor"] for r in csv.DictReader(open(v.layer_accuracy["csv"]))]
    assert not any("[" in n for n in names), names


def test_per_layer_accuracy_files(tmp_path):
    """cosim writes layers_accuracy.csv (one row per layer with an ONNX name, SQNR against
    onnxruntime) and a PNG, and names the lowest-SQNR layer in the verdict."""
    import csv

    from tpucompile.fp32 import LAYER_COLUMNS
    model = qnets.residual_add()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="res")
    rows = list(csv.DictReader((tmp_path / "layers_accuracy.csv").open()))
    assert list(rows[0]) == list(LAYER_COLUMNS) and len(rows) == v.layer_accuracy["layers"] >= 3
    assert [r["onnx_tensor"] for r in rows][-1] == "y"
    assert all(float(r["sqnr_db"]) > 20 for r in rows), rows
    worst = min(rows, key=lambda r: float(r["sqnr_db"]))
    assert v.layer_accuracy["worst"]["layer"] == worst["layer"]
    first = next((r["layer"] for r in rows if float(r["sqnr_db"]) < 30 or float(r["cosine"] or 1) < 0.99), None)
    assert (v.layer_accuracy["first_below"] or {}).get("layer") == first
    png = (tmp_path / "layers_accuracy.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
