"""Golden int8 model: runs a QGraph layer by layer in numpy with exactly ``tpusim.arch.arith``.

Independent of tiling and of the binary format: each op runs its ``golden`` function of the op
table (``tpucompile.ops``; convolution is im2col with the input padded with its zero point +
``arith.matmul_acc`` (int32) + ``arith.requant_conv``), host ops their ``host`` function in
float32. All tensors are int8 NCHW.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops import OP_TABLE
from tpucompile.ops.conv import conv_int8
from tpucompile.qgraph import QGraph

__all__ = ["run_golden", "run_host_ops", "quantize_input", "dequantize", "conv_int8"]


def quantize_input(qg: QGraph, x, name: str | None = None):
    """float32 NCHW -> int8 with the input tensor's params (ONNX QuantizeLinear:
    round half to even, add zp, saturate to [-128, 127]). ``x`` a dict {input name: float32}
    (a model with several inputs): the dict of each quantized with its own parameters."""
    if isinstance(x, dict):
        return {n: quantize_input(qg, x[n], n) for n in qg.inputs}
    t = qg.tensor(name or qg.inputs[0])
    x = np.asarray(x, np.float64)
    if x.shape != tuple(t.shape) and x.size == int(np.prod(t.shape)) and x.ndim in (2, 3):
        x = x.reshape(t.shape)       # a (1, K) / (1, C, L) model input, on the device (1, K, 1, 1) / (1, C, 1, L)
    q = np.round(x / t.scale) + t.zero_point
    return np.clip(q, -128, 127).astype(np.int8)


def dequantize(qg: QGraph, name: str, q: np.ndarray) -> np.ndarray:
    """int8 -> float32 real values: (q - zero_point) * scale."""
    t = qg.tensor(name)
    return ((np.asarray(q, np.float64) - t.zero_point) * t.scale).astype(np.float32)


def run_golden(qg: QGraph, x) -> dict:
    """Run every device op. x: int8 NCHW input of qg.inputs[0]'s shape, or a dict {name: int8}
    of every input of ``qg.inputs``.
    Returns {tensor name: int8 NCHW array} for the input and every op output (device names;
    use qg.resolve() for aliases). Raises ValueError for a wrong input dtype/shape."""
    xs = x if isinstance(x, dict) else {qg.inputs[0]: x}
    env = {}
    for name in qg.inputs if isinstance(x, dict) else qg.inputs[:1]:
        v, t = np.asarray(xs.get(name)), qg.tensors[name]
        if v.dtype != np.int8 or tuple(v.shape) != tuple(t.shape):
            raise ValueError(f"golden input {name!r} must be int8 {t.shape}, got {v.dtype} {v.shape}")
        env[t.name] = v
    for op in qg.ops:
        y = OP_TABLE.device(op).golden(op, *(env[name] for name in op.inputs))
        if tuple(y.shape) != tuple(qg.tensors[op.out].shape):
            raise AssertionError(f"{op.name}: golden shape {y.shape} != {qg.tensors[op.out].shape}")
        env[op.out] = y
    return env


def run_host_ops(qg: QGraph, env: dict) -> dict:
    """Dequantize the device outputs and run the host ops in float32.
    Returns {name: float32 array} for every fp32_output (device outputs are dequantized and
    reshaped to their ONNX shape when they are aliases)."""
    vals = {}
    for h in qg.host_ops:
        d = OP_TABLE.get(h["op"])
        if d is None or d.host is None:
            raise ValueError(f"unknown host op {h['op']!r}")
        xs = [vals[n] if n in vals else dequantize(qg, n, env[qg.resolve(n)]).reshape(s)   # a host op's output, or a device one
              for n, s in zip(h.get("inputs", [h["inp"]]), h.get("shapes", [h.get("shape")]))]
        y = d.host(h, *xs)
        vals.update(y if isinstance(y, dict) else {h["out"]: y})   # a host tail: several outputs
    for name in qg.fp32_outputs:
        if name not in vals:
            vals[name] = dequantize(qg, name, env[qg.resolve(name)])
    return vals
