"""Element-wise functions on the LUT (tpucompile.ops.lut): the table is f at each int8 input's
dequantized value rounded to the output grid; every function through the compiler and the SimPy
model on 'small' against onnxruntime; the Mul(x, g(x)) patterns; errors name the node."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.driver import compile_onnx
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ops.lut import FUNCTIONS, lut_table, unary_function
from tpucompile.passes.pipeline import run_passes
from tpusim.arch import arith
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

#: opset that has the op (Gelu: 20; HardSwish: 14; Mish: 18)
_OPSET = {"Gelu": 20}
#: attributes for the graph test (defaults otherwise)
_ATTRS = {"LeakyRelu": {"alpha": 0.2}, "Elu": {"alpha": 0.7}, "HardSigmoid": {"alpha": 0.3, "beta": 0.45},
          "Gelu": {"approximate": "tanh"}}


def test_table_is_f_at_each_dequantized_input_rounded_to_the_output_grid():
    f = unary_function("Sigmoid", {})
    sx, zx, sy, zy = 0.05, -3, 1 / 255, -128
    t = lut_table(f, sx, zx, sy, zy)
    for v in range(-128, 128):
        want = min(127, max(-128, math.floor(1 / (1 + math.exp(-sx * (v - zx))) / sy + 0.5) + zy))
        assert arith.lut_int8(np.array([v]), t)[0] == want, v
    assert t[0] == arith.lut_int8(np.array([0]), t)[0] and t[255] == arith.lut_int8(np.array([-1]), t)[0]


def test_table_refuses_non_finite_values_naming_the_input():
    with pytest.raises(ValueError, match=r"f\(710\) \(input code 71\) is inf, not a finite number"):
        lut_table(unary_function("Exp", {}), 10.0, 0, 1.0, 0)


#: functions defined on x > 0 only get Add(Abs(c), 0.5) as their input (one Lut with them)
_POSITIVE = ("Sqrt", "Reciprocal")


def _single(op: str, attrs: dict, opset: int):
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    x = "c"
    if op in _POSITIVE:
        nodes += [helper.make_node("Abs", ["c"], ["a"], name="abs"), helper.make_node("Add", ["a", "h"], ["p"], name="add")]
        x = "p"
    nodes.append(helper.make_node(op, [x], ["y"], name="f", **attrs))
    return qnets.make_model(nodes, {"w": qnets.conv_w(rng, 5, 3, 3), "h": np.float32(0.5)}, (1, 3, 7, 6), "y",
                            (1, 5, 7, 6), opset=opset)


def test_a_function_undefined_on_the_calibrated_range_is_refused_naming_node_and_input(tmp_path):
    rng = np.random.default_rng(1)
    model = qnets.make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                              helper.make_node("Sqrt", ["c"], ["y"], name="root")],
                             {"w": qnets.conv_w(rng, 5, 3, 1)}, (1, 3, 4, 4), "y", None)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=2)
    with pytest.raises(CompileError, match=r"node 'root' \(Lut Sqrt\(x\)\): f\(-[0-9.]+\) \(input code -?\d+\) is nan"):
        run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="m")


@pytest.mark.parametrize("op", sorted(FUNCTIONS))
def test_every_function_compiles_and_matches_onnxruntime(op, tmp_path):
    model = _single(op, _ATTRS.get(op, {}), _OPSET.get(op, 18))
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=op)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, (op, v.accuracy)


def _graph(body, cout=4):
    """Conv (3 -> cout, 1x1) to ``c``, then ``body`` (nodes reading ``c``, writing ``y``)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv")] + body
    inits = {"w": qnets.conv_w(rng, cout, 3, 1), "half": np.float32(0.5), "one": np.float32(1.0),
             "sqrt2": np.float32(math.sqrt(2)), "three": np.float32(3), "six": np.float32(6),
             "zero": np.float32(0), "w2": qnets.conv_w(rng, cout, cout, 1)}
    return qnets.make_model(nodes, inits, (1, 3, 5, 5), "y", None)


