"""FP32 reference: onnxruntime on the float model, and int8-vs-fp32 comparison metrics."""
from __future__ import annotations

import numpy as np
import onnx

from tpucompile.quantize.calibrate import session_feed, session_with_outputs

__all__ = ["run_fp32", "compare", "error_metrics", "layer_accuracy", "LAYER_COLUMNS"]


def run_fp32(model: onnx.ModelProto, x: np.ndarray, names=None) -> dict:
    """Run `model` (onnxruntime CPU, float32) on x (float32 NCHW; a dict of one array per
    run-time input name for a model with several); return {name: array} for
    `names` (any intermediate ONNX tensor names; default: the model outputs)."""
    names = list(names) if names else [o.name for o in model.graph.output]
    sess = session_with_outputs(model, names)
    vals = sess.run(names, session_feed(sess, model, x))
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


def error_metrics(test: np.ndarray, ref: np.ndarray) -> dict:
    """A dequantized int8 tensor against its FP32 reference (any shapes of one size): ``max_abs``,
    ``sqnr_db`` = 10 log10(sum f^2 / sum (q - f)^2) (inf if equal, -inf for an all-zero reference
    that differs), and ``cosine``, or ``constant_fp32`` True instead when the reference is constant
    (peak-to-peak <= 1e-6 of its magnitude: a cosine would say nothing)."""
    a = np.asarray(test, np.float64).reshape(-1)
    b = np.asarray(ref, np.float64).reshape(-1)
    err, sig = float(np.sum((a - b) ** 2)), float(np.sum(b ** 2))
    out = {"max_abs": float(np.abs(a - b).max(initial=0.0)),
           "sqnr_db": float("inf") if err == 0 else (float(10 * np.log10(sig / err)) if sig > 0 else float("-inf"))}
    if np.ptp(b) <= 1e-6 * max(1.0, float(np.abs(b).max(initial=0.0))):
        return {**out, "constant_fp32": True}
    out["cosine"] = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
    return out


#: columns of ``layer_accuracy`` rows (the cosim's layers_accuracy.csv)
LAYER_COLUMNS = ("index", "layer", "op", "onnx_tensor", "shape", "scale", "zero_point", "sqnr_db", "cosine",
                 "max_abs_error", "fp32_min", "fp32_max", "saturated_fraction")


def _onnx_names(qg, model: onnx.ModelProto) -> dict:
    """device tensor -> an ONNX tensor name holding the same values (itself, or an alias of it)."""
    names = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    out = {t: t for t in qg.tensors if t in names}
    for a in qg.aliases:
        if a in names:
            out.setdefault(qg.resolve(a), a)
    return out


def _concat_parts(qg) -> dict:
    """device tensor -> (Concat output, first channel, end channel) for every part of a channel
    Concat of the QGraph (``parts`` / ``offsets`` / ``counts``: ops/concat.py ``QConcat``)."""
    return {p: (op.out, int(o), int(o) + int(c)) for op in qg.ops if hasattr(op, "parts") and hasattr(op, "offsets")
            for p, o, c in zip(op.parts, op.offsets, op.counts)}


def _enclosing(t: str, parts: dict) -> list:
    """The Concat outputs that hold device tensor ``t`` as a part, innermost first."""
    out = []
    while t in parts and parts[t][0] not in out:
        t = parts[t][0]
        out.append(t)
    return out


def _reference(t: str, onnx_of: dict, parts: dict, ref: dict):
    """(FP32 array, its name) holding the values of device tensor ``t``, or (None, None). A
    Concat part is its channel slice of the Concat's reference (``cat[:, a:b]``) when that
    differs from its own ONNX tensor: a Relu after the Concat that fuse_relu moved into the
    parts' producers (they then hold the clamped values, their ONNX tensors the unclamped)."""
    own = (np.asarray(ref[onnx_of[t]], np.float64), onnx_of[t]) if t in onnx_of else (None, None)
    if t not in parts:
        return own
    cat, a, b = parts[t]
    whole, name = _reference(cat, onnx_of, parts, ref)
    if whole is None or whole.ndim < 2 or whole.shape[1] < b:
        return own
    sl = whole[:, a:b]
    if own[0] is not None and own[0].shape == sl.shape and np.array_equal(own[0], sl):
        return own
    return sl, f"{name}[:, {a}:{b}]"


def layer_accuracy(qg, golden_env: dict, model: onnx.ModelProto, x: np.ndarray) -> list[dict]:
    """Per layer, the int8 golden output (dequantized: ``(q - zero_point) * scale``) against the
    FP32 tensor onnxruntime computes for the same ONNX name (a Concat part: see below) on input
    ``x`` (float32 NCHW).

    qg: the QGraph; golden_env: ``golden.run_golden``'s {device tensor: int8 NCHW}; model: the
    float ONNX model. Returns one dict per device op whose output has an ONNX name, in graph
    order, with LAYER_COLUMNS: ``sqnr_db``, ``cosine`` (None for a constant FP32 tensor) and
    ``max_abs_error`` of ``error_metrics``, ``saturated_fraction`` = share of int8 codes at
    127, or -128 unless that is the zero point (clipping by the calibrated range shows here). A
    part of a Concat compares with its channels of the Concat's FP32 tensor where its own ONNX
    tensor holds other values (a Relu after the Concat moved before it by fuse_relu: the part
    holds the clamped values); ``onnx_tensor`` then names the slice, e.g. ``cat[:, 0:4]``. The
    scores of a run-time attention mask (a QActMatMul with ``key_bias``: -128 for a masked key,
    the FP32 tensor before the mask) compare on their attended keys (channels) only, and are
    left out when every key is masked (an all-zero mask). Ops
    without an FP32 tensor holding their values (a Gemm's internal (1, N, 1, 1) view) are left
    out. Raises ValueError if a tensor's sizes disagree.
    """
    onnx_of, parts = _onnx_names(qg, model), _concat_parts(qg)
    wanted = {onnx_of[t] for op in qg.ops for t in (op.out, *_enclosing(op.out, parts)) if t in onnx_of}
    ref = run_fp32(model, x, names=sorted(wanted))
    rows = []
    for i, op in enumerate(qg.ops):
        f, fname = _reference(op.out, onnx_of, parts, ref)
        if f is None:
            continue
        t, q = qg.tensors[op.out], np.asarray(golden_env[op.out])
        if f.size != q.size:
            raise ValueError(f"layer {op.name!r}: FP32 {fname!r} has {f.size} values, int8 {q.size}")
        d = (q.astype(np.float64) - t.zero_point) * t.scale
        if getattr(op, "key_bias", ""):       # masked scores: compared on the attended keys only
            keep = np.asarray(golden_env[op.key_bias]).reshape(-1) == 0
            if not keep.any():                # an all-zero mask: no attended key to compare
                continue
            d, f = d.reshape(keep.size, -1)[keep], f.reshape(keep.size, -1)[keep]
        m = error_metrics(d, f)
        rows.append({"index": i, "layer": op.name, "op": type(op).__name__, "onnx_tensor": fname,
                     "shape": "x".join(str(int(s)) for s in t.shape), "scale": float(t.scale),
                     "zero_point": int(t.zero_point), "sqnr_db": m["sqnr_db"], "cosine": m.get("cosine"),
                     "max_abs_error": m["max_abs"], "fp32_min": float(f.min()), "fp32_max": float(f.max()),
                     "saturated_fraction": float(((q == 127) | ((q == -128) & (t.zero_point != -128))).mean())})
    return rows
