"""Bad compiler input: every class gets one clear line on stderr, exit status 2, no traceback.

Inputs come from tests/badinputs.py; the tpucompile CLI runs in-process (``main([...])``), the
calibration cases go through ``tpucompile.driver`` (the API tpusim.flow.cosim uses).
"""
from __future__ import annotations

import re
from pathlib import Path

import badinputs as B
import numpy as np
import onnx
import pytest
import qnets
import yaml

from tpucompile import driver
from tpucompile.cli import main
from tpucompile.ops import OP_TABLE
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError

SUPPORTED = ", ".join(OP_TABLE.onnx_types)       # the importer's list, in op-table order


def compile_cli(tmp_path, capsys, model, hw="small", *extra):
    """Run ``tpucompile`` on ``model`` (ModelProto or bytes); returns (path, stderr line)."""
    p = tmp_path / "m.onnx"
    if isinstance(model, bytes):
        p.write_bytes(model)
    else:
        onnx.save(model, p)
    out = tmp_path / "m.tpubin"
    rc = main([str(p), "--hw", str(hw), "-o", str(out), "--calib", "1", *extra])
    cap = capsys.readouterr()
    assert rc == 2, cap.out
    assert "Traceback" not in cap.err and len(cap.err.strip().splitlines()) == 1, cap.err
    assert not out.exists(), "a refused model must not leave an output file"
    return p, cap.err.strip()


def test_good_model_compiles(tmp_path, capsys):
    p = tmp_path / "m.onnx"
    onnx.save(B.good_model(), p)
    assert main([str(p), "--hw", "small", "-o", str(tmp_path / "m.tpubin"), "--calib", "1"]) == 0


def test_not_an_onnx_file(tmp_path, capsys):
    p, err = compile_cli(tmp_path, capsys, B.not_onnx_bytes())
    assert err.startswith(f"tpucompile: error: {p}: not a readable ONNX model (DecodeError: ")
    with pytest.raises(CompileError, match=r"not a readable ONNX model \(DecodeError"):
        driver.load_model(p)


def test_truncated_protobuf(tmp_path, capsys):
    p, err = compile_cli(tmp_path, capsys, B.truncated_bytes())
    assert err.startswith(f"tpucompile: error: {p}: not a readable ONNX model (DecodeError: ")


def test_empty_file(tmp_path, capsys):
    """A 0-byte .onnx decodes as an empty ModelProto: refused as such, naming the file (it was
    "model fails onnx.checker: ... ir_version" in tpucompile and "the model has no run-time
    input" in cosim)."""
    p, err = compile_cli(tmp_path, capsys, b"")
    assert err == f"tpucompile: error: {p}: not an ONNX model (the file is empty)"
    with pytest.raises(CompileError, match=r"not an ONNX model \(the file is empty\)"):
        driver.load_model_and_data(p, calib=1)


def test_protobuf_without_graph(tmp_path, capsys):
    """Bytes that decode as a ModelProto with no graph (here: only ir_version, field 1) are
    refused naming the file, not taken for a model without inputs."""
    p, err = compile_cli(tmp_path, capsys, b"\x08\x07")
    assert err == f"tpucompile: error: {p}: not an ONNX model (it decodes to a ModelProto without a graph)"


def test_model_failing_onnx_checker(tmp_path, capsys):
    _, err = compile_cli(tmp_path, capsys, B.checker_failure())
    assert err == ("tpucompile: error: model fails onnx.checker: Nodes in a graph must be "
                   "topologically sorted, however input 'ghost' of node: name: conv0 OpType: Conv "
                   "is not output of any previous nodes.")


def test_readme_lists_every_supported_op():
    """README's front-end paragraph names exactly the ops of the table."""
    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    para = text[text.index("float32 models made of"):text.index("anything else is refused")]
    named = set(re.findall(r"[A-Z][A-Za-z]+", para))
    assert named == set(OP_TABLE.onnx_types), (sorted(named ^ set(OP_TABLE.onnx_types)))


def test_unsupported_op_names_node_and_lists_ops(tmp_path, capsys):
    _, err = compile_cli(tmp_path, capsys, B.unsupported_op())
    assert err == f"tpucompile: error: node 'sig0': op Hardmax unsupported; supported ops: {SUPPORTED}"


