"""cosim (SimPy only, small config) on graphs whose shape used to break the flow itself."""
from __future__ import annotations

import pytest

from tests import qnets
from tpusim.flow.cosim import run


@pytest.mark.parametrize("name, build", [
    ("gemm_output", lambda: qnets.gemm_head(softmax=False)),   # the device output is 'logits__nchw'
    ("same_pad_dropout", qnets.same_pad_dropout),
    ("reshape_gemm", lambda: qnets.flatten_gemm(reshape=True)),
    ("fire_odd_maxpool", lambda: qnets.fire(e1=5, e3=6, pool=True)),    # Concat with gap lanes
    ("fire_concat_output", lambda: qnets.fire(e1=13, e3=6, head=False)),  # ... as the graph output
])
def test_cosim_without_rtl_passes(name, build, tmp_path):
    model = build()
    xs = qnets.inputs(qnets.in_shape(model), 4, seed=3)
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name=name)
    assert v.passed and v.accuracy["cosine"] > 0.98, (v.accuracy, v.notes)
