"""Calibration: per-tensor float min/max of chosen tensors, measured with onnxruntime.

The original ONNX model is run with the requested intermediate tensors added as graph outputs
(the compiler's passes keep ONNX tensor names, see ``ir.Tensor.onnx_name``).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from tpucompile.frontend.onnx_import import runtime_inputs
from tpusim.arch.errors import CompileError

__all__ = ["calibrate", "session_input", "session_with_outputs"]


def session_with_outputs(model: onnx.ModelProto, names) -> ort.InferenceSession:
    """An onnxruntime CPU session of `model` whose outputs are exactly `names` (float32)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    for n in names:
        m.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def session_input(sess: ort.InferenceSession, model: onnx.ModelProto):
    """The onnxruntime input meta (name, shape) of the model's one run-time input: the first
    graph input that is not an initializer (IR-3 models also list their weights as inputs)."""
    names = [vi.name for vi in runtime_inputs(model)]
    if not names:
        raise CompileError("the model has no graph input that is not an initializer")
    return next(i for i in sess.get_inputs() if i.name == names[0])


def calibrate(model: onnx.ModelProto, images, names) -> dict:
    """Run `model` on every image (float32 NCHW arrays) and return {name: (min, max)} (floats)
    over all images for each ONNX tensor in `names`. Raises CompileError if `images` is empty."""
    names = list(dict.fromkeys(names))
    if len(images) == 0:
        raise CompileError("calibration needs at least one image, got 0")
    sess = session_with_outputs(model, names)
    meta = session_input(sess, model)
    inp = meta.name
    images = [_check_image(i, x, inp, meta.shape) for i, x in enumerate(images)]
    lo = {n: np.inf for n in names}
    hi = {n: -np.inf for n in names}
    for x in images:
        for n, v in zip(names, sess.run(names, {inp: x})):
            lo[n] = min(lo[n], float(v.min()))
            hi[n] = max(hi[n], float(v.max()))
    return {n: (lo[n], hi[n]) for n in names}


def _check_image(i: int, x, name: str, shape) -> np.ndarray:
    """Calibration image #i as float32 of the model input's shape, with finite values."""
    try:
        a = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise CompileError(f"calibration image #{i} is not a float array ({type(x).__name__}: {e})") from None
    want = tuple(shape)
    if a.shape != want:
        raise CompileError(f"calibration image #{i} has shape {a.shape}, but model input {name!r} "
                           f"has shape {want}")
    if not np.isfinite(a).all():
        raise CompileError(f"calibration image #{i} has {int((~np.isfinite(a)).sum())} non-finite "
                           "values (NaN or infinity)")
    return a
