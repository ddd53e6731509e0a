"""Real inputs for end-to-end tests: ResNet-50 with seeded synthetic weights, real photographs.

Weights. The onnx wheel ships the real ResNet-50 graph (``light_resnet50.onnx``, opset 9) whose
weights are placeholders (ConstantOfShape of 0.02). ``resnet50_model(seed)`` replaces every
parameter with a constant initializer drawn from ``numpy.random.default_rng(seed)``, visiting
parameters in graph order (so the same seed always gives the same model):

* Conv weights [Cout, Cin, kh, kw]: He-normal, std = sqrt(2 / (Cin*kh*kw)) (leading 1s of a
  weight stored for a Reshape ignored).
* Gemm weight [1000, 2048]: He-normal, std = sqrt(2 / 2048); bias ~ N(0, 0.01).
* BatchNorm: gamma ~ U(0.5, 1.0), for the last BN of each residual branch (``*_branch2c_bn``)
  additionally multiplied by U(0.2, 0.5) so the residual stream stays bounded;
  beta ~ N(0, 0.05); mean ~ N(0, 0.1); var ~ U(0.5, 1.5).

Images. ``images()`` uses photographs shipped with scikit-image (astronaut, chelsea, coffee,
rocket) and scikit-learn (china, flower): resize so the shorter side is ``size*256/224``, crop,
scale to [0, 1], normalise with the ImageNet mean/std, layout NCHW float32 [1, 3, H, W].
``test_image()`` is the astronaut centre crop; ``calibration_images(n)`` come only from the *other*
photographs (centre crop first, then the four corner crops of each), so they are disjoint from the
test image.
"""
from __future__ import annotations

import importlib.util
import logging
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from tpusim.arch.errors import CompileError

__all__ = ["LIGHT_RESNET50", "WHEEL_MODELS", "wheel_model", "transformer_linears", "synthetic_weights", "resnet50_model", "resnet50_modern", "resnet50_reduced", "images", "crop_image", "test_image", "renormalised",
           "calibration_images", "IMAGENET_MEAN", "IMAGENET_STD"]

LIGHT_RESNET50 = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
TEST_PHOTO = "astronaut"
CALIB_PHOTOS = ("chelsea", "coffee", "rocket", "china", "flower")
#: built-in calibration images: each photograph's centre and four corner crops
CALIB_IMAGES_MAX = 5 * len(CALIB_PHOTOS)


def _param(rng, name: str, shape: tuple, role: str, damp) -> np.ndarray:
    if role == "w":
        dims = list(shape)
        while len(dims) > 2 and dims[0] == 1:      # a weight stored with leading 1s, reshaped for its Gemm
            dims.pop(0)
        fan_in = int(np.prod(dims[1:]))
        return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    if role == "b":
        return rng.normal(0.0, 0.01, shape)
    if role == "gamma":
        g = rng.uniform(0.5, 1.0, shape)
        return g * rng.uniform(0.2, 0.5, shape) if damp(name) else g
    if role == "beta":
        return rng.normal(0.0, 0.05, shape)
    if role == "mean":
        return rng.normal(0.0, 0.1, shape)
    if role == "scale":
        return rng.uniform(0.5, 1.0, shape)
    if role == "shift":
        return rng.normal(0.0, 0.05, shape)
    return rng.uniform(0.5, 1.5, shape)


