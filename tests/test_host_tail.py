"""The host tail (tpucompile/ops/host_tail.py, ``--host-tail``): a detector's decoding after its
last device layer (5-D Reshape / Transpose, Sigmoid, grid arithmetic, Split and Concat on the last
axis) runs on the host by onnxruntime, bit-exact device layers, the final output close to FP32;
without the flag it is refused; a refused node that has layers after it is still an error."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile import fp32
from tpucompile.driver import compile_onnx
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def test_detector_decoding_runs_on_the_host(tmp_path):
    model = qnets.detect_head()
    xs = qnets.inputs(qnets.in_shape(model), 5, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="det", host_tail=True)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    assert any(n.startswith("host tail after the device: 12 nodes (Reshape x2, Transpose x1, Sigmoid x1, Split x1, "
                            "Mul x5, Add x1, Concat x1) run by onnxruntime in float32 from head to y") for n in v.notes), v.notes
    tail = next(n for n in v.notes if n.startswith("host tail output 'y' (1, 192, 7) vs FP32: cosine "))
    assert float(tail.split("cosine ")[1].split(",")[0]) > 0.99, tail
    assert np.load(tmp_path / "out_y_host.npy").shape == (1, 192, 7)
    b = TpuBinary.read(tmp_path / "det.tpubin")
    assert [L["op"] for L in b.meta["layers"]] == ["QConv", "QConv"]
    assert [t.name for t in b.outputs] == ["head"] and b.meta["fp32_outputs"] == ["y"]


def test_host_tail_output_tracks_fp32(tmp_path):
    """The decoded boxes from the int8 head against onnxruntime on the float model."""
    from tpucompile import golden
    model = qnets.detect_head()
    xs = qnets.inputs(qnets.in_shape(model), 5, seed=2)
    res = compile_onnx(model, load_config("small"), xs[1:], host_tail=True)
    env = golden.run_golden(res.qgraph, golden.quantize_input(res.qgraph, xs[0]))
    y = golden.run_host_ops(res.qgraph, env)["y"]
    ref = fp32.run_fp32(model, xs[0], names=["y"])["y"]
    assert y.shape == ref.shape == (1, 192, 7)
    assert np.corrcoef(y.reshape(-1), ref.reshape(-1))[0, 1] > 0.99


def test_without_the_flag_the_tail_is_refused():
    model = qnets.detect_head()
    with pytest.raises(CompileError, match=r"2 nodes are refused by the compiler's passes \(by op: Split x1, Concat x1\)"):
        compile_onnx(model, load_config("small"), qnets.inputs(qnets.in_shape(model), 2, seed=1))


def _reshape_in_the_middle():
    """A 5-D Reshape round trip between two Convs, the second with real weights: not a tail."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1"], ["a"], name="c1"),
             n("Reshape", ["a", "s5"], ["a5"], name="to5d"), n("Reshape", ["a5", "s4"], ["a4"], name="back"),
             n("Conv", ["a4", "w2"], ["y"], name="after", pads=[1, 1, 1, 1])]
    inits = {"w1": qnets.conv_w(rng, 64, 3, 1), "w2": qnets.conv_w(rng, 256, 64, 3),
             "s5": np.array([1, 2, 32, 6, 6], np.int64), "s4": np.array([1, 64, 6, 6], np.int64)}
    return qnets.make_model(nodes, inits, (1, 3, 6, 6), "y", None)


def test_a_refused_node_with_layers_after_it_is_an_error_saying_why():
    """--host-tail with a weighted layer after the refused nodes: the refusal, and the reason."""
    with pytest.raises(CompileError, match=r"(?s)node 'to5d' \(Reshape\): a Reshape of the activation 'a' from "
                                           r"\(1, 64, 6, 6\) to \(1, 2, 32, 6, 6\) moves values across channels: it "
                                           r"maps only as.*--host-tail not "
                                           r"applied: the layer 'after' \(Conv\) reads what"):
        compile_onnx(_reshape_in_the_middle(), load_config("small"), qnets.inputs((1, 3, 6, 6), 2, seed=1),
                     host_tail=True)
