"""A model's run-time input and calibration data: from files (``--input``, ``--calib``), the
built-in photographs, or seeded noise.

  --input FILE.npy | FILE.npz      the test input, float32 of the graph input's shape (a missing
                                   leading batch dimension of 1 is added); an .npz holds it under
                                   the input's name, or as its only array
  --calib N                        N of the built-in photographs (1..25), 3-channel image models
  --calib DIR                      the image files of DIR (.png .jpg .jpeg .bmp .tif .tiff, sorted by
                                   name): 3 channels: resized and centre-cropped like the built-in
                                   photographs, ImageNet-normalised; 1 channel: grey, resized, in
                                   [0, 1]
  --calib FILE.npy | FILE.npz      a stack (N, *input shape without batch) or (N, *input shape), or
                                   an .npz of one array per sample (or one stack)

A model with several run-time inputs takes an .npz for each: ``--input`` one array per input name,
``--calib`` one stack (N, *input shape) per input name (N the same for all); without them it gets
seeded noise for every input.

A model whose input is not a 3-channel image of at least 16x16 gets seeded standard-normal noise
of its input shape when no file is given, with a note (accuracy is then measured on noise).
Errors (CompileError) name the option, the file and the shapes.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from tpucompile import realdata
from tpucompile.frontend.nhwc_input import input_layout, to_model_layout
from tpucompile.frontend.onnx_import import runtime_inputs
from tpucompile.quantize.calibrate import CALIB_METHODS, HOST_MEMORY_SHARE, available_memory_bytes
from tpusim.arch.errors import CompileError

__all__ = ["input_spec", "input_specs", "load_input", "load_inputs", "load_calib", "load_calibs", "model_data", "check_data_memory", "calib_arg", "add_calib_options", "load_token_arrays", "IMAGE_SUFFIXES", "MAX_CALIB"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")
#: most calibration samples taken from a file or folder (calibration runs onnxruntime on each)
MAX_CALIB = 256
NOISE_NOTE = ("the model's input is not a 3-channel image of at least 16x16 (the built-in photographs): "
              "accuracy is measured on seeded noise (--input FILE.npy and --calib DIR|FILE give it real data)")


def add_calib_options(ap) -> None:
    """``--calib N|DIR|FILE`` (read with ``calib_arg``) and ``--calib-method`` on an argparse parser."""
    ap.add_argument("--calib", default="4", metavar="N|DIR|FILE",
                    help="N built-in photographs (1..25, default 4; seeded noise for a non-image model), "
                         "a folder of images, or an .npy/.npz stack of samples")
    ap.add_argument("--calib-method", default="minmax", choices=CALIB_METHODS,
                    help="activation ranges: minmax (default), percentile (99.99), mse, entropy (KL). With "
                         "every method a calibration sample's isolated outliers (values beyond 256x its largest "
                         "|x| after its largest max(4, 0.1 %%) values, e.g. one 1e30) are first clipped to the range of "
                         "its other values, with a warning naming the input")


def calib_arg(text: str):
    """The ``--calib`` option: an int count of built-in photographs (1..25) or a path (Path);
    CompileError for a count out of range."""
    try:
        n = int(text)
    except ValueError:
        return Path(text)
    if not 1 <= n <= realdata.CALIB_IMAGES_MAX:
        raise CompileError(f"--calib must be between 1 and {realdata.CALIB_IMAGES_MAX} built-in calibration images (or a folder / "
                           f".npy/.npz file), got {n}")
    return n


def input_specs(model) -> list[tuple[str, tuple]]:
    """[(name, static shape)] of every run-time input of the model, in graph order; CompileError
    if it has none or one has a dynamic dimension."""
    ins = runtime_inputs(model)
    if not ins:
        raise CompileError("the model has no run-time input (every graph input is an initializer)")
    out = []
    for i in ins:
        dims = i.type.tensor_type.shape.dim
        shape = tuple(d.dim_value for d in dims)
        if not shape or any(s <= 0 for s in shape):
            raise CompileError(f"input {i.name!r} has a dynamic or unknown dimension "
                               f"({[d.dim_param or d.dim_value for d in dims]}); only static shapes are supported")
        out.append((i.name, shape))
    return out


def input_spec(model) -> tuple[str, tuple]:
    """(name, static shape) of the model's one run-time input; CompileError if it has none, several
    (``input_specs`` gives them all) or a dynamic dimension."""
    specs = input_specs(model)
    if len(specs) != 1:
        raise CompileError(f"the model has {len(specs)} run-time inputs {[n for n, _ in specs]}; only one is "
                           "supported here")
    return specs[0]


def _fit(a: np.ndarray, shape: tuple, what: str, layout: dict | None = None, name: str | None = None) -> np.ndarray:
    """``a`` as float32 of ``shape`` (a missing leading batch dimension of 1 added; a channels-last
    model's NHWC array transposed); CompileError starting with ``what`` for a non-numeric dtype, a
    shape that does not fit (naming the input ``name`` when given) or a non-finite value."""
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise CompileError(f"{what}: array of dtype {a.dtype}, expected real numbers")
    a = to_model_layout(a, layout)          # a channels-last model's NHWC array (frontend/nhwc_input)
    if tuple(a.shape) == tuple(shape[1:]) and shape[0] == 1:
        a = a[None]
    if tuple(a.shape) != tuple(shape):
        raise CompileError(f"{what}: array of shape {tuple(a.shape)} does not fit the input "
                           f"{'' if name is None else repr(name) + ' '}of shape {tuple(shape)}")
    if a.dtype == np.int8:
        raise CompileError(f"{what}: array of dtype int8 (a quantized input such as tpucompile's OUT.input_q.npy?); "
                           "this takes the model's float input values (run a quantized input on the binary with "
                           "`tpusim run BIN --input`)")
    if not np.isfinite(a).all():
        raise CompileError(f"{what}: {int((~np.isfinite(a)).sum())} values are NaN or infinite")
    big = int((np.abs(a) > np.finfo(np.float32).max).sum()) if a.dtype.kind == "f" else 0   # (integers fit)
    if big:
        raise CompileError(f"{what}: {big} values are outside float32's range (largest |x| "
                           f"{float(np.abs(a).max()):.4g}); the model's input is float32")
    return a.astype(np.float32)


#: the first bytes of an .npy file (numpy.lib.format) and of an .npz (a zip archive)
NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK"


def _read(path: Path, what: str):
    if not path.exists():
        raise CompileError(f"{what} {str(path)!r}: no such file or folder")
    try:
        with open(path, "rb") as f:
            head = f.read(len(NPY_MAGIC))
    except OSError as e:
        raise CompileError(f"{what} {str(path)!r}: cannot be read ({e.strerror})") from None
    if not (head.startswith(NPY_MAGIC) or head.startswith(ZIP_MAGIC)):
        # np.load would take it for a pickle and suggest allow_pickle, which is wrong advice
        raise CompileError(f"{what} {str(path)!r}: not a readable .npy/.npz file (it starts with {head!r}, "
                           f"neither NumPy's {NPY_MAGIC!r} nor a zip archive's {ZIP_MAGIC!r})")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:       # members are read here: a truncated one fails here
                return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CompileError(f"{what} {str(path)!r}: not a readable .npy/.npz file ({e})") from None
    return data


def load_token_arrays(path: str | Path, names: list[str]) -> dict:
    """The arrays of a token-id model's ``--input`` file: an .npz of one array per name in
    ``names`` (its token-id inputs and attention masks), {name: array}; CompileError naming the
    file for an unreadable file, a bare .npy array or an array of no such name (a missing one is
    refused by the caller, which knows what it holds)."""
    p = Path(path)
    data = _read(p, "--input")
    if not isinstance(data, dict):
        raise CompileError(f"--input {str(p)!r}: a single array; a token-id model takes an .npz of one integer "
                           f"array per input {names}")
    extra = sorted(set(data) - set(names))
    if extra:
        raise CompileError(f"--input {str(p)!r}: unknown arrays {extra}; the model's inputs are {names}")
    return data


def load_input(path: str | Path, name: str, shape: tuple, layout: dict | None = None) -> np.ndarray:
    """The test input from ``path`` (.npy, or .npz under ``name`` or as its only array); for a
    channels-last model (``layout``: ``nhwc_input.input_layout``) also in its NHWC shape."""
    p = Path(path)
    data = _read(p, "--input")
    if isinstance(data, dict):
        if name in data:
            data = data[name]
        elif len(data) == 1:
            data = next(iter(data.values()))
        else:
            raise CompileError(f"--input {str(p)!r}: holds arrays {sorted(data)}, none named {name!r} (the model's input)")
    return _fit(np.asarray(data), shape, f"--input {str(p)!r}", layout, name)


def _image(path: Path, shape: tuple) -> np.ndarray:
    from skimage import io
    from skimage.color import gray2rgb, rgb2gray, rgba2rgb
    from skimage.transform import resize
    try:
        img = io.imread(path)
    except Exception as e:     # imageio's message goes on with lines of plugin advice: its first line only
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        raise CompileError(f"--calib image {str(path)!r}: cannot be read as an image ({type(e).__name__}: "
                           f"{first})") from None
    c, h, w = shape[1:]
    if img.ndim == 3 and img.shape[2] == 4:
        img = (rgba2rgb(img) * 255).astype(np.uint8)
    if c == 3:
        return realdata.crop_image(gray2rgb(img) if img.ndim == 2 else img, h, w)
    g = rgb2gray(img) if img.ndim == 3 else img.astype(np.float64) / (255.0 if img.dtype == np.uint8 else 1.0)
    return resize(g, (h, w), anti_aliasing=True).astype(np.float32)[None, None]


def _samples(a: np.ndarray, shape: tuple, where: str, layout: dict | None = None) -> list[np.ndarray]:
    """The calibration samples of one array: a stack (N, *shape without batch) or (N, *shape),
    or one sample of ``shape``."""
    inner = tuple(layout["shape"][1:]) if layout is not None and tuple(a.shape[1:]) == tuple(layout["shape"][1:]) \
        else tuple(shape[1:])
    stacked = a.ndim == len(shape) + 1 or (a.ndim == len(shape) and shape[0] == 1 and a.shape[0] != 1
                                          and tuple(a.shape[1:]) == inner)
    return [_fit(np.asarray(s), shape, f"{where} sample {j}" if stacked else where, layout)
            for j, s in enumerate(a if stacked else [a])]


def load_calib(path: str | Path, shape: tuple, layout: dict | None = None) -> list[np.ndarray]:
    """Calibration samples (float32 arrays of ``shape``) from a folder of images or an array file
    (for a channels-last model, ``layout``, also of its NHWC shape)."""
    p = Path(path)
    if p.is_dir():
        if len(shape) != 4 or shape[0] != 1 or shape[1] not in (1, 3):
            raise CompileError(f"--calib {str(p)!r}: image folders calibrate 1- or 3-channel NCHW inputs; "
                               f"this one is {tuple(shape)} (give an .npy/.npz stack)")
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise CompileError(f"--calib {str(p)!r}: no image files ({', '.join(IMAGE_SUFFIXES)})")
        return [_image(f, shape) for f in files[:MAX_CALIB]]
    data = _read(p, "--calib")
    arrays = list(data.items()) if isinstance(data, dict) else [(None, np.asarray(data))]
    out = []
    for key, a in arrays:
        where = f"--calib {str(p)!r}" + (f" array {key!r}" if key is not None else "")
        out += _samples(np.asarray(a), shape, where, layout)
    if not out:
        raise CompileError(f"--calib {str(p)!r}: holds no samples")
    return out[:MAX_CALIB]


def _is_image(shape: tuple) -> bool:
    return len(shape) == 4 and shape[0] == 1 and shape[1] == 3 and shape[2] >= 16 and shape[3] >= 16


def check_data_memory(specs: list, samples: int, available: int | None = None) -> None:
    """CompileError, before anything is allocated, if ``samples`` float32 arrays of each input of
    ``specs`` ([(name, shape)]: the test input and the calibration samples drawn here; samples
    read from a ``--calib`` file are bounded by the file) and one float64 array of each (seeded
    noise is drawn in float64) would need more than HOST_MEMORY_SHARE of the available memory
    (``available`` bytes; default: the machine's). Names the largest input, its shape and the sizes."""
    elements = {name: int(np.prod(shape, dtype=object)) for name, shape in specs}
    need_bytes = sum(elements.values()) * (4 * samples + 8)
    avail = available_memory_bytes() if available is None else available
    if need_bytes > HOST_MEMORY_SHARE * avail:
        gib = 1 << 30
        name, shape = max(specs, key=lambda s: elements[s[0]])
        each = "them" if len(specs) == 1 else f"each of the {len(specs)} inputs"
        raise CompileError(f"input {name!r} of shape {tuple(shape)} is {elements[name] * 4 / gib:.2f} GiB as float32: "
                           f"{samples} of {each} (the test input and the calibration samples) need about "
                           f"{need_bytes / gib:.1f} GiB, more than {HOST_MEMORY_SHARE:.0%} of the {avail / gib:.1f} "
                           "GiB available; use a smaller input")


def _drawn_samples(calib) -> int:
    """Arrays of each input drawn here: the test input and ``calib`` seeded calibration samples
    when it is a count (none when it is a file or folder)."""
    return 1 + (int(calib) if isinstance(calib, (int, np.integer)) else 0)


def _npz_names(p: Path, data, specs: list, what: str, per: str) -> dict:
    """The arrays of an .npz read for a model with several inputs: exactly one per input name."""
    names = [n for n, _ in specs]
    if not isinstance(data, dict):
        raise CompileError(f"{what} {str(p)!r}: the model has {len(names)} run-time inputs {names}; give an "
                           f".npz with {per} per input name")
    missing, extra = [n for n in names if n not in data], sorted(set(data) - set(names))
    if missing or extra:
        raise CompileError(f"{what} {str(p)!r}: the model's run-time inputs are {names}; "
                           + "; ".join(([f"missing {missing}"] if missing else [])
                                       + ([f"unknown {extra}"] if extra else [])))
    return data


def load_inputs(path: str | Path, specs: list, model=None) -> dict:
    """The test inputs of a model with several run-time inputs (``specs``: ``input_specs``) from
    an .npz of one array per input name: {name: float32 array of its shape}; CompileError naming
    a missing, unknown or misshaped input."""
    p = Path(path)
    data = _npz_names(p, _read(p, "--input"), specs, "--input", "one array")
    return {n: _fit(np.asarray(data[n]), shape, f"--input {str(p)!r} array {n!r}",
                    input_layout(model, n) if model is not None else None, n) for n, shape in specs}


def load_calibs(path: str | Path, specs: list, model=None) -> list[dict]:
    """Calibration samples of a model with several run-time inputs from an .npz of one stack
    (N, *shape) per input name, N the same for all: [{name: float32 array}] (at most MAX_CALIB)."""
    p = Path(path)
    if p.is_dir():
        raise CompileError(f"--calib {str(p)!r}: image folders calibrate a model with one image input; this "
                           f"one has {len(specs)} run-time inputs {[n for n, _ in specs]} (give an .npz with "
                           "a stack of samples per input name)")
    data = _npz_names(p, _read(p, "--calib"), specs, "--calib", "a stack of samples")
    stacks = {n: _samples(np.asarray(data[n]), shape, f"--calib {str(p)!r} array {n!r}",
                          input_layout(model, n) if model is not None else None) for n, shape in specs}
    counts = {n: len(v) for n, v in stacks.items()}
    if len(set(counts.values())) != 1:
        raise CompileError(f"--calib {str(p)!r}: the inputs' stacks hold different numbers of samples {counts}")
    return [{n: stacks[n][j] for n, _ in specs} for j in range(min(next(iter(counts.values())), MAX_CALIB))]


#: the note for a model with several inputs given seeded noise
NOISE_NOTE_MULTI = ("the model has several run-time inputs: accuracy is measured on seeded noise (--input FILE.npz "
                    "and --calib FILE.npz, one array / stack per input name, give it real data)")


def _multi_data(model, specs: list, input_path, calib, size) -> tuple:
    """``model_data`` for a model with several run-time inputs: dicts {input name: array}."""
    notes = []
    if size:
        notes.append(f"--input-size {size} ignored: the model has {len(specs)} run-time inputs")
    check_data_memory(specs, _drawn_samples(calib))
    if input_path is not None:
        x = load_inputs(input_path, specs, model)
    else:
        rng = np.random.default_rng(1)
        x = {n: rng.normal(0, 1, shape).astype(np.float32) for n, shape in specs}
        notes.append(NOISE_NOTE_MULTI)
    if isinstance(calib, (int, np.integer)):
        rng = np.random.default_rng(0)
        cal = [{n: rng.normal(0, 1, shape).astype(np.float32) for n, shape in specs} for _ in range(int(calib))]
        if input_path is not None:
            notes.append("calibrated on seeded noise (--calib FILE.npz gives it real data)")
    else:
        cal = load_calibs(calib, specs, model)
    return x, cal, notes


def model_data(model, input_path=None, calib=4, size=None) -> tuple:
    """(test input, calibration samples, notes) for ``model``: ``input_path`` a file or None;
    ``calib`` a count of built-in photographs (int) or a file/folder path; ``size``: the H, W the
    user expects of an image model (CompileError if its static input shape differs). A model with
    several run-time inputs gets dicts {input name: array} (the test input, and each calibration sample) instead of arrays."""
    specs = input_specs(model)
    if len(specs) > 1:
        return _multi_data(model, specs, input_path, calib, size)
    name, shape = specs[0]
    notes = []
    if size and _is_image(shape):
        if tuple(shape[2:]) != (size, size):
            h, w = shape[2:]
            raise CompileError(f"--input-size {size}: the model's input {name!r} has the static shape "
                               f"{tuple(shape)}, its height and width are fixed at {h}x{w}; leave "
                               "--input-size out")
    elif size:
        notes.append(f"--input-size {size} ignored: it resizes 3-channel images of at least 16x16, and "
                     f"the model's input {name!r} has shape {tuple(shape)}")
    image = _is_image(shape)
    check_data_memory([(name, shape)], _drawn_samples(calib))
    if input_path is not None:
        x = load_input(input_path, name, shape, input_layout(model))
    elif image:
        x = realdata.renormalised(realdata.test_image(shape[2:]), model)
    else:
        x = np.random.default_rng(1).normal(0, 1, shape).astype(np.float32)
        notes.append(NOISE_NOTE)
    if isinstance(calib, (int, np.integer)):
        if image:
            cal = [realdata.renormalised(c, model) for c in realdata.calibration_images(int(calib), shape[2:])]
        else:
            rng = np.random.default_rng(0)
            cal = [rng.normal(0, 1, shape).astype(np.float32) for _ in range(int(calib))]
            if input_path is not None:
                notes.append("calibrated on seeded noise (--calib DIR|FILE gives it real data)")
    else:
        cal = load_calib(calib, shape, input_layout(model))
        if image and Path(calib).is_dir():        # images read as the built-in photographs
            cal = [realdata.renormalised(c, model) for c in cal]
    return x, cal, notes
