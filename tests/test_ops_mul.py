"""Mul of two activations on the vector unit (MUL, tpucompile.ops.mul): equal shapes and a
(1, C, 1, 1) channel gate (squeeze-and-excite), operands on different lanes (a GLU's halves:
a lane copy), against onnxruntime and golden = SimPy; broadcasts it cannot do are refused
naming the node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.binary import TpuBinary
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


@pytest.mark.parametrize("gate_first", [False, True])
def test_squeeze_excite_and_product_compile_bit_exact(gate_first, tmp_path):
    model = qnets.se_block(gate_first=gate_first)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="se")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] > 0.99, v.accuracy
    layers = TpuBinary.read(tmp_path / "se.tpubin").meta["layers"]
    muls = [L for L in layers if L["op"] == "QMul"]
    assert [L["gate"] for L in muls] == [True, False] and muls[1]["relu"], muls


def test_relu_after_a_product_is_fused():
    g = run_passes(import_onnx(qnets.se_block()))
    prod = next(nd for nd in g.nodes if nd.name == "product")
    assert prod.attrs.get("relu") and "Relu" not in {nd.op for nd in g.nodes if nd.name == "relu_out"}


def test_other_broadcasts_are_refused_naming_the_node(tmp_path):
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             n("Conv", ["x", "w1"], ["att"], name="spatial", pads=[1, 1, 1, 1]),     # (1, 1, 6, 6)
             n("Mul", ["c", "att"], ["y"], name="spatial_gate")]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 4, 3, 3), "w1": qnets.conv_w(rng, 1, 3, 3)},
                             (1, 3, 6, 6), "y", None)
    xs = qnets.inputs(qnets.in_shape(model), 2, seed=2)
    with pytest.raises(CompileError, match=r"node 'spatial_gate' \(Mul\): broadcasting \(1, 4, 6, 6\) \* "
                                           r"\(1, 1, 6, 6\) unsupported"):
        run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="m")


@pytest.mark.parametrize("hw", ["small", "medium"])
@pytest.mark.parametrize("split", [True, False])
def test_glu_of_two_halves_on_different_lanes(split, hw, tmp_path):
    """a * Sigmoid(b) of the two halves of one tensor (a Split or two Slices; on 'small' b sits on
    lanes 5..9, a on 0..4): an identity 1x1 Conv copies a onto b's lanes before the MUL (the
    vector unit works lane by lane); the Add of the product and b then shares b's lanes."""
    model = qnets.glu(split=split)
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=2)
    v = run(model, hw, tmp_path, rtl=False, data=(xs[0], xs[1:]), name="glu")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
    ops = [(L["name"], L["op"]) for L in TpuBinary.read(tmp_path / "glu.tpubin").meta["layers"]]
    assert ("glu__lanes_a", "QConv") in ops, ops


def test_add_of_two_concats_with_different_maps(tmp_path):
    """Add(Concat(a 5, b 6), Concat(d 6, e 5)): the two maps differ on 'small', the second operand
    is copied onto the first one's lanes."""
    model = qnets.concat_refused("add_maps")
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=2)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="am")
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.accuracy["cosine"] > 0.99, v.accuracy
