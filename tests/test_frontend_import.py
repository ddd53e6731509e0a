"""ONNX import: supported graphs, dump text, and refusals naming node/op/attribute."""
import numpy as np
import onnx
import pytest
import qnets
from onnx import TensorProto, helper

from tpucompile import realdata
from tpucompile.frontend.onnx_import import _all_finite, import_onnx
from tpucompile.ir import Graph, Node, Tensor, dump, verify
from tpusim.arch.errors import CompileError


def _conv_model(**attrs):
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="myconv", kernel_shape=[3, 3], **attrs)
    return qnets.make_model([node], {"w": qnets.conv_w(rng, 4, 4, 3)}, (1, 4, 8, 8), "y", None)


def test_import_light_resnet50():
    g = import_onnx(realdata.LIGHT_RESNET50)
    ops = [n.op for n in g.nodes]
    assert ops.count("Conv") == 53 and ops.count("ConstantOfShape") == 239
    assert g.inputs == ["gpu_0/data_0"] and g.tensors["r0"].shape == (1, 64, 112, 112)
    conv = next(n for n in g.nodes if n.name == "n0")
    assert conv.attrs["strides"] == (2, 2) and conv.attrs["pads"] == (3, 3, 3, 3)


def test_dump_format():
    text = dump(import_onnx(realdata.LIGHT_RESNET50))
    line = next(l for l in text.splitlines() if "// n0" in l)
    assert line.strip().startswith("%r0 = tpu.conv(%gpu_0/data_0, %gpu_0/conv1_w_0) {")
    assert "pads=[3,3,3,3]" in line and "strides=[2,2]" in line
    assert ": (1x3x224x224xf32, 64x3x7x7xf32) -> (1x64x112x112xf32)" in line
    assert text.startswith("func @main(%gpu_0/data_0: 1x3x224x224xf32) -> (1x1000xf32) {")


def test_import_modern_opset13():
    g = import_onnx(realdata.resnet50_modern(0))
    ops = {n.op for n in g.nodes}
    assert {"Add", "GlobalAveragePool", "Flatten"} <= ops and "Sum" not in ops


def test_unsupported_op_named():
    node = helper.make_node("Hardmax", ["x"], ["y"], name="act7")
    m = qnets.make_model([node], {}, (1, 2, 3, 3), "y", None)
    with pytest.raises(CompileError, match=r"'act7': op Hardmax unsupported; supported ops: Conv"):
        import_onnx(m)


@pytest.mark.parametrize("attrs, match", [
    ({"dilations": [0, 2]}, r"'myconv' \(Conv\): attribute dilations=\[0, 2\] invalid"),
    ({"group": 0}, r"'myconv' \(Conv\): attribute group=0 invalid"),
    ({"auto_pad": "SAME"}, r"attribute auto_pad='SAME' invalid \(ONNX allows NOTSET, SAME_UPPER"),
    ({"auto_pad": "VALID", "pads": [1, 1, 1, 1]}, r"attribute pads=\[1, 1, 1, 1\] given with auto_pad=VALID"),
])
def test_bad_conv_attributes(attrs, match):
    with pytest.raises(CompileError, match=match):
        import_onnx(_conv_model(**attrs))


def _passes(model):
    from tpucompile.passes.pipeline import run_passes
    return run_passes(import_onnx(model))


def test_grouped_and_dilated_conv_become_dense():
    """group 2 over 4 channels -> block-diagonal (4, 4, 3, 3); dilation 2 -> a 5x5 kernel with
    zero taps between; other weights untouched (onnx Conv spec)."""
    rng = np.random.default_rng(0)
    w = qnets.conv_w(rng, 4, 2, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="gd", group=2, dilations=[2, 2], pads=[2, 2, 2, 2])
    g = _passes(qnets.make_model([node], {"w": w}, (1, 4, 8, 8), "y", None))
    conv, = g.nodes
    dense = g.const(conv.inputs[1])
    assert dense.shape == (4, 4, 5, 5) and "group" not in conv.attrs and "dilations" not in conv.attrs
    assert np.array_equal(dense[:2, :2, ::2, ::2], w[:2]) and np.array_equal(dense[2:, 2:, ::2, ::2], w[2:])
    assert not dense[:2, 2:].any() and not dense[2:, :2].any() and not dense[:, :, 1::2].any()


def test_grouped_conv_refusals():
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="g3", group=3, kernel_shape=[1, 1])
    with pytest.raises(CompileError, match=r"'g3' \(Conv\): group=3 does not divide the 6 outputs and 4 input "
                                           r"channels into weight blocks of 1 \(weight \(6, 1, 1, 1\)\)"):
        _passes(qnets.make_model([node], {"w": qnets.conv_w(rng, 6, 1, 1)}, (1, 4, 8, 8), "y", None))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="huge", group=1024, kernel_shape=[3, 3], dilations=[40, 40])
    with pytest.raises(CompileError, match=r"'huge' \(Conv\): group=1024, dilations=\[40, 40\] expand to a dense "
                                           r"weight of \d+ elements, over the compiler's limit"):
        _passes(qnets.make_model([node], {"w": qnets.conv_w(rng, 1024, 1, 3)}, (1, 1024, 90, 90), "y", None))


