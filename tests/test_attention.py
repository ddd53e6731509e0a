"""BERT end to end (issue 10): a BertModel-shaped export (tpucompile.transformer_models) with its
embeddings on the host (frontend/host_embeddings.py), the self-attention rewritten per head
(frontend/attention.py: Einsum -> QActMatMul, Vᵀ through the array) on 'small': the rewrite equals
the original model in float, golden == SimPy (== RTL) bit-exactly on every layer, the last hidden
state close to onnxruntime FP32; refusals name the input / node."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests import qnets
from tpucompile import driver
from tpucompile.backend.estimate import Estimator
from tpucompile.frontend.host_embeddings import split_host_embeddings
from tpucompile.frontend.nhwc_input import input_layout, to_model_layout
from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.frontend.token_input import channels_first_tokens_model
from tpucompile.ops.softmax import softmax_score_tensors
from tpucompile.passes.pipeline import run_passes
from tpucompile.quantize.calibrate import calibrate, widen_by_offset_spread
from tpucompile.transformer_models import bert_inputs, bert_model
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError
from tpusim.flow.cosim import run

#: a reduced BERT: 1 layer, hidden 16, 2 heads of 8, FFN 32, 8 tokens, vocabulary 64
SMALL = dict(layers=1, hidden=16, heads=2, ffn=32, seq=8, vocab=64)


def _small_bert(tmp_path, **kw):
    m = bert_model(**{**SMALL, **kw}, seed=3, name="bert_small")
    path = tmp_path / "bert_small.onnx"
    onnx.save(m, path)
    return m, path


def _ones_mask(m):
    x = bert_inputs(m, seed=4)
    x["attention_mask"][:] = 1
    return x


@pytest.mark.parametrize("padded", [False, True])
def test_host_head_and_per_head_rewrite_equal_the_original_model(tmp_path, padded):
    """Float: the host head (embeddings and the mask's extension) + the rewritten device model
    equal the export, with an all-ones and with a padded attention mask."""
    m, _ = _small_bert(tmp_path)
    x = bert_inputs(m, seed=4) if padded else _ones_mask(m)
    assert padded == (x["attention_mask"].min() == 0)
    want = ort.InferenceSession(m.SerializeToString()).run(None, x)
    dev, head = split_host_embeddings(m)
    assert sorted(head.masks) == ["attention_mask"] and [n for n, _ in head.token_inputs] == ["input_ids",
                                                                                                 "token_type_ids"]
    assert Counter(n.op_type for n in head.model.graph.node) == {"Gather": 3, "Add": 2, "Unsqueeze": 2, "Cast": 1,
                                                                 "Sub": 1, "Mul": 1, "Reshape": 1}
    e = head.run(x)
    cf = channels_first_tokens_model(dev)
    ops = Counter(n.op_type for n in cf.graph.node)
    assert ops["Einsum"] == 3 * SMALL["heads"] and ops["MatMul"] == 0 and ops["Transpose"] == 2 * ops["LayerNormalization"]   # the LayerNorm sandwiches only
    feeds = {k: to_model_layout(v, input_layout(cf)) for k, v in e.items()}
    got = ort.InferenceSession(cf.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0].transpose(0, 2, 1), atol=2e-5)     # last hidden state (1, C, T)
    np.testing.assert_allclose(got[1], want[1], atol=2e-5)                        # pooler output


def test_bert_small_golden_equals_simpy_and_is_close_to_fp32(tmp_path):
    _, path = _small_bert(tmp_path)
    v = run(str(path), "small", tmp_path / "run", rtl=False)
    assert v.passed and sum(v.layer_mismatches.values()) == 0 and v.layers_compared > 20, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] >= 0.99, v.accuracy
    assert any("embeddings on the host" in n for n in v.notes), v.notes


def _qkv_layers(path, hw):
    """The compiled QConv layers of the Q/K/V projections (``__qkv``) and the compile result."""
    m, _, cal = driver.load_model_and_data(str(path), calib=2)
    res = driver.compile_onnx(m, load_config(hw), cal)
    return [L for L in res.binary.meta["layers"] if L["op"] == "QConv" and "__qkv" in L["name"]], res


def test_one_projection_per_layer_writes_heads_off_the_blocks_on_their_own_blocks(tmp_path):
    """Heads of 12 channels on small's 8-lane blocks (hidden 24, 2 heads): one Q/K/V projection
    per layer (x read once) writes each of the 6 heads from its own block (lanes 0, 16, .., 80:
    92 lanes for 72 channels), the gap lanes' weight columns not loaded (the estimator's bytes
    are the program's)."""
    _, path = _small_bert(tmp_path, hidden=24, heads=2, ffn=48)
    qkv, res = _qkv_layers(path, "small")
    assert len(qkv) == SMALL["layers"] and qkv[0]["cout"] == 92, qkv
    est = {e.name: e for e in Estimator(res.qgraph).estimate(load_config("small")).layers}
    assert (est[qkv[0]["name"]].load_bytes, est[qkv[0]["name"]].store_bytes) == (qkv[0]["ddr_bytes_in"],
                                                                                 qkv[0]["ddr_bytes_out"])


@pytest.mark.parametrize("rtl", [False, pytest.param(True, marks=pytest.mark.rtl)])
def test_heads_off_the_blocks_golden_equals_simpy(tmp_path, rtl):
    """The projection with gap lanes (above) and its heads' views, bit-exact (and == RTL)."""
    _, path = _small_bert(tmp_path, hidden=24, heads=2, ffn=48)
    v = run(str(path), "small", tmp_path / "run", rtl=rtl)
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
    assert v.accuracy["cosine"] >= 0.99, v.accuracy
    if rtl:
        qnets.assert_three_way(v)


def test_a_padded_attention_mask_reaches_the_device_as_its_key_mask(tmp_path):
    """The host's extension of the user's mask: 0 for a real token, finfo.min for a padded one,
    (1, T, 1) (tests/test_attention_mask.py runs it)."""
    m, path = _small_bert(tmp_path)
    x = bert_inputs(m, seed=4)                # the last eighth of the tokens padded
    np.savez(tmp_path / "tokens.npz", **x)
    _, xd, _ = driver.load_model_and_data(str(path), input_path=tmp_path / "tokens.npz", calib=1)
    km = xd["/Mul__key_mask"]
    assert km.shape == (1, SMALL["seq"], 1)
    assert np.all(km[0, :, 0][x["attention_mask"][0] == 1] == 0)
    assert np.all(km[0, :, 0][x["attention_mask"][0] == 0] == np.finfo(np.float32).min)


def test_a_users_tokens_reach_the_device_input_through_the_host_embeddings(tmp_path):
    """--input tokens.npz: the device input is the embeddings sum of those ids, in (1, C, T)."""
    m, path = _small_bert(tmp_path)
    x = _ones_mask(m)
    np.savez(tmp_path / "tokens.npz", **x)
    _, xd, cal = driver.load_model_and_data(str(path), input_path=tmp_path / "tokens.npz", calib=2)
    m.graph.output.append(onnx.helper.make_tensor_value_info("/embeddings/Add_1", onnx.TensorProto.FLOAT, None))
    want = ort.InferenceSession(m.SerializeToString()).run(["/embeddings/Add_1"], x)[0]
    np.testing.assert_allclose(xd["/embeddings/Add_1"], want.transpose(0, 2, 1), atol=1e-6)
    assert np.all(xd["/Mul__key_mask"] == 0)       # all ones: every key attended
    assert len(cal) == 2 and cal[0]["/embeddings/Add_1"].shape == xd["/embeddings/Add_1"].shape


def test_a_missing_token_array_is_refused_naming_it(tmp_path):
    m, path = _small_bert(tmp_path)
    x = _ones_mask(m)
    np.savez(tmp_path / "tokens.npz", input_ids=x["input_ids"])
    with pytest.raises(CompileError, match=r"no array 'token_type_ids'"):
        driver.load_model_and_data(str(path), input_path=tmp_path / "tokens.npz")


@pytest.mark.parametrize("change, message", [
    (lambda a: a.astype(np.float32) + 0.5, r"array 'input_ids' has dtype float32; token ids are integers"),
    (lambda a: a[:, :-1], r"array 'input_ids' of shape \(1, \d+\) does not fit the token input of shape \(1, \d+\)"),
    (lambda a: a + 10**6, r"array 'input_ids' holds ids \d+\.\.\d+, outside \[0, \d+\) \(the rows of its embedding table\)"),
    (lambda a: np.full_like(a, -1), r"array 'input_ids' holds ids -1\.\.-1, outside \[0, \d+\)"),
])
def test_bad_token_ids_are_refused_naming_the_array(tmp_path, change, message):
    """--input token ids of another dtype, length or outside the vocabulary: one CompileError naming
    the file and the array (was an onnxruntime Gather error or a numpy reshape traceback)."""
    m, path = _small_bert(tmp_path)
    x = _ones_mask(m)
    x["input_ids"] = change(np.asarray(x["input_ids"]))
    np.savez(tmp_path / "tokens.npz", **x)
    with pytest.raises(CompileError, match=r"--input .*tokens.npz: " + message):
        driver.load_model_and_data(str(path), input_path=tmp_path / "tokens.npz")


def _save_npy(path, a):
    """An .npy file's bytes under ``path`` whatever its suffix (np.save would append .npy)."""
    with open(path, "wb") as f:
        np.save(f, a)


@pytest.mark.parametrize("write, message", [
    (lambda p, x: _save_npy(p, x["input_ids"]), r"a single array; a token-id model takes an \.npz of one integer array "
                                              r"per input \['input_ids', 'token_type_ids', 'attention_mask'\]"),
    (lambda p, x: p.write_bytes(b"garbage\n"), r"not a readable \.npy/\.npz file \(it starts with b'garbag'"),
    (lambda p, x: np.savez(p, **x, foo=x["input_ids"]), r"unknown arrays \['foo'\]; the model's inputs are "
                                                        r"\['input_ids', 'token_type_ids', 'attention_mask'\]"),
])
def test_a_token_input_file_that_is_no_npz_of_its_inputs_is_refused(tmp_path, write, message):
    """--input of a token-id model: a bare .npy, a file that is no NumPy file, or an .npz with an
    array of no input's name: one CompileError naming the file (were an AttributeError and a
    ValueError traceback, and an array silently ignored)."""
    m, path = _small_bert(tmp_path)
    x = _ones_mask(m)
    f = tmp_path / "tokens.npz"
    write(f, x)
    with pytest.raises(CompileError, match=r"--input '.*tokens.npz': " + message):
        driver.load_model_and_data(str(path), input_path=f)


def test_a_dynamic_sequence_axis_is_refused_naming_the_input(tmp_path):
    """An export with dynamic axes (torch.onnx.export's dynamic_axes: the sequence a dim_param) is
    refused naming the token input and the axis (was an onnxruntime Gather traceback, exit 1)."""
    m, _ = _small_bert(tmp_path)
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    path = tmp_path / "bert_dynamic.onnx"
    onnx.save(m, path)
    with pytest.raises(CompileError, match=r"tensor 'input_ids' has a dynamic/unknown dimension \(sequence\); "
                                           r"only static shapes are supported"):
        driver.load_model_and_data(str(path))


def test_a_mask_that_is_not_all_zeros_is_refused_naming_the_add(tmp_path):
    """An extended mask that does not fold to zeros (a padded constant mask, no run-time input) is
    refused by name."""
    m, _ = _small_bert(tmp_path)
    del m.graph.input[1]                       # attention_mask: a constant with one padded token
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([[1] * (SMALL["seq"] - 1) + [0]], np.int64),
                                                            "attention_mask"))
    dev, _ = split_host_embeddings(m)
    with pytest.raises(CompileError, match=r"node '/encoder.layer.0.attention.self/Add' \(Add\): the attention mask "
                                           r"'/Mul' is neither a constant of zeros nor the extended mask of a run-time "
                                           r"attention_mask input"):
        channels_first_tokens_model(dev)


