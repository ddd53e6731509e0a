"""Softmax inside the network on the vector unit (tpucompile.ops.softmax, SOFTMAX) on 'small':
golden == SimPy == the ISA executor bit-exactly, against onnxruntime FP32, a scalar Div folded
into exp_mult, the final Softmax of a classifier left on the host, refusals naming the node."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.golden import quantize_input, run_golden
from tpucompile.ops.softmax import QSoftmax
from tpucompile.qgraph import QGraph, QTensor
from tpucompile.quantize.quantize import compile_model
from tpucompile.selfcheck import run_on_executor
from tpusim.arch import arith
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

CFG = load_config("small")


def _model(c: int, hw=(5, 6), div: float | None = None, axis: int = 1, producer: str = "Conv"):
    """Conv 3 -> c (x4 gain: logits spanning several units), [Div by ``div``], Softmax(axis),
    Conv c -> 4 reading the probabilities. producer "Add": the logits are Conv + Conv (the Div
    then cannot fold into a Conv)."""
    rng = np.random.default_rng(1)
    inits = {"w": qnets.conv_w(rng, c, 3, 1) * 4, "w2": qnets.conv_w(rng, 4, c, 1), "wb": qnets.conv_w(rng, c, 3, 1) * 2}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")]
    x = "c"
    if producer == "Add":
        nodes += [helper.make_node("Conv", ["x", "wb"], ["cb"], name="convb"),
                  helper.make_node("Add", ["c", "cb"], ["a"], name="add")]
        x = "a"
    if div is not None:
        inits["k"] = np.float32(div)
        nodes.append(helper.make_node("Div", [x, "k"], ["d"], name="scale"))
        x = "d"
    nodes += [helper.make_node("Softmax", [x], ["s"], name="sm", axis=axis),
              helper.make_node("Conv", ["s", "w2"], ["y"], name="conv2")]
    return qnets.make_model(nodes, inits, (1, 3) + hw, "y", (1, 4) + hw, opset=17)


@pytest.mark.parametrize("c", [6, 8, 20, 64])
def test_softmax_inside_the_network_is_bit_exact_and_close_to_onnxruntime(c, tmp_path):
    """C <= W (one word per row: in place) and C > W (rows of several words: the transposing
    POOL copies), golden == SimPy on every layer, the whole net close to FP32."""
    model = _model(c)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=f"sm{c}")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    b = compile_onnx(model, CFG, xs[1:]).binary
    layer = next(entry for entry in b.meta["layers"] if entry["name"] == "sm")
    assert layer["op"] == "QSoftmax" and not b.meta.get("host_ops")
    by_op = b.meta["stats"]["by_opcode"]
    assert by_op["SOFTMAX"] >= 1 and (by_op.get("POOL", 0) >= 2) == (c > CFG.word_bytes)


def test_a_scalar_div_before_the_softmax_becomes_its_exp_multiplier(tmp_path):
    """softmax(x / 0.5) after an Add (no Conv to fold the Div into): exp_mult carries 1/0.5."""
    model = _model(8, div=0.5, producer="Add")
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="smdiv")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    qg, _ = compile_model(model, xs[1:])
    sm = next(op for op in qg.ops if isinstance(op, QSoftmax))
    s_in = qg.tensors[sm.inp].scale
    assert sm.inp == "a" and sm.exp_mult == round(s_in / 0.5 * math.log2(math.e) * 2 ** 20)
    assert not any(op.name == "scale" for op in qg.ops)


def test_golden_is_within_half_an_lsb_of_float_softmax_of_the_int8_logits():
    """QSoftmax's golden on (1, C, H, W): per pixel over C, <= 0.51 output LSB from the float
    softmax of the same dequantized int8 input (docs/integer_nonlinear.md), for the full-range
    output (1/255, -128) and a calibrated one of a long row (max p about 0.2)."""
    rng = np.random.default_rng(3)
    for c, s_in, (s_out, zp) in ((7, 0.05, (1 / 255, -128)), (20, 0.3, (1 / 255, -128)), (130, 0.02, (0.2 / 255, -128))):
        x = rng.integers(-128, 128, (1, c, 3, 4)).astype(np.int8)
        m, s = arith.quantize_multiplier(2.0 ** -30 / s_out)
        op = QSoftmax("sm", "x", "y", round(s_in * math.log2(math.e) * 2 ** 20), m, s, zp)
        qg = QGraph({"x": QTensor("x", x.shape, s_in, 0), "y": QTensor("y", x.shape, s_out, zp)}, [op], ["x"], ["y"])
        y = run_golden(qg, x)["y"].astype(np.float64)
        xf = s_in * x.astype(np.float64)
        e = np.exp(xf - xf.max(axis=1, keepdims=True))
        want = np.clip(e / e.sum(axis=1, keepdims=True) / s_out + zp, -128, 127)
        assert np.abs(y - want).max() <= 0.51, (c, s_in, np.abs(y - want).max())


def test_a_classifiers_final_softmax_stays_on_the_host():
    model = qnets.gemm_head(softmax=True)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=1)
    b = compile_onnx(model, CFG, xs).binary
    assert [h["op"] for h in b.meta["host_ops"]] == ["Softmax"]
    assert "scale" not in b.meta["host_ops"][0]
    assert all(entry["op"] != "QSoftmax" for entry in b.meta["layers"])


def test_a_softmax_over_another_axis_inside_the_network_is_refused_naming_node_and_axis():
    model = _model(8, axis=3)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=1)
    with pytest.raises(CompileError, match=r"node 'sm' \(Softmax\): axis 3 of a 4-D tensor \(1, 8, 5, 6\)"):
        compile_onnx(model, CFG, xs)


def test_the_executor_agrees_on_rows_of_several_words():
    """The binary of a 20-channel Softmax (3 words per row on 'small') under several
    token-respecting interleavings of the ISA executor equals golden."""
    model = _model(20, hw=(3, 4))
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=4)
    r = compile_onnx(model, CFG, xs[1:])
    b, qg = r.binary, r.qgraph
    xin = quantize_input(qg, xs[0])
    gold = run_golden(qg, xin)
    d = b.inputs[0]
    got = run_on_executor(b, CFG, {d.name: d.to_blocked(xin, b.meta["input_pad_value"][d.name])}, sched_seeds=(0, 1))
    assert got and all(np.array_equal(np.asarray(arr), gold[qg.resolve(name)]) for name, arr in got.items())
