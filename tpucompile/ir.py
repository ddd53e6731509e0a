"""The compiler's small float IR: Graph of Nodes over named Tensors, plus verify() and dump().

Op names are the ONNX op types (Conv, Add, ...) plus ``Alias`` (a no-op reshape whose output
shares its input's bytes, e.g. (1, C, 1, 1) <-> (1, C)). Attributes are normalised by the front
end (e.g. Conv always has kernel_shape, strides, pads (top, left, bottom, right), relu).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from tpusim.arch.errors import CompileError

__all__ = ["Tensor", "Node", "Graph", "verify", "dump", "prune", "consumers", "readers", "producers", "union_groups"]


@dataclass
class Tensor:
    """A value: shape (tuple of ints, elements), dtype (numpy dtype name, e.g. 'float32'),
    value (np.ndarray for a constant, else None), onnx_name (name of the ONNX tensor holding the
    same values, used for calibration; defaults to name), qparams ((scale, int8 zero point)
    pinned by a pre-quantized model's QuantizeLinear / DequantizeLinear pair, used instead of
    calibration; None otherwise), weight_scale (float64 [Cout]: the per-output-channel scales
    of a pre-quantized model's symmetric int8 weights, so the compiler keeps its integers)."""
    name: str
    shape: tuple
    dtype: str = "float32"
    value: Optional[np.ndarray] = None
    onnx_name: Optional[str] = None
    qparams: Optional[tuple] = None
    weight_scale: Optional[np.ndarray] = None

    @property
    def is_const(self) -> bool:
        return self.value is not None


@dataclass
class Node:
    """One operation: op type, unique node name, input/output tensor names, attributes."""
    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    """tensors: name -> Tensor (activations and constants); nodes in topological order;
    inputs/outputs: names of the graph's runtime inputs and final outputs."""
    tensors: dict
    nodes: list
    inputs: list
    outputs: list

    def const(self, name: str) -> Optional[np.ndarray]:
        t = self.tensors.get(name)
        return None if t is None else t.value

    def add_const(self, name: str, value: np.ndarray) -> str:
        self.tensors[name] = Tensor(name, tuple(value.shape), str(value.dtype), value)
        return name


def producers(graph: Graph) -> dict:
    """tensor name -> Node producing it."""
    return {o: n for n in graph.nodes for o in n.outputs}


def consumers(graph: Graph) -> dict:
    """tensor name -> list of Nodes reading it."""
    out: dict = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                out.setdefault(i, []).append(n)
    return out


def readers(graph: Graph, name: str) -> list:
    """The Nodes reading tensor ``name``, in graph order, a node once per input slot that reads
    it: ``consumers(graph).get(name, [])`` without building the map of every tensor (an op hook
    asking about one tensor: BERT-base's 144 Softmax hooks did, 1 s of a compile)."""
    return [n for n in graph.nodes for i in n.inputs if i == name]


def union_groups(groups) -> tuple:
    """(find, parent) of the union of the tensor-name lists ``groups`` (each list one group, its
    first name the group's root): ``find(t)`` is the root of t's group; parent's keys are every
    name seen."""
    parent: dict = {}

    def find(t):
        while parent.setdefault(t, t) != t:
            t = parent[t]
        return t

    for grp in groups:
        for t in grp[1:]:
            a, b = find(t), find(grp[0])
            if a != b:
                parent[a] = b
    return find, parent


def prune(graph: Graph) -> Graph:
    """Drop nodes whose outputs are never used and tensors nothing refers to; an unused output of
    a node with several becomes "" (ONNX's absent optional output)."""
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(o in live for o in n.outputs):
            if len(n.outputs) > 1:          # an unused output of a Split: absent ("")
                n.outputs = [o if o in live else "" for o in n.outputs]
            kept.append(n)
            live.update(i for i in n.inputs if i)
    kept.reverse()
    live.update(graph.inputs)
    return Graph({k: v for k, v in graph.tensors.items() if k in live}, kept,
                 list(graph.inputs), list(graph.outputs))


def verify(graph: Graph) -> None:
    """Check: every input defined before use (topological), every tensor has a known static
    shape, no output defined twice, graph outputs produced, no dangling node outputs.
    Raises CompileError naming the node or tensor."""
    defined = set(graph.inputs) | {k for k, t in graph.tensors.items() if t.is_const}
    used = set(graph.outputs) | {i for n in graph.nodes for i in n.inputs}
    names = set()
    for n in graph.nodes:
        if n.name in names:
            raise CompileError(f"node name {n.name!r} ({n.op}) used twice")
        names.add(n.name)
        for i in n.inputs:
            if i and i not in defined:
                raise CompileError(f"node {n.name!r} ({n.op}) reads {i!r} which is not defined "
                                   "before it (graph not topological or input missing)")
        for o in filter(None, n.outputs):
            if o in defined:
                raise CompileError(f"node {n.name!r} ({n.op}) redefines tensor {o!r}")
            if o not in used:
                raise CompileError(f"node {n.name!r} ({n.op}) output {o!r} is dangling (never used)")
            defined.add(o)
    for name in list(graph.inputs) + list(graph.outputs) + [o for n in graph.nodes for o in n.outputs if o]:
        t = graph.tensors.get(name)
        if t is None:
            raise CompileError(f"tensor {name!r} has no Tensor entry")
        if t.shape is None or any(not isinstance(d, (int, np.integer)) or d <= 0 for d in t.shape):
            raise CompileError(f"tensor {name!r} has unknown or dynamic shape {t.shape}")
    for o in graph.outputs:
        if o not in defined:
            raise CompileError(f"graph output {o!r} is never produced")


_DT = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32", "int8": "i8",
       "uint8": "u8", "bool": "i1"}


def _ty(t: Tensor) -> str:
    dims = "x".join(str(d) for d in t.shape) if t.shape else ""
    dt = _DT.get(t.dtype, t.dtype)
    return f"{dims}x{dt}" if dims else dt


def _attr(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_attr(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, np.ndarray):
        return f"dense<{v.dtype}{list(v.shape)}>"
    return str(v)


def dump(graph: Graph) -> str:
    """MLIR-like text, one line per node:
    ``%out = tpu.conv(%x, %w) {strides=[2,2], pads=[3,3,3,3]} : (1x3x224x224xf32, ...) -> (...)``
    """
    ins = ", ".join(f"%{i}: {_ty(graph.tensors[i])}" for i in graph.inputs)
    outs = ", ".join(_ty(graph.tensors[o]) for o in graph.outputs if o in graph.tensors)
    lines = [f"func @main({ins}) -> ({outs}) {{"]
    for n in graph.nodes:
        args = ", ".join(f"%{i}" for i in n.inputs if i)
        attrs = ", ".join(f"{k}={_attr(v)}" for k, v in sorted(n.attrs.items()))
        attrs = f" {{{attrs}}}" if attrs else ""
        tin = ", ".join(_ty(graph.tensors[i]) for i in n.inputs if i and i in graph.tensors)
        tout = ", ".join(_ty(graph.tensors[o]) for o in n.outputs if o in graph.tensors)
        res = ", ".join(f"%{o}" for o in n.outputs)
        lines.append(f"  {res} = tpu.{n.op.lower()}({args}){attrs} : ({tin}) -> ({tout})"
                     f"  // {n.name}")
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
