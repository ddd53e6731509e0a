"""Quantizer: parameter choices, the QGraph contract, and refusals by message."""
import numpy as np
import pytest
import qnets
from onnx import helper

from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.ops import QAdd, QConv, QMaxPool
from tpucompile.passes.pipeline import run_passes
from tpucompile.qgraph import QGraph, QTensor
from tpucompile.quantize import activation_params, calibrate, compile_model, quantize_graph
from tpucompile.quantize.quantize import calibration_names, weight_params
from tpusim.arch import arith
from tpusim.arch.errors import CompileError


@pytest.mark.parametrize("lo, hi, expect", [
    (0.0, 0.0, (1.0, 0)),                 # empty range
    (0.0, 1e-40, (1.0, 0)),               # denormal range
    (-1.0, 1.0, (2 / 255, 0)),            # -128 + 127.5 = -0.5 -> half-even 0
    (0.5, 2.0, (2 / 255, -128)),          # range extended to include 0
    (-3.0, -1.0, (3 / 255, 127)),
])
def test_activation_params(lo, hi, expect):
    scale, zp = activation_params(lo, hi)
    assert scale == pytest.approx(expect[0], rel=1e-12) and zp == expect[1]
    assert -128 <= zp <= 127


def test_activation_zero_exact_and_range_covered():
    rng = np.random.default_rng(0)
    for lo, hi in rng.normal(0, 3, (200, 2)):
        lo, hi = min(lo, hi), max(lo, hi)
        s, zp = activation_params(lo, hi)
        assert (-128 - zp) * s <= min(lo, 0) + s and (127 - zp) * s >= max(hi, 0) - s


def test_weight_params():
    w = np.zeros((3, 2, 1, 1))
    w[0, :, 0, 0] = [0.5, -1.0]
    w[2, :, 0, 0] = [1e-3, 2e-3]
    q, s = weight_params(w)
    assert q.dtype == np.int8 and s[1] == 1.0 and not q[1].any()
    assert q[0, :, 0, 0].tolist() == [64, -127] and q[2, :, 0, 0].tolist() == [64, 127]


def test_conv_bias_and_multipliers():
    model = qnets.conv_stride2()
    qg, _ = compile_model(model, qnets.inputs((1, 4, 15, 13), 4))
    conv = qg.ops[0]
    assert isinstance(conv, QConv) and conv.weight.dtype == np.int8 and conv.bias.dtype == np.int32
    x, y = qg.tensors["x"], qg.tensors["y"]
    init = {i.name: np.frombuffer(i.raw_data, np.float32).reshape(i.dims) for i in model.graph.initializer}
    _, sw = weight_params(init["w"].astype(np.float64))
    bq = np.round(init["bias"] / (x.scale * sw))
    expect = bq - x.zero_point * conv.weight.reshape(6, -1).astype(np.int64).sum(1)
    assert conv.bias.tolist() == expect.astype(np.int64).tolist()
    for n in range(6):
        assert (conv.mult[n], conv.shift[n]) == arith.quantize_multiplier(x.scale * sw[n] / y.scale)
    assert conv.pads == (2, 1, 1, 2) and conv.strides == (2, 2) and not conv.relu


def test_maxpool_shares_params_and_add_has_own():
    qg, _ = compile_model(qnets.conv_maxpool(), qnets.inputs((1, 3, 14, 14), 4))
    mp = next(o for o in qg.ops if isinstance(o, QMaxPool))
    ti, to = qg.tensors[mp.inp], qg.tensors[mp.out]
    assert (ti.scale, ti.zero_point) == (to.scale, to.zero_point)
    qg, _ = compile_model(qnets.residual_add(), qnets.inputs((1, 4, 8, 8), 4))
    add = next(o for o in qg.ops if isinstance(o, QAdd))
    sa, sb, so = (qg.tensors[n].scale for n in (add.a, add.b, add.out))
    assert sb / sa > 3                                   # genuinely different input scales
    assert ((add.mult_a, add.shift_a), (add.mult_b, add.shift_b), (add.mult_out, add.shift_out)) == \
        arith.add_multipliers(sa, sb, so)
    assert add.relu and add.zp_out == -128               # post-relu range starts at 0


def test_huge_multiplier_refused_with_node_name():
    model = qnets.conv_stride2()
    g = run_passes(import_onnx(model))
    stats = calibrate(model, qnets.inputs((1, 4, 15, 13), 2), calibration_names(g))
    stats["y"] = (0.0, 1e-30)
    with pytest.raises(CompileError, match=r"node 'conv': requantization multiplier .* unsupported"):
        quantize_graph(g, stats)
    del stats["y"]
    with pytest.raises(CompileError, match=r"no calibration range for tensor 'y'"):
        quantize_graph(g, stats)