def _parameter_roles(g) -> dict:
    """Parameter name -> role ("w", "b", "gamma", "beta", "mean", "var", "scale", "shift"), in graph
    order: Conv weight (and bias), Gemm weight and bias (also through a Reshape or Unsqueeze:
    inception_v1's classifier weight is a (1, 1, 1000, 1024) placeholder reshaped for its Gemm),
    BatchNormalization's four inputs, and the operands of Mul ("scale") and Add ("shift"), also
    through an Unsqueeze (Caffe2's affine after BN); operands that are activations are dropped by the caller (not initializers)."""
    roles = {}
    unsq = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Unsqueeze"}
    via = {n.output[0]: n.input[0] for n in g.node if n.op_type in ("Unsqueeze", "Reshape")}
    for n in g.node:
        if n.op_type in ("Mul", "Add"):
            for i in n.input:
                roles.setdefault(unsq.get(i, i), "scale" if n.op_type == "Mul" else "shift")
        if n.op_type in ("Conv", "Gemm"):
            roles[via.get(n.input[1], n.input[1])] = "w"
            if len(n.input) > 2 and n.input[2]:
                roles[via.get(n.input[2], n.input[2])] = "b"
        elif n.op_type == "BatchNormalization":
            for nm, r in zip(n.input[1:5], ("gamma", "beta", "mean", "var")):
                roles[nm] = r
    return roles


def _refuse_transformer(g) -> None:
    """CompileError naming the node when graph ``g`` is a transformer's: a LayerNormalization, an
    embedding Gather (a constant table indexed by a run-time input) or a MatMul of two activations
    (attention). Its weights are MatMul, LayerNormalization and embedding constants, which
    ``synthetic_weights`` has no rule for, and its Mul / Add rules would redraw the constants of
    its bias Adds and attention mask (a Hugging Face BertModel export: a KeyError on the mask's
    ConstantOfShape before this check)."""
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    runtime = {vi.name for vi in g.input} - consts
    for n in g.node:
        why = ("a LayerNormalization" if n.op_type == "LayerNormalization" else
               "an embedding lookup (a Gather of a constant table by a run-time input)"
               if n.op_type == "Gather" and len(n.input) > 1 and n.input[0] in consts and n.input[1] in runtime else
               "a MatMul of two activations (attention)"
               if n.op_type == "MatMul" and not {i for i in n.input if i} & consts else None)
        if why:
            raise CompileError(f"--synthetic-weights: the model is a transformer (node {n.name!r} is {why}); "
                               "synthetic weights are drawn for Conv, Gemm and BatchNormalization parameters and "
                               "per-channel Mul / Add operands only, not for MatMul, LayerNormalization or "
                               "embedding weights: run it with the weights of its export (leave --synthetic-weights "
                               "out)")


def synthetic_weights(model: onnx.ModelProto, seed: int = 0, damp=lambda name: False,
                      graph_name: str | None = None, ir_version: int = 7) -> onnx.ModelProto:
    """``model`` with every Conv/Gemm/BatchNormalization parameter replaced by a seeded constant
    initializer (module doc; ``numpy.random.default_rng(seed)``, parameters visited in graph order,
    so one seed always gives one model). A parameter may be an initializer or the output of a
    ConstantOfShape whose shape is an initializer (the onnx wheel's placeholder weights; one of a
    computed shape is left alone); the ConstantOfShape nodes are dropped. CompileError naming the
    node for a transformer (``_refuse_transformer``).
    ``damp(name)``: BatchNorm gammas also multiplied by U(0.2, 0.5) (the last BN of a residual
    branch keeps the residual stream bounded). Returns a checked model (same opset, one input:
    the run-time input). A single-number Mul / Add operand (a hard swish's 3 and 1/6) is kept."""
    g = model.graph
    _refuse_transformer(g)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    cos = {n.output[0]: n for n in g.node if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits}
    def shape_of(name):
        return tuple(int(d) for d in inits[cos[name].input[0]]) if name in cos else inits[name].shape
    # others: computed; a single-number Mul / Add operand is the export's own constant (a hard
    # swish's 3 and 1/6, a rescale), not a per-channel parameter: kept
    roles = {k: r for k, r in _parameter_roles(g).items() if (k in inits or k in cos)
             and not (r in ("scale", "shift") and int(np.prod(shape_of(k), dtype=np.int64)) == 1)}
    rng = np.random.default_rng(seed)
    new_inits = []
    for name, role in roles.items():
        shape = shape_of(name)
        new_inits.append(numpy_helper.from_array(_param(rng, name, shape, role, damp).astype(np.float32), name))
    keep = [n for n in g.node if n.op_type != "ConstantOfShape" or n.output[0] not in roles]
    used = {i for n in keep for i in n.input}
    extra = [i for i in g.initializer if i.name in used and i.name not in roles]
    data = [i for i in g.input if i.name not in inits and i.name not in roles]
    graph = helper.make_graph(keep, graph_name or f"{g.name}_synthetic", data, list(g.output), extra + new_inits)
    out = helper.make_model(graph, opset_imports=list(model.opset_import))
    out.ir_version = ir_version
    onnx.checker.check_model(out)
    return out


