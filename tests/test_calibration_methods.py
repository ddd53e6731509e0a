"""--calib-method: minmax, percentile, mse, entropy (tpucompile.quantize.calibrate) on a small net;
one outlier value in the calibration data is clipped, with a warning, before any method sees it."""
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
    clip_input_outliers,
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


#: the warning for one 1e30 in one of ``n`` calibration samples of input 'x'
OUTLIER_WARNING = ("warning: calibration input 'x': 1 isolated outlier value clipped to the range of its sample's "
                   "other values, in 1 of {n} sample{s} (largest 1e+30, more than 256x {ref}, the sample's largest "
                   "|x| after its top 4); kept, it would set the range of every tensor after it\n")


@pytest.mark.parametrize("samples", [4, 1])
def test_one_outlier_is_clipped_for_every_method(samples, tmp_path, capsys):
    """A single 1e30 in one calibration image: before any method it is clipped to the range of
    its image's other values (calibrate.clip_input_outliers), with one warning naming the input,
    the count and the value (on stderr and in the verdict's notes), so no method lets it set a range. Before, with minmax (the default)
    the input's scale swallowed the test image: cosine 0; with one calibration image every method
    gave cosine 0 (percentile's median over the images and mse / entropy's OUTLIER_FACTOR need
    other images to outvote it)."""
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), samples + 1, seed=3)
    xs[1 + samples // 2][0, 0, 3, 3] = 1e30
    ref = np.sort(np.abs(np.where(np.abs(xs[1 + samples // 2]) > 1e29, 0, xs[1 + samples // 2])).ravel())[-4]
    cos = {}
    for method in CALIB_METHODS:
        capsys.readouterr()
        v = run(model, "small", tmp_path / method, rtl=False, data=(xs[0], xs[1:]), name=method, calib_method=method)
        assert v.passed
        cos[method] = v.accuracy.get("cosine", 0.0)
        err = capsys.readouterr().err
        want = OUTLIER_WARNING.format(n=samples, s="s" if samples > 1 else "", ref=f"{ref:.4g}")
        assert [ln + "\n" for ln in err.splitlines() if ln.startswith("warning:")] == [want], err
        assert want.removeprefix("warning: ").rstrip("\n") in v.notes, v.notes      # and in the verdict
    floors = FLOORS if samples > 1 else {**FLOORS, "entropy": 0.9}    # one image: 0.949 (0.966 without the 1e30)
    assert all(cos[m] > floors[m] for m in CALIB_METHODS), cos


def test_clipping_leaves_ordinary_data_alone():
    """clip_input_outliers returns the very arrays of samples without isolated outliers (so no
    normal model's ranges change): photographs' and noise's tails, a heavy-tailed Laplace sample,
    a sparse one (its reference magnitude is 0: a large value is not known to be an outlier), up
    to 256x the reference, and a tiny array. An outlier is clipped to the other values' range on
    its side, and a negative one named with its sign; several in one input give one warning."""
    rng = np.random.default_rng(4)
    plain = [rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32), rng.laplace(0, 1, (1, 8, 16, 16)).astype(np.float32),
             np.where(rng.random((1, 4, 16, 16)) < 0.0005, 1e6, 0.0).astype(np.float32),
             np.full((1, 3), 1e30, np.float32)]
    edge = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    edge.ravel()[:4] = 255 * np.sort(np.abs(edge.ravel()))[-5]            # within 256x: kept
    feeds = [{"x": a} for a in plain + [edge]]
    out = clip_input_outliers(feeds)
    assert all(o["x"] is f["x"] for o, f in zip(out, feeds))
    bad = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    bad[0, 1, 2, 2], bad[0, 2, 5, 5] = -3e6, 1e9
    with pytest.MonkeyPatch.context() as mp:
        lines = []
        mp.setattr("sys.stderr", type("E", (), {"write": lambda self, t: lines.append(t), "flush": lambda self: None})())
        got = clip_input_outliers([{"x": bad}, {"x": plain[0]}])
    rest = np.delete(bad.ravel(), [bad.ravel().argmin(), bad.ravel().argmax()])
    want = bad.copy()
    want[0, 1, 2, 2], want[0, 2, 5, 5] = rest.min(), rest.max()
    assert np.array_equal(got[0]["x"], want) and got[1]["x"] is plain[0]
    text = "".join(lines)
    assert text.count("\n") == 1 and text.startswith("warning: calibration input 'x': 2 isolated outlier values "
                                                      "clipped to the range of their sample's other values, in 1 "
                                                      "of 2 samples (largest 1e+09, more than 256x "), text


def test_a_sample_that_overflows_float32_is_refused():
    """A calibration sample of finite float32 values whose FP32 run overflows (every value about
    1e38: not an isolated outlier) is refused naming the sample, the tensor and the values'
    size; before, it failed later with an unsupported requantization multiplier."""
    model = qnets.conv_bn_relu()
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=3)
    xs[1] = xs[1] * np.float32(1e38)
    with pytest.raises(CompileError, match=r"^calibration sample #1: onnxruntime's FP32 tensor '\w+' has \d+ "
                                           r"infinite values \(float32 overflows on this sample, whose values "
                                           r"reach 3\.\d+e\+38\); scale the calibration data to the model's input "
                                           r"range$"):
        driver.compile_onnx(model, load_config("small"), xs)


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


def test_a_sample_of_huge_values_is_named_but_left_alone(capsys):
    """More outliers than a sample's isolated ones (5 values of 1e30), or a whole sample 1e6x the
    others: nothing is clipped (not known to be wrong), but one warning names the input and the
    sample, since minmax would set every range from it (it passed silently with cosine 0; new-user
    trial, 2026-12-07). Samples of like size give no warning."""
    rng = np.random.default_rng(6)
    xs = [rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    assert clip_input_outliers([{"x": a} for a in xs]) and capsys.readouterr().err == ""
    xs[2].ravel()[:5] = 1e30
    out = clip_input_outliers([{"x": a} for a in xs])
    assert all(o["x"] is a for o, a in zip(out, xs))
    err = capsys.readouterr().err
    assert err.startswith("warning: calibration input 'x': sample #2's values reach 1e+30, more than 256x the other "
                          "samples' (median largest |x| ") and err.count("\n") == 1, err
    assert "with --calib-method minmax it sets the range of every tensor after it" in err
    xs[2] = np.full_like(xs[1], 1e6)
    notes: list = []
    clip_input_outliers([{"x": a} for a in xs], notes)
    assert "sample #2's values reach 1e+06" in capsys.readouterr().err
    assert len(notes) == 1 and notes[0].startswith("calibration input 'x': sample #2's values reach 1e+06"), notes
