"""Host-side input transforms that a binary declares in ``meta["input_transforms"]``.

A compiled binary may ask the host to reshape an input before it is written to DDR (the
compiler decides, ``tpucompile/ops/conv.py``; the SimPy runner, the RTL testbench and
``tpusim run`` apply it). One kind exists:

``im2col``: {"name", "kind": "im2col", "orig_shape": (1, C, H, W), "kernel": (kh, kw),
"strides": (sh, sw), "pads": (t, l, b, r), "pad_value": int8 zero point, "device_shape"}.
The int8 image ``x`` (1, C, H, W) becomes (1, C*kh*kw, OH, OW) with channel
``k = (c*kh + ky)*kw + kx`` holding ``xpad[c, oy*sh + ky, ox*sw + kx]`` (``xpad`` = ``x`` padded
with ``pad_value``); OH = (H + t + b - kh) // sh + 1, OW likewise.
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.errors import CompileError


def im2col(x: np.ndarray, kernel, strides, pads, pad_value: int) -> np.ndarray:
    """int8 (1, C, H, W) -> (1, C*kh*kw, OH, OW), channel (c*kh + ky)*kw + kx (module docstring)."""
    from numpy.lib.stride_tricks import sliding_window_view
    t, l, b, r = pads
    kh, kw = kernel
    sh, sw = strides
    xp = np.pad(x[0], ((0, 0), (t, b), (l, r)), constant_values=pad_value)
    oh, ow = (xp.shape[1] - kh) // sh + 1, (xp.shape[2] - kw) // sw + 1
    win = sliding_window_view(xp, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]  # C,OH,OW,kh,kw
    return np.ascontiguousarray(win.transpose(0, 3, 4, 1, 2).reshape(1, -1, oh, ow)).astype(np.int8)


def host_input_transform(meta: dict, name: str, x: np.ndarray) -> np.ndarray:
    """Apply the binary's host-side input transform (if any) to the int8 NCHW input ``name``.
    CompileError if ``x`` does not have the transform's ``orig_shape``."""
    for tr in meta.get("input_transforms", []):
        if tr["name"] == name and tr["kind"] == "im2col":
            if tuple(x.shape) != tuple(tr["orig_shape"]):
                raise CompileError(f"input {name!r}: expected shape {tuple(tr['orig_shape'])}, got {x.shape}")
            return im2col(x, tr["kernel"], tr["strides"], tr["pads"], tr["pad_value"])
    return x


def host_feeds(binary, x_q) -> dict:
    """{input name: device array} of ``binary`` (a TpuBinary) for the int8 input ``x_q``: one
    array for a binary with one input, or a dict {input name: array} for one with several (each
    through ``host_input_transform``). CompileError naming a missing input."""
    if not isinstance(x_q, dict):
        if len(binary.inputs) != 1:
            raise CompileError(f"the binary has {len(binary.inputs)} inputs {[d.name for d in binary.inputs]}; "
                               "give one array per input name")
        name = binary.inputs[0].name
        return {name: host_input_transform(binary.meta, name, x_q)}
    missing = [d.name for d in binary.inputs if d.name not in x_q]
    if missing:
        raise CompileError(f"no input array for the binary's input(s) {missing}")
    return {d.name: host_input_transform(binary.meta, d.name, x_q[d.name]) for d in binary.inputs}

