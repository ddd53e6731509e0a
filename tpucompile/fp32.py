"""FP32 reference: onnxruntime on the float model, and int8-vs-fp32 comparison metrics."""
from __future__ import annotations

import numpy as np
import onnx

from tpucompile.quantize.calibrate import session_input, session_with_outputs

__all__ = ["run_fp32", "compare"]


def run_fp32(model: onnx.ModelProto, x: np.ndarray, names=None) -> dict:
    """Run `model` (onnxruntime CPU, float32) on x (float32 NCHW); return {name: array} for
    `names` (any intermediate ONNX tensor names; default: the model outputs)."""
    names = list(names) if names else [o.name for o in model.graph.output]
    sess = session_with_outputs(model, names)
    vals = sess.run(names, {session_input(sess, model).name: np.asarray(x, np.float32)})
    return dict(zip(names, vals))


def compare(test: np.ndarray, ref: np.ndarray) -> dict:
    """Compare logits (any shape, flattened): cosine similarity, max |difference|, top-1 match
    (bool), top-5 overlap (fraction of ref's 5 best classes among test's 5 best) and whether
    ref's top-1 is within test's top-5."""
    a = np.asarray(test, np.float64).ravel()
    b = np.asarray(ref, np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"compare: shapes differ {a.shape} vs {b.shape}")
    den = np.linalg.norm(a) * np.linalg.norm(b)
    cos = float(a @ b / den) if den > 0 else float(np.array_equal(a, b))
    k = min(5, a.size)
    ta, tb = np.argsort(-a, kind="stable")[:k], np.argsort(-b, kind="stable")[:k]
    return {"cosine": cos, "max_abs": float(np.abs(a - b).max()), "top1": bool(ta[0] == tb[0]),
            "top5_overlap": len(set(ta) & set(tb)) / k, "top1_in_top5": bool(tb[0] in set(ta))}