@pytest.mark.parametrize("kind,msg", [
    ("dilations", "node 'conv0' (Conv): attribute dilations=[0, 2] invalid (2 values >= 1 expected)"),
    ("group", "node 'conv0' (Conv): attribute group=0 invalid (a positive integer expected)"),
    ("auto_pad", "node 'conv0' (Conv): attribute auto_pad='SAME' invalid (ONNX allows NOTSET, SAME_UPPER, "
                 "SAME_LOWER, VALID)"),
    ("ceil_mode", "node 'pool0' (MaxPool): attribute ceil_mode=2 invalid (0 or 1)"),
    ("strides", "node 'conv0' (Conv): attribute pads/strides=([1, 1, 1, 1], [0, 1]) invalid"),
])
def test_unsupported_attribute_value(tmp_path, capsys, kind, msg):
    _, err = compile_cli(tmp_path, capsys, B.bad_attribute(kind))
    assert err == f"tpucompile: error: {msg}"


@pytest.mark.parametrize("gen,msg", [
    (B.dynamic_shape, "tensor 'x' has a dynamic/unknown dimension (N); only static shapes are supported"),
    (B.missing_shape, "graph input 'x' has no shape; only static shapes are supported"),
])
def test_dynamic_or_missing_shape(tmp_path, capsys, gen, msg):
    _, err = compile_cli(tmp_path, capsys, gen())
    assert err == f"tpucompile: error: {msg}"


def test_unsupported_dtype(tmp_path, capsys):
    _, err = compile_cli(tmp_path, capsys, B.unsupported_dtype())
    assert err == "tpucompile: error: graph input 'x' has dtype float16, only float32 is supported"


def test_layer_that_cannot_be_tiled(tmp_path, capsys):
    hw = tmp_path / "tiny.yaml"
    hw.write_text(yaml.safe_dump(B.tiny_config()))
    _, err = compile_cli(tmp_path, capsys, B.untileable(), hw, "--no-im2col")
    assert err == ("tpucompile: error: QConv 'conv0' (8->8, kernel 15x15, stride 1x1, output 64x64) "
                   "cannot be tiled into the 256-word SRAM of config 'tiny' (even a one-pixel tile "
                   "needs 306 words: double-buffered weight tiles, requant tables, input window)")


def test_ddr_footprint_past_2_to_40_refused_before_calibration(tmp_path, capsys):
    _, err = compile_cli(tmp_path, capsys, B.huge_footprint())
    assert err == ("tpucompile: error: graph input 'x' of shape (1, 8, 524288, 262144) needs "
                   "1099511627776 bytes of DDR, past the 40-bit address space (2^40 bytes)")


@pytest.mark.parametrize("images,msg", [
    ([], "calibration needs at least one image, got 0"),
    ([np.zeros((1, 3, 8, 8), np.float32)],
     "calibration image #0 has shape (1, 3, 8, 8), but model input 'x' has shape (1, 8, 8, 8)"),
    ([np.zeros((1, 8, 8, 8)), np.full((1, 8, 8, 8), np.nan)],
     "calibration image #1 has 512 non-finite values (NaN or infinity)"),
    (["abc"], "calibration image #0 is not a float array (str: could not convert string to float: 'abc')"),
])
def test_bad_calibration_data(images, msg):
    with pytest.raises(CompileError) as e:
        driver.compile_onnx(B.good_model(), load_config("small"), images)
    assert str(e.value) == msg


@pytest.mark.parametrize("kind,msg", [
    ("unknown", "sram: unknown key(s) ['ports']; expected ['banks', 'size_bytes']"),
    ("missing", "dma: missing key(s) ['outstanding']"),
    ("inconsistent", "config 'inconsistent': array.cols must be a power of two >= 4, got 12 (an accumulator "
                     "row of cols int32 must fill whole words or whole lane groups)"),
    ("type", "sram.banks: expected an integer, got 'four'"),
    ("not_mapping", "config: expected a mapping, got list ['name', 'small']"),
])
def test_bad_hardware_config(tmp_path, capsys, kind, msg):
    hw = tmp_path / f"{kind}.yaml"
    hw.write_text(yaml.safe_dump(B.bad_config(kind)))
    _, err = compile_cli(tmp_path, capsys, B.good_model(), hw)
    assert err == f"tpucompile: error: {hw}: {msg}"


def test_hardware_config_not_yaml(tmp_path, capsys):
    hw = tmp_path / "bad.yaml"
    hw.write_text("array: [rows: 8\n")
    _, err = compile_cli(tmp_path, capsys, B.good_model(), hw)
    assert err.startswith(f"tpucompile: error: {hw}: not valid YAML: ")