n = helper.make_node
#: (name, body, the Lut expressions after the passes)
PATTERNS = [
    ("silu", [n("Sigmoid", ["c"], ["g"], name="gate"), n("Mul", ["c", "g"], ["y"], name="mul")],
     ["Mul(x, Sigmoid(x))"]),
    ("silu_swapped", [n("Sigmoid", ["c"], ["g"], name="gate"), n("Mul", ["g", "c"], ["y"], name="mul")],
     ["Mul(Sigmoid(x), x)"]),
    ("gelu_erf", [n("Div", ["c", "sqrt2"], ["d"], name="div"), n("Erf", ["d"], ["e"], name="erf"),
                  n("Add", ["e", "one"], ["p"], name="add"), n("Mul", ["c", "p"], ["m"], name="mul"),
                  n("Mul", ["m", "half"], ["y"], name="mul2")],
     ["Mul(Mul(x, Add(Erf(Div(x, 1.41421)), 1)), 0.5)"]),
    ("hardswish_written", [n("Add", ["c", "three"], ["a"], name="add"),
                           n("Clip", ["a", "zero", "six"], ["r6"], name="relu6"),
                           n("Mul", ["c", "r6"], ["m"], name="mul"), n("Div", ["m", "six"], ["y"], name="div")],
     ["Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)"]),
    # the gate is read twice: y = x*g + g is still one function of c
    ("gate_read_twice", [n("Sigmoid", ["c"], ["g"], name="gate"), n("Mul", ["c", "g"], ["m"], name="mul"),
                         n("Add", ["m", "g"], ["y"], name="add")],
     ["Add(Mul(x, Sigmoid(x)), Sigmoid(x))"]),
    ("square_of_relu", [n("Relu", ["c"], ["r"], name="relu"), n("Mul", ["r", "r"], ["y"], name="sq")],
     ["Mul(Relu(x), Relu(x))"]),
    # comparisons and Where join the group (a leaky ReLU written out; torch dynamo's Softplus)
    ("where_leaky", [n("Greater", ["c", "zero"], ["g"], name="gt"), n("Mul", ["c", "half"], ["h"], name="mul"),
                     n("Where", ["g", "c", "h"], ["y"], name="where")],
     ["Where(Greater(x, 0), x, Mul(x, 0.5))"]),
    ("where_softplus", [n("Greater", ["c", "three"], ["g"], name="gt"), n("Softplus", ["c"], ["sp"], name="sp"),
                        n("Where", ["g", "c", "sp"], ["y"], name="where")],
     ["Where(Greater(x, 3), x, Softplus(x))"]),
    # Relu(c) is read by a Conv too: it stays a Relu (fused into the Conv), the Lut reads it
    ("after_shared_relu", [n("Relu", ["c"], ["r"], name="relu"), n("Tanh", ["r"], ["t"], name="tanh"),
                           n("Conv", ["r", "w2"], ["c2"], name="conv2"), n("Add", ["t", "c2"], ["y"], name="add")],
     ["Tanh(x)"]),
]


@pytest.mark.parametrize("name, body, exprs", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_element_wise_groups_become_one_lut_each(name, body, exprs, tmp_path):
    model = _graph(body)
    g = run_passes(import_onnx(model))
    luts = [nd for nd in g.nodes if nd.op == "Lut"]
    assert [nd.attrs["expr"] for nd in luts] == exprs, [(nd.op, nd.attrs.get("expr")) for nd in g.nodes]
    assert not {nd.op for nd in g.nodes} & {"Sigmoid", "Erf", "Mul", "Div", "Tanh", "Clip", "Where", "Greater"}
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=name)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("op, attrs, msg", [
    ("Sigmoid", {"alpha": 1.0}, "node 'f' (Sigmoid): attribute 'alpha' is not defined for Sigmoid in opset 18"),
    ("Gelu", {"approximate": "erf"}, "node 'f' (Gelu): attribute approximate='erf' is not one of 'none', 'tanh'"),
])
def test_bad_attributes_name_node_and_value(op, attrs, msg):
    with pytest.raises(CompileError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        import_onnx(_single(op, attrs, _OPSET.get(op, 18)))


@pytest.mark.parametrize("slope", [[0.25], np.full((6, 1, 1), -0.3)])
def test_prelu_with_one_slope_is_a_table(slope, tmp_path):
    """torch's nn.PReLU() (a (1,) slope) and equal per-channel slopes: one LUT, golden = SimPy."""
    model = qnets.prelu_net(slope)
    assert [nd.op for nd in run_passes(import_onnx(model)).nodes] == ["Conv", "Lut", "Conv"]
    xs = qnets.inputs((1, 3, 6, 6), 5, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="pr")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


def test_prelu_with_per_channel_slopes_is_two_luts_a_concat_and_a_conv(tmp_path):
    """nn.PReLU(C): LUT max(x, 0) and LUT min(x, 0) into one Concat, a 1x1 Conv with weights 1 and
    the slopes (ops/prelu.py); against onnxruntime, golden = SimPy on every layer."""
    model = qnets.prelu_net()
    xs = qnets.inputs((1, 3, 6, 6), 5, seed=2)
    binary = compile_onnx(model, load_config("small"), xs)
    kinds = [layer["op"] for layer in binary.binary.meta["layers"]]
    assert kinds == ["QConv", "QLut", "QLut", "QConcat", "QConv", "QConv"], kinds
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="prc")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy


@pytest.mark.parametrize("slope, msg", [
    (np.linspace(0.1, 0.6, 6).reshape(1, 1, 6), r"its slope 's' of shape \(1, 1, 6\) varies over the batch or "
                                                r"spatial axes of \(1, 6, 6, 6\); only one slope per channel"),
])
def test_prelu_slopes_not_per_channel_are_refused_naming_node_and_shape(slope, msg):
    with pytest.raises(CompileError, match=r"node 'prelu' \(PRelu\): " + msg):
        compile_onnx(qnets.prelu_net(slope), load_config("small"), qnets.inputs((1, 3, 6, 6), 2, seed=2))