def test_standalone_batchnorm_and_constant_add_become_diagonal_convs():
    rng = np.random.default_rng(0)
    nodes = [qnets.bn_node("x", "b", "bn", "lonely_bn"), helper.make_node("Add", ["b", "c"], ["y"], name="cadd")]
    m = qnets.make_model(nodes, {**qnets.bn_params(rng, 3, "bn"), "c": np.ones((1, 3, 1, 1), np.float32)},
                         (1, 3, 4, 4), "y", None)
    qg, g = compile_model(m, qnets.inputs((1, 3, 4, 4), 2))
    assert [n.op for n in g.nodes] == ["Conv"] and g.nodes[0].name == "lonely_bn"


def test_broadcast_add_refused():
    nodes = [helper.make_node("Add", ["x", "c"], ["y"], name="badd")]
    m = qnets.make_model(nodes, {"c": np.ones((1, 1, 4, 1), np.float32)}, (1, 3, 4, 4), "y", None)
    with pytest.raises(CompileError, match=r"'badd' \(Add\) reads 'c', which is not an int8 device tensor"):
        compile_model(m, qnets.inputs((1, 3, 4, 4), 2))


def test_qgraph_contract_checks():
    with pytest.raises(CompileError, match=r"zero_point 200 outside"):
        QTensor("t", (1, 1, 1, 1), 0.1, 200)
    with pytest.raises(CompileError, match=r"scale must be finite and > 0, got 0.0"):
        QTensor("t", (1, 1, 1, 1), 0.0, 0)
    with pytest.raises(CompileError, match=r"bias must be int32 \(2,\)"):
        QConv("c", "x", "y", np.zeros((2, 1, 1, 1), np.int8), np.zeros(2, np.int64),
              np.zeros(2, np.int32), np.zeros(2, np.int32), (1, 1), (0, 0, 0, 0), False, 0, 0)
    qg = QGraph({"x": QTensor("x", (1, 1, 2, 2), 1.0, 0)}, [
        QMaxPool("p", "q", "y", (2, 2), (1, 1), (0, 0, 0, 0))], ["x"], ["y"])
    with pytest.raises(CompileError, match=r"'p' reads 'q' before it is produced"):
        qg.validate()


def test_resnet50_qgraph_ranges():
    from tpucompile import realdata
    qg, _ = compile_model(realdata.resnet50_model(0), realdata.calibration_images(2))
    for op in qg.ops:
        if isinstance(op, QConv):
            assert np.all((op.mult == 0) | (op.mult >= 2 ** 30)) and np.all(op.shift >= -31)
            assert np.all(op.shift <= 30)
    assert qg.aliases == {"r174": "r174__nchw"} and qg.outputs == ["r174__nchw"]
    assert qg.host_ops[0]["op"] == "Softmax" and qg.host_ops[0]["shape"] == (1, 1000)


def test_every_refused_node_after_the_passes_is_reported_at_once():
    """Two nodes the quantizer refuses (a fractional Resize, a Mul broadcasting over H, W) come in
    one message; nodes reading a refused node's output are not tried (no follow-on errors)."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             n("Resize", ["c", "roi", "sc"], ["r"], name="rz_frac", mode="nearest"),
             n("Conv", ["x", "w1"], ["a"], name="spatial", pads=[1, 1, 1, 1]),
             n("Mul", ["c", "a"], ["m"], name="mul_hw"),
             n("Add", ["m", "m"], ["y"], name="add_after")]
    inits = {"w": qnets.conv_w(rng, 4, 3, 3), "w1": qnets.conv_w(rng, 1, 3, 3), "roi": np.zeros(0, np.float32),
             "sc": np.array([1, 1, 1.5, 1.5], np.float32)}
    m = qnets.make_model(nodes, inits, (1, 3, 6, 6), "y", None)
    m.graph.output.append(helper.make_tensor_value_info("r", 1, None))
    with pytest.raises(CompileError) as e:
        compile_model(m, qnets.inputs((1, 3, 6, 6), 1))
    lines = str(e.value).splitlines()
    assert lines[0] == "2 nodes have no int8 device mapping or are refused (by op: Resize x1, Mul x1):"
    assert lines[1].startswith("  node 'rz_frac' (Resize): axis 2 6 -> 9") and "mul_hw" in lines[2]
    assert lines[3].startswith("supported after passes: Conv, ") and len(lines) == 4
