"""End-to-end compile: ONNX model (+ calibration images) → QGraph → .tpubin, with timings.

Used by the `tpucompile` command line and by the co-simulation driver (`tpusim.flow.cosim`).
"""
from __future__ import annotations

import difflib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from tpucompile import digits, inputs, realdata, transformer_models
from tpucompile.backend.compile import compile_qgraph
from tpucompile.frontend.host_embeddings import check_mask_feeds, split_host_embeddings
from tpucompile.frontend.host_patches import HostPatches, split_host_patches
from tpucompile.frontend.nhwc_input import input_layout, nchw_input_model, to_model_layout
from tpucompile.frontend.onnx_import import read_onnx
from tpucompile.frontend.token_input import channels_first_tokens_model
from tpucompile.quantize.quantize import compile_model
from tpucompile.stages import IrDumps
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.errors import CompileError

#: Built-in model names for `--model`: (loader in tpucompile.realdata, description)
MODELS = {
    "resnet50": (realdata.resnet50_model, "ResNet-50 graph from the onnx wheel (opset 9), synthetic weights"),
    "resnet50-modern": (realdata.resnet50_modern, "the same network exported as opset 13 (Add, GlobalAveragePool, Flatten)"),
    "resnet50-qdq": (realdata.resnet50_qdq, "resnet50-modern pre-quantized by onnxruntime quantize_static (QDQ, "
                     "per-channel int8): its own scales and zero points"),
    "resnet50-reduced": (realdata.resnet50_reduced, "stem + stage 1 of ResNet-50 on a 32x32 input (fast tests)"),
    **{name: ((lambda n=name: realdata.wheel_model(n)), f"{file}.onnx from the onnx wheel, synthetic weights")
       for name, file in realdata.WHEEL_MODELS.items()},
    "bert-base-linears": (realdata.transformer_linears, "the linear layers (QKV, output projection, GELU FFN, "
                          "residual Adds; no attention) of 2 BERT-base encoder layers over 128 tokens, synthetic"),
    "bert-tiny-linears": ((lambda: realdata.transformer_linears(128, 512, 2, 128)),
                          "the same for BERT-tiny (d_model 128, d_ff 512, 2 layers, 128 tokens)"),
    "bert-tiny": (transformer_models.bert_tiny, "BERT-tiny (2 layers, hidden 128, 2 heads, FFN 512, 128 tokens) in "
                  "the shape of torch.onnx.export of Hugging Face BertModel, opset 17, seeded weights"),
    "bert-base": (transformer_models.bert_base, "BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, 128 tokens), "
                  "likewise"),
    "vit-tiny": (transformer_models.vit_tiny, "ViT-tiny/16 (12 layers, hidden 192, 3 heads, FFN 768, 224x224 image, "
                 "197 tokens) in the shape of torch.onnx.export of Hugging Face ViTModel, opset 17, seeded weights"),
    "digits": (digits.load, "a small CNN trained on scikit-learn's 8x8 digits (scripts/train_digits.py)"),
}
#: built-in models that come with a labelled dataset: name -> split() = ((x_train, y_train),
#: (x_test, y_test)); calibration uses training images, the test input and the cosim's top-1
#: report the held-out ones
DATASETS = {"digits": digits.split}
#: training images a dataset model is calibrated on (unless --calib gives a file or folder)
DATASET_CALIB = 64


@dataclass
class CompileResult:
    binary: TpuBinary
    qgraph: object
    times_s: dict = field(default_factory=dict)


def load_model(model: str | Path, synthetic_seed: int | None = None) -> onnx.ModelProto:
    """The device model of ``load_model_head`` (a token-id model's embeddings cut off)."""
    return load_model_head(model, synthetic_seed)[0]