def test_dilated_pool_refused():
    mp = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], dilations=[2, 2])
    with pytest.raises(CompileError, match=r"'mp' \(MaxPool\): attribute dilations=\[2, 2\] unsupported \(only 1\)"):
        import_onnx(qnets.make_model([mp], {}, (1, 2, 5, 5), "y", None))


def test_dilated_same_pad_resolved_with_the_dilated_kernel():
    """SAME_UPPER, k 3, dilation 2, stride 1 on 8: total pad (8-1)*1 + (3-1)*2 + 1 - 8 = 4."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", dilations=[2, 2], auto_pad="SAME_UPPER")
    g = import_onnx(qnets.make_model([node], {"w": qnets.conv_w(np.random.default_rng(0), 4, 4, 3)},
                                     (1, 4, 8, 8), "y", None))
    assert g.nodes[0].attrs["pads"] == (2, 2, 2, 2)


def _clip_model(lo, hi, as_inputs=True):
    rng = np.random.default_rng(0)
    inits = {"w": qnets.conv_w(rng, 4, 3, 3)}
    ins = ["c"]
    if as_inputs:
        for k, v in (("lo", lo), ("hi", hi)):
            if v is not None:
                inits[k] = np.float32(v)
            ins.append(k if v is not None else "")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3]),
             helper.make_node("Clip", ins, ["y"], name="clip")]
    return qnets.make_model(nodes, inits, (1, 3, 8, 8), "y", None)


def test_clip_fuses_into_its_producer():
    """Clip(0, 6) clamps at the zero point (relu); Clip(-1, None) and Clip(None, 2) only take over
    the output name (its calibrated range saturates)."""
    for lo, hi, relu in ((0, 6, True), (-1, None, False), (None, 2, False)):
        conv, = _passes(_clip_model(lo, hi)).nodes
        assert conv.op == "Conv" and conv.outputs == ["y"] and conv.attrs["relu"] is relu


def test_clip_refusals():
    with pytest.raises(CompileError, match=r"'clip' \(Clip\): bounds \[0.5, 6\] do not contain 0"):
        _passes(_clip_model(0.5, 6))
    m = _clip_model(0, 6)
    m.graph.initializer[-1].CopyFrom(onnx.numpy_helper.from_array(np.full(4, 6, np.float32), "hi"))
    with pytest.raises(CompileError, match=r"'clip' \(Clip\): max 'hi' must be a constant scalar, got \(4,\)"):
        _passes(m)


def test_reduce_mean_over_hw_is_a_global_average_pool():
    keep = helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[-2, -1], keepdims=1)
    g = _passes(qnets.make_model([keep], {}, (1, 4, 5, 5), "y", None))
    assert [n.op for n in g.nodes] == ["GlobalAveragePool"]
    flat = helper.make_node("ReduceMean", ["x", "ax"], ["y"], name="mean", keepdims=0)
    g = _passes(qnets.make_model([flat], {"ax": np.array([2, 3], np.int64)}, (1, 4, 5, 5), "y", None, opset=18))
    assert [n.op for n in g.nodes] == ["GlobalAveragePool", "Alias"] and g.tensors["y"].shape == (1, 4)
    bad = helper.make_node("ReduceMean", ["x"], ["y"], name="cmean", axes=[1])
    with pytest.raises(CompileError, match=r"'cmean' \(ReduceMean\): axes \[1\] of a 4-D input 'x' \(1, 4, 5, 5\) "
                                           r"unsupported \(only the spatial axes"):
        _passes(qnets.make_model([bad], {}, (1, 4, 5, 5), "y", None))


def test_constant_nodes_fold():
    c = helper.make_node("Constant", [], ["six"], name="k", value_float=6.0)
    z = helper.make_node("Constant", [], ["zero"], name="k0",
                         value=onnx.numpy_helper.from_array(np.zeros((), np.float32)))
    conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3])
    clip = helper.make_node("Clip", ["c", "zero", "six"], ["y"], name="clip")
    g = _passes(qnets.make_model([c, z, conv, clip], {"w": qnets.conv_w(np.random.default_rng(0), 4, 3, 3)},
                                 (1, 3, 8, 8), "y", None))
    assert [n.op for n in g.nodes] == ["Conv"] and g.nodes[0].attrs["relu"]
    bad = helper.make_node("Constant", [], ["s"], name="sp", value_string="x")
    with pytest.raises(CompileError, match=r"'sp' \(Constant\): attribute value_string=.* is not supported"):
        import_onnx(qnets.make_model([bad, helper.make_node("Relu", ["x"], ["y"], name="r")], {}, (1, 1, 2, 2), "y", None))


def test_bad_pool_and_gemm_attributes():
    mp = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], storage_order=1)
    with pytest.raises(CompileError, match=r"'mp' \(MaxPool\): attribute storage_order=1 unsupported"):
        import_onnx(qnets.make_model([mp], {}, (1, 2, 5, 5), "y", None))
    ap = helper.make_node("AveragePool", ["x"], ["y"], name="ap", kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=2)
    with pytest.raises(CompileError, match=r"'ap' \(AveragePool\): attribute count_include_pad=2 invalid \(0 or 1\)"):
        import_onnx(qnets.make_model([ap], {}, (1, 2, 5, 5), "y", None))
    gm = helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transA=1)
    m = helper.make_model(helper.make_graph(
        [gm], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.ones((4, 3), np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CompileError, match=r"'fc' \(Gemm\): attribute transA=1"):
        import_onnx(m)


def test_dynamic_shape_named():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(CompileError, match=r"tensor 'x' has a dynamic/unknown dimension \(N\)"):
        import_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


def test_verify_catches_errors():
    t = {"x": Tensor("x", (1, 2)), "y": Tensor("y", (1, 2)), "z": Tensor("z", (1, 2))}
    g = Graph(t, [Node("Relu", "a", ["z"], ["y"]), Node("Relu", "b", ["x"], ["z"])], ["x"], ["y"])
    with pytest.raises(CompileError, match=r"'a' \(Relu\) reads 'z'.*not topological"):
        verify(g)
    g = Graph(t, [Node("Relu", "a", ["x"], ["y"]), Node("Relu", "b", ["x"], ["z"])], ["x"], ["y"])
    with pytest.raises(CompileError, match="'z' is dangling"):
        verify(g)
    t["y"] = Tensor("y", (1, 0))
    g = Graph(t, [Node("Relu", "a", ["x"], ["y"])], ["x"], ["y"])
    with pytest.raises(CompileError, match=r"tensor 'y' has unknown or dynamic shape \(1, 0\)"):
        verify(g)


# ---------------------------------------------------------------- issue 9: breadth of the importer
@pytest.mark.parametrize("mode, hw, k, s, pads", [
    ("SAME_UPPER", (9, 10), 3, 2, (1, 0, 1, 1)),    # totals: 2 rows, 1 column
    ("SAME_UPPER", (8, 8), 3, 2, (0, 0, 1, 1)),     # total 1 per axis: the extra at the end
    ("SAME_LOWER", (8, 8), 3, 2, (1, 1, 0, 0)),     # ... at the beginning
    ("SAME_UPPER", (8, 8), 4, 1, (1, 1, 2, 2)),
    ("VALID", (8, 8), 3, 2, (0, 0, 0, 0)),
])
def test_auto_pad_resolved_into_pads(mode, hw, k, s, pads):
    rng = np.random.default_rng(0)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", strides=[s, s], auto_pad=mode)
    m = qnets.make_model([node], {"w": qnets.conv_w(rng, 4, 4, k)}, (1, 4, *hw), "y", None)
    conv = import_onnx(m).nodes[0]
    assert conv.attrs["pads"] == pads and "auto_pad" not in conv.attrs


def test_every_refused_node_reported_at_once_grouped_by_op():
    nodes = [helper.make_node("Hardmax", ["x"], ["a"], name="sig1"),
             helper.make_node("LpNormalization", ["a"], ["b"], name="lrn1"),
             helper.make_node("Hardmax", ["b"], ["c"], name="sig2"),
             helper.make_node("Conv", ["c", "w"], ["y"], name="conv1", kernel_shape=[1, 1], group=-2)]
    m = qnets.make_model(nodes, {"w": np.ones((4, 1, 1, 1), np.float32)}, (1, 2, 4, 4), "y", None)
    with pytest.raises(CompileError) as e:
        import_onnx(m)
    lines = str(e.value).splitlines()
    assert lines[0] == "4 nodes cannot be compiled (by op: Hardmax x2, LpNormalization x1, Conv x1):"
    assert [ln.split("'")[1] for ln in lines[1:5]] == ["sig1", "lrn1", "sig2", "conv1"]
    assert "attribute group=-2 invalid" in lines[4]
    assert lines[1] == "  node 'sig1': op Hardmax unsupported"            # the op list once, last
    assert lines[5].startswith("supported ops: Conv, ") and len(lines) == 6


def _dropout_model(outputs=("d", "mask"), graph_out="y", extra_inputs=(), inits=None, opset=9):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
             helper.make_node("Dropout", ["c", *extra_inputs], list(outputs), name="drop"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    return qnets.make_model(nodes, {"w": qnets.conv_w(rng, 4, 4, 1), **(inits or {})}, (1, 4, 4, 4),
                            graph_out, None, opset=opset)


def test_dropout_and_identity_become_aliases():
    from tpucompile.quantize import compile_model
    qg, g = compile_model(_dropout_model(), qnets.inputs((1, 4, 4, 4), 2))
    assert [n.op for n in g.nodes] == ["Conv", "Alias"] and qg.resolve("y") == qg.resolve("c")


def test_dropout_refusals():
    from tpucompile.quantize import compile_model
    with pytest.raises(CompileError, match=r"node 'drop' \(Dropout\): its mask output 'mask' is used"):
        m = _dropout_model(opset=13)
        m.graph.output.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, None))
        compile_model(m, qnets.inputs((1, 4, 4, 4), 1))
    m = _dropout_model(extra_inputs=("r", "t"), inits={"r": np.array(0.5, np.float32), "t": np.array(True)},
                       opset=13)
    with pytest.raises(CompileError, match=r"node 'drop' \(Dropout\): training_mode 't' is true"):
        compile_model(m, qnets.inputs((1, 4, 4, 4), 1))


def test_average_pool_same_padding_resolved():
    ap = helper.make_node("AveragePool", ["x"], ["y"], name="ap", kernel_shape=[3, 3], auto_pad="SAME_UPPER")
    node = import_onnx(qnets.make_model([ap], {}, (1, 2, 5, 5), "y", None)).nodes[0]
    assert node.attrs["pads"] == (1, 1, 1, 1) and node.attrs["count_include_pad"] == 0


def test_average_pool_excluding_column_pads_on_small(tmp_path):
    """count_include_pad=0 with pads (1, 1, 1, 1) on 'small' (4-pixel DDR granules): the column
    run starting at column 1 is widened to column 0 and overwritten by column 0's run."""
    from tpusim.flow.cosim import run
    m = qnets.avgpool_pads()
    xs = qnets.inputs((1, 3, 7, 9), 1, seed=3)
    v = run(m, "small", tmp_path, rtl=False, data=(xs[0], xs), name="pads")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, v.mismatches
    assert v.accuracy["max_lsb"] <= 2.5, v.accuracy