def test_an_integer_input_that_is_no_mask_is_refused_naming_it(tmp_path):
    m, _ = _small_bert(tmp_path)
    m.graph.input[1].name = "lengths"
    for n in m.graph.node:
        n.input[:] = ["lengths" if i == "attention_mask" else i for i in n.input]
    with pytest.raises(CompileError, match=r"input 'lengths': an integer input that is neither the indices of an "
                                           r"embedding Gather nor an attention mask"):
        split_host_embeddings(m)


@pytest.mark.rtl
def test_bert_small_three_way_on_the_small_rtl(tmp_path):
    """golden == SimPy == RTL on every output, the same cycles and retire trace."""
    _, path = _small_bert(tmp_path)
    v = run(str(path), "small", tmp_path / "run", rtl=True)
    qnets.assert_three_way(v)


@pytest.mark.parametrize("hw", ["small", "seed"])
def test_the_estimators_bytes_are_the_programs(tmp_path, hw):
    """The work hooks of QActMatMul, QConstAct, QLayerNorm, QSoftmax and QSpatialSlice (the
    pooler's token; and every other op of the encoder) give the compiled program's LOAD and STORE
    bytes per layer."""
    _, path = _small_bert(tmp_path)
    m, _, cal = driver.load_model_and_data(str(path), calib=2)
    cfg = load_config(hw)
    res = driver.compile_onnx(m, cfg, cal)
    layers = {L["name"]: L for L in res.binary.meta["layers"]}
    est = Estimator(res.qgraph).estimate(cfg)
    hooked = ("QActMatMul", "QConstAct", "QLayerNorm", "QSoftmax", "QSpatialSlice")
    assert {L["op"] for L in layers.values()} >= set(hooked)
    assert {e.name for e in est.layers} >= {n for n, L in layers.items() if L["op"] in hooked}
    off = [(e.name, e.load_bytes, layers[e.name]["ddr_bytes_in"], e.store_bytes, layers[e.name]["ddr_bytes_out"])
           for e in est.layers if layers[e.name]["op"] in hooked
           and (e.load_bytes, e.store_bytes) != (layers[e.name]["ddr_bytes_in"], layers[e.name]["ddr_bytes_out"])]
    assert not off, off


