"""What a SimPy cycle count depends on (README, `make bench-zoo` against `make cosim`): the
program only, not the input values; the calibration data changes the program only through the
quantization parameters, and of its structure only the number of LOAD_QREG (the back end's
quant-register cache, ``emit.QregAlloc``, loads a (multiplier, shift, zero point) not already
held, so two tensors whose calibrated parameters coincide share one load)."""
from __future__ import annotations

import numpy as np

from tpucompile import driver, golden
from tpusim.arch.config import load_config
from tpusim.arch.host_transforms import host_feeds
from tpusim.arch.isa import decode_program
from tpusim.sim import run_binary


def test_cycles_do_not_depend_on_the_input_values():
    """One binary of the reduced ResNet-50 on 'small': the test photograph, zeros and int8 noise
    take the same number of cycles (the outputs differ)."""
    cfg = load_config("small")
    m, x, calib = driver.load_model_and_data("resnet50-reduced", 2)
    res = driver.compile_onnx(m, cfg, calib)
    xq = golden.quantize_input(res.qgraph, x)
    inputs = {"photo": xq, "zeros": np.zeros_like(xq),
              "noise": np.random.default_rng(7).integers(-128, 128, xq.shape).astype(xq.dtype)}
    runs = {k: run_binary(res.binary, cfg, host_feeds(res.binary, v)) for k, v in inputs.items()}
    assert len({r.cycles for r in runs.values()}) == 1, {k: r.cycles for k, r in runs.items()}
    outs = [next(iter(r.outputs.values())) for r in runs.values()]
    assert not np.array_equal(outs[0], outs[1])


def test_calibration_changes_only_the_qreg_loads():
    """The reduced ResNet-50 calibrated on 1 and on 3 photographs: the same instructions in the
    same order once the LOAD_QREG are left out (their number and the field values may differ)."""
    cfg = load_config("small")
    progs = {}
    for n in (1, 3):
        m, _, calib = driver.load_model_and_data("resnet50-reduced", n)
        progs[n] = decode_program(driver.compile_onnx(m, cfg, calib).binary.code)
    ops = {n: [i.op for i in p if i.op != "LOAD_QREG"] for n, p in progs.items()}
    assert ops[1] == ops[3]
    assert [i.args for i in progs[1] if i.op == "LOAD_QREG"] != [i.args for i in progs[3] if i.op == "LOAD_QREG"]
