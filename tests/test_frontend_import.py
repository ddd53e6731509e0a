"""ONNX import: supported graphs, dump text, and refusals naming node/op/attribute."""
import numpy as np
import onnx
import pytest
import qnets
from onnx import TensorProto, helper

from tpucompile import realdata
from tpucompile.frontend.onnx_import import import_onnx
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
    node = helper.make_node("Sigmoid", ["x"], ["y"], name="act7")
    m = qnets.make_model([node], {}, (1, 2, 3, 3), "y", None)
    with pytest.raises(CompileError, match=r"'act7': op Sigmoid unsupported; supported ops: Conv"):
        import_onnx(m)


@pytest.mark.parametrize("attrs, match", [
    ({"dilations": [2, 2]}, r"'myconv' \(Conv\): attribute dilations=\[2, 2\]"),
    ({"group": 2}, r"'myconv' \(Conv\): attribute group=2"),
    ({"auto_pad": "SAME_UPPER"}, r"attribute auto_pad=b'SAME_UPPER'"),
])
def test_bad_conv_attributes(attrs, match):
    with pytest.raises(CompileError, match=match):
        import_onnx(_conv_model(**attrs))


def test_bad_pool_and_gemm_attributes():
    mp = helper.make_node("MaxPool", ["x"], ["y"], name="mp", kernel_shape=[2, 2], ceil_mode=1)
    with pytest.raises(CompileError, match=r"'mp' \(MaxPool\): attribute ceil_mode=1"):
        import_onnx(qnets.make_model([mp], {}, (1, 2, 5, 5), "y", None))
    ap = helper.make_node("AveragePool", ["x"], ["y"], name="ap", kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=1)
    with pytest.raises(CompileError, match=r"'ap' \(AveragePool\): attribute pads=\[1, 1, 1, 1\].*count_include_pad=1"):
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