def resnet50_model(seed: int = 0) -> onnx.ModelProto:
    """light_resnet50 (opset 9) with seeded synthetic weights as initializers (see module doc).

    Input ``gpu_0/data_0`` float32 [1, 3, 224, 224]; output ``gpu_0/softmax_1`` [1, 1000];
    the pre-softmax logits are tensor ``r174``.
    """
    return synthetic_weights(onnx.load(str(LIGHT_RESNET50)), seed, damp=lambda name: "branch2c_bn" in name,
                             graph_name="resnet50_synthetic")


#: Built-in name -> graph file of the onnx wheel's backend test models (all opset 9, IR 3, with
#: placeholder weights): each runs with seeded synthetic weights (:func:`wheel_model`).
WHEEL_MODELS = {"alexnet": "light_bvlc_alexnet", "densenet121": "light_densenet121",
                "inception_v1": "light_inception_v1", "inception_v2": "light_inception_v2",
                "shufflenet": "light_shufflenet", "squeezenet": "light_squeezenet", "vgg19": "light_vgg19",
                "zfnet512": "light_zfnet512"}


def wheel_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """The onnx wheel's ``light_<name>.onnx`` graph (``WHEEL_MODELS``) with seeded synthetic
    weights (:func:`synthetic_weights`). ValueError for an unknown name."""
    if name not in WHEEL_MODELS:
        raise ValueError(f"wheel_model: unknown model {name!r}; known: {', '.join(WHEEL_MODELS)}")
    path = LIGHT_RESNET50.parent / f"{WHEEL_MODELS[name]}.onnx"
    return synthetic_weights(onnx.load(str(path)), seed, graph_name=f"{name}_synthetic")


