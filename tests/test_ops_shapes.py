"""Shape subgraphs of exporter output fold at compile time (tpucompile.ops.shapes): each fold
against onnxruntime, a Reshape target computed from Shape / Gather / Unsqueeze / Concat, and an
activation Gather refused by name."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ir import Node
from tpucompile.ops import OP_TABLE
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run


def _ort_const(nodes, inits, out, opset=17):
    vi = onnx.ValueInfoProto()
    vi.name = out
    g = helper.make_graph(nodes, "t", [], [vi],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})[0]


D = np.arange(2 * 5 * 7, dtype=np.int64).reshape(2, 5, 7)


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1], [4], [1], [1]), ([-3], [2 ** 62], [2], [1]), ([4, 0], [0, 7], [1, 2], [-2, 3]), ([0], [-1], None, None),
    ([6], [-2 ** 62], [2], [-1]),
])
def test_slice_fold_matches_onnxruntime(starts, ends, axes, steps):
    inits = {"d": D, "s": np.array(starts, np.int64), "e": np.array(ends, np.int64)}
    ins = ["d", "s", "e"]
    if axes is not None:
        inits["a"], inits["st"] = np.array(axes, np.int64), np.array(steps, np.int64)
        ins += ["a", "st"]
    node = helper.make_node("Slice", ins, ["y"], name="sl")
    ref = _ort_const([node], inits, "y")
    got = OP_TABLE.get("Slice").fold(Node("Slice", "sl", ins, ["y"], {}), *(inits[i] for i in ins))
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op, inits, attrs", [
    ("Gather", {"d": D, "i": np.array([2, 0], np.int64)}, {"axis": 1}),
    ("Gather", {"d": D, "i": np.array(-1, np.int64)}, {"axis": 2}),
    ("Cast", {"d": D}, {"to": TensorProto.FLOAT}),
    ("Expand", {"d": np.array([[1], [2]], np.int64), "s": np.array([2, 3], np.int64)}, {}),
    ("Range", {"a": np.array(2, np.int64), "b": np.array(11, np.int64), "c": np.array(3, np.int64)}, {}),
    ("Equal", {"a": np.array([1, 2, 3]), "b": np.array([1, 5, 3])}, {}),
    ("Where", {"c": np.array([True, False]), "a": np.array([1, 2]), "b": np.array([7, 8])}, {}),
])
def test_folds_match_onnxruntime(op, inits, attrs):
    ins = list(inits)
    ref = _ort_const([helper.make_node(op, ins, ["y"], name="n", **attrs)], inits, "y")
    d = OP_TABLE.get(op)
    imported = d.import_node(helper.make_node(op, ins, ["y"], name="n"), attrs, 17)
    got = d.fold(Node(op, "n", ins, ["y"], imported), *inits.values())
    np.testing.assert_array_equal(got, ref)
    assert got.dtype == ref.dtype or op == "Equal"


def _flatten_by_shape(gather_activation=False, constant_target=False):
    """Conv -> GlobalAveragePool -> Reshape to (Shape(p)[0], -1) -> Gemm, as x.view(x.size(0), -1)
    (``constant_target``: the same Reshape to the constant (1, -1))."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             n("GlobalAveragePool", ["c"], ["p"], name="gap"),
             n("Shape", ["p"], ["s"], name="shape"),
             n("Gather", ["s", "zero"], ["b"], name="batch", axis=0),
             n("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq"),
             n("Concat", ["b1", "minus1"], ["target"], name="target", axis=0),
             n("Reshape", ["p", "target"], ["f"], name="flat"),
             n("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1)]
    if gather_activation:
        nodes[-1] = n("Gather", ["f", "zero"], ["y"], name="pick", axis=1)
    inits = {"w": qnets.conv_w(rng, 6, 3, 3), "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64), "fw": rng.normal(0, 0.3, (4, 6)).astype(np.float32),
             "fb": np.zeros(4, np.float32)}
    if constant_target:
        nodes = nodes[:2] + [n("Reshape", ["p", "one_minus1"], ["f"], name="flat")] + nodes[-1:]
        inits["one_minus1"] = np.array([1, -1], np.int64)
    return qnets.make_model(nodes, inits, (1, 3, 6, 6), "y", None)


def test_reshape_target_from_a_shape_subgraph_folds(tmp_path):
    """ONNX shape inference leaves the Reshape's output unknown (data propagation stops at the
    Gather of a shape); folding the subgraph gives the same program as a constant target."""
    g = run_passes(import_onnx(_flatten_by_shape()))
    assert not {"Shape", "Gather", "Unsqueeze"} & {nd.op for nd in g.nodes}, [nd.op for nd in g.nodes]
    runs = []
    for const in (False, True):
        m = _flatten_by_shape(constant_target=const)
        xs = qnets.inputs(qnets.in_shape(m), 3, seed=1)
        v = run(m, "small", tmp_path / str(const), rtl=False, data=(xs[0], xs[1:]), name="f")
        assert v.passed, v.notes
        runs.append((v.cycles_simpy, np.load(tmp_path / str(const) / "out_y__nchw_simpy.npy").tobytes()))
    assert runs[0] == runs[1]


def test_a_gather_of_an_activation_is_refused_by_name(tmp_path):
    m = _flatten_by_shape(gather_activation=True)
    xs = qnets.inputs(qnets.in_shape(m), 2, seed=1)
    with pytest.raises(CompileError, match=r"node 'pick' \(Gather\) has no int8 device mapping"):
        run(m, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="g")


def test_malformed_initializer_in_a_model_with_shape_subgraphs_is_named():
    """Folding shape subgraphs reads the small initializers; a malformed one (data size against
    dims, as the fuzzer makes) is still reported by name, not as a numpy traceback."""
    m = _flatten_by_shape()
    junk = numpy_helper.from_array(np.arange(3, dtype=np.int64), "junk")
    junk.dims[0] = 2                                        # 3 values, dims say 2
    m.graph.initializer.append(junk)
    with pytest.raises(CompileError, match=r"initializer 'junk' \(dims \[2\]\) is malformed"):
        import_onnx(m)
