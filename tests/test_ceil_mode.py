"""MaxPool / AveragePool ceil_mode=1 (torch's ceil_mode=True): extra bottom / right padding
(``ops.common.resolve_ceil_mode``) that a max pool fills with its lowest value and an average
pool never counts (count_include_pad 0 or 1, as onnxruntime). SimPy on 'small', golden = SimPy
on every layer, the output within about 2 LSB of onnxruntime (calibrated on the test image:
no clipping), on shapes where ceil_mode adds a row and a column and where it changes nothing."""
from __future__ import annotations

import onnxruntime as ort
import pytest

from tests import qnets
from tpucompile.frontend.onnx_import import import_onnx
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

#: (op, count_include_pad, input (H, W), pads, kernel = stride, extra (rows, columns) ceil_mode
#: adds), kernel 3 stride 2 unless given. An average pool's extra column (a divisor changing in
#: the last output column, off a DDR granule on 'small': its run is widened, ``pool._store_regions``)
CASES = [("AveragePool", 1, (8, 8), (0, 0, 0, 0), None, (1, 1)), ("AveragePool", 0, (8, 9), (1, 1, 1, 1), None, (1, 0)),
         ("MaxPool", 0, (8, 8), (0, 0, 0, 0), None, (1, 1)), ("MaxPool", 0, (7, 7), (0, 0, 0, 0), None, (0, 0)),
         ("MaxPool", 0, (8, 9), (1, 1, 1, 1), None, (1, 0)), ("MaxPool", 0, (9, 10), (1, 1, 1, 1), None, (0, 1)),
         ("AveragePool", 0, (8, 9), (0, 0, 0, 0), None, (1, 0)), ("AveragePool", 0, (7, 7), (0, 0, 0, 0), None, (0, 0)),
         ("AveragePool", 0, (7, 10), (1, 0, 0, 1), None, (1, 0)),
         ("AveragePool", 1, (8, 9), (0, 0, 0, 0), None, (1, 0)), ("AveragePool", 1, (7, 7), (0, 0, 0, 0), None, (0, 0)),
         ("AveragePool", 1, (8, 9), (1, 1, 1, 1), None, (1, 0)), ("AveragePool", 1, (7, 10), (1, 0, 0, 1), None, (1, 0))]


@pytest.mark.parametrize("op, cip, hw, pads, k, extra", CASES,
                         ids=[f"{o}-cip{c}-{h}x{w}-p{''.join(map(str, p))}-k{k or 3}" for o, c, (h, w), p, k, _ in CASES])
def test_ceil_mode_pool_matches_onnxruntime(op, cip, hw, pads, k, extra, tmp_path):
    m = qnets.ceil_pool(op, count_include_pad=cip, hw=hw, pads=pads, **({"k": k, "s": k} if k else {}))
    g = import_onnx(m)
    pool = next(n for n in g.nodes if n.name == "pool")
    assert pool.attrs["ceil_extra"] == extra and "ceil_mode" not in pool.attrs, pool.attrs
    xs = qnets.inputs(qnets.in_shape(m), 1, seed=3)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"x": xs[0]})[0].shape
    assert g.tensors["y"].shape == want
    v = run(m, "small", tmp_path, rtl=False, data=(xs[0], xs[:1]), name="p")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["max_lsb"] <= 2.5 and v.accuracy["cosine"] > 0.9995, v.accuracy


def test_window_starting_in_the_end_pads_is_refused_naming_the_node():
    """k 2 s 2, end pads 1 on 4 x 6: onnxruntime drops the third window (it would start in the end
    pads: output 2 x 3), ONNX shape inference keeps it (3 x 4)."""
    m = qnets.ceil_pool("MaxPool", hw=(4, 6), pads=(0, 0, 1, 1), k=2, s=2)
    with pytest.raises(CompileError, match=r"node 'pool' \(MaxPool\): ceil_mode=1 output 'y' is \(2, 3\) \(ONNX spec, "
                                           r"onnxruntime: .*\) but \(3, 4\) after ONNX shape inference"):
        import_onnx(m)


def test_invalid_ceil_mode_is_refused_naming_the_node():
    m = qnets.ceil_pool("MaxPool")
    next(a for a in m.graph.node[1].attribute if a.name == "ceil_mode").i = 2
    with pytest.raises(CompileError, match=r"node 'pool' \(MaxPool\): attribute ceil_mode=2 invalid \(0 or 1\)"):
        import_onnx(m)


def test_divisor_of_partial_windows_excludes_the_extra_pad():
    """count_include_pad=1, no pads, 8 x 9, k 3 s 2: the last row of windows holds 2 input rows
    (onnxruntime divides by 6, not 9): the quantizer's regions carry those divisors."""
    from tpucompile.ops.common import requant_multiplier
    from tpucompile.quantize import compile_model
    m = qnets.ceil_pool("AveragePool", count_include_pad=1, hw=(8, 9))
    qg, _ = compile_model(m, qnets.inputs(qnets.in_shape(m), 1, seed=3))
    op = next(o for o in qg.ops if o.name == "pool")
    ratio = qg.tensors[op.inp].scale / qg.tensors[op.out].scale
    assert [r[:4] for r in op.regions] == [(0, 3, 0, 4), (3, 4, 0, 4)], op.regions
    assert [r[4:] for r in op.regions] == [requant_multiplier("pool", ratio / n) for n in (9, 6)], op.regions


@pytest.mark.rtl
@pytest.mark.parametrize("name", ["ceil_cip1", "pads_cip0"])
def test_average_pool_runs_off_the_granule_three_way_small_rtl(name, tmp_path):
    """The widened column runs (``pool._store_regions``: a run stored from its DDR granule, the
    extra columns overwritten by the run to its left) on the RTL: golden = SimPy = RTL."""
    from tests.test_cosim_rtl import _check
    m = (qnets.ceil_pool("AveragePool", count_include_pad=1, hw=(8, 8)) if name == "ceil_cip1"
         else qnets.avgpool_pads())
    xs = qnets.inputs(qnets.in_shape(m), 2, seed=3)
    _check(run(m, "small", tmp_path, rtl=True, data=(xs[0], xs), name=name))