def resnet50_modern(seed: int = 0) -> onnx.ModelProto:
    """The same network and weights re-exported as opset 13: Sum -> Add, the 7x7 AveragePool ->
    GlobalAveragePool, Reshape -> Flatten(axis=1), Softmax(axis=1)."""
    old = resnet50_model(seed).graph
    nodes = []
    for n in old.node:
        if n.op_type == "Sum":
            nodes.append(helper.make_node("Add", list(n.input), list(n.output), name=n.name))
        elif n.op_type == "AveragePool":
            nodes.append(helper.make_node("GlobalAveragePool", [n.input[0]], list(n.output), name=n.name))
        elif n.op_type == "Reshape":
            nodes.append(helper.make_node("Flatten", [n.input[0]], list(n.output), name=n.name, axis=1))
        elif n.op_type == "Softmax":
            nodes.append(helper.make_node("Softmax", [n.input[0]], list(n.output), name=n.name, axis=1))
        else:
            nodes.append(n)
    used = {i for n in nodes for i in n.input}
    inits = [i for i in old.initializer if i.name in used]
    graph = helper.make_graph(nodes, "resnet50_synthetic_opset13", list(old.input), list(old.output), inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


#: calibration crops of the built-in QDQ ResNet-50 (onnxruntime.quantization calibrates on them)
QDQ_CALIB_IMAGES = 8


#: the warnings onnxruntime.quantization logs (``logging.warning``, the root logger: "WARNING:root:"
#: on stderr) for the built-in QDQ model, each understood: twice the advice to run its
#: pre-processing first (shape inference and graph optimisation: it would change the model this
#: quantizes) and, once per BatchNorm scale vector, that per-channel axis 1 is out of range for a
#: rank-1 weight (onnxruntime then gives it one scale, as intended). 55 lines in every compile and
#: cosim of resnet50-qdq, which ``_quiet_quantize_advice`` drops
QUANTIZE_ADVICE = ("Please consider to run pre-processing before quantization",
                   "Please consider pre-processing before quantization", "is out-of-range for weight")
_ORT_QUANTIZATION_DIR = str(Path(quantize_static.__code__.co_filename).parent)


class _QuantizeAdvice(logging.Filter):
    """Drops the WARNING records of onnxruntime.quantization's modules whose message has one of
    QUANTIZE_ADVICE; every other record (any error, any other warning) passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING and record.pathname.startswith(_ORT_QUANTIZATION_DIR)
                    and any(a in record.getMessage() for a in QUANTIZE_ADVICE))


@contextmanager
def _quiet_quantize_advice():
    """QUANTIZE_ADVICE dropped on the root logger while the block runs."""
    f = _QuantizeAdvice()
    logging.getLogger().addFilter(f)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(f)


def resnet50_qdq(seed: int = 0) -> onnx.ModelProto:
    """:func:`resnet50_modern` pre-quantized by ``onnxruntime.quantization.quantize_static`` in
    QDQ format (per-channel symmetric int8 weights, int8 activations, min-max over the first
    QDQ_CALIB_IMAGES :func:`calibration_images`): a model that brings its own scales and zero
    points (the compiler keeps them: ``tpucompile.ops.qdq``). About 10 s."""
    model = resnet50_modern(seed)
    name = model.graph.input[0].name
    batches = iter([{name: x} for x in calibration_images(QDQ_CALIB_IMAGES)])

    class _Reader(CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    with tempfile.TemporaryDirectory(prefix="tpusim-qdq-") as d:
        src, dst = Path(d) / "float.onnx", Path(d) / "qdq.onnx"
        onnx.save(model, src)
        with _quiet_quantize_advice():
            quantize_static(str(src), str(dst), _Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
        return onnx.load(str(dst))


#: Output tensor of each ResNet-50 stage (after the Relu that follows its last residual Sum).
STAGE_ENDS = {1: "r35", 2: "r77", 3: "r139", 4: "r171"}


def resnet50_reduced(stages: int = 1, size: int = 32, seed: int = 0) -> onnx.ModelProto:
    """The first ``stages`` stages of ResNet-50 (stem, max pool, then 3/4/6/3 bottleneck blocks per
    stage), with the same synthetic weights as :func:`resnet50_modern`, on a ``size`` x ``size``
    input, ending in GlobalAveragePool + Flatten: output ``features`` [1, C] (C = 256, 512, 1024,
    2048 for 1..4 stages). Used for fast end-to-end tests on the small config.
    """
    if stages not in STAGE_ENDS:
        raise ValueError(f"resnet50_reduced: stages must be in {sorted(STAGE_ENDS)}, got {stages}")
    if size < 32 or size % 32:
        raise ValueError(f"resnet50_reduced: size must be a multiple of 32, got {size}")
    full = resnet50_modern(seed).graph
    end = STAGE_ENDS[stages]
    nodes = []
    for n in full.node:
        nodes.append(n)
        if end in n.output:
            break
    nodes.append(helper.make_node("GlobalAveragePool", [end], ["pooled"], name="reduced_gap"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["features"], name="reduced_flatten", axis=1))
    used = {i for n in nodes for i in n.input}
    inits = [i for i in full.initializer if i.name in used]
    cout = {1: 256, 2: 512, 3: 1024, 4: 2048}[stages]
    inp = helper.make_tensor_value_info(full.input[0].name, onnx.TensorProto.FLOAT, [1, 3, size, size])
    out = helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, [1, cout])
    graph = helper.make_graph(nodes, f"resnet50_stages{stages}_{size}", [inp], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def transformer_linears(d_model: int = 768, d_ff: int = 3072, layers: int = 2, seq: int = 128,
                        seed: int = 0) -> onnx.ModelProto:
    """The linear layers of ``layers`` transformer encoder layers (BERT-base: d_model 768, d_ff
    3072) over a sequence of ``seq`` tokens, as an exporter writes a Conv1d network: input
    float32 (1, d_model, seq), channels = features, one token per position. Per layer: the QKV
    projection (1x1 Conv d -> 3d), V taken by a channel Slice, the output projection (d -> d),
    the residual Add, the FFN (d -> d_ff, the Erf form of GELU, d_ff -> d) and its residual Add.
    The attention itself (softmax(QK^T)V, LayerNorm) is not included: this is the architecture
    sweep's proxy for a transformer's GEMMs (about 2/3 of BERT-base's MACs at seq 128), whose
    M = seq, K = d_model, N = 3d / d / d_ff shapes are what the array sees. Weights: seeded
    normal, std 1/sqrt(fan_in); biases N(0, 0.01). Opset 13."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv(x, cin, cout, name):
        w = const(f"{name}.weight", rng.normal(0, 1 / np.sqrt(cin), (cout, cin, 1)))
        b = const(f"{name}.bias", rng.normal(0, 0.01, cout))
        nodes.append(helper.make_node("Conv", [x, w, b], [name], name=name, kernel_shape=[1]))
        return name

    sqrt2, half, one = const("sqrt2", np.sqrt(2.0)), const("half", 0.5), const("one", 1.0)
    s0, s1, ax = (inits.append(numpy_helper.from_array(np.array([v], np.int64), n)) or n
                  for n, v in (("v_start", 2 * d_model), ("v_end", 3 * d_model), ("axis1", 1)))
    x = "tokens"
    for i in range(layers):
        p = f"layer{i}"
        qkv = conv(x, d_model, 3 * d_model, f"{p}.qkv")
        nodes.append(helper.make_node("Slice", [qkv, s0, s1, ax], [f"{p}.v"], name=f"{p}.v"))
        o = conv(f"{p}.v", d_model, d_model, f"{p}.attn_out")
        nodes.append(helper.make_node("Add", [x, o], [f"{p}.res1"], name=f"{p}.res1"))
        h = conv(f"{p}.res1", d_model, d_ff, f"{p}.ffn1")
        for op, ins, out in (("Div", [h, sqrt2], "div"), ("Erf", None, "erf"), ("Add", None, "erf1"),
                             ("Mul", [h, None], "mul"), ("Mul", [None, half], "gelu")):
            prev = nodes[-1].output[0]
            ins = {"Erf": [prev], "Add": [prev, one]}.get(op, [prev if t is None else t for t in ins or []])
            nodes.append(helper.make_node(op, ins, [f"{p}.{out}"], name=f"{p}.{out}"))
        f = conv(f"{p}.gelu", d_ff, d_model, f"{p}.ffn2")
        nodes.append(helper.make_node("Add", [f"{p}.res1", f], [f"{p}.out"], name=f"{p}.out"))
        x = f"{p}.out"
    g = helper.make_graph(nodes, f"transformer_linears_d{d_model}_l{layers}",
                          [helper.make_tensor_value_info("tokens", onnx.TensorProto.FLOAT, [1, d_model, seq])],
                          [helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, d_model, seq])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    return m


def _photo(name: str) -> np.ndarray:
    """uint8 HxWx3 photograph ``name``: scikit-learn's china / flower read as
    ``sklearn.datasets.load_sample_images`` reads them (PIL, ``np.asarray``) from the files it
    ships, without importing scikit-learn (2 to 4 s of a small model's compile here) or decoding
    the other one; else ``skimage.data.<name>()``."""
    if name in ("china", "flower"):
        from PIL import Image
        spec = importlib.util.find_spec("sklearn")      # the package's folder; nothing imported
        path = Path(spec.submodule_search_locations[0]) / "datasets" / "images" / f"{name}.jpg"
        with path.open("rb") as f:
            return np.asarray(Image.open(f))
    import skimage.data
    return getattr(skimage.data, name)()


def _crop(img: np.ndarray, h: int, w: int, where: str) -> np.ndarray:
    """uint8 HxWx3 photo -> float32 [1, 3, h, w] ImageNet-normalised crop at `where`."""
    from skimage.transform import resize
    scale = max(h, w) * 256.0 / 224.0 / min(img.shape[:2])
    rh = max(h, int(round(img.shape[0] * scale)))
    rw = max(w, int(round(img.shape[1] * scale)))
    r = resize(img, (rh, rw), anti_aliasing=True, preserve_range=True).astype(np.float32) / 255.0
    oy = {"c": (rh - h) // 2, "tl": 0, "tr": 0, "bl": rh - h, "br": rh - h}[where]
    ox = {"c": (rw - w) // 2, "tl": 0, "bl": 0, "tr": rw - w, "br": rw - w}[where]
    x = (r[oy:oy + h, ox:ox + w, :3] - IMAGENET_MEAN) / IMAGENET_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(np.float32)


def crop_image(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """Any uint8 HxWx3 picture -> float32 [1, 3, h, w]: resized, centre crop, ImageNet-normalised
    (as the built-in photographs; ``--calib DIR`` images)."""
    return _crop(img, h, w, "c")


def renormalised(x: np.ndarray, model) -> np.ndarray:
    """An ImageNet-normalised float32 (1, 3, H, W) image (the built-in photographs) in the
    normalisation ``model`` declares in its metadata (``image_mean`` / ``image_std``: three
    comma-separated floats each, of pixels in [0, 1]; ViTImageProcessor's 0.5, 0.5), else ``x``
    itself. CompileError naming the field for a malformed entry."""
    props = {p.key: p.value for p in model.metadata_props}
    if "image_mean" not in props and "image_std" not in props:
        return x
    try:
        mean, std = (np.array([float(v) for v in props[k].split(",")], np.float32) for k in ("image_mean", "image_std"))
    except (KeyError, ValueError) as e:
        raise CompileError(f"model metadata image_mean / image_std: not three comma-separated floats each "
                           f"({type(e).__name__}: {e})") from None
    if mean.shape != (3,) or std.shape != (3,) or np.any(std <= 0):
        raise CompileError(f"model metadata image_mean {mean.tolist()} / image_std {std.tolist()}: three values "
                           "each, std > 0")
    px = x * IMAGENET_STD[:, None, None] + IMAGENET_MEAN[:, None, None]
    return ((px - mean[:, None, None]) / std[:, None, None]).astype(np.float32)


def images(size=224) -> dict:
    """Centre crops of every photo: name -> float32 [1, 3, H, W] (size int or (H, W))."""
    h, w = (size, size) if np.isscalar(size) else size
    return {n: _crop(_photo(n), h, w, "c") for n in (TEST_PHOTO,) + CALIB_PHOTOS}


def test_image(size=224) -> np.ndarray:
    """The astronaut photograph, centre crop, float32 [1, 3, H, W] ImageNet-normalised."""
    h, w = (size, size) if np.isscalar(size) else size
    return _crop(_photo(TEST_PHOTO), h, w, "c")


test_image.__test__ = False  # not a pytest test


def calibration_images(n: int = 8, size=224) -> list:
    """n crops (float32 [1, 3, H, W]) from photos other than the test image: the centre crops of
    chelsea, coffee, rocket, china, flower, then their tl/tr/bl/br corner crops (max 25)."""
    h, w = (size, size) if np.isscalar(size) else size
    order = [(p, c) for c in ("c", "tl", "tr", "bl", "br") for p in CALIB_PHOTOS]
    if not 1 <= n <= len(order):
        raise ValueError(f"calibration_images: n must be in [1, {len(order)}], got {n}")
    photos = {p: _photo(p) for p, _ in order[:n]}          # only those the n crops use
    return [_crop(photos[p], h, w, c) for p, c in order[:n]]