@pytest.mark.parametrize("rank", [3, 4])
def test_another_einsum_is_refused_naming_the_node(rank):
    """Only the one Einsum the rewrite writes is mapped: on a sequence tensor the lifting refuses
    another, on a 4-D tensor the importer does, each naming the node."""
    eq, shape = ("bkn,bkm->bmn", (1, 4, 6)) if rank == 3 else ("bkxn,bkxm->bmxn", (1, 4, 1, 6))
    n = onnx.helper.make_node("Einsum", ["x", "x"], ["y"], name="ein", equation=eq)
    m = qnets.make_model([n], {}, shape, "y", shape[:1] + shape[-1:] + shape[2:-1] + shape[-1:], opset=13)
    want = (r"node 'ein' \(Einsum\) reads the 3-D tensor 'x' of a sequence model" if rank == 3 else
            r"node 'ein' \(Einsum\): attribute equation='bkxn,bkxm->bmxn' unsupported \(only 'bkxn,bkxm->bnxm'")
    with pytest.raises(CompileError, match=want):
        import_onnx(m)


def test_the_scores_before_each_softmax_are_calibrated_free_of_their_row_offset(tmp_path):
    """``softmax_score_tensors``: per head the Einsum's scores and the key-mask Add's output
    (the Softmax's input), nothing else."""
    m, _ = _small_bert(tmp_path)
    g = run_passes(import_onnx(driver._device_model(m)[0]), None, False)
    names = softmax_score_tensors(g)
    ops = {(g.tensors[o].onnx_name or o): n.op for n in g.nodes for o in n.outputs}
    softmax_inputs = {g.tensors[n.inputs[0]].onnx_name or n.inputs[0] for n in g.nodes if n.op == "Softmax"}
    assert len(names) == 2 * SMALL["heads"] and softmax_inputs <= set(names)
    assert sorted(ops[n] for n in names) == ["Add"] * SMALL["heads"] + ["Einsum"] * SMALL["heads"]


