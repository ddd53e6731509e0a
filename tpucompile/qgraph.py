"""The quantized graph: the contract between the quantizer, the golden model and the back end.

Every device tensor is int8, layout NCHW, batch 1; a fully-connected activation is (1, C, 1, 1).
Real value of a tensor element ``q``: ``(q - zero_point) * scale``.

The ops are ``QOp`` subclasses, one per device op, each defined with its integer semantics in its
op module (``tpucompile.ops``: ``QConv`` in conv.py, ``QMaxPool``/``QAvgPool`` in pool.py, ``QAdd``
in add.py). Their arithmetic is ``tpusim.arch.arith`` (gemmlowp fixed point), implemented
identically by ``tpucompile.golden``, the SimPy model and the RTL.

Host ops (e.g. a classifier's final Softmax; one inside the network runs on the vector unit) run
in float32 on the host after the device, on the dequantized device outputs.

Reshape/Flatten between (1, C, 1, 1) and (1, C) produce no op: ``aliases`` maps the ONNX name
to the device tensor holding the same bytes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from tpusim.arch.errors import CompileError

__all__ = ["QTensor", "QOp", "QGraph", "check_array", "dump_qgraph"]


@dataclass(frozen=True)
class QTensor:
    """An int8 activation tensor.

    name: unique tensor name.  shape: (N, C, H, W) in elements.  scale: real units per LSB (> 0).
    zero_point: int8 value representing real 0, in [-128, 127].
    """
    name: str
    shape: tuple
    scale: float
    zero_point: int

    def __post_init__(self):
        if len(self.shape) != 4 or any(int(d) <= 0 for d in self.shape):
            raise CompileError(f"QTensor {self.name!r}: shape must be 4-D positive NCHW, got {self.shape}")
        if not (self.scale > 0 and np.isfinite(self.scale)):
            raise CompileError(f"QTensor {self.name!r}: scale must be finite and > 0, got {self.scale}")
        if not -128 <= int(self.zero_point) <= 127:
            raise CompileError(f"QTensor {self.name!r}: zero_point {self.zero_point} outside [-128, 127]")

    @property
    def size_bytes(self) -> int:
        """Its int8 elements, unpadded: N x C x H x W bytes."""
        return int(np.prod(self.shape))


def check_array(op: str, name: str, a: np.ndarray, dtype, shape: tuple):
    """CompileError unless ``a`` is an ndarray of ``dtype`` and ``shape`` (``op`` and ``name`` for the message)."""
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape:
        got = (getattr(a, "dtype", type(a)), getattr(a, "shape", None))
        raise CompileError(f"{op}: {name} must be {np.dtype(dtype)} {shape}, got {got}")


class QOp:
    """Base of the QGraph's device ops. A subclass is a frozen dataclass with at least ``name``
    (the node name) and ``out`` (the output tensor name), defined in its op module of
    ``tpucompile.ops`` together with its ``tpucompile.ops.registry.DeviceOp``."""
    name: str
    out: str

    @property
    def inputs(self) -> tuple:
        """Names of the tensors the op reads, in the order its golden function takes them."""
        return (self.inp,)

    def verify(self, qg: "QGraph") -> None:
        """Check the op against its tensors in ``qg``; CompileError naming the op."""

    def constant_bytes(self) -> int:
        """The int8 constants the op loads from DDR (bytes): its ``weight``, ``value`` or
        ``table`` arrays (the per-layer compulsory traffic, tpucompile.backend.compile)."""
        return sum(int(a.size) for a in (getattr(self, k, None) for k in ("weight", "value", "table"))
                   if isinstance(a, np.ndarray))

    def needed_bytes(self, t: str, qg: "QGraph") -> int:
        """The bytes of input tensor ``t`` the op reads at the least: all of it (an op that
        samples its input says less)."""
        return qg.tensors[t].size_bytes


@dataclass
class QGraph:
    """A whole quantized network.

    tensors: every device tensor by name.  ops: in topological order.  inputs/outputs: device
    tensor names (the outputs may be names in ``aliases``).  host_ops: dicts such as
    {"op": "Softmax", "inp": name, "out": name, "axis": 1} run in float32 on the host after the
    device, reading dequantized device outputs.  fp32_outputs: final model output names (the host
    ops' outputs, or device outputs if none).  aliases: ONNX name -> device tensor name (no-op
    Reshape/Flatten).
    """
    tensors: dict
    ops: list
    inputs: list
    outputs: list
    host_ops: list = field(default_factory=list)
    fp32_outputs: list = field(default_factory=list)
    aliases: dict = field(default_factory=dict)

    def resolve(self, name: str) -> str:
        """Follow aliases until a device tensor name."""
        seen = set()
        while name in self.aliases:
            if name in seen:
                raise CompileError(f"alias cycle through {name!r}")
            seen.add(name)
            name = self.aliases[name]
        return name

    def tensor(self, name: str) -> QTensor:
        n = self.resolve(name)
        if n not in self.tensors:
            raise CompileError(f"unknown tensor {name!r}")
        return self.tensors[n]

    def validate(self) -> None:
        """Check names, topological order, and zero points/relu consistency; raise CompileError."""
        defined = set(self.inputs)
        for name in self.inputs:
            self.tensor(name)
        for op in self.ops:
            if not isinstance(op, QOp):
                raise CompileError(f"op {getattr(op, 'name', op)!r}: unsupported type {type(op).__name__}")
            for t in op.inputs:
                if t not in defined:
                    raise CompileError(f"op {op.name!r} reads {t!r} before it is produced")
            if op.out in defined:
                raise CompileError(f"op {op.name!r} redefines {op.out!r}")
            if op.out not in self.tensors:
                raise CompileError(f"op {op.name!r} output {op.out!r} has no QTensor")
            op.verify(self)
            defined.add(op.out)
        for name in self.outputs:
            if self.resolve(name) not in defined:
                raise CompileError(f"graph output {name!r} is never produced")


def _field_text(v) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{list(v.shape)}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_field_text(x) for x in v) + "]"
    return str(v)


def dump_qgraph(qg: QGraph) -> str:
    """Readable text of a QGraph: tensors (shape, scale, zero point), one line per op with its
    fields (arrays as dtype[shape]), aliases and host ops."""
    lines = ["tensors:"]
    for t in qg.tensors.values():
        lines.append(f"  %{t.name}: {'x'.join(map(str, t.shape))}xi8 scale={t.scale:.6g} zp={t.zero_point}")
    lines.append(f"inputs: {', '.join('%' + n for n in qg.inputs)}")
    lines.append("ops:")
    for op in qg.ops:
        attrs = ", ".join(f"{f.name}={_field_text(getattr(op, f.name))}" for f in dataclasses.fields(op)
                          if f.name not in ("name", "out", "inp", "a", "b"))
        args = ", ".join(f"%{i}" for i in op.inputs)
        lines.append(f"  %{op.out} = {type(op).__name__}({args}) {{{attrs}}}  // {op.name}")
    for k, v in qg.aliases.items():
        lines.append(f"alias %{k} = %{v}")
    for h in qg.host_ops:
        lines.append(f"host %{h['out']} = {h['op']}(%{h['inp']}) "
                     + "{" + ", ".join(f"{k}={_field_text(v)}" for k, v in h.items()
                                       if k not in ("op", "inp", "out", "model")) + "}")
    lines.append(f"outputs: {', '.join('%' + n for n in qg.outputs)}")
    return "\n".join(lines) + "\n"
