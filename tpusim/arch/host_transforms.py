"""Host-side input transforms that a binary declares in ``meta["input_transforms"]``.

A compiled binary may ask the host to reshape an input before it is written to DDR (the
compiler decides, ``tpucompile/ops/conv.py``; the SimPy runner, the RTL testbench and
``tpusim run`` apply it). Two kinds exist:

``im2col``: {"name", "kind": "im2col", "orig_shape": (1, C, H, W), "kernel": (kh, kw),
"strides": (sh, sw), "pads": (t, l, b, r), "pad_value": int8 zero point, "device_shape"}.
The int8 image ``x`` (1, C, H, W) becomes (1, C*kh*kw, OH, OW) with channel
``k = (c*kh + ky)*kw + kx`` holding ``xpad[c, oy*sh + ky, ox*sw + kx]`` (``xpad`` = ``x`` padded
with ``pad_value``); OH = (H + t + b - kh) // sh + 1, OW likewise.

``key_mask_bias``: {"name", "kind": "key_mask_bias", "orig_shape": (1, T, 1, 1),
"device_shape": (1, W, 1, n)}. A transformer's run-time attention mask over its T keys, int8:
0 = attended, -128 = masked (the host's extended mask 0 / large negative quantized with scale 1,
zero point 0), becomes the int32 little-endian bias row the score MatMuls' REQUANT tables take
(``tpucompile/ops/act_matmul.py``): ``KEY_MASK_BIAS`` for a masked key, 0 otherwise, padded with
0 to ``W*n/4`` keys (whole N tiles), its bytes as ``n`` SRAM words of W bytes: byte ``i`` is
channel ``i % W`` of pixel ``i // W`` (the blocked layout of one channel block then holds the row
in consecutive words).
"""
from __future__ import annotations

import numpy as np

from tpusim.arch.errors import CompileError

#: the REQUANT bias of a masked key's score: far below any K*127*127 accumulator, so the score
#: saturates to -128 (SOFTMAX ``mask`` = 1 then gives it probability 0); no int32 wrap for K < 2^16
KEY_MASK_BIAS = -(1 << 30)
#: the two int8 values of a key mask input: attended, masked
KEY_MASK_VALUES = (0, -128)


def key_mask_bias(name: str, m: np.ndarray) -> np.ndarray:
    """int32 (T,) REQUANT bias row of the int8 key mask ``m`` (any shape of T values: 0 attended,
    -128 masked; module docstring). CompileError naming the input and the first other value."""
    v = np.asarray(m).reshape(-1)
    bad = v[(v != KEY_MASK_VALUES[0]) & (v != KEY_MASK_VALUES[1])]
    if bad.size:
        raise CompileError(f"attention mask input {name!r}: value {int(bad[0])} at key "
                           f"{int(np.flatnonzero(v == bad[0])[0])}; a key mask holds only 0 (attended) or -128 "
                           "(masked: the extended mask's large negative quantized)")
    return np.where(v == KEY_MASK_VALUES[1], KEY_MASK_BIAS, 0).astype("<i4")


def key_mask_bytes(name: str, m: np.ndarray, device_shape) -> np.ndarray:
    """The ``key_mask_bias`` transform: int8 (1, T, 1, 1) mask -> int8 ``device_shape`` (1, W, 1,
    n), the bytes of the bias row padded with 0 to W*n/4 keys as n words (module docstring)."""
    row = key_mask_bias(name, m)
    _, w, _, n = (int(d) for d in device_shape)
    if row.size * 4 > w * n:
        raise CompileError(f"attention mask input {name!r}: {row.size} keys, the binary holds {w * n // 4}")
    out = np.zeros(w * n // 4, "<i4")
    out[:row.size] = row
    return np.ascontiguousarray(out.view(np.int8).reshape(n, w).T).reshape(1, w, 1, n)


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
        if tr["name"] == name and tr["kind"] == "key_mask_bias":
            if tuple(x.shape) != tuple(tr["orig_shape"]):
                raise CompileError(f"attention mask input {name!r}: expected shape {tuple(tr['orig_shape'])} "
                                   f"(one int8 per key), got {tuple(x.shape)}")
            dev = tr.get("device_shape")
            if not (isinstance(dev, list) and len(dev) == 4 and all(isinstance(v, int) and v > 0 for v in dev)
                    and dev[1] * dev[3] % 4 == 0):
                raise CompileError(f"attention mask input {name!r}: the binary's key_mask_bias transform has device_shape "
                                   f"{dev!r}, not (1, W, 1, n) positive integers holding whole int32 biases")
            return key_mask_bytes(name, x, dev)
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