@pytest.mark.parametrize("gen,msg", [
    (B.malformed_initializer, "model fails onnx.checker: TensorProto (tensor name: w) raw_data size "
                              "(12 bytes) is too small for the declared shape and type (2304 bytes required)."),
    (B.attribute_of_wrong_type, "node 'conv0' (Conv): attribute kernel_shape has type FLOAT, expected INTS"),
    (B.huge_constant_of_shape, "node 'cos0' (ConstantOfShape): folding it would create a constant of "
                               "shape (1073741824, 8, 2, 2) (34359738368 elements, more than 268435456)"),
])
def test_fuzz_findings_are_clean_errors(tmp_path, capsys, gen, msg):
    """Models the fuzzer found crashing the front end (ValueError, TypeError, MemoryError)."""
    _, err = compile_cli(tmp_path, capsys, gen())
    assert err.startswith(f"tpucompile: error: {msg}")


def _conv_bias(n):
    m = B.conv()
    m.graph.node[0].input.append("b")
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros(n, np.float32), "b"))
    return m


def _nan_weight():
    m = B.conv()
    w = onnx.numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[0, 0, 0, 0] = np.nan
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    return m


@pytest.mark.parametrize("make, msg", [
    (lambda: _conv_bias(5), "node 'conv0' (Conv): bias 'b' must be a constant of 8 values, got (5,)"),
    (_nan_weight, "initializer 'w' (dims [8, 8, 3, 3]) holds 1 non-finite values (NaN or infinity)"),
])
def test_models_refused_before_calibration(tmp_path, capsys, make, msg):
    _, err = compile_cli(tmp_path, capsys, make())
    assert err == f"tpucompile: error: {msg}"


@pytest.mark.parametrize("kind, msg", [
    ("axis", "node 'cat' (Concat): axis 2 of the rank-4 output (1, 6, 12, 6) is unsupported: only the "
             "channel axis (1) concatenates without a copy (each input a block range of one blocked "
             "buffer); an H or W concatenation would need a copy"),
    ("twice", "node 'cat' (Concat): input 'b' appears twice; without a copy a tensor is one part only"),
    ("two_concats", "tensor 'a' is an input of Concat 'cat1' and of 'cat2': without a copy a tensor is a "
                    "part of one Concat output only"),
    ("pad_values", "tensor 'c' needs border value -128 for 'pool' and {zp} for 'h2': two different pad "
                   "values on one tensor are unsupported ('h2' reads 'a', a view in the buffer of 'c')"),
])
def test_concat_refused_by_name(tmp_path, capsys, kind, msg):
    """Concats that would need a copy (or two layouts at once) are refused naming the nodes."""
    _, err = compile_cli(tmp_path, capsys, qnets.concat_refused(kind))
    want = re.escape(f"tpucompile: error: {msg}").replace(re.escape("{zp}"), "-?[0-9]+")   # the conv's zero point
    assert re.fullmatch(want, err), err


def test_batch_refusal_names_the_graph_input(tmp_path, capsys):
    """A batch-4 model: the refusal names the graph input with its shape, not the first layer
    output that inherits the batch."""
    m = B.conv()
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    _, err = compile_cli(tmp_path, capsys, m)
    assert err == ("tpucompile: error: graph input 'x' of shape (4, 8, 8, 8): batch 4 unsupported "
                   "(batch 1 only; export the model with a batch of 1)")


@pytest.mark.parametrize("model, msg", [
    ("resnet", "model 'resnet' is not a built-in model and no such file exists; did you mean 'resnet50'? "
               "built-in models: alexnet, "),
    ("nosuch/m.onnx", "model file 'nosuch/m.onnx' not found (built-in models: alexnet, "),
    ("zzz", "model 'zzz' is not a built-in model and no such file exists; built-in models: alexnet, "),
])
def test_unknown_model(tmp_path, capsys, model, msg):
    """A typo of a built-in name gets the nearest names; a path a missing file."""
    assert main([model, "--hw", "small", "-o", str(tmp_path / "m.tpubin")]) == 2
    assert capsys.readouterr().err.startswith(f"tpucompile: error: {msg}")
    with pytest.raises(CompileError, match=re.escape(msg)):
        driver.load_model(model)