def test_weights_listed_as_graph_inputs_calibrate_on_the_image():
    """IR-3 style: every initializer also a graph input, and listed before the image."""
    from tpucompile.cli import _model_data
    from tpucompile.fp32 import run_fp32
    from tpucompile.quantize import compile_model
    m = qnets.conv_stride2()
    m.ir_version = 3
    g = m.graph
    image = onnx.ValueInfoProto()
    image.CopyFrom(g.input[0])
    del g.input[:]
    for init in g.initializer:
        g.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    g.input.append(image)
    assert [c.shape for c in _model_data(m, 2)[1]] == [(1, 4, 15, 13)] * 2
    x = qnets.inputs((1, 4, 15, 13), 1, seed=4)[0]
    qg, _ = compile_model(m, [x])
    ref, t = run_fp32(m, x)["y"], qg.tensor("y")
    lo, hi = (np.array([-128, 127]) - t.zero_point) * t.scale
    assert lo - t.scale <= ref.min() and ref.max() <= hi + t.scale   # calibrated on the image


@pytest.mark.parametrize("reshape", [False, True])
def test_flatten_then_gemm_is_a_conv_over_the_whole_map(reshape):
    from tpucompile.quantize import compile_model
    qg, g = compile_model(qnets.flatten_gemm(reshape=reshape), qnets.inputs((1, 3, 7, 7), 2))
    fc = next(n for n in g.nodes if n.name == "fc")
    assert fc.op == "Conv" and fc.attrs["kernel_shape"] == (3, 3) and fc.inputs[0] == "p"
    assert "Reshape" not in {n.op for n in g.nodes} and "Flatten" not in {n.op for n in g.nodes}
    assert g.tensors[fc.inputs[1]].shape == (10, 8, 3, 3)


def test_all_finite_by_one_sum_and_exact_when_the_sum_overflows():
    """The initializer check sums once; a NaN or infinity fails it, and finite values whose
    float32 sum overflows still pass (checked value by value)."""
    assert _all_finite(np.full(4, 3e38, np.float32))             # sum overflows to inf: all finite
    assert _all_finite(np.array([3e38, -3e38, 3e38, 3e38], np.float32))
    for bad in (np.nan, np.inf, -np.inf):
        a = np.ones(1000, np.float32)
        a[517] = bad
        assert not _all_finite(a)
    a = np.full(4, 3e38, np.float32)
    a[0] = np.inf
    assert not _all_finite(a)
