"""Resize / Upsample nearest by integer factors and linear x2 (tpucompile.ops.resize): the index
maps against onnxruntime, the YOLO-style neck golden = SimPy, bilinear x2 against onnxruntime
(golden = SimPy; the only rounding the final one), and every refusal names the node."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from tests import qnets
from tpucompile.ops.resize import nearest_indices
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

MODES = [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"), ("half_pixel", "round_prefer_ceil"),
         ("pytorch_half_pixel", "round_prefer_floor"), ("tf_half_pixel_for_nn", "floor"),
         ("align_corners", "round_prefer_floor"), ("half_pixel_symmetric", "ceil"), ("asymmetric", "ceil")]


@pytest.mark.parametrize("coord, nearest", MODES)
@pytest.mark.parametrize("n_in, n_out", [(4, 8), (5, 15), (3, 7), (6, 4)])
def test_index_maps_match_onnxruntime(coord, nearest, n_in, n_out):
    x = np.arange(n_in, dtype=np.float32).reshape(1, 1, 1, n_in)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode=coord, nearest_mode=nearest)
    m = qnets.make_model([node], {"sizes": np.array([1, 1, 1, n_out], np.int64)}, (1, 1, 1, n_in), "y", None,
                         opset=19)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(nearest_indices(n_in, n_out, n_out / n_in, coord, nearest), ref.reshape(-1))


@pytest.mark.parametrize("coord, nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")])
def test_yolo_neck_bit_exact(coord, nearest, tmp_path):
    model = qnets.yolo_neck(coord=coord, nearest=nearest)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="neck")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


def _resize(factors=(2, 3), opset=13, **attrs):
    rng = np.random.default_rng(0)
    inits = {"w": qnets.conv_w(rng, 5, 3, 3), "roi": np.zeros(0, np.float32),
             "scales": np.array([1, 1, *factors], np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Resize", ["c", "roi", "scales"], ["y"], name="up", **attrs)]
    return qnets.make_model(nodes, inits, (1, 3, 6, 4), "y", None, opset=opset)


def test_unequal_factors_and_upsample(tmp_path):
    m = _resize((2, 3), mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    xs = qnets.inputs(qnets.in_shape(m), 3, seed=1)
    v = run(m, "small", tmp_path / "r", rtl=False, data=(xs[0], xs[1:]), name="r")
    assert v.passed and v.accuracy["cosine"] > 0.999, v.accuracy
    rng = np.random.default_rng(0)
    up = qnets.make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Upsample", ["c", "scales"], ["y"], name="up", mode="nearest")],
                          {"w": qnets.conv_w(rng, 5, 3, 3), "scales": np.array([1, 1, 3, 2], np.float32)},
                          (1, 3, 6, 4), "y", None, opset=9)
    v = run(up, "small", tmp_path / "u", rtl=False, data=(xs[0], xs[1:]), name="u")
    assert v.passed and v.accuracy["cosine"] > 0.999, v.accuracy


@pytest.mark.parametrize("factors, attrs, msg", [
    ((2, 2), {"mode": "cubic"}, "node 'up' (Resize): attribute mode='cubic' unsupported"),
    ((2, 3), {"mode": "linear"}, "node 'up' (Resize): linear resize (1, 5, 6, 4) -> (1, 5, 12, 12) (half_pixel) is "
                                 "unsupported: only x2 on both H and W"),
    ((2, 2), {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     "node 'up' (Resize): linear resize (1, 5, 6, 4) -> (1, 5, 12, 8) (align_corners) is unsupported"),
    ((1.5, 2), {"mode": "nearest"}, "node 'up' (Resize): axis 2 6 -> 9 (scale 1.5, half_pixel, round_prefer_floor) "
                                    "is not an integer-factor nearest upsampling"),
    # align_corners happens to give i // 2 for 6 -> 12 (compiled), not i // 3 for 6 -> 18
    ((3, 3), {"mode": "nearest", "coordinate_transformation_mode": "align_corners"},
     "node 'up' (Resize): axis 2 6 -> 18 (scale 3, align_corners, round_prefer_floor) is not an integer-factor"),
])
def test_refusals_name_node_and_reason(factors, attrs, msg, tmp_path):
    m = _resize(factors, **attrs)
    xs = qnets.inputs(qnets.in_shape(m), 2, seed=1)
    with pytest.raises(CompileError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        run(m, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="r")


@pytest.mark.parametrize("hw", ["small", "medium"])
@pytest.mark.parametrize("coord, opset", [("half_pixel", 13), ("pytorch_half_pixel", 13), ("half_pixel", 19)])
def test_bilinear_x2(coord, opset, hw, tmp_path):
    """Linear x2 (torch's bilinear, align_corners False): edge pad, nearest x2, crop, the [1,2,1]
    blur as a depthwise Conv; on the input's grid, so within a step of onnxruntime's float."""
    m = _resize((2, 2), opset=opset, mode="linear", coordinate_transformation_mode=coord)
    xs = qnets.inputs(qnets.in_shape(m), 3, seed=1)
    v = run(m, hw, tmp_path, rtl=False, data=(xs[0], xs[1:]), name="bl")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.999, v.accuracy


def test_bilinear_x2_is_the_blur_of_the_edge_padded_nearest_upsampling():
    """The identity the lowering rests on, against onnxruntime's float Resize."""
    x = np.random.default_rng(5).normal(0, 1, (1, 2, 3, 5)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")
    m = qnets.make_model([node], {"scales": np.array([1, 1, 2, 2], np.float32)}, (1, 2, 3, 5), "y", None, opset=13)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    u = np.repeat(np.repeat(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge"), 2, 2), 2, 3)[:, :, 1:-1, 1:-1]
    k = np.outer([1, 2, 1], [1, 2, 1]) / 16
    blur = sum(k[i, j] * u[:, :, i:i + 6, j:j + 10] for i in range(3) for j in range(3))
    np.testing.assert_allclose(blur, ref, rtol=1e-5, atol=1e-6)