def missing_model_error(model: str | Path) -> CompileError:
    """The error for a ``--model`` that is neither a built-in name nor an existing file: a path
    (a folder separator or a file suffix) is a missing file; a bare word an unknown name, with the
    closest built-in names first."""
    text = str(model)
    if "/" in text or os.sep in text or Path(text).suffix:
        return CompileError(f"model file {text!r} not found (built-in models: {', '.join(sorted(MODELS))})")
    close = difflib.get_close_matches(text, list(MODELS), n=3, cutoff=0.7)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    return CompileError(f"model {text!r} is not a built-in model and no such file exists; {hint}"
                        f"built-in models: {', '.join(sorted(MODELS))}")


def load_model_head(model: str | Path, synthetic_seed: int | None = None):
    """A built-in model name (see MODELS) or a path to an .onnx file. CompileError if neither.
    ``synthetic_seed``: replace a file's Conv/Gemm/BatchNorm parameters by seeded synthetic ones
    (``realdata.synthetic_weights``: for exports with placeholder or no trained weights); built-in
    models always carry theirs. A file whose image input is channels-last is returned as the NCHW
    model it is after its input Transpose (``frontend.nhwc_input``), a transformer's (1, T, C) token
    input as its (1, C, T) model (``frontend.token_input``). Returns (model, HostHead / HostPatches
    or None): a model with integer token-id inputs has its embedding lookups cut off into a host
    head (``frontend.host_embeddings``), a vision transformer its patch extraction
    (``frontend.host_patches``). CompileError for ``synthetic_seed`` with a built-in model (it
    was ignored: the built-in models' weights are fixed, seeded where synthetic)."""
    if str(model) in MODELS:
        if synthetic_seed is not None:
            raise CompileError(f"--synthetic-weights {synthetic_seed}: {str(model)!r} is a built-in model, whose "
                               "weights are fixed (seeded where synthetic); the option applies to a model file: "
                               "leave it out")
        return _device_model(MODELS[str(model)][0]())
    p = Path(model)
    if not p.exists():
        raise missing_model_error(model)
    m = read_onnx(p)
    if synthetic_seed is not None:
        try:
            m = realdata.synthetic_weights(m, synthetic_seed)
        except CompileError as e:
            raise CompileError(f"{p}: {e}") from None
        except (KeyError, ValueError, onnx.checker.ValidationError) as e:
            raise CompileError(f"{p}: cannot give it synthetic weights ({type(e).__name__}: {e})") from None
    return _device_model(m)


def _device_model(m: onnx.ModelProto):
    """(device model, HostHead / HostPatches or None): embeddings of token ids on the host, or a
    vision transformer's patch extraction (``frontend.host_patches``); a channels-last input's
    leading Transpose on the host; a (1, T, C) token input as (1, C, T)."""
    m, head = split_host_embeddings(m)
    if head is None:
        m, head = split_host_patches(m)
    return channels_first_tokens_model(nchw_input_model(m)), head


