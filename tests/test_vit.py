"""ViT end to end (issue 10): a ViTModel-shaped export (tpucompile.transformer_models.vit_model)
with its patch extraction on the host and the patch projection + [CLS] + position embeddings as
one device MatMul (frontend/host_patches.py), the pre-LN encoder as BERT's (token_input,
attention): the split equals the original model in float, golden == SimPy (== RTL) bit-exactly
on every layer, the last hidden state close to onnxruntime FP32; refusals name the node."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper
from skimage import io

from tests import qnets
from tpucompile import driver, inputs, realdata
from tpucompile.frontend.host_patches import patch_tokens, split_host_patches
from tpucompile.frontend.nhwc_input import input_layout, to_model_layout
from tpucompile.frontend.token_input import channels_first_tokens_model
from tpucompile.transformer_models import vit_model
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

#: a reduced ViT: 2 layers, hidden 64, 2 heads of 32, FFN 128, 64x64 image, 16x16 patches (17 tokens)
SMALL = dict(layers=2, hidden=64, heads=2, ffn=128, image=64, patch=16)


def _session(m):
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def _image(size=64, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (1, 3, size, size)).astype(np.float32)


def _small_vit(tmp_path=None, **kw):
    m = vit_model(**{**SMALL, **kw}, seed=1, name="vit_small")
    if tmp_path is None:
        return m, None
    path = tmp_path / "vit_small.onnx"
    onnx.save(m, path)
    return m, path


def test_graph_has_the_exporters_structure():
    m, _ = _small_vit()
    layers = SMALL["layers"]
    ops = Counter(n.op_type for n in m.graph.node)
    assert ops["Conv"] == 1 and ops["Concat"] == 1 and ops["Expand"] == 1
    assert ops["LayerNormalization"] == 1 + 2 * layers             # pre-LN: before, after, final
    assert ops["Softmax"] == layers and ops["Erf"] == layers
    assert ops["MatMul"] == 8 * layers and ops["Reshape"] == 1 + 4 * layers
    assert ops["Transpose"] == 1 + 4 * layers and ops["Gemm"] == 1 and ops["Tanh"] == 1
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert attrs["kernel_shape"] == attrs["strides"] == [16, 16] and attrs["pads"] == [0, 0, 0, 0]
    assert {p.key: p.value for p in m.metadata_props} == {"image_mean": "0.5,0.5,0.5", "image_std": "0.5,0.5,0.5"}
    hidden, pooled = _session(m).run(None, {"pixel_values": _image()})
    assert hidden.shape == (1, 17, 64) and pooled.shape == (1, 64)
    assert np.isfinite(hidden).all() and 0.5 < hidden.std() < 2 and np.abs(pooled).max() < 1
    with pytest.raises(ValueError, match="image 70 is not a multiple of patch 16"):
        vit_model(1, 32, 2, 64, 70, 16)


def test_patch_tokens_hold_each_patch_and_a_one_hot_token_index():
    x = _image(32, seed=3)
    t = patch_tokens(x, (16, 16), 1)
    assert t.shape == (1, 5, 3 * 256 + 5)
    assert not t[0, 0, :768].any()                       # the [CLS] row: no pixels
    # token 1 + oy*2 + ox holds x[c, oy*16 + ky, ox*16 + kx] at (c*16 + ky)*16 + kx
    np.testing.assert_array_equal(t[0, 1 + 1 * 2 + 0, :768].reshape(3, 16, 16), x[0, :, 16:32, 0:16])
    np.testing.assert_array_equal(t[0, 2, :768].reshape(3, 16, 16), x[0, :, 0:16, 16:32])
    np.testing.assert_array_equal(t[0, :, 768:], np.eye(5, dtype=np.float32))


def test_host_patches_and_device_model_equal_the_original_model():
    m, _ = _small_vit()
    x = _image()
    want = _session(m).run(None, {"pixel_values": x})
    dev, head = split_host_patches(m)
    assert head.image == ("pixel_values", (1, 3, 64, 64)) and head.extra == 1
    ops = Counter(n.op_type for n in dev.graph.node)
    assert "Conv" not in ops and "Concat" not in ops and "Expand" not in ops
    assert [vi.name for vi in dev.graph.input] == ["pixel_values__patch_tokens"]
    feeds = head.run({"pixel_values": x})
    got = _session(dev).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)
    cf = channels_first_tokens_model(dev)                # the (1, C, T) model the compiler maps
    got = _session(cf).run(None, {k: to_model_layout(v, input_layout(cf)) for k, v in feeds.items()})
    np.testing.assert_allclose(got[0], want[0].transpose(0, 2, 1), atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)


def test_the_builtin_photographs_take_the_models_normalisation():
    m, _ = _small_vit()
    dev, head = driver._device_model(m)
    x, cal, notes = driver.token_data(head, None, 2, dev)
    assert x.shape == (1, 768 + 17, 17) and len(cal) == 2 and "patch extraction on the host" in notes[0]
    img = realdata.test_image(64)
    vit = realdata.renormalised(img, m)
    np.testing.assert_allclose(vit, ((img * realdata.IMAGENET_STD[:, None, None] + realdata.IMAGENET_MEAN[:, None, None])
                                     - 0.5) / 0.5, atol=1e-6)
    assert vit.min() >= -1.001 and vit.max() <= 1.001 and vit.max() > 0.5
    np.testing.assert_allclose(x[0, :768, 1:], patch_tokens(vit, (16, 16), 1)[0, 1:, :768].T, atol=1e-6)
    bad = onnx.ModelProto()
    bad.CopyFrom(m)
    helper.set_model_props(bad, {"image_mean": "0.5,0.5", "image_std": "0.5,0.5,0.5"})
    with pytest.raises(CompileError, match=r"image_mean \[0.5, 0.5\]"):
        realdata.renormalised(img, bad)


def test_vit_small_golden_equals_simpy_and_is_close_to_fp32(tmp_path):
    _, path = _small_vit(tmp_path)
    v = run(str(path), "small", tmp_path / "run", rtl=False)
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.layers_compared > 40, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] >= 0.99, v.accuracy
    assert any("patch extraction on the host" in n for n in v.notes), v.notes


@pytest.mark.rtl
def test_vit_small_three_way_on_the_small_rtl(tmp_path):
    """golden == SimPy == RTL on every output, the same cycles and retire trace."""
    _, path = _small_vit(tmp_path, layers=1)
    v = run(str(path), "small", tmp_path / "run", rtl=True)
    qnets.assert_three_way(v)


def _with_conv_attrs(m, **attrs):
    c = onnx.ModelProto()
    c.CopyFrom(m)
    conv = next(n for n in c.graph.node if n.op_type == "Conv")
    for a in list(conv.attribute):
        if a.name in attrs:
            conv.attribute.remove(a)
    conv.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    return c


@pytest.mark.parametrize("attrs, what", [
    (dict(strides=[8, 8]), "strides \\[8, 8\\]"),           # overlapping patches
    (dict(pads=[1, 1, 1, 1]), "pads \\[1, 1, 1, 1\\]"),
])
def test_overlapping_or_padded_patches_are_refused_naming_the_conv(attrs, what):
    m, _ = _small_vit()
    m = _with_conv_attrs(m, **attrs)
    shape = list(onnx.shape_inference.infer_shapes(m).graph.value_info)
    grid = next(vi for vi in shape if vi.name == "/embeddings/patch_embeddings/projection/Conv")
    p = int(np.prod([d.dim_value for d in grid.type.tensor_type.shape.dim][2:]))
    rs = next(t for t in m.graph.initializer if t.name == "/embeddings/patch_embeddings/Constant")
    rs.CopyFrom(numpy_helper.from_array(np.array([1, 64, p], np.int64), rs.name))
    with pytest.raises(CompileError, match=f"node '/embeddings/patch_embeddings/projection/Conv' \\(Conv\\).*{what}"):
        driver._device_model(m)


def test_a_patch_reshape_without_its_transpose_is_refused_naming_the_node():
    m, _ = _small_vit()
    tr = next(n for n in m.graph.node if n.name == "/embeddings/patch_embeddings/Transpose")
    del tr.attribute[:]
    tr.attribute.append(helper.make_attribute("perm", [0, 1, 2]))
    with pytest.raises(CompileError, match="node '/embeddings/patch_embeddings/Transpose' \\(Transpose\\)"):
        split_host_patches(m)


def test_builtin_name():
    assert "vit-tiny" in driver.MODELS


def test_an_image_folder_calibrates_in_the_models_normalisation(tmp_path):
    m, _ = _small_vit()
    folder = tmp_path / "imgs"
    folder.mkdir()
    px = np.random.default_rng(5).integers(0, 256, (80, 80, 3), dtype=np.uint8)
    io.imsave(folder / "a.png", px)
    _, cal, _ = inputs.model_data(m, None, str(folder))
    assert len(cal) == 1 and cal[0].shape == (1, 3, 64, 64)
    assert -1.001 <= cal[0].min() < -0.5 and 0.5 < cal[0].max() <= 1.001     # (pixel / 255 - 0.5) / 0.5
