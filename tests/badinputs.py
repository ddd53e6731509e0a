"""The corpus of bad inputs: small seeded generators, one per class, shared by
tests/test_bad_inputs_compiler.py, tests/test_bad_inputs_sim.py, tests/test_fuzz.py and
``python -m tpusim.flow.fuzz``.

Compiler side: ONNX models (``onnx.ModelProto`` or raw bytes) and hardware-config dicts.
Simulator side: ``.tpubin`` images (bytes) built around one small valid program for the
``small`` config (``valid_binary``), and single bad instructions spliced into it.
"""
from __future__ import annotations

import struct
import zlib

import numpy as np
import yaml
from onnx import TensorProto, helper, numpy_helper

from tpusim.arch.binary import TensorDesc, TpuBinary
from tpusim.arch.config import CONFIG_DIR
from tpusim.arch.isa import Engine, encode_program, make

# ------------------------------------------------------------------------------ ONNX models

def model(nodes, inits: dict, in_shape=(1, 8, 8, 8), out_shape=None, *, in_type=TensorProto.FLOAT,
          opset=13, out_name="y"):
    """A float32 model with input ``x`` and output ``out_name`` (output shape inferred if None)."""
    g = helper.make_graph(
        nodes, "bad", [helper.make_tensor_value_info("x", in_type, None if in_shape is None else list(in_shape))],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(out_shape) if out_shape else None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv(cin=8, cout=8, k=3, in_hw=(8, 8), seed=0, **attrs):
    """Conv k x k (pads k//2 unless given) + Relu: x [1, cin, H, W] -> y. ``attrs`` go on the Conv."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.2, (cout, cin // max(attrs.get("group", 1), 1), k, k)).astype(np.float32)
    attrs.setdefault("kernel_shape", [k, k])
    if "auto_pad" not in attrs:
        attrs.setdefault("pads", [k // 2] * 4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv0", **attrs),
             helper.make_node("Relu", ["c"], ["y"], name="relu0")]
    return model(nodes, {"w": w}, (1, cin, *in_hw))


def maxpool(**attrs):
    """MaxPool 3x3 s2 p1 on x [1, 8, 8, 8] (``attrs`` override)."""
    a = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    a.update(attrs)
    return model([helper.make_node("MaxPool", ["x"], ["y"], name="pool0", **a)], {})


def good_model():
    return conv()


def not_onnx_bytes() -> bytes:
    return b"name: small\narray: {rows: 8, cols: 8}\n# a YAML file, not an ONNX model\n"


def truncated_bytes() -> bytes:
    raw = good_model().SerializeToString()
    return raw[: len(raw) // 2]


def checker_failure():
    """Node 'conv0' reads 'ghost', a tensor no node, input or initializer defines."""
    m = good_model()
    m.graph.node[0].input[0] = "ghost"
    return m


def unsupported_op():
    return model([helper.make_node("Hardmax", ["x"], ["y"], name="sig0")], {})


def bad_attribute(kind: str):
    return {"dilations": lambda: conv(dilations=[0, 2]),
            "group": lambda: conv(group=0),
            "auto_pad": lambda: conv(auto_pad="SAME"),
            "ceil_mode": lambda: maxpool(ceil_mode=2),
            "strides": lambda: conv(strides=[0, 1]),
            }[kind]()


def dynamic_shape():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], {}, in_shape=("N", 8, 8, 8))


def missing_shape():
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], {}, in_shape=None)


def unsupported_dtype():
    m = model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], {}, in_type=TensorProto.FLOAT16)
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    return m


def untileable(k: int = 15):
    """A 15x15 conv on a 64x64 image: its window cannot fit a tiny SRAM (see ``tiny_config``)."""
    return conv(cin=8, cout=8, k=k, in_hw=(64, 64))


def huge_footprint():
    """An 8 x 2^19 x 2^18 activation in and out: 2^40 bytes each, before any calibration."""
    return model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], {}, in_shape=(1, 8, 1 << 19, 1 << 18))


# ------------------------------------------------------------------------------ configs

def config_dict(name: str = "small") -> dict:
    return yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())


def tiny_config() -> dict:
    """The small chip with a 2 KiB SRAM (256 words of 8 bytes): the least the validator allows."""
    d = config_dict()
    d["name"] = "tiny"
    d["sram"] = {"size_bytes": 2048, "banks": 4}
    return d


def bad_config(kind: str) -> dict:
    d = config_dict()
    if kind == "unknown":
        d["sram"]["ports"] = 2
    elif kind == "missing":
        del d["dma"]["outstanding"]
    elif kind == "inconsistent":
        d["array"]["cols"] = 12
    elif kind == "type":
        d["sram"]["banks"] = "four"
    elif kind == "not_mapping":
        d = ["name", "small"]
    return d


# ------------------------------------------------------------------------------ binaries
LOAD, STORE, MXU, VPU = (1 << e for e in Engine)
DMA = dict(count1=1, count2=1)


def valid_program() -> list:
    """A tiny program for the small config: load 2 words, store them back, halt."""
    return [
        make("DMA_LOAD", signal=STORE, ddr_addr=0x10000, sram_addr=0, inner_bytes=16, **DMA),
        make("DMA_STORE", wait=LOAD, ddr_addr=0x20000, sram_addr=0, inner_bytes=16, **DMA),
        make("HALT"),
    ]


def binary_for(prog_or_code, cfg_hash: bytes) -> TpuBinary:
    code = prog_or_code if isinstance(prog_or_code, bytes) else encode_program(prog_or_code)
    x = TensorDesc("x", (1, 8, 1, 2), 0.05, 0, 0x10000, 8)
    y = TensorDesc("y", (1, 8, 1, 2), 0.05, 0, 0x20000, 8)
    return TpuBinary(cfg_hash, 0, code, inputs=[x], outputs=[y])


def valid_binary(cfg_hash: bytes) -> bytes:
    return binary_for(valid_program(), cfg_hash).to_bytes()


def recrc(raw: bytes) -> bytes:
    """Replace the trailing CRC so that only the intended corruption is seen."""
    return raw[:-4] + struct.pack("<I", zlib.crc32(raw[:-4]))


def bad_binary(kind: str, cfg_hash: bytes) -> bytes:
    raw = bytearray(valid_binary(cfg_hash))
    if kind == "magic":
        raw[0:4] = b"ELF\x7f"
    elif kind == "version":
        raw[4:6] = struct.pack("<H", 7)
    elif kind == "checksum":
        raw[-10] ^= 0xFF
        return bytes(raw)
    elif kind == "truncated":
        return bytes(raw[:60])
    elif kind == "truncated_section":            # CODE section claims 4 bytes: no address
        raw[44 + 16:44 + 24] = struct.pack("<Q", 4)
    elif kind == "offset":                        # section 1 (FILL) at offset 2^32
        raw[44 + 24 + 8:44 + 24 + 16] = struct.pack("<Q", 1 << 32)
    elif kind == "code_addr":                     # CODE loaded at 2^40 - 8
        off = struct.unpack_from("<Q", raw, 44 + 8)[0]
        raw[off:off + 8] = struct.pack("<Q", (1 << 40) - 8)
    elif kind == "json":                          # IO section is not JSON
        off, size = struct.unpack_from("<QQ", raw, 44 + 24 * 2 + 8)
        raw[off:off + size] = b"{" * size
    return recrc(bytes(raw))


def bad_program(kind: str) -> list:
    """A program with one bad instruction (index 1, pc 0x20) for the small config."""
    ok = make("NOP", engine=0)
    bad = {
        "zero_dma": make("DMA_LOAD", ddr_addr=0x10000, sram_addr=0, inner_bytes=0, **DMA),
        "misaligned_dma": make("DMA_LOAD", ddr_addr=0x10000, sram_addr=4, inner_bytes=16, **DMA),
        "dma_ddr_2_40": make("DMA_LOAD", ddr_addr=(1 << 40) - 32, sram_addr=0, inner_bytes=64, **DMA),
        "sram_past_end": make("DMA_LOAD", ddr_addr=0x10000, sram_addr=16384 - 8, inner_bytes=16, **DMA),
        "mxu_past_end": make("MATMUL", act_addr=2040, count_x=16, stride_x=1, count_y=1),
        "acc_past_end": make("MATMUL", act_addr=0, count_x=4, stride_x=1, count_y=1, acc_addr=510),
        "qreg_unloaded": make("REQUANT", acc_addr=0, count=1, param_addr=0, dst_addr=16, qreg=5),
        "deadlock": make("MATMUL", wait=LOAD, act_addr=0, count_x=1, stride_x=1, count_y=1),
    }[kind]
    return [ok, bad, make("HALT")]


def reserved_opcode_code() -> bytes:
    prog = encode_program([make("NOP", engine=0)])
    return prog + bytes([0xEE]) + bytes(31) + encode_program([make("HALT")])


def out_of_range_field_code() -> bytes:
    """NOP with bits set above its 2-bit engine field (a field value the encoder never makes)."""
    word = int.from_bytes(encode_program([make("NOP", engine=1)]), "little") | (0x3F << 18)
    return encode_program([make("NOP", engine=0)]) + word.to_bytes(32, "little") + encode_program([make("HALT")])


__all__ = [n for n in dir() if not n.startswith("_")]


# ------------------------------------------------------------------------------ fuzz findings

def malformed_initializer():
    """Weight 'w' whose raw data is cut short of its dims (numpy_helper.to_array ValueError)."""
    m = good_model()
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:12]
    return m


def attribute_of_wrong_type():
    """Conv dilations given as one float (the handler used to iterate over it: TypeError)."""
    m = good_model()
    for a in m.graph.node[0].attribute:
        if a.name == "kernel_shape":
            a.CopyFrom(helper.make_attribute("kernel_shape", 3.0))
    return m


def huge_constant_of_shape():
    """ConstantOfShape making 2^30 x 32 floats (constant folding used to allocate 128 GiB)."""
    nodes = [helper.make_node("ConstantOfShape", ["shp"], ["z"], name="cos0",
                              value=numpy_helper.from_array(np.array([0.5], np.float32))),
             helper.make_node("Add", ["x", "z"], ["y"], name="add0")]
    return model(nodes, {"shp": np.array([1 << 30, 8, 2, 2], np.int64)}, in_shape=(1 << 30, 8, 2, 2))
