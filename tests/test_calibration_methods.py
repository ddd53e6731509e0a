"""--calib-method: minmax, percentile, mse, entropy (tpucompile.quantize.calibrate) on a small net;
one outlier value in the calibration data wrecks minmax, not percentile, mse or entropy."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import qnets

from tpucompile import driver
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.quantize.calibrate import (
    CALIB_METHODS,
    EXTERNAL_MIN_BYTES,
    _expanded_levels,
    _without_big_weights,
    calibrate,
    session_with_outputs,
)
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

#: cosine floors; entropy (KL) clips hardest: on 4 samples of this short-tailed net it cuts the
#: top of the range
FLOORS = {"minmax": 0.99, "percentile": 0.99, "mse": 0.99, "entropy": 0.95}


@pytest.mark.parametrize("method", CALIB_METHODS)
def test_every_method_tracks_fp32(method, tmp_path):
    floor = FLOORS[method]
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 5, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=method, calib_method=method)
    assert v.passed and v.accuracy["cosine"] > floor, (method, v.accuracy)


def test_ranges_stay_inside_min_max_and_percentile_clips():
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=1)
    full = calibrate(model, xs, ["x", "y"])
    for method in ("percentile", "mse", "entropy"):
        got = calibrate(model, xs, ["x", "y"], method=method)
        for n in ("x", "y"):
            assert full[n][0] <= got[n][0] <= got[n][1] <= full[n][1], (method, n, got[n], full[n])
    p = calibrate(model, xs, ["x"], method="percentile", percentile=99.0)["x"]
    assert p[1] < full["x"][1] and p[0] > full["x"][0]


def test_one_outlier_wrecks_minmax_only(tmp_path):
    """A single 1e30 in one of four calibration images: with minmax the input's scale swallows
    the test image (the int8 output no longer tracks FP32); percentile's median over the images
    ignores that image; mse and entropy leave values beyond 16x the median of the samples' peaks
    out of their error and histogram (calibrate.OUTLIER_FACTOR), so neither lets it set a range."""
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 5, seed=3)
    xs[2][0, 0, 3, 3] = 1e30
    cos = {}
    for method in CALIB_METHODS:
        v = run(model, "small", tmp_path / method, rtl=False, data=(xs[0], xs[1:]), name=method, calib_method=method)
        assert v.passed
        cos[method] = v.accuracy.get("cosine", 0.0)
    assert cos["minmax"] < 0.9, cos
    assert all(cos[m] > FLOORS[m] for m in ("percentile", "mse", "entropy")), cos


def test_bad_method_and_percentile():
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 1)
    with pytest.raises(CompileError, match=r"calibration method 'kl' unknown; known: minmax, percentile, mse, entropy"):
        calibrate(model, xs, ["x"], method="kl")
    with pytest.raises(CompileError, match=r"calibration percentile must be in \(50, 100\], got 30"):
        calibrate(model, xs, ["x"], method="percentile", percentile=30)
    r = driver.compile_onnx(model, load_config("small"), xs, calib_method="entropy")
    assert r.binary.code


def test_a_model_too_big_for_host_memory_is_refused_before_allocating():
    """A 1x64x2048x2048 input (1 GiB of float32 per tensor, three tensors) on a machine said to
    have 4 GiB free: refused before onnxruntime or the calibration images allocate anything."""
    from onnx import helper

    from tpucompile.frontend.onnx_import import import_onnx
    from tpucompile.passes.pipeline import run_passes
    from tpucompile.quantize.calibrate import check_host_memory
    from tpucompile.quantize.quantize import calibration_names
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("MaxPool", ["r"], ["y"], name="mp",
                                                                                     kernel_shape=[1, 1])]
    g = run_passes(import_onnx(qnets.make_model(nodes, {}, (1, 64, 2048, 2048), "y", None)))
    with pytest.raises(CompileError, match=r"calibration would need about \d+\.\d GiB of host memory \(\d+ float32 "
                                           r"activations, the largest '.*' of shape \(1, 64, 2048, 2048\): 1.00 GiB\), "
                                           r"more than 60% of the 4.0 GiB available; use a smaller input"):
        check_host_memory(g, calibration_names(g), available=4 << 30)
    check_host_memory(g, calibration_names(g), available=64 << 30)


def test_large_weights_reach_onnxruntime_as_arrays_with_the_same_results():
    """session_with_outputs hands initializers of EXTERNAL_MIN_BYTES or more to onnxruntime as
    arrays (external-data stubs in the serialized model): the stubs carry no bytes, the small
    ones stay inline, and the outputs equal a plain session's."""
    model = qnets.conv_bn_relu()
    rng = np.random.default_rng(0)
    big = rng.normal(0, 0.1, (64, 8, 7, 7)).astype(np.float32)          # 100 KB
    assert big.nbytes >= EXTERNAL_MIN_BYTES
    model.graph.initializer.append(onnx.numpy_helper.from_array(big, "wbig"))
    model.graph.node.append(onnx.helper.make_node("Conv", ["y", "wbig"], ["z"], name="big", pads=[3, 3, 3, 3]))
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    stripped, names, arrays = _without_big_weights(model)
    assert names == ["wbig"] and np.array_equal(arrays[0], big)
    stub = next(t for t in stripped.graph.initializer if t.name == "wbig")
    assert not stub.raw_data and stub.data_location == onnx.TensorProto.EXTERNAL
    assert stripped.ByteSize() < big.nbytes // 10
    x = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    got = session_with_outputs(model, ["z", "y"]).run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(got[0], want[0])


