"""Calibration: per-tensor float min/max of chosen tensors, measured with onnxruntime.

The original ONNX model is run with the requested intermediate tensors added as graph outputs
(the compiler's passes keep ONNX tensor names, see ``ir.Tensor.onnx_name``).
"""
from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tpucompile.frontend.onnx_import import runtime_inputs
from tpucompile.ops.common import activation_params, one_line
from tpusim.arch.errors import CompileError

__all__ = ["calibrate", "clip_input_outliers", "check_host_memory", "session_input", "session_feed", "session_with_outputs", "CALIB_METHODS",
           "DEFAULT_PERCENTILE", "OUTLIER_INPUT_FACTOR", "OUTLIER_INPUT_SHARE",
           "OUTLIER_INPUT_MIN"]


#: initializers of at least this many bytes reach onnxruntime as arrays, not serialized
EXTERNAL_MIN_BYTES = 1 << 16


def _copy_fields(dst, src, skip: tuple) -> None:
    """Copy every set field of protobuf message ``src`` into ``dst`` except those in ``skip``."""
    for fd, val in src.ListFields():
        if fd.name in skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(val)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(val)
        else:
            setattr(dst, fd.name, val)


def _nbytes(t: TensorProto) -> int:
    """The size of initializer ``t``'s values from its shape and type (0 for strings), without
    serializing it."""
    if t.data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    return int(np.prod(t.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize


def _array_view(t) -> np.ndarray:
    """The initializer's values: a read-only view of its raw little-endian bytes when it has
    them, else ``numpy_helper.to_array``. ``raw_data`` is read once: each read of a protobuf bytes
    field is a fresh copy (VGG-19: 548 MB, 0.3 s a read)."""
    if t.HasField("raw_data") and t.data_type in (TensorProto.FLOAT, TensorProto.INT8, TensorProto.UINT8,
                                                   TensorProto.INT32, TensorProto.INT64, TensorProto.DOUBLE) \
            and sys.byteorder == "little":
        return np.frombuffer(t.raw_data, helper.tensor_dtype_to_np_dtype(t.data_type)).reshape(tuple(t.dims))
    return numpy_helper.to_array(t)


def _without_big_weights(model: onnx.ModelProto, weights: dict | None = None) -> tuple[onnx.ModelProto, list, list]:
    """``model`` with its outputs removed and every initializer of EXTERNAL_MIN_BYTES or more
    (with inline data) replaced by an external-data stub, plus the stubs' names and arrays: a
    session of it gets the arrays with ``SessionOptions.add_external_initializers``, so the
    weights are neither copied into a second ModelProto nor serialized and parsed again (VGG-19:
    548 MB, about 5 s of a compile). ``weights``: {name: read-only array} of ``model``'s
    initializers already read (``import_onnx`` fills it), used instead of reading them again."""
    weights = weights or {}
    m = onnx.ModelProto()
    _copy_fields(m, model, ("graph",))
    _copy_fields(m.graph, model.graph, ("initializer", "output"))
    names, arrays = [], []
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL and _nbytes(t) >= EXTERNAL_MIN_BYTES:
            stub = m.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims,
                                           data_location=TensorProto.EXTERNAL)
            stub.external_data.add(key="location", value="tpusim-in-memory")
            names.append(t.name)
            arrays.append(weights[t.name] if t.name in weights else _array_view(t))
        else:
            m.graph.initializer.append(t)
    return m, names, arrays


def session_with_outputs(model: onnx.ModelProto, names, weights: dict | None = None) -> ort.InferenceSession:
    """An onnxruntime CPU session of `model` whose outputs are exactly `names` (float32); its
    large weights are handed over as arrays (``_without_big_weights``, ``weights`` the arrays
    already read)."""
    m, ext_names, ext_arrays = _without_big_weights(model, weights)
    for n in names:
        m.graph.output.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    # the worker threads sleep between parallel sections instead of spinning: the same results
    # (measured bit-identical), about 0.2 s less CPU for VGG-19's 4 calibration runs, 0.4 s for
    # bert-base's (845 outputs), and no cycles burnt on a machine shared with other jobs
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # weight pre-packing stays on: without it VGG-19's session starts in half the time (0.9 ->
    # 0.4 s) but its Gemm / Conv results differ in the last bits, and with them the calibrated
    # ranges (measured: vgg19's and zfnet512's binaries changed)
    try:
        if ext_names:
            opts.add_external_initializers(ext_names, [ort.OrtValue.ortvalue_from_numpy(a) for a in ext_arrays])
        return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's Fail / InvalidArgument / NotImplemented
        raise CompileError(f"onnxruntime (the FP32 reference and calibrator) cannot run the model: "
                           f"{one_line(e)[:600]}") from None


def session_input(sess: ort.InferenceSession, model: onnx.ModelProto):
    """The onnxruntime input meta (name, shape) of the model's one run-time input: the first
    graph input that is not an initializer (IR-3 models also list their weights as inputs)."""
    names = [vi.name for vi in runtime_inputs(model)]
    if not names:
        raise CompileError("the model has no graph input that is not an initializer")
    return next(i for i in sess.get_inputs() if i.name == names[0])


def session_feed(sess: ort.InferenceSession, model: onnx.ModelProto, x) -> dict:
    """onnxruntime's feed {input name: float32 array} for ``x``: one array for a model with one
    run-time input, or a dict of one array per run-time input name (a model with several)."""
    if isinstance(x, dict):
        return {k: np.asarray(v, np.float32) for k, v in x.items()}
    return {session_input(sess, model).name: np.asarray(x, np.float32)}


#: ``calibrate``'s range methods (``--calib-method``)
CALIB_METHODS = ("minmax", "percentile", "mse", "entropy")
#: values of each tensor kept per calibration sample for ``mse`` / ``entropy`` (seeded subsample)
SAMPLE_PER_IMAGE = 1 << 14
#: ``percentile``'s default: the range is the median over the samples of their 0.01 % and 99.99 %
#: points
DEFAULT_PERCENTILE = 99.99


#: share of the machine's available memory calibration may plan to use
HOST_MEMORY_SHARE = 0.6
#: bytes per float32 activation byte in all: the calibration samples (4 of the input's size by
#: default), onnxruntime's working copies and numpy's. Measured: a 1x4096x512x512 input with a
#: 1x1 Conv peaked at 24 GB resident for 4 GiB of float32 tensors
HOST_MEMORY_FACTOR = 6


def available_memory_bytes() -> int:
    """MemAvailable of /proc/meminfo (psutil's figure elsewhere)."""
    try:
        import psutil
        return int(psutil.virtual_memory().available)
    except Exception:
        return 1 << 62


def check_host_memory(graph, names, available: int | None = None) -> None:
    """CompileError, before anything is allocated, if running the model with every tensor of
    ``names`` (ONNX names) as an output would need more than HOST_MEMORY_SHARE of the available
    memory: float32 values times HOST_MEMORY_FACTOR. Names the largest tensor and the sizes."""
    shapes = {(t.onnx_name or t.name): t.shape for t in graph.tensors.values() if not t.is_const}
    sizes = {n: int(np.prod(shapes[n], dtype=object)) * 4 for n in dict.fromkeys(names) if n in shapes}
    if not sizes:
        return
    need = HOST_MEMORY_FACTOR * sum(sizes.values())
    avail = available_memory_bytes() if available is None else available
    if need > HOST_MEMORY_SHARE * avail:
        big = max(sizes, key=sizes.get)
        gib = 1 << 30
        raise CompileError(f"calibration would need about {need / gib:.1f} GiB of host memory ({len(sizes)} "
                           f"float32 activations, the largest {big!r} of shape {tuple(shapes[big])}: "
                           f"{sizes[big] / gib:.2f} GiB), more than {HOST_MEMORY_SHARE:.0%} of the "
                           f"{avail / gib:.1f} GiB available; use a smaller input")


def calibrate(model: onnx.ModelProto, images, names, method: str = "minmax",
              percentile: float = DEFAULT_PERCENTILE, row_offset_free=(), weights: dict | None = None,
              notes: list | None = None) -> dict:
    """Run `model` on every image (float32 NCHW arrays) and return {name: (lo, hi)} (floats) for
    each ONNX tensor in `names`, by ``method``:

    * ``minmax``: min and max over all images;
    * ``percentile``: per image the (100 - p) and p percentiles (data points, not interpolated),
      then the median over the images: one bad image (an outlier, a saturated sensor) does not set
      the range, as it would with minmax or TensorRT's mean over batches;
    * ``mse``: the range [max(min, -t), min(max, t)] whose int8 quantize-dequantize
      (tpucompile.ops.common.activation_params, round half even) has the least mean squared error
      on a seeded sample of the tensor's values, t among 41 steps of 0.2..1 x max|x| and the
      50..99.99 % quantiles of |x| (NVIDIA pytorch-quantization's MSE calibrator does a finer
      search of the same kind); outliers (OUTLIER_FACTOR x the median of the samples' max |x|)
      left out;
    * ``entropy``: TensorRT's KL-divergence threshold (Migacz 2017) on a 2048-bin histogram of
      |x| (128 levels; 255 for a tensor without negative values), applied to both ends;
      outliers (as for mse) left out of the histogram.

    ``row_offset_free``: names (of ``names``) whose consumer cancels an offset common to each
    pixel's channels (attention scores before a Softmax over the keys:
    ``ops.softmax.softmax_score_tensors``). Their values carry such an offset that moves from one input to
    the next (bert-base's last layers: a head's scores in [-8.6, -4.6] for one token sequence,
    [3.3, 8.3] for another, each row spread over +-1 around its own mean), so the range of a few
    samples misses the next one's: each side of the method's range is widened by the spread of
    the samples' mid-ranges ``max - min of (min_s + max_s) / 2`` (``widen_by_offset_spread``;
    nothing with one sample).

    Before any method, each sample's isolated outliers are clipped (``clip_input_outliers``, one
    warning per input on stderr, and in ``notes`` if given: the verdict's): a handful of values far beyond the rest of their sample would
    otherwise set the range of every tensor after them, with every method when there is one
    sample and with minmax always.

    ``weights``: {initializer name: read-only array} of ``model`` already read (``import_onnx``).

    Raises CompileError if `images` is empty or ``method`` is unknown, or if onnxruntime's FP32
    run of a sample overflows (an infinite value in a calibrated tensor)."""
    names = list(dict.fromkeys(names))
    if method not in CALIB_METHODS:
        raise CompileError(f"calibration method {method!r} unknown; known: {', '.join(CALIB_METHODS)}")
    if not 50.0 < percentile <= 100.0:
        raise CompileError(f"calibration percentile must be in (50, 100], got {percentile}")
    if len(images) == 0:
        raise CompileError("calibration needs at least one image, got 0")
    sess = session_with_outputs(model, names, weights)
    if any(isinstance(x, dict) for x in images):
        metas = {vi.name: i for vi in runtime_inputs(model) for i in sess.get_inputs() if i.name == vi.name}
        feeds = [_check_feed(i, x, metas) for i, x in enumerate(images)]
    else:
        meta = session_input(sess, model)
        feeds = [{meta.name: _check_image(i, x, meta.name, meta.shape)} for i, x in enumerate(images)]
    feeds = clip_input_outliers(feeds, notes)
    lo = {n: np.inf for n in names}
    hi = {n: -np.inf for n in names}
    pct = {n: [] for n in names}
    samples = {n: [] for n in names}
    peaks = {n: [] for n in names}                  # per sample max |x| (mse, entropy: outliers)
    rng = np.random.default_rng(0)
    offset_free = set(row_offset_free)
    mids = {n: [] for n in names if n in offset_free}     # per sample (min + max) / 2
    for i, feed in enumerate(feeds):
        for n, v in zip(names, sess.run(names, feed)):
            v_lo, v_hi = float(v.min()), float(v.max())
            if not (np.isfinite(v_lo) and np.isfinite(v_hi)) and np.isinf(v).any():
                raise _overflow_error(i, n, v, feed)     # NaN alone: an op undefined there names itself
            lo[n] = min(lo[n], v_lo)
            hi[n] = max(hi[n], v_hi)
            if n in mids:
                mids[n].append((v_lo + v_hi) / 2)
            if method == "minmax":
                continue
            v = np.asarray(v, np.float64).ravel()
            if method == "percentile":
                pct[n].append((np.percentile(v, 100.0 - percentile, method="higher"),
                               np.percentile(v, percentile, method="lower")))
            else:
                samples[n].append(v if v.size <= SAMPLE_PER_IMAGE else rng.choice(v, SAMPLE_PER_IMAGE, replace=False))
                peaks[n].append(float(np.abs(v).max(initial=0.0)))
    if method == "minmax":
        out = {n: (lo[n], hi[n]) for n in names}
    elif method == "percentile":
        out = {n: (float(np.median([p[0] for p in pct[n]])), float(np.median([p[1] for p in pct[n]]))) for n in names}
    else:
        search = _mse_range if method == "mse" else _entropy_range
        out = {n: search(np.concatenate(samples[n]), lo[n], hi[n], _outlier_cap(peaks[n])) for n in names}
    for n, m in mids.items():
        out[n] = widen_by_offset_spread(out[n], m)
    return out


#: a calibration sample's value is an isolated outlier when its magnitude is more than
#: OUTLIER_INPUT_FACTOR times the sample's reference magnitude: its (K + 1)-th largest |x|, K =
#: the most outliers a sample may have, OUTLIER_INPUT_SHARE of its values but at least
#: OUTLIER_INPUT_MIN (a 16x16 image's 768 values: 4). Kept, such a value would leave all other
#: values but K within one int8 step of the tensor's range (255 steps span it): every layer after
#: it reads zeros. Clipped, they keep their resolution. Data whose largest values lie within 256x
#: of that reference (photographs, noise, embeddings: every built-in model's samples) is untouched
OUTLIER_INPUT_FACTOR = 256.0
OUTLIER_INPUT_SHARE = 0.001
OUTLIER_INPUT_MIN = 4


def _sample_outliers(a: np.ndarray):
    """(outlier count, largest outlier, (reference magnitude, K), clipped array) of one
    calibration array ``a``, or None when it has no isolated outlier, or too few values to tell
    (at most OUTLIER_INPUT_MIN), or a reference of 0 (a sparse array, where a large value is not
    known to be an outlier)."""
    mag = np.abs(a).ravel()
    k = max(OUTLIER_INPUT_MIN, int(OUTLIER_INPUT_SHARE * mag.size))
    if mag.size <= k:
        return None
    peak = float(mag.max())
    ref = float(np.partition(mag, mag.size - 1 - k)[mag.size - 1 - k])
    cut = OUTLIER_INPUT_FACTOR * ref
    if not (ref > 0.0 and peak > cut):
        return None
    far = np.abs(a) > cut
    kept = a[~far]
    return (int(far.sum()), float(a.ravel()[int(np.argmax(mag))]), (ref, k),
            np.clip(a, kept.min(), kept.max()).astype(a.dtype))


def clip_input_outliers(feeds: list[dict], notes: list | None = None) -> list[dict]:
    """The calibration feeds ({input name: float32 array} per sample) with each sample's
    isolated outliers clipped to the range of that sample's other values: at most K values
    (OUTLIER_INPUT_SHARE of the sample, at least OUTLIER_INPUT_MIN) of magnitude more than
    OUTLIER_INPUT_FACTOR x the sample's (K + 1)-th largest |x| (one 1e30 in an image). Clipped
    at the input, they reach no tensor of onnxruntime's FP32 run, so no calibrated range
    downstream sees them. Prints one warning
    line per input that had any on stderr, naming the input, the count, the samples and the
    largest value, and appends its text (without "warning: ") to ``notes`` if given; so does
    ``_warn_outlier_samples`` for a sample of outsized values."""
    found = {}                      # input name -> [values, samples, largest, its sample's reference]
    out = []
    for feed in feeds:
        clipped = {}
        for name, a in feed.items():
            hit = _sample_outliers(a)
            if hit is None:
                clipped[name] = a
                continue
            count, largest, ref, clipped[name] = hit
            f = found.setdefault(name, [0, 0, largest, ref])
            f[0] += count
            f[1] += 1
            if abs(largest) > abs(f[2]):
                f[2], f[3] = largest, ref
        out.append(clipped)
    for name, (count, samples, largest, ref) in found.items():
        _warn(notes, f"calibration input {name!r}: {count} isolated outlier value{'s' if count != 1 else ''} "
              f"clipped to the range of {'their' if count != 1 else 'its'} sample's other values, in {samples} of "
              f"{len(feeds)} sample{'s' if len(feeds) != 1 else ''} (largest {largest:.6g}, more than "
              f"{OUTLIER_INPUT_FACTOR:g}x {ref[0]:.4g}, the sample's largest |x| after its top {ref[1]}); kept, "
              "it would set the range of every tensor after it")
    _warn_outlier_samples(out, notes)
    return out


def _warn(notes: list | None, text: str) -> None:
    """``text`` as a warning line on stderr, and in ``notes`` (the verdict's) if given."""
    print(f"warning: {text}", file=sys.stderr)
    if notes is not None:
        notes.append(text)


def _warn_outlier_samples(feeds: list[dict], notes: list | None = None) -> None:
    """One warning line on stderr per input whose largest |x| in one calibration sample is more
    than OUTLIER_INPUT_FACTOR x the median of the other samples' (a sample of huge values, or more
    outliers than ``clip_input_outliers`` clips): nothing is changed (the values are not known to
    be wrong), but with minmax that sample sets the range of every tensor after it."""
    if len(feeds) < 2:
        return
    for name in feeds[0]:
        peaks = [float(np.abs(f[name]).max(initial=0.0)) for f in feeds]
        i = int(np.argmax(peaks))
        rest = float(np.median(peaks[:i] + peaks[i + 1:]))
        if rest > 0.0 and peaks[i] > OUTLIER_INPUT_FACTOR * rest:
            _warn(notes, f"calibration input {name!r}: sample #{i}'s values reach {peaks[i]:.4g}, more than "
                  f"{OUTLIER_INPUT_FACTOR:g}x the other samples' (median largest |x| {rest:.4g}); with "
                  "--calib-method minmax it sets the range of every tensor after it (percentile, mse and "
                  "entropy weigh the samples): check that sample")


def _overflow_error(i: int, name: str, v: np.ndarray, feed: dict) -> CompileError:
    """The CompileError for calibration sample #i whose FP32 tensor ``name`` (values ``v``) holds
    infinities: float32 overflowed on the sample's data. (NaN alone is left to the op whose
    function is undefined on the range, which names its node: ``ops/lut.py``.)"""
    bad = int(np.isinf(v).sum())
    peak = max(float(np.abs(a).max(initial=0.0)) for a in feed.values())
    return CompileError(f"calibration sample #{i}: onnxruntime's FP32 tensor {name!r} has {bad} infinite "
                        f"values (float32 overflows on this sample, whose values reach {peak:.4g}); scale the "
                        "calibration data to the model's input range")


def widen_by_offset_spread(rng: tuple, mids: list) -> tuple:
    """``rng`` (lo, hi) widened on each side by ``max(mids) - min(mids)``: ``mids`` are the
    calibration samples' mid-ranges ``(min_s + max_s) / 2`` of a tensor whose consumer cancels a
    per-pixel offset (``calibrate``'s ``row_offset_free``). The samples show how far that offset
    moves between inputs; a next input's offset may lie as far again beyond the ones seen (with
    two samples its range is expected outside theirs one time in three on each side). One sample
    (or none): ``rng`` unchanged."""
    lo, hi = rng
    d = max(mids) - min(mids) if mids else 0.0
    return float(lo) - d, float(hi) + d


def _qdq(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    scale, zp = activation_params(lo, hi)
    return (np.clip(np.round(v / scale) + zp, -128, 127) - zp) * scale


#: ``mse`` / ``entropy``: a value more than this many times the median over the calibration
#: samples of their max |x| is an outlier: left out of the MSE and of the histogram, so one 1e30
#: in one sample cannot set a range (an isolated outlier within its sample is clipped before any
#: method: ``clip_input_outliers``)
OUTLIER_FACTOR = 16.0


def _outlier_cap(peaks: list) -> float:
    """OUTLIER_FACTOR x the median of the per-sample max |x| ``peaks`` (inf for no peaks)."""
    return OUTLIER_FACTOR * float(np.median(peaks)) if peaks else np.inf


def _mse_range(v: np.ndarray, lo: float, hi: float, cap: float = np.inf) -> tuple:
    if not (hi > lo):
        return lo, hi
    a = np.abs(v)
    v, a = v[a <= cap], a[a <= cap]                  # outliers left out of the error
    amax = float(a.max(initial=0.0))
    cands = np.unique(np.concatenate([amax * np.linspace(0.2, 1.0, 41),
                                      np.quantile(a, [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999])]))
    best = None
    for t in cands[cands > 0]:
        r = (max(lo, -t), min(hi, t))
        err = float(np.mean((_qdq(v, *r) - v) ** 2))
        if best is None or err < best[0]:
            best = (err, r)
    return (float(best[1][0]), float(best[1][1])) if best else (lo, hi)


def _expanded_levels(h: np.ndarray, levels: int) -> np.ndarray:
    """TensorRT's candidate distribution Q of histogram ``h`` (float64 counts, len(h) >= levels):
    ``h`` split into ``levels`` consecutive chunks as ``np.array_split`` splits it (the first
    len(h) % levels chunks one bin longer), each chunk's total spread evenly over its non-empty
    bins, empty bins 0. Vectorized over the chunks (was a Python loop of ``levels`` chunks per
    candidate: mobilenetv2's 66 tensors took 40 s); the counts are whole numbers in float64, so
    every sum is exact in any order and the result is bit-identical to that loop."""
    base, extra = divmod(len(h), levels)
    sizes = np.full(levels, base, np.int64)
    sizes[:extra] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    nz = h > 0
    counts = np.add.reduceat(nz.astype(np.int64), starts)
    per = np.divide(np.add.reduceat(h, starts), counts, out=np.zeros(levels), where=counts > 0)
    return np.where(nz, np.repeat(per, sizes), 0.0)


def _entropy_range(v: np.ndarray, lo: float, hi: float, cap: float = np.inf, bins: int = 2048) -> tuple:
    a = np.abs(v)
    amax = max(abs(lo), abs(hi))
    if amax > cap:                                   # outliers left out of the histogram
        a = a[a <= cap]
        amax = float(a.max(initial=0.0))
    if amax <= 0 or not np.isfinite(amax):
        return lo, hi
    levels = 255 if lo >= 0 else 128
    hist, _ = np.histogram(a, bins=bins, range=(0.0, amax))
    hist = hist.astype(np.float64)
    best = None
    for i in range(levels, bins + 1, 8):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        q = _expanded_levels(hist[:i], levels)
        ps, qs = p.sum(), q.sum()
        if ps == 0 or qs == 0:
            continue
        p, q = p / ps, q / qs
        m = p > 0
        kl = float(np.sum(p[m] * np.log(p[m] / np.maximum(q[m], 1e-12))))
        if best is None or kl < best[0]:
            best = (kl, i)
    if best is None:
        return lo, hi
    t = (best[1] + 0.5) * amax / bins
    return max(lo, -t), min(hi, t)


def _check_feed(i: int, x, metas: dict) -> dict:
    """Calibration sample #i of a model with several run-time inputs (``metas``: name ->
    onnxruntime input meta): a dict of one float32 array per input name, each checked."""
    if not isinstance(x, dict) or set(x) != set(metas):
        got = sorted(x) if isinstance(x, dict) else type(x).__name__
        raise CompileError(f"calibration sample #{i}: the model's run-time inputs are {sorted(metas)}, "
                           f"the sample gives {got}")
    return {n: _check_image(i, x[n], n, m.shape) for n, m in metas.items()}


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
