"""Several run-time inputs through the channels-last and token front ends
(tpucompile.frontend.nhwc_input, token_input): every (1, H, W, C) input read only by a Transpose
to NCHW, and every (1, T, C) input of a token model, is converted and recorded by name; a user's
.npz of arrays in the model's own layouts runs golden = SimPy; the sweep's SimPy point and the
host feeds take the inputs by name."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tpucompile import golden
from tpucompile.driver import compile_onnx, load_model
from tpucompile.frontend.nhwc_input import input_layout, to_model_layout
from tpusim.arch.config import load_config
from tpusim.flow.cosim import run
from tpusim.flow.sweep import simulate


def _model(nodes, inits: dict, ins: dict, out: str) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in ins.items()],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def two_nhwc_images(seed=0) -> onnx.ModelProto:
    """xa, xb (1, 8, 8, 3) -> Transpose to NCHW -> Conv 3x3 (4) each -> Add -> Relu: y (1, 4, 8, 8)."""
    rng = np.random.default_rng(seed)
    inits = {f"w{k}": rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32) for k in "ab"}
    nodes = [n for k in "ab" for n in (
        helper.make_node("Transpose", [f"x{k}"], [f"t{k}"], name=f"to_nchw_{k}", perm=[0, 3, 1, 2]),
        helper.make_node("Conv", [f"t{k}", f"w{k}"], [f"c{k}"], name=f"conv_{k}", pads=[1, 1, 1, 1]))]
    nodes += [helper.make_node("Add", ["ca", "cb"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["y"], name="relu")]
    return _model(nodes, inits, {"xa": (1, 8, 8, 3), "xb": (1, 8, 8, 3)}, "y")


def two_token_inputs(seed=0, t=12, c=8, n=6) -> onnx.ModelProto:
    """xa, xb (1, T, C) -> a Linear (MatMul by a constant (C, N)) each -> Add: y (1, T, N)."""
    rng = np.random.default_rng(seed)
    inits = {f"w{k}": rng.normal(0, 0.4, (c, n)).astype(np.float32) for k in "ab"}
    nodes = [helper.make_node("MatMul", [f"x{k}", f"w{k}"], [f"m{k}"], name=f"linear_{k}") for k in "ab"]
    nodes.append(helper.make_node("Add", ["ma", "mb"], ["y"], name="add"))
    return _model(nodes, inits, {"xa": (1, t, c), "xb": (1, t, c)}, "y")


def _check(model, layout: str, user_shape: tuple, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    m = load_model(path)
    assert {input_layout(m, k)["layout"] for k in ("xa", "xb")} == {layout}
    rng = np.random.default_rng(5)
    x = {k: rng.uniform(-1, 1, user_shape).astype(np.float32) for k in ("xa", "xb")}
    # the converted model on the converted arrays computes what the original computes
    ref = ort.InferenceSession(model.SerializeToString()).run(None, x)[0]
    conv = ort.InferenceSession(m.SerializeToString()).run(None, {k: to_model_layout(v, input_layout(m, k))
                                                                   for k, v in x.items()})[0]
    assert np.allclose(conv.reshape(-1), (ref if layout == "NHWC" else ref.transpose(0, 2, 1)).reshape(-1), atol=1e-5)
    np.savez(tmp_path / "x.npz", **x)
    np.savez(tmp_path / "cal.npz", **{k: np.stack([v[0], -v[0]]) for k, v in x.items()})
    v = run(str(path), "small", tmp_path / "run", rtl=False, input_path=str(tmp_path / "x.npz"),
            calib=str(tmp_path / "cal.npz"))
    assert v.passed and sum(v.layer_mismatches.values()) == 0, v.mismatches
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    return m


def test_two_channels_last_images(tmp_path):
    m = _check(two_nhwc_images(), "NHWC", (1, 8, 8, 3), tmp_path)
    assert [n.op_type for n in m.graph.node].count("Transpose") == 0


def test_two_token_inputs(tmp_path):
    m = _check(two_token_inputs(), "NTC", (1, 12, 8), tmp_path)
    assert [n.op_type for n in m.graph.node] == ["Conv", "Conv", "Add"]


def test_the_sweep_point_takes_several_inputs_by_name(tmp_path):
    m = load_model(_save(two_nhwc_images(), tmp_path))
    rng = np.random.default_rng(2)
    xs = [{k: rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32) for k in ("xa", "xb")} for _ in range(2)]
    res = compile_onnx(m, load_config("small"), xs)
    point = simulate(res.qgraph, golden.quantize_input(res.qgraph, xs[0]), load_config("small"))
    assert "error" not in point and point["cycles"] > 0, point


def _save(model, tmp_path):
    onnx.save(model, tmp_path / "m.onnx")
    return tmp_path / "m.onnx"