def test_import_hands_its_weights_to_the_calibration_session():
    """import_onnx fills ``weights`` with its read-only initializer arrays; the calibration
    session takes those very arrays (no second copy of ``raw_data``) and its outputs equal a
    plain session's."""
    model = qnets.conv_bn_relu()
    rng = np.random.default_rng(1)
    big = rng.normal(0, 0.1, (64, 8, 7, 7)).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(big, "wbig"))
    model.graph.node.append(onnx.helper.make_node("Conv", ["y", "wbig"], ["z"], name="big", pads=[3, 3, 3, 3]))
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None))
    weights: dict = {}
    import_onnx(model, weights)
    assert "wbig" in weights and not weights["wbig"].flags.writeable and np.array_equal(weights["wbig"], big)
    _, names, arrays = _without_big_weights(model, weights)
    assert names == ["wbig"] and arrays[0] is weights["wbig"]
    x = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    got = session_with_outputs(model, ["z"], weights).run(None, {"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(got[0], want[0])


def _expanded_levels_loop(h, levels):
    """The chunk-by-chunk form of TensorRT's Q (the loop ``_expanded_levels`` replaced)."""
    q = np.zeros(len(h))
    for chunk in np.array_split(np.arange(len(h)), levels):
        nz = h[chunk] > 0
        if nz.any():
            q[chunk[nz]] = h[chunk].sum() / nz.sum()
    return q


def test_entropy_q_equals_the_chunk_loop():
    """The vectorized Q is bit-identical to the loop over np.array_split chunks, for every
    candidate length the entropy search uses (128 and 255 levels), on sparse and dense
    histograms, so the entropy ranges (and binaries) did not change."""
    rng = np.random.default_rng(5)
    hists = [np.histogram(np.abs(rng.standard_normal(n) * s), bins=2048)[0].astype(np.float64)
             for n, s in ((300, 1.0), (20_000, 3.0), (65_536, 0.2))]
    hists.append(np.where(rng.random(2048) < 0.05, rng.integers(1, 9, 2048), 0).astype(np.float64))
    for h in hists:
        for levels in (128, 255):
            for i in range(levels, 2049, 8):
                assert np.array_equal(_expanded_levels(h[:i], levels), _expanded_levels_loop(h[:i], levels)), (levels, i)