def token_data(head, input_path, calib, model=None, size: int | None = None) -> tuple:
    """(test input, calibration samples, notes) of a model with a host head: a token-id model's
    (HostHead) run on token ids (``input_path``: an .npz of one int array per token input; default
    seeded ids, all-ones masks, token types 0 then 1; a mask is required in the file and may pad:
    ``host_embeddings.check_mask_feeds``) and on ``calib`` seeded id samples, their masks padded
    from none to three quarters of the tokens (``calib_masks``); a vision
    transformer's (HostPatches) on its image input's data (``inputs.model_data``: the built-in
    photographs, or ``input_path`` / ``calib`` files). ``size`` (``--input-size``): checked against a
    vision transformer's image size; CompileError naming the option for a token-id model (its
    inputs are token sequences of a fixed length, not images)."""
    if isinstance(head, HostPatches):
        img, cal_img, notes = inputs.model_data(head.model, input_path, calib, size)
        x = head.run({head.image[0]: img})
        cal = [head.run({head.image[0]: c}) for c in cal_img]
        return _device_data(x, cal, model) + ([head.describe()] + notes,)
    if size:
        ins = ", ".join(f"{n} {tuple(shape)}" for n, shape in [*head.token_inputs, *head.masks.items()])
        raise CompileError(f"--input-size {size}: the model's inputs are token ids and masks ({ins}), not an image; "
                           "their length is fixed by the model: leave --input-size out")
    vocab = {}
    inits = {t.name: t for t in head.model.graph.initializer}
    for n in head.model.graph.node:
        if n.op_type == "Gather" and n.input[1] in dict(head.token_inputs) and n.input[0] in inits:
            vocab[n.input[1]] = int(inits[n.input[0]].dims[0])

    def draw(seed):
        rng = np.random.default_rng(seed)
        return {n: rng.integers(0, vocab.get(n, 2), shape, dtype=np.int64) for n, shape in head.token_inputs}
    if input_path is not None:
        data = inputs.load_token_arrays(input_path, [t for t, _ in head.token_inputs] + list(head.masks))
        feeds = {}
        for n, shape in head.token_inputs:
            if n not in data:
                raise CompileError(f"--input {input_path}: no array {n!r} (token inputs: "
                                   f"{[t for t, _ in head.token_inputs]})")
            feeds[n] = _token_ids(f"--input {input_path}", n, np.asarray(data[n]), shape, vocab.get(n))
        feeds.update(check_mask_feeds(head, data, f"--input {input_path}"))
    else:
        feeds = draw(1)
    if not isinstance(calib, (int, np.integer)):
        raise CompileError("--calib: a token-id model is calibrated on seeded token ids (give a count)")
    n = int(calib)
    x, cal = _device_data(head.run(feeds), [head.run({**draw(100 + i), **calib_masks(head, i, n)}) for i in range(n)],
                          model)
    notes = [head.describe()] + ([] if input_path is not None else ["test input: seeded token ids"])
    notes += [f"--input's attention mask {m!r} has no real token (all 0): every key is masked, so the outputs are "
              "those of an all-padding sequence (FP32 and int8 may then differ widely)"
              for m in head.masks if m in feeds and not feeds[m].any()]
    return x, cal, notes


#: the fewest real tokens a calibration sample's attention mask keeps, as a share of the sequence
CALIB_MASK_MIN_REAL = 0.25


def calib_masks(head, i: int, n: int) -> dict:
    """{mask name: int64 0/1 array} of calibration sample ``i`` of ``n`` of a token-id model
    (HostHead ``head``): the first ``real`` tokens 1, the rest padding 0, ``real`` from the whole
    sequence T (sample 0: no padding) down evenly to ``ceil(CALIB_MASK_MIN_REAL * T)`` (the last
    sample; one sample: no padding). Why: a padded mask concentrates each attention row's
    probability on fewer keys, so the Softmax outputs (and the P·V products after them) reach
    values no all-ones sample shows; calibrated on all-ones masks only, they saturated with a
    padded mask (the transformers 5.25 BertModel fixture, 20 real tokens of 32: Softmax SQNR 9 dB
    against FP32 in the per-layer report; docs/backend.md "Run-time attention masks")."""
    out = {}
    for name, shape in head.masks.items():
        t = int(shape[-1])
        low = max(1, math.ceil(CALIB_MASK_MIN_REAL * t))
        real = t if n <= 1 else t - round(i * (t - low) / (n - 1))
        m = np.zeros(shape, np.int64)
        m[..., :real] = 1
        out[name] = m
    return out


def _token_ids(where: str, name: str, a: np.ndarray, shape: tuple, vocab: int | None) -> np.ndarray:
    """Token-id array ``name`` of an ``--input`` file reshaped to the model's token input
    ``shape``: CompileError naming the file and the array for a non-integer dtype, another
    number of ids, or an id outside [0, ``vocab``) (the rows of the embedding table it indexes;
    None: not checked)."""
    if a.dtype.kind not in "iu":
        raise CompileError(f"{where}: array {name!r} has dtype {a.dtype}; token ids are integers")
    if a.size != int(np.prod(shape)):
        raise CompileError(f"{where}: array {name!r} of shape {a.shape} does not fit the token input of shape "
                           f"{tuple(shape)}")
    if vocab is not None and a.size and (a.min() < 0 or a.max() >= vocab):
        raise CompileError(f"{where}: array {name!r} holds ids {a.min()}..{a.max()}, outside [0, {vocab}) "
                           "(the rows of its embedding table)")
    return a.reshape(shape)


