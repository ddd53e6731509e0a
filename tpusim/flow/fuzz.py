"""Fuzzing of the four input parsers: ``python -m tpusim.flow.fuzz --cases 100000``.

Targets (the cases are shared round-robin between them):

* ``loader``   ``TpuBinary.from_bytes`` on random bytes and on mutated valid binaries (byte
               flips, truncation, section-table edits, JSON sections replaced by random JSON;
               the CRC is recomputed for most of them so the parser gets past the checksum),
               then ``decode_program`` on its code.
* ``decoder``  ``isa.decode`` on random 32-byte words (random and valid opcodes); a word that
               decodes must re-encode to the same bytes.
* ``importer`` ``import_onnx`` + the front-end passes on mutated small ONNX models (attributes,
               op types, dims, dtypes, node inputs, initializers, opsets) and on corrupted
               serialized bytes.
* ``config``   ``config_from_dict`` / ``parse_config_text`` on mutated valid configs, random
               nested YAML-ish values and corrupted YAML text.

Expected outcome of a case: success, or a ``TpuError`` (for the ONNX bytes, also a protobuf
DecodeError, which ``tpucompile`` turns into a CompileError). Anything else is a *crash*; a case
running longer than ``--timeout`` seconds (SIGALRM) is a *hang*; a broken property (a decoded
word that does not re-encode to itself) is a *failure*. Exit status 0 only if all three are 0.
Every case is seeded by (seed, target, index): ``--replay TARGET:INDEX`` reruns one with its
traceback.
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import struct
import sys
import time
import traceback
import zlib
from collections import Counter

import numpy as np

from tpucompile.frontend.onnx_import import import_onnx
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import CONFIG_DIR, config_from_dict, load_config, parse_config_text
from tpusim.arch.errors import TpuError
from tpusim.arch.isa import BY_CODE, HEADER_BITS, decode, decode_program, encode, encode_program, make

TARGETS = ("loader", "decoder", "importer", "config")


class Hang(Exception):
    """Raised by the SIGALRM handler when a case runs past its timeout."""


class PropertyFailure(Exception):
    """A case returned a wrong result (not an exception a user would see)."""


# ------------------------------------------------------------------------------ random values

def rand_int(r: random.Random) -> int:
    return r.choice([0, 1, -1, 2, 3, 7, 8, 16, 255, 256, 1 << 15, 1 << 16, (1 << 31) - 1, 1 << 31,
                     1 << 32, 1 << 39, 1 << 40, (1 << 40) - 1, 1 << 63, 1 << 64, -(1 << 63),
                     r.randint(-1000, 1000), r.getrandbits(r.randint(1, 70))])


def rand_scalar(r: random.Random):
    k = r.randrange(9)
    if k < 3:
        return rand_int(r)
    return [None, True, r.choice([0.5, -1.5, 1e300, float("inf"), float("nan")]),
            r.choice(["", "x", "seed", "0x10", "1e3", "four", "NaN"]), False, 1e-30][k - 3]


def rand_json(r: random.Random, depth: int = 0):
    """A random JSON-able value (nested lists and dicts, odd numbers and strings)."""
    k = r.randrange(10 if depth < 3 else 6)
    if k < 6:
        return rand_scalar(r)
    if k < 8:
        return [rand_json(r, depth + 1) for _ in range(r.randrange(4))]
    keys = ["name", "shape", "scale", "zero_point", "ddr_addr", "blk", "pads", "dtype", "addr",
            "size", "value", "inputs", "outputs", "input_transforms", "orig_shape", "x", ""]
    return {r.choice(keys): rand_json(r, depth + 1) for _ in range(r.randrange(5))}


def mutate_bytes(r: random.Random, raw: bytes, n: int | None = None) -> bytes:
    b = bytearray(raw)
    for _ in range(n or r.randint(1, 6)):
        k = r.randrange(6)
        if not b:
            b += bytes([r.randrange(256)])
        elif k == 0:
            b[r.randrange(len(b))] ^= 1 << r.randrange(8)
        elif k == 1:
            b[r.randrange(len(b))] = r.randrange(256)
        elif k == 2:
            del b[r.randrange(len(b)):]
        elif k == 3:
            i = r.randrange(len(b))
            b[i:i] = bytes(r.randrange(256) for _ in range(r.randint(1, 8)))
        elif k == 4:
            i = r.randrange(len(b))
            del b[i:i + r.randint(1, 16)]
        else:
            i = r.randrange(len(b))
            v = rand_int(r) & ((1 << 64) - 1)
            b[i:i + 8] = v.to_bytes(8, "little")[:len(b) - i]
    return bytes(b)


# ------------------------------------------------------------------------------ loader

_VALID_BINARIES: list = []


def valid_binaries() -> list:
    """A few valid .tpubin images (small config hash) with fills, constants, I/O and meta."""
    if not _VALID_BINARIES:
        h = load_config("small").hash_bytes()
        dma = dict(count1=1, count2=1)
        prog = [make("DMA_LOAD", signal=2, ddr_addr=0x10000, sram_addr=0, inner_bytes=16, **dma),
                make("DMA_STORE", wait=1, ddr_addr=0x20000, sram_addr=0, inner_bytes=16, **dma),
                make("LOAD_QREG", qreg=3, multiplier=1 << 30, shift=-2, zero_point=4),
                make("HALT")]
        x = TensorDesc("x", (1, 8, 1, 2), 0.05, 0, 0x10000, 8)
        y = TensorDesc("y", (1, 8, 3, 4), 0.1, -3, 0x20000, 8, (1, 1, 1, 1))
        _VALID_BINARIES.extend([
            TpuBinary(h, 0, encode_program(prog), inputs=[x], outputs=[y]).to_bytes(),
            TpuBinary(h, 0x40000, encode_program(prog), consts=[(0x30000, bytes(range(40)))],
                      fills=[{"addr": 0x20000, "size": 120, "value": -3}], inputs=[x], outputs=[y],
                      meta={"model": "m", "input_transforms": [{"name": "x", "orig_shape": [1, 3, 2, 2]}],
                            "layers": [{"name": "c", "op": "QConv", "instr_begin": 0, "instr_end": 3,
                                        "pc_begin": 0}]}).to_bytes(),
        ])
    return _VALID_BINARIES


def _recrc(raw: bytes) -> bytes:
    return raw[:-4] + struct.pack("<I", zlib.crc32(raw[:-4])) if len(raw) >= 4 else raw


def _rebuild(raw: bytes, sections: list) -> bytes:
    """A .tpubin with the header of ``raw`` and the given [(kind, bytes)] sections."""
    hdr = bytearray(raw[:44])
    hdr[40:44] = struct.pack("<I", len(sections))
    off, table, payload = 44 + 24 * len(sections), [], []
    for kind, data in sections:
        table.append(struct.pack("<IIQQ", kind, 0, off, len(data)))
        payload.append(data)
        off += len(data)
    body = bytes(hdr) + b"".join(table) + b"".join(payload)
    return body + struct.pack("<I", zlib.crc32(body))


def _sections(raw: bytes) -> list:
    n = struct.unpack_from("<I", raw, 40)[0]
    out = []
    for i in range(n):
        kind, _, off, size = struct.unpack_from("<IIQQ", raw, 44 + 24 * i)
        out.append((kind, raw[off:off + size]))
    return out


def gen_loader(r: random.Random) -> bytes:
    k = r.randrange(10)
    if k == 0:                                   # random bytes
        return bytes(r.getrandbits(8) for _ in range(r.randrange(200)))
    base = r.choice(valid_binaries())
    if k == 1:                                   # random bytes behind a valid header
        body = base[:44] + bytes(r.getrandbits(8) for _ in range(r.randrange(300)))
        return _recrc(body + bytes(4))
    if k == 2:                                   # raw mutation, CRC left stale
        return mutate_bytes(r, base)
    if k in (3, 4, 5):                           # mutation with a fresh CRC
        return _recrc(mutate_bytes(r, base[:-4] + bytes(4)))
    secs = _sections(base)
    if k in (6, 7):                              # a JSON section replaced by random JSON
        i = r.choice([j for j, (kind, _) in enumerate(secs) if kind >= 3])
        kind = secs[i][0]
        if r.random() < 0.5:
            val = json.loads(secs[i][1])
            if isinstance(val, dict) and val:
                key = r.choice(list(val))
                if isinstance(val[key], list) and val[key] and isinstance(val[key][0], dict) and r.random() < 0.7:
                    d = val[key][0]
                    d[r.choice(list(d) + ["extra"])] = rand_json(r)
                else:
                    val[key] = rand_json(r)
            elif isinstance(val, list) and val and isinstance(val[0], dict):
                val[0][r.choice(list(val[0]))] = rand_json(r)
            else:
                val = rand_json(r)
        else:
            val = rand_json(r)
        try:
            data = json.dumps(val).encode()
        except ValueError:
            data = b"null"
        secs[i] = (kind, data)
        return _rebuild(base, secs)
    if k == 8:                                   # CODE/CONST: random address or length
        i = r.choice([j for j, (kind, _) in enumerate(secs) if kind in (1, 2)] or [0])
        kind, data = secs[i]
        if r.random() < 0.5:
            data = struct.pack("<Q", rand_int(r) & ((1 << 64) - 1)) + data[8:]
        else:
            data = data[:r.randrange(len(data) + 1)]
        secs[i] = (kind, data)
        return _rebuild(base, secs)
    # section list edits: drop, duplicate, unknown kind, reorder
    op = r.randrange(4)
    if op == 0 and secs:
        del secs[r.randrange(len(secs))]
    elif op == 1 and secs:
        secs.append(r.choice(secs))
    elif op == 2:
        secs.append((r.choice([0, 6, 255, 1 << 31]), b"{}"))
    else:
        r.shuffle(secs)
    return _rebuild(base, secs)


def run_loader(raw: bytes) -> None:
    b = TpuBinary.from_bytes(raw, where="fuzz")
    decode_program(b.code)
    for t in b.inputs + b.outputs:
        _ = t.size_bytes, t.padded_hw
    if sum(f["size"] for f in b.fills) + sum(t.size_bytes for t in b.inputs) <= 1 << 20:
        b.ddr_segments({t.name: bytes(t.size_bytes) for t in b.inputs})


# ------------------------------------------------------------------------------ decoder

def gen_decoder(r: random.Random) -> bytes:
    word = r.getrandbits(256)
    k = r.randrange(4)
    if k >= 1:                                   # a valid opcode
        word = (word & ~0xFF) | r.choice(list(BY_CODE))
    if k >= 2:                                   # unused bits clear
        spec = BY_CODE[word & 0xFF]
        top = HEADER_BITS + sum(f.bits for f in spec.fields)
        word &= (1 << top) - 1
    return word.to_bytes(32, "little")


def run_decoder(raw: bytes) -> None:
    ins = decode(raw, 0)
    if encode(ins) != raw:
        raise PropertyFailure(f"decode/encode round trip of {raw.hex()} gives {encode(ins).hex()}")
    ins.text()


# ------------------------------------------------------------------------------ importer

_SEED_MODELS: list = []


def seed_models() -> list:
    """Small valid ONNX models covering every supported op (serialized)."""
    if not _SEED_MODELS:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
        rng = np.random.default_rng(0)

        def mk(nodes, inits, shape, opset=13, out_shape=None):
            g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                                  [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
            m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
            m.ir_version = 8
            onnx.checker.check_model(onnx.shape_inference.infer_shapes(m))
            return m.SerializeToString()

        w = lambda *s: rng.normal(0, 0.2, s).astype(np.float32)  # noqa: E731
        bn = {"g": w(8) + 1, "b": w(8), "m": w(8), "v": np.abs(w(8)) + 0.5}
        _SEED_MODELS.extend([
            mk([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                helper.make_node("BatchNormalization", ["c", "g", "bb", "m", "v"], ["n"], name="bn", epsilon=1e-5),
                helper.make_node("Relu", ["n"], ["y"], name="relu")],
               {"w": w(8, 4, 3, 3), "b": w(8), "g": bn["g"], "bb": bn["b"], "m": bn["m"], "v": bn["v"]}, (1, 4, 8, 8)),
            mk([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1], strides=[2, 2]),
                helper.make_node("MaxPool", ["c"], ["p"], name="mp", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                helper.make_node("AveragePool", ["p"], ["y"], name="ap", kernel_shape=[2, 2], strides=[2, 2])],
               {"w": w(8, 4, 1, 1)}, (1, 4, 16, 16)),
            mk([helper.make_node("Conv", ["x", "w"], ["a"], name="c1", kernel_shape=[1, 1]),
                helper.make_node("Conv", ["x", "w2"], ["b"], name="c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                helper.make_node("Add", ["a", "b"], ["s"], name="add"),
                helper.make_node("Relu", ["s"], ["y"], name="relu")],
               {"w": w(8, 8, 1, 1), "w2": w(8, 8, 3, 3)}, (1, 8, 6, 6)),
            mk([helper.make_node("GlobalAveragePool", ["x"], ["p"], name="gap"),
                helper.make_node("Flatten", ["p"], ["f"], name="flat", axis=1),
                helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name="fc", transB=1),
                helper.make_node("MatMul", ["g", "mw"], ["m"], name="dense"),
                helper.make_node("Softmax", ["m"], ["y"], name="sm")],
               {"fw": w(10, 8), "fb": w(10), "mw": w(10, 6)}, (1, 8, 4, 4)),
            # a per-pixel LayerNorm (ConvNeXt's channels-last form) and a Softmax inside the network
            mk([helper.make_node("Transpose", ["x"], ["t"], name="nhwc", perm=[0, 2, 3, 1]),
                helper.make_node("LayerNormalization", ["t", "lg", "lb"], ["n"], name="ln", axis=-1),
                helper.make_node("Transpose", ["n"], ["u"], name="nchw", perm=[0, 3, 1, 2]),
                helper.make_node("Softmax", ["u"], ["s"], name="sm", axis=1),
                helper.make_node("Conv", ["s", "w"], ["y"], name="conv", kernel_shape=[1, 1])],
               {"lg": w(8) + 1, "lb": w(8), "w": w(4, 8, 1, 1)}, (1, 8, 3, 3), opset=17),
            # the attention's matmul of two activations (frontend/attention.py's Einsum, lifted)
            mk([helper.make_node("Conv", ["x", "wq"], ["q"], name="q", kernel_shape=[1, 1]),
                helper.make_node("Conv", ["x", "wk"], ["k"], name="k", kernel_shape=[1, 1]),
                helper.make_node("Einsum", ["k", "q"], ["y"], name="qk", equation="bkxn,bkxm->bnxm")],
               {"wq": w(4, 4, 1, 1), "wk": w(4, 4, 1, 1)}, (1, 4, 1, 6), opset=17, out_shape=[1, 6, 1, 6]),
            mk([helper.make_node("Sum", ["x", "x"], ["s"], name="sum"),
                helper.make_node("ConstantOfShape", ["shp"], ["z"], name="cos",
                                 value=numpy_helper.from_array(np.array([0.5], np.float32))),
                helper.make_node("Add", ["s", "z"], ["a"], name="add"),
                helper.make_node("Reshape", ["a", "rs"], ["y"], name="rs")],
               {"shp": np.array([1, 8, 2, 2], np.int64), "rs": np.array([1, 32], np.int64)}, (1, 8, 2, 2), opset=9),
            mk([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[2, 2], auto_pad="SAME_UPPER"),
                helper.make_node("Dropout", ["c"], ["d", "mask"], name="drop", ratio=0.25),
                helper.make_node("MaxPool", ["d"], ["p"], name="mp", kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
                helper.make_node("Identity", ["p"], ["y"], name="id")],
               {"w": w(8, 4, 3, 3)}, (1, 4, 7, 8), opset=9),
            mk([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[1, 1]),
                helper.make_node("Unsqueeze", ["sc"], ["sc3"], name="usc", axes=[1, 2]),
                helper.make_node("Squeeze", ["sh4"], ["sh3"], name="ssh", axes=[0]),
                helper.make_node("Mul", ["c", "sc3"], ["m"], name="mul"),
                helper.make_node("Add", ["m", "sh3"], ["a"], name="add"),
                helper.make_node("Sub", ["a", "k"], ["s"], name="sub"),
                helper.make_node("Div", ["s", "k"], ["y"], name="div")],
               {"w": w(8, 4, 1, 1), "sc": np.abs(w(8)) + 0.5, "sh4": w(1, 8, 1, 1), "k": np.array(2.0, np.float32)},
               (1, 4, 6, 6), opset=9),
            mk([helper.make_node("Conv", ["x", "w"], ["a"], name="c1", kernel_shape=[1, 1]),
                helper.make_node("Conv", ["x", "w2"], ["b"], name="c3", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                helper.make_node("Concat", ["a", "b"], ["c"], name="cat", axis=1),
                helper.make_node("Split", ["c", "sp"], ["c0", "c1"], name="split", axis=1),
                helper.make_node("MaxPool", ["c1"], ["y"], name="mp", kernel_shape=[2, 2], strides=[2, 2])],
               {"w": w(5, 4, 1, 1), "w2": w(6, 4, 3, 3), "sp": np.array([5, 6], np.int64)}, (1, 4, 6, 6)),
            mk([helper.make_node("Conv", ["x", "w"], ["c"], name="gconv", kernel_shape=[3, 3], pads=[2, 2, 2, 2],
                                 group=2, dilations=[2, 2]),
                helper.make_node("Constant", [], ["six"], name="k6", value_float=6.0),
                helper.make_node("Clip", ["c", "zero", "six"], ["r"], name="relu6"),
                helper.make_node("Reshape", ["r", "s5"], ["r5"], name="shuf_in"),
                helper.make_node("Transpose", ["r5"], ["t5"], name="shuf", perm=[0, 2, 1, 3, 4]),
                helper.make_node("Reshape", ["t5", "s4"], ["t"], name="shuf_out"),
                helper.make_node("Conv", ["t", "w2"], ["d"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=8),
                helper.make_node("ReduceMean", ["d"], ["y"], name="mean", axes=[2, 3], keepdims=1)],
               {"w": w(8, 2, 3, 3), "zero": np.array(0.0, np.float32), "s5": np.array([1, 2, 4, 6, 6], np.int64),
                "s4": np.array([1, 8, 6, 6], np.int64), "w2": w(8, 1, 3, 3)}, (1, 4, 6, 6)),
            mk([helper.make_node("Conv", ["x", "w"], ["u0"], name="conv", kernel_shape=[1, 1])]
               + [helper.make_node(op, [f"u{i}"], [f"u{i + 1}"], name=f"f{i}")
                  for i, op in enumerate(["Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu",
                                          "Selu", "Softplus", "Softsign", "Erf", "Gelu", "Mish", "Exp", "Abs",
                                          "Sqrt", "Reciprocal", "Neg"])]
               + [helper.make_node("PRelu", ["u17", "quarter"], ["u17p"], name="prelu"),
                  helper.make_node("Pow", ["u17p", "two"], ["u18"], name="pow"),
                  helper.make_node("LRN", ["u18"], ["u19"], name="lrn", size=3, alpha=1e-3, beta=0.5, bias=1.5),
                  helper.make_node("Resize", ["u19", "", "up2"], ["y"], name="up", mode="nearest")],
               {"w": w(8, 4, 1, 1), "two": np.array(2.0, np.float32), "quarter": np.array([0.25], np.float32), "up2": np.array([1, 1, 2, 2], np.float32)},
               (1, 4, 5, 5), opset=20),
            mk([helper.make_node("Upsample", ["x", "s"], ["y"], name="up", mode="nearest")],
               {"s": np.array([1, 1, 2, 3], np.float32)}, (1, 4, 3, 3), opset=9),
            mk([helper.make_node("GlobalAveragePool", ["x"], ["p"], name="gap"),
                helper.make_node("Shape", ["p"], ["s"], name="shape"),
                helper.make_node("Size", ["p"], ["sz"], name="size"),
                helper.make_node("Gather", ["s", "i0"], ["g0"], name="batch", axis=0),
                helper.make_node("Slice", ["s", "one", "two"], ["sl"], name="chans"),
                helper.make_node("Equal", ["sl", "eight"], ["e"], name="eq"),
                helper.make_node("Not", ["e"], ["ne"], name="not"),
                helper.make_node("And", ["e", "ne"], ["a"], name="and"),
                helper.make_node("Or", ["a", "e"], ["o"], name="or"),
                helper.make_node("Less", ["sl", "nine"], ["lt"], name="lt"),
                helper.make_node("Greater", ["sl", "one"], ["gt"], name="gt"),
                helper.make_node("And", ["lt", "gt"], ["lg"], name="and2"),
                helper.make_node("And", ["lg", "o"], ["ok"], name="and3"),
                helper.make_node("Where", ["ok", "sz", "zero"], ["w"], name="where"),
                helper.make_node("Range", ["i0", "one_s", "one_s"], ["r"], name="range"),
                helper.make_node("Expand", ["r", "one"], ["ex"], name="expand"),
                helper.make_node("Add", ["ex", "one"], ["ex1"], name="add"),
                helper.make_node("Cast", ["w"], ["wc"], name="cast", to=TensorProto.INT64),
                helper.make_node("Unsqueeze", ["g0", "ax0"], ["g1"], name="unsq"),
                helper.make_node("Mul", ["g1", "ex1"], ["b1"], name="mul"),
                helper.make_node("Concat", ["b1", "wc"], ["target"], name="target", axis=0),
                helper.make_node("Reshape", ["p", "target"], ["y"], name="flat")],
               {"i0": np.array(0, np.int64), "one": np.array([1], np.int64), "two": np.array([2], np.int64),
                "eight": np.array([8], np.int64), "nine": np.array([9], np.int64), "zero": np.array(0, np.int64),
                "one_s": np.array(1, np.int64), "ax0": np.array([0], np.int64)}, (1, 8, 3, 3), opset=13,
               out_shape=[1, 8]),
            mk([helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q_x"),
                helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq_x"),
                helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="dq_w", axis=0),
                helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", kernel_shape=[1, 1])],
               {"xs": np.float32(0.05), "xz": np.uint8(128), "wq": rng.integers(-127, 128, (8, 4, 1, 1)).astype(np.int8),
                "ws": np.abs(w(8)) + 0.01, "wz": np.zeros(8, np.int8)}, (1, 4, 3, 3), opset=13),
            # a (1, C, L) sequence: causal zero Pad + Conv1d + depthwise Conv1d (frontend/lift_1d)
            mk([helper.make_node("Pad", ["x", "pads"], ["xp"], name="causal", mode="constant"),
                helper.make_node("Conv", ["xp", "w"], ["c"], name="conv1d", kernel_shape=[3]),
                helper.make_node("Conv", ["c", "dw"], ["y"], name="dw1d", kernel_shape=[3], pads=[1, 1], group=8)],
               {"pads": np.array([0, 0, 2, 0, 0, 0], np.int64), "w": w(8, 4, 3), "dw": w(8, 1, 3)}, (1, 4, 12)),
        ])
    return _SEED_MODELS


_OPS = ["Conv", "BatchNormalization", "Relu", "Sum", "Add", "MaxPool", "AveragePool",
        "GlobalAveragePool", "Reshape", "Flatten", "Gemm", "Softmax", "ConstantOfShape", "Sigmoid",
        "Mul", "Sub", "Div", "Unsqueeze", "Squeeze", "Concat", "Identity", "Dropout", ""]
_ATTRS = ["kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "ceil_mode", "axis",
          "transA", "transB", "alpha", "beta", "epsilon", "count_include_pad", "storage_order",
          "spatial", "training_mode", "value", "foo"]


def _rand_attr(r: random.Random, name: str):
    from onnx import helper, numpy_helper
    k = r.randrange(6)
    if k == 0:
        return helper.make_attribute(name, rand_int(r) % (1 << 62) * r.choice([1, -1]))
    if k == 1:
        return helper.make_attribute(name, [rand_int(r) % 100 - 10 for _ in range(r.randrange(6))] or [0])
    if k == 2:
        return helper.make_attribute(name, r.choice([0.0, 1.0, 0.5, -1.0, 1e-5, float("nan")]))
    if k == 3:
        return helper.make_attribute(name, r.choice(["NOTSET", "SAME_UPPER", "VALID", "", "x"]))
    if k == 4:
        return helper.make_attribute(name, numpy_helper.from_array(
            np.asarray(r.choice([[1.0], [0], [1, 2], 3.0]), r.choice([np.float32, np.int64]))))
    return helper.make_attribute(name, [r.choice([0.5, 1.0, -2.0]) for _ in range(r.randrange(1, 4))])


def mutate_model(r: random.Random, m) -> None:
    """One structural mutation of ModelProto ``m`` in place."""
    from onnx import TensorProto
    g = m.graph
    k = r.randrange(12)
    nodes = list(g.node)
    if k == 0 and nodes:                          # attribute value
        n = r.choice(nodes)
        name = r.choice([a.name for a in n.attribute] + _ATTRS) if n.attribute else r.choice(_ATTRS)
        keep = [a for a in n.attribute if a.name != name]
        del n.attribute[:]
        n.attribute.extend(keep + [_rand_attr(r, name)])
    elif k == 1 and nodes:                        # op type
        r.choice(nodes).op_type = r.choice(_OPS)
    elif k == 2 and nodes:                        # drop or duplicate a node
        i = r.randrange(len(nodes))
        if r.random() < 0.5:
            del g.node[i]
        else:
            g.node.add().CopyFrom(nodes[i])
    elif k == 3 and nodes:                        # rewire an input
        n = r.choice(nodes)
        names = ["x", "y", "", "ghost"] + [o for nd in nodes for o in nd.output] + [i.name for i in g.initializer]
        if n.input and r.random() < 0.7:
            n.input[r.randrange(len(n.input))] = r.choice(names)
        else:
            n.input.append(r.choice(names))
    elif k == 4:                                  # input dims
        dims = g.input[0].type.tensor_type.shape.dim
        if dims and r.random() < 0.8:
            d = dims[r.randrange(len(dims))]
            if r.random() < 0.2:
                d.dim_param = "N"
            else:
                d.dim_value = r.choice([0, 1, 2, 3, 5, 7, 1 << 20, 1 << 31, -1, 1 << 62])
        elif r.random() < 0.5:
            dims.add().dim_value = r.choice([1, 2])
        elif dims:
            del dims[-1]
    elif k == 5:                                  # dtype of input/output
        vi = r.choice([g.input[0]] + list(g.output))
        vi.type.tensor_type.elem_type = r.choice([TensorProto.FLOAT16, TensorProto.INT8, TensorProto.INT64,
                                                  TensorProto.DOUBLE, TensorProto.STRING, 0, 99])
    elif k == 6 and g.initializer:               # initializer dims / data
        t = r.choice(list(g.initializer))
        if r.random() < 0.5 and t.dims:
            t.dims[r.randrange(len(t.dims))] = r.choice([0, 1, 2, 3, 100, -1])
        elif r.random() < 0.5:
            t.raw_data = t.raw_data[:r.randrange(len(t.raw_data) + 1)]
        else:
            t.data_type = r.choice([TensorProto.INT8, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.DOUBLE])
    elif k == 7 and g.initializer:               # drop an initializer
        del g.initializer[r.randrange(len(g.initializer))]
    elif k == 8:                                  # opset
        m.opset_import[0].version = r.choice([1, 6, 7, 9, 11, 13, 17, 21, 99, 0])
        if r.random() < 0.2:
            m.opset_import[0].domain = "com.example"
    elif k == 9 and nodes:                        # node outputs
        n = r.choice(nodes)
        if r.random() < 0.5:
            n.output.append(r.choice(["extra", "", "y"]))
        elif n.output:
            n.output[0] = r.choice(["y", "x", "", "zz"])
    elif k == 10:                                 # graph outputs
        if r.random() < 0.5 and g.output:
            g.output[0].name = r.choice(["x", "ghost", "c", ""])
        else:
            g.output.add().CopyFrom(g.output[0]) if g.output else None
    else:                                         # node name collisions / domains
        if nodes:
            n = r.choice(nodes)
            if r.random() < 0.5:
                n.name = nodes[0].name
            else:
                n.domain = r.choice(["", "ai.onnx", "com.microsoft", "ai.onnx.ml"])


def gen_importer(r: random.Random) -> bytes:
    raw = r.choice(seed_models())
    if r.random() < 0.15:                         # corrupted serialized bytes
        return mutate_bytes(r, raw, r.randint(1, 3))
    import onnx
    m = onnx.ModelProto.FromString(raw)
    for _ in range(r.randint(1, 3)):
        mutate_model(r, m)
    return m.SerializeToString()


def run_importer(raw: bytes) -> None:
    import onnx
    from google.protobuf.message import DecodeError
    try:
        m = onnx.ModelProto.FromString(raw)
    except DecodeError:
        return                                    # tpucompile: "not a readable ONNX model"
    run_passes(import_onnx(m))


# ------------------------------------------------------------------------------ config

_BASE_CONFIGS: list = []


def base_configs() -> list:
    if not _BASE_CONFIGS:
        import yaml
        _BASE_CONFIGS.extend(yaml.safe_load(p.read_text()) for p in sorted(CONFIG_DIR.glob("*.yaml")))
    return _BASE_CONFIGS


def _paths(d, prefix=()):
    for k, v in d.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


def gen_config(r: random.Random):
    """A dict to validate, or ("yaml", text) for the text parser."""
    import copy

    import yaml
    d = copy.deepcopy(r.choice(base_configs()))
    k = r.randrange(10)
    if k == 0:
        return rand_json(r)
    if k == 1:
        text = yaml.safe_dump(d)
        return ("yaml", mutate_bytes(r, text.encode(), r.randint(1, 4)).decode("utf-8", "replace"))
    for _ in range(r.randint(1, 3)):
        path = r.choice(list(_paths(d)))
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        op = r.randrange(5)
        if op == 0:
            del parent[path[-1]]
        elif op == 1:
            parent[r.choice(["extra", "rows", "banks", "name", "freq_mhz"])] = rand_scalar(r)
        elif op == 2:
            parent[path[-1]] = rand_json(r)
        else:                                     # plausible numbers: keeps the dict valid-ish
            v = parent[path[-1]]
            if isinstance(v, int) and not isinstance(v, bool):
                parent[path[-1]] = r.choice([0, 1, -v, v * 2, v // 2, v + 1, 1 << 20, 1 << 40,
                                             3, 5, 7, 333, 999, 1001, 2000, 1 << 16])
    return d


def run_config(case) -> None:
    if isinstance(case, tuple) and case and case[0] == "yaml":
        cfg = parse_config_text(case[1], "fuzz.yaml")
    else:
        cfg = config_from_dict(case)
    cfg.hash_bytes()
    _ = cfg.sram_words, cfg.bank_words, cfg.param_words


# ------------------------------------------------------------------------------ driver
GENERATORS = {"loader": gen_loader, "decoder": gen_decoder, "importer": gen_importer, "config": gen_config}
RUNNERS = {"loader": run_loader, "decoder": run_decoder, "importer": run_importer, "config": run_config}


def case_rng(seed: int, target: str, i: int) -> random.Random:
    return random.Random(f"{seed}:{target}:{i}")


def run_case(target: str, case, timeout_s: float) -> str:
    """'ok', 'rejected' (a TpuError), 'hang', 'failure' or 'crash:<ExceptionType>'."""
    def on_alarm(signum, frame):
        raise Hang(f"case ran past {timeout_s} s")
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        RUNNERS[target](case)
        return "ok"
    except Hang:
        return "hang"
    except TpuError:
        return "rejected"
    except PropertyFailure:
        return "failure"
    except Exception as e:  # noqa: BLE001 - the point: anything else is a crash
        return f"crash:{type(e).__name__}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def fuzz(cases: int, seed: int = 0, timeout_s: float = 10.0, targets=TARGETS, out=sys.stdout,
         max_reports: int = 5) -> dict:
    """Run ``cases`` cases round-robin over ``targets``; returns the counts."""
    import warnings
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    counts = {t: Counter() for t in targets}
    bad = []
    t0 = time.perf_counter()
    for i in range(cases):
        target = targets[i % len(targets)]
        idx = i // len(targets)
        r = case_rng(seed, target, idx)
        try:
            case = GENERATORS[target](r)
        except Exception as e:  # a generator bug is not a product crash, but must be seen
            counts[target]["generator-error"] += 1
            bad.append(f"{target}:{idx} generator {type(e).__name__}: {e}")
            continue
        res = run_case(target, case, timeout_s)
        counts[target][res.split(":")[0]] += 1
        if res not in ("ok", "rejected"):
            bad.append(f"{target}:{idx} {res}")
            if len(bad) <= max_reports:
                print(f"  {target}:{idx} {res} (replay: python -m tpusim.flow.fuzz --seed {seed} "
                      f"--replay {target}:{idx})", file=out)
        if out is not None and (i + 1) % 10000 == 0:
            print(f"  {i + 1} cases, {time.perf_counter() - t0:.0f} s", file=out, flush=True)
    wall = time.perf_counter() - t0
    total = Counter()
    for c in counts.values():
        total.update(c)
    summary = {"cases": cases, "crashes": total["crash"], "hangs": total["hang"],
               "failures": total["failure"], "generator_errors": total["generator-error"],
               "wall_s": wall, "per_target": {t: dict(c) for t, c in counts.items()}, "problems": bad}
    return summary


def replay(spec: str, seed: int) -> int:
    target, idx = spec.split(":")
    case = GENERATORS[target](case_rng(seed, target, int(idx)))
    print(f"case: {case!r}"[:2000])
    try:
        RUNNERS[target](case)
        print("ok")
    except TpuError as e:
        print(f"rejected: {type(e).__name__}: {e}")
    except Exception:
        traceback.print_exc()
        return 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tpusim.flow.fuzz", description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=100000, help="total cases (default 100000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {TARGETS}")
    ap.add_argument("--replay", metavar="TARGET:INDEX", help="rerun one case and show its traceback")
    a = ap.parse_args(argv)
    if a.replay:
        return replay(a.replay, a.seed)
    targets = tuple(t for t in a.targets.split(",") if t)
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or a.cases < 1 or a.timeout <= 0:
        print(f"tpusim.flow.fuzz: error: unknown target(s) {unknown} / --cases and --timeout must be positive",
              file=sys.stderr)
        return 2
    print(f"fuzzing {a.cases} cases over {', '.join(targets)} (seed {a.seed}, timeout {a.timeout} s/case)")
    s = fuzz(a.cases, a.seed, a.timeout, targets)
    for t, c in s["per_target"].items():
        print(f"  {t:9s} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print(f"cases: {s['cases']}  crashes: {s['crashes']}  hangs: {s['hangs']}  "
          f"failures: {s['failures']}  generator errors: {s['generator_errors']}  "
          f"({s['wall_s']:.1f} s, {s['cases'] / s['wall_s']:.0f} cases/s)")
    return 0 if not (s["crashes"] or s["hangs"] or s["failures"] or s["generator_errors"]) else 1


if __name__ == "__main__":
    sys.exit(main())
