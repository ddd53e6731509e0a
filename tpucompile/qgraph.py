"""The quantized graph: the contract between the quantizer, the golden model and the back end.

Every device tensor is int8, layout NCHW, batch 1; a fully-connected activation is (1, C, 1, 1).
Real value of a tensor element ``q``: ``(q - zero_point) * scale``.

Every op's integer semantics are given by ``tpusim.arch.arith`` (gemmlowp fixed point) and are
implemented identically by ``tpucompile.golden``, the SimPy model and the RTL:

* ``QConv``   acc[n, oy, ox] = sum over (ci, ky, kx) of w[n, ci, ky, kx] * xp[ci, oy*sh+ky, ox*sw+kx]
              in int32, where ``xp`` is the input padded with ``x_zp`` (so padded taps cancel
              against the bias correction exactly like real inputs); then
              ``y = arith.requant_conv(acc, bias, mult, shift, y_zp, relu)``.
              ``bias`` already holds the zero-point correction:
              ``bias = round(b / (s_x * s_w[n])) - x_zp * sum(w[n])``.
              A Gemm/FC layer is a QConv with kh = kw = 1 on a (1, C, 1, 1) input.
* ``QMaxPool`` max over the window of the input padded with -128; output shares the input's
              scale and zero point.
* ``QAvgPool`` sum over the window (n = kh*kw taps, no padding), then
              ``arith.pool_avg(sum, n, x_zp, mult, shift, y_zp)`` with
              mult/shift = quantize_multiplier(s_x / (n * s_y)).
              GlobalAveragePool is a QAvgPool whose kernel equals the input (H, W).
* ``QAdd``    ``arith.add_int8(a, b, zp_a, mult_a, shift_a, zp_b, mult_b, shift_b,
              zp_out, mult_out, shift_out, relu)`` (TFLite style, 20-bit left shift).

Host ops (e.g. Softmax: the accelerator has no exponent unit) run in float32 on the host after
the device, on the dequantized device outputs.

Reshape/Flatten between (1, C, 1, 1) and (1, C) produce no op: ``aliases`` maps the ONNX name
to the device tensor holding the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

from tpusim.arch.errors import CompileError

__all__ = ["QTensor", "QConv", "QMaxPool", "QAvgPool", "QAdd", "QOp", "QGraph"]


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


def _check_arr(op: str, name: str, a: np.ndarray, dtype, shape: tuple):
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape:
        got = (getattr(a, "dtype", type(a)), getattr(a, "shape", None))
        raise CompileError(f"{op}: {name} must be {np.dtype(dtype)} {shape}, got {got}")


@dataclass(frozen=True)
class QConv:
    """Convolution / fully-connected layer (int8 x int8 -> int32 -> int8).

    weight: int8 [Cout, Cin, kh, kw] (per-output-channel symmetric, zero point 0).
    bias:   int32 [Cout], zero-point corrected (see module docstring).
    mult:   int32 [Cout] Q31 multipliers in [2**30, 2**31-1] or 0.  shift: int32 [Cout] in [-31, 30]
            (positive = left shift).  strides: (sh, sw).  pads: (top, left, bottom, right), in
            elements, padding value x_zp.  relu: clamp low end at y_zp.  x_zp, y_zp: zero points
            of inp and out.
    """
    name: str
    inp: str
    out: str
    weight: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    strides: tuple
    pads: tuple
    relu: bool
    x_zp: int
    y_zp: int

    def __post_init__(self):
        if not isinstance(self.weight, np.ndarray) or self.weight.dtype != np.int8 or self.weight.ndim != 4:
            raise CompileError(f"QConv {self.name!r}: weight must be int8 4-D, got "
                               f"{getattr(self.weight, 'dtype', None)} {getattr(self.weight, 'shape', None)}")
        cout = self.weight.shape[0]
        for nm, dt in (("bias", np.int32), ("mult", np.int32), ("shift", np.int32)):
            _check_arr(f"QConv {self.name!r}", nm, getattr(self, nm), dt, (cout,))
        if len(self.strides) != 2 or min(self.strides) < 1:
            raise CompileError(f"QConv {self.name!r}: bad strides {self.strides}")
        if len(self.pads) != 4 or min(self.pads) < 0:
            raise CompileError(f"QConv {self.name!r}: bad pads {self.pads}")

    @property
    def kernel(self) -> tuple:
        return tuple(self.weight.shape[2:])


@dataclass(frozen=True)
class QMaxPool:
    """Max pooling; kernel (kh, kw), strides (sh, sw), pads (top, left, bottom, right) padded
    with -128. Input and output share scale and zero point."""
    name: str
    inp: str
    out: str
    kernel: tuple
    strides: tuple
    pads: tuple


@dataclass(frozen=True)
class QAvgPool:
    """Average pooling over n = kh*kw taps (no padding): pool_avg(sum, n, x_zp, mult, shift, y_zp).

    mult (int, Q31) / shift (int) = quantize_multiplier(s_x / (n * s_y)).
    """
    name: str
    inp: str
    out: str
    kernel: tuple
    strides: tuple
    pads: tuple
    mult: int
    shift: int
    x_zp: int
    y_zp: int

    @property
    def n(self) -> int:
        return int(self.kernel[0] * self.kernel[1])


@dataclass(frozen=True)
class QAdd:
    """Element-wise residual add of two int8 tensors of the same shape (TFLite arithmetic).

    mult_a/shift_a = quantize_multiplier(s_a / (2 max(s_a, s_b))), likewise b;
    mult_out/shift_out = quantize_multiplier(2 max(s_a, s_b) / (2**20 s_out)).
    """
    name: str
    a: str
    b: str
    out: str
    zp_a: int
    mult_a: int
    shift_a: int
    zp_b: int
    mult_b: int
    shift_b: int
    zp_out: int
    mult_out: int
    shift_out: int
    relu: bool


QOp = Union[QConv, QMaxPool, QAvgPool, QAdd]


def op_inputs(op: QOp) -> list:
    """Names of the tensors an op reads."""
    return [op.a, op.b] if isinstance(op, QAdd) else [op.inp]


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
            for t in op_inputs(op):
                if t not in defined:
                    raise CompileError(f"op {op.name!r} reads {t!r} before it is produced")
            if op.out in defined:
                raise CompileError(f"op {op.name!r} redefines {op.out!r}")
            if op.out not in self.tensors:
                raise CompileError(f"op {op.name!r} output {op.out!r} has no QTensor")
            if isinstance(op, QConv):
                if op.x_zp != self.tensors[op.inp].zero_point or op.y_zp != self.tensors[op.out].zero_point:
                    raise CompileError(f"QConv {op.name!r}: zero points disagree with its tensors")
                cin = self.tensors[op.inp].shape[1]
                if op.weight.shape[1] != cin:
                    raise CompileError(f"QConv {op.name!r}: weight Cin {op.weight.shape[1]} != input C {cin}")
            if isinstance(op, QMaxPool):
                ti, to = self.tensors[op.inp], self.tensors[op.out]
                if (ti.scale, ti.zero_point) != (to.scale, to.zero_point):
                    raise CompileError(f"QMaxPool {op.name!r}: output params differ from input's")
            defined.add(op.out)
        for name in self.outputs:
            if self.resolve(name) not in defined:
                raise CompileError(f"graph output {name!r} is never produced")