def _device_data(x: dict, cal: list, model) -> tuple:
    """(test input, calibration samples) from a host head's {name: (1, T, C)} outputs: in the
    device model's layout (``model``, if given), a bare array for a single input."""
    if model is not None:         # the host head gives (1, T, C): the device model's layout
        lay = input_layout(model)
        x = {n: to_model_layout(v, lay) for n, v in x.items()}
        cal = [{n: to_model_layout(v, lay) for n, v in c.items()} for c in cal]
    if len(x) == 1:
        x, cal = next(iter(x.values())), [next(iter(c.values())) for c in cal]
    return x, cal


def load_model_and_data(model: str | Path, calib=4, size: int | None = None,
                        synthetic_seed: int | None = None, input_path=None, notes: list | None = None):
    """(ONNX model, test input float32, calibration samples) for a model name or path: the
    built-in photographs for a 3-channel image model, else seeded noise, or the files given
    (``input_path``; ``calib`` a count or a file/folder: tpucompile.inputs); a dataset model
    (DATASETS) is calibrated on DATASET_CALIB training images and tested on the first held-out
    one. Notes about the data (noise) are appended to ``notes``."""
    m, head = load_model_head(model, synthetic_seed)
    if head is not None:
        x, cal, n = token_data(head, input_path, calib, m, size)
        if notes is not None:
            notes.extend(n)
        return m, x, cal
    if str(model) in DATASETS and input_path is None:
        (xtr, _), (xte, _) = DATASETS[str(model)]()
        cal = list(xtr[:DATASET_CALIB, None]) if isinstance(calib, int) else inputs.load_calib(
            calib, inputs.input_spec(m)[1])
        return m, xte[:1], cal
    x, cal, n = inputs.model_data(m, input_path, calib, size)
    if notes is not None:
        notes.extend(n)
    return m, x, cal


def compile_onnx(model: onnx.ModelProto, cfg, calib_images, dump_ir: str | Path | None = None,
                 keep_intermediates: bool = False, calib_method: str = "minmax", host_tail: bool = False,
                 notes: list | None = None) -> CompileResult:
    """Front end (import, passes, calibration, quantization) then back end (layout, memory plan,
    tiling, emission, token check); with ``dump_ir`` the IR after every stage of both;
    ``host_tail``: a post-processing tail without a device mapping runs on the host; ``notes``:
    a list the calibration's warnings are appended to (besides stderr: ``compile_model``)."""
    t0 = time.perf_counter()
    dumps = IrDumps.open(dump_ir)
    qg, _ = compile_model(model, calib_images, dump_dir=dumps, calib_method=calib_method, host_tail=host_tail,
                          cfg=cfg, notes=notes)
    t1 = time.perf_counter()
    binary = compile_qgraph(qg, cfg, keep_intermediates=keep_intermediates, dump_ir=dumps)
    t2 = time.perf_counter()
    return CompileResult(binary, qg, {"frontend": t1 - t0, "backend": t2 - t1, "total": t2 - t0})


def logits_name(qg) -> str:
    """The ONNX tensor compared against FP32: the input of the host Softmax, or the model's output
    (its ONNX name: the device tensor may be an internal one, e.g. a Gemm's ``<name>__nchw``)."""
    if qg.host_ops:
        return qg.host_ops[0]["inp"]
    return qg.fp32_outputs[0] if qg.fp32_outputs else qg.outputs[0]


def layer_tensors(binary: TpuBinary) -> list[TensorDesc]:
    """Every layer output the binary keeps in DDR (compiled with keep_intermediates)."""
    return [TensorDesc.from_json(d) for d in binary.meta.get("tensors", [])]


__all__ = ["MODELS", "DATASETS", "CompileResult", "load_model", "load_model_head", "token_data", "load_model_and_data", "compile_onnx",
           "logits_name", "layer_tensors"]
