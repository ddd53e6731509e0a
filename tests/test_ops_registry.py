"""The op table (tpucompile/ops): every entry complete, lookups by ONNX type and by QGraph op class,
refusals by name, and no op kind left in the drivers that dispatch through it."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import pytest
import qnets
from onnx import helper

from tpucompile.backend.compile import compile_qgraph
from tpucompile.frontend.onnx_import import SUPPORTED_OPS, import_onnx
from tpucompile.golden import quantize_input, run_golden
from tpucompile.ir import Node
from tpucompile.ops import FAMILIES, OP_TABLE, DeviceOp, OpDef, OpTable, QConv
from tpucompile.ops.common import no_attrs
from tpucompile.qgraph import QOp
from tpucompile.quantize import compile_model
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError

ROOT = Path(__file__).resolve().parents[1] / "tpucompile"


def test_every_entry_has_every_hook():
    assert len(OP_TABLE.ops) == sum(len(f.OPS) for f in FAMILIES)
    for d in OP_TABLE:
        assert isinstance(d, OpDef), d
        for hook in OpDef.HOOKS:
            assert getattr(d, hook) is None or callable(getattr(d, hook)), (d.op_type, hook)
        if d.device is not None or d.host is not None:
            assert d.quantize is not None, f"{d.op_type}: a device or host op needs a quantize rule"
        if d.import_node is not None:
            assert onnx.defs.has(d.op_type), f"{d.op_type} is not an ONNX op"
    assert OP_TABLE.device_ops, "no device op"
    for dev in OP_TABLE.device_ops:
        assert isinstance(dev, DeviceOp)
        assert issubclass(dev.qop, QOp) and dev.qop.__dataclass_params__.frozen, dev.qop
        for hook in DeviceOp.HOOKS:
            assert callable(getattr(dev, hook)), (dev.qop.__name__, hook)


def test_lookups():
    assert SUPPORTED_OPS == OP_TABLE.onnx_types
    assert SUPPORTED_OPS[:3] == ("Conv", "BatchNormalization", "Relu")     # the messages' order
    assert OP_TABLE.get("Alias").import_node is None                      # made by the passes only
    assert OP_TABLE.get("Hardmax") is None
    conv = OP_TABLE.get("Conv")
    assert OP_TABLE.importer("Conv", "c0") is conv.import_node
    z = np.zeros(1, np.int32)
    op = QConv("c0", "x", "y", np.zeros((1, 1, 1, 1), np.int8), z, z, z, (1, 1), (0, 0, 0, 0), False, 0, 0)
    assert OP_TABLE.device(op) is conv.device
    assert {d.qop.__name__ for d in OP_TABLE.device_ops} == {
        "QConv", "QDwConv", "QMaxPool", "QAvgPool", "QAdd", "QConcat", "QLut", "QMul", "QResize", "QSlice", "QPad",
        "QSpatialSlice", "QRegroup", "QSpatialTranspose", "QEdgePad", "QSoftmax", "QLayerNorm", "QActMatMul", "QConstAct",
        "QConvAdd", "QConvPool"}


def test_unknown_onnx_op_refused_with_node_name():
    with pytest.raises(CompileError, match=r"node 'act7': op Hardmax unsupported; supported ops: Conv, "):
        OP_TABLE.importer("Hardmax", "act7")
    m = qnets.make_model([helper.make_node("Hardmax", ["x"], ["y"], name="act7")], {}, (1, 2, 4, 4), "y", None)
    with pytest.raises(CompileError, match=r"node 'act7': op Hardmax unsupported; supported ops: "
                                           + ", ".join(SUPPORTED_OPS)):
        import_onnx(m)


def test_unknown_device_op_refused_with_its_name():
    class Bogus:
        name = "b0"
    with pytest.raises(CompileError, match=r"op 'b0': unsupported type Bogus"):
        OP_TABLE.device(Bogus())


def test_table_refuses_an_op_type_twice():
    with pytest.raises(ValueError, match="Conv defined twice"):
        OpTable([OpDef("Conv"), OpDef("Conv")])


# the drivers that dispatch through the table, and what they must no longer name
DRIVERS = ["frontend/onnx_import.py", "quantize/quantize.py", "qgraph.py", "golden.py", "backend"]


def _code_names(path: Path) -> set:
    """Identifiers and string constants of a module, docstrings excluded."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.alias):
            out.add(n.asname or n.name.split(".")[-1])
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            out.add(n.value)
    return out


@pytest.mark.parametrize("driver", DRIVERS)
def test_drivers_name_no_op_kind(driver):
    """No isinstance chain or op-type string left: every op kind is in its op module."""
    kinds = {d.qop.__name__ for d in OP_TABLE.device_ops} | {d.op_type for d in OP_TABLE}
    p = ROOT / driver
    for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
        named = _code_names(f) & kinds
        assert not named, f"{f.relative_to(ROOT)} names op kinds {sorted(named)}"


def test_an_op_is_one_module(monkeypatch):
    """docs/backend.md's worked example: ONNX Identity as one OpDef (an Alias after canonicalize)
    runs through import, passes, quantization, golden and the back end with no driver touched."""
    def canonicalize(graph, node, producers):
        return [Node("Alias", node.name, node.inputs, node.outputs)]

    identity = OpDef("Identity", import_node=no_attrs, fold=lambda node, x: x, canonicalize=canonicalize)
    extended = OpTable(OP_TABLE.ops + (() if OP_TABLE.get("Identity") else (identity,)))
    for k, v in vars(extended).items():
        monkeypatch.setattr(OP_TABLE, k, v)
    rng = np.random.default_rng(0)
    m = qnets.make_model([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
                          helper.make_node("Identity", ["c"], ["i"], name="id"),
                          helper.make_node("MaxPool", ["i"], ["y"], name="pool", kernel_shape=[2, 2])],
                         {"w": qnets.conv_w(rng, 8, 4, 1)}, (1, 4, 6, 6), "y", None)
    qg, g = compile_model(m, qnets.inputs((1, 4, 6, 6), 2, seed=1))
    assert [n.op for n in g.nodes] == ["Conv", "Alias", "MaxPool"]
    assert qg.aliases == {"i": "c"} and [type(op).__name__ for op in qg.ops] == ["QConv", "QMaxPool"]
    b = compile_qgraph(qg, load_config("small"))
    assert [L["op"] for L in b.meta["layers"]] == ["QConvPool"]       # the pool fused into the conv
    x = quantize_input(qg, qnets.inputs((1, 4, 6, 6), 1, seed=7)[0])
    assert run_golden(qg, x)["y"].shape == (1, 8, 5, 5)