def test_widen_by_offset_spread():
    """Each side widened by the spread of the mid-ranges; one sample: unchanged."""
    assert widen_by_offset_spread((-8.6, 8.3), [-6.6, 5.8]) == pytest.approx((-21.0, 20.7))
    assert widen_by_offset_spread((1.0, 2.0), [1.5]) == (1.0, 2.0)


def test_calibrate_widens_only_the_offset_free_tensors():
    """Two samples of a one-Add model whose values sit at offsets 0 and 4: minmax (0, 5) for both
    tensors, the offset-free one widened by the mid-range spread 4 on each side."""
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    zero = onnx.numpy_helper.from_array(np.zeros((1, 4), np.float32), "zero")
    model = onnx.helper.make_model(onnx.helper.make_graph([onnx.helper.make_node("Add", ["x", "zero"], ["y"])],
                                                          "g", [x], [y], [zero]),
                                   opset_imports=[onnx.helper.make_opsetid("", 17)])
    xs = [np.array([[0, 0.5, 1, 0.25]], np.float32), np.array([[4, 4.5, 5, 4.25]], np.float32)]
    got = calibrate(model, xs, ["x", "y"], row_offset_free=["y"])
    assert got["x"] == pytest.approx((0.0, 5.0)) and got["y"] == pytest.approx((-4.0, 9.0))
    assert calibrate(model, xs[:1], ["y"], row_offset_free=["y"])["y"] == pytest.approx((0.0, 1.0))
