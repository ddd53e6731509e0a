"""tpusim.arch.binary: the .tpubin container (round trip, corruption, bounds) and TensorDesc blocked layout."""
import json
import re
import struct
import zlib

import numpy as np
import pytest

from tpusim.arch import binary
from tpusim.arch.binary import MAGIC, VERSION, TensorDesc, TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import BinaryFormatError, TpuError
from tpusim.arch.isa import decode_program, encode_program, make

HDR = binary.HEADER          # magic, version, reserved, config hash, section count
SEC = binary.SECTION_ENTRY   # kind, reserved, offset, size
CODE, CONST, FILL, IO, META = 1, 2, 3, 4, 5
H1 = bytes(range(32))
H2 = bytes(range(1, 33))


def pack(sections, chash=H1, version=VERSION, magic=MAGIC, nsec=None, fix=None):
    """Build a .tpubin by hand from (kind, payload) pairs, independently of TpuBinary.to_bytes.
    ``fix(i, kind, off, size)`` may return a replacement table entry."""
    off = HDR.size + SEC.size * len(sections)
    table, payload = [], []
    for i, (kind, data) in enumerate(sections):
        entry = (kind, 0, off, len(data))
        if fix:
            entry = fix(i, *entry) or entry
        table.append(SEC.pack(*entry))
        payload.append(data)
        off += len(data)
    body = HDR.pack(magic, version, 0, chash, len(sections) if nsec is None else nsec)
    body += b"".join(table) + b"".join(payload)
    return with_crc(body)


def with_crc(body: bytes) -> bytes:
    return body + struct.pack("<I", zlib.crc32(body))


def code_sec(addr=0, code=None):
    return (CODE, struct.pack("<Q", addr) + (encode_program([make("HALT")]) if code is None else code))


def const_sec(addr, data):
    return (CONST, struct.pack("<Q", addr) + data)


def js(kind, obj):
    return (kind, json.dumps(obj).encode())


def desc(name="x", shape=(1, 3, 4, 5), blk=8, pads=(1, 2, 1, 0), addr=0x1000, zp=-3, scale=0.05, channels=None):
    return TensorDesc(name, shape, scale, zp, addr, blk, pads, channels=channels)


def sample() -> TpuBinary:
    prog = [make("DMA_LOAD", ddr_addr=0x1000, sram_addr=0, inner_bytes=64, count1=1, count2=1, signal=0b0100),
            make("LOAD_WEIGHTS", sram_addr=0, wait=0b0001),
            make("LOAD_QREG", qreg=5, multiplier=-123456, shift=-7, zero_point=-128),
            make("HALT")]
    return TpuBinary(
        config_hash=H1, code_addr=0x4000, code=encode_program(prog),
        consts=[(0x8000, bytes(range(256)) * 3), (0xFF_FFFF_FF00, b"\x01\x02\x03"), (0x9000, b"")],
        fills=[{"addr": 0x1000, "size": 420, "value": -3}, {"addr": 0x2000, "size": 64, "value": 127}],
        inputs=[desc("input.1")],
        outputs=[desc("out", shape=(1, 10, 1, 1), pads=(0, 0, 0, 0), addr=0x3000, zp=7, scale=0.125)],
        meta={"model": "tiny", "host_ops": [{"op": "Softmax", "axis": 1}], "layers": [{"name": "fc", "op": "QConv", "instr_begin": 0, "instr_end": 3, "macs": 640, "n": 1}],
              "ü": "ß"},
    )


# ---- round trip -------------------------------------------------------------------------------
def test_round_trip_everything():
    b = sample()
    raw = b.to_bytes()
    back = TpuBinary.from_bytes(raw, expected_config_hash=H1)
    assert back == b
    assert back.code_addr == 0x4000
    assert decode_program(back.code) == decode_program(b.code)
    assert back.consts == [(0x8000, bytes(range(256)) * 3), (0xFF_FFFF_FF00, b"\x01\x02\x03"), (0x9000, b"")]
    assert back.fills == b.fills
    assert back.inputs == b.inputs and back.outputs == b.outputs
    assert isinstance(back.inputs[0].shape, tuple) and isinstance(back.inputs[0].pads, tuple)
    assert back.meta == b.meta
    assert back.to_bytes() == raw


def test_round_trip_minimal():
    b = TpuBinary(H2, 0, b"")
    back = TpuBinary.from_bytes(b.to_bytes())
    assert back == b
    assert (back.consts, back.fills, back.inputs, back.outputs, back.meta) == ([], [], [], [], {})


def test_container_layout_matches_spec():
    b = sample()
    raw = b.to_bytes()
    magic, version, reserved, chash, nsec = HDR.unpack_from(raw, 0)
    assert (magic, version, reserved, chash) == (b"TPUB", 1, 0, H1)
    assert nsec == 1 + len(b.consts) + 3
    kinds, end = [], HDR.size + nsec * SEC.size
    for i in range(nsec):
        kind, res, off, size = SEC.unpack_from(raw, HDR.size + i * SEC.size)
        assert res == 0 and off == end
        kinds.append(kind)
        end += size
    assert kinds == [CODE, CONST, CONST, CONST, FILL, IO, META]
    assert end == len(raw) - 4
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    # CODE payload: u64 address then the instructions
    _, _, off, size = SEC.unpack_from(raw, HDR.size)
    assert struct.unpack_from("<Q", raw, off)[0] == 0x4000
    assert raw[off + 8:off + size] == b.code


def test_hand_packed_binary_is_read():
    raw = pack([code_sec(0x100), const_sec(0x200, b"abc"), js(FILL, []), js(IO, {"inputs": [], "outputs": []}),
                js(META, {"k": 1})])
    b = TpuBinary.from_bytes(raw, H1)
    assert b.code_addr == 0x100 and b.consts == [(0x200, b"abc")] and b.meta == {"k": 1}


def test_optional_sections_may_be_absent():
    b = TpuBinary.from_bytes(pack([code_sec(0x40)]))
    assert (b.code_addr, b.consts, b.fills, b.inputs, b.outputs, b.meta) == (0x40, [], [], [], [], {})
    b = TpuBinary.from_bytes(pack([code_sec(), js(IO, {})]))
    assert b.inputs == [] and b.outputs == []


def test_write_read_atomic(tmp_path):
    p = tmp_path / "net.tpubin"
    b = sample()
    b.write(p)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.tpubin"]
    assert p.read_bytes() == b.to_bytes()
    assert TpuBinary.read(p, H1) == b
    # overwrite an existing file, still no temporary left
    b2 = TpuBinary(H2, 0x40, b"")
    b2.write(str(p))
    assert sorted(x.name for x in tmp_path.iterdir()) == ["net.tpubin"]
    assert TpuBinary.read(p) == b2


def test_read_missing_file(tmp_path):
    p = tmp_path / "none.tpubin"
    with pytest.raises(BinaryFormatError, match=re.escape(f"cannot read {p}: No such file or directory")):
        TpuBinary.read(p)


def test_read_directory(tmp_path):
    with pytest.raises(BinaryFormatError, match=re.escape(f"cannot read {tmp_path}: Is a directory")):
        TpuBinary.read(tmp_path)


def test_read_errors_name_the_path(tmp_path):
    p = tmp_path / "bad.tpubin"
    p.write_bytes(b"NOPE" + bytes(60))
    with pytest.raises(BinaryFormatError, match=re.escape(f"{p}: bad magic b'NOPE'")):
        TpuBinary.read(p)


def test_real_config_hash_round_trip():
    cfg = load_config("small")
    b = TpuBinary(cfg.hash_bytes(), 0, b"")
    assert TpuBinary.from_bytes(b.to_bytes(), cfg.hash_bytes()).config_hash == cfg.hash_bytes()
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"built for hardware config {cfg.hash_hex()[:16]}…, but the selected config is "
            f"{load_config('seed').hash_hex()[:16]}…: recompile for this config")):
        TpuBinary.from_bytes(b.to_bytes(), load_config("seed").hash_bytes())


def test_error_is_tpu_error():
    assert issubclass(BinaryFormatError, TpuError)


# ---- header and checksum errors --------------------------------------------------------------
def test_bad_magic():
    raw = pack([code_sec()], magic=b"ELF\x7f")
    with pytest.raises(BinaryFormatError, match=re.escape(
            "bad magic b'ELF\\x7f', expected b'TPUB': not a .tpubin file")):
        TpuBinary.from_bytes(raw)


@pytest.mark.parametrize("version", [0, 3, 0xFFFF])
def test_unknown_version(version):
    raw = pack([code_sec()], version=version)
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"unsupported format version {version} (this tool reads 1 and 2)")):
        TpuBinary.from_bytes(raw)


def _version(raw: bytes) -> int:
    return binary.HEADER.unpack_from(raw, 0)[1]


def test_version_2_only_with_a_channel_map():
    """A binary is written with the lowest version describing it: 2 when an IO or kept-layer
    TensorDesc has a channel map (a tool reading only 1 then refuses it by its version)."""
    b = sample()
    assert b.version == 1 and _version(b.to_bytes()) == 1
    mapped = desc("cat", shape=(1, 11, 4, 5), channels=((0, 0, 5), (5, 8, 6)))
    b.outputs.append(mapped)
    raw = b.to_bytes()
    assert _version(raw) == binary.VERSION_CHANNELS == 2
    assert TpuBinary.from_bytes(raw) == b
    b.outputs.pop()
    b.meta["tensors"] = [mapped.to_json()]
    assert _version(b.to_bytes()) == 2
    assert TpuBinary.from_bytes(b.to_bytes()).meta["tensors"][0]["channels"] == [[0, 0, 5], [5, 8, 6]]


def test_where_prefix():
    with pytest.raises(BinaryFormatError, match=re.escape("net.tpubin: unsupported format version 9")):
        TpuBinary.from_bytes(pack([code_sec()], version=9), where="net.tpubin")


def test_checksum_mismatch_one_flipped_byte():
    raw = bytearray(sample().to_bytes())
    raw[200] ^= 0x01
    crc = struct.unpack("<I", raw[-4:])[0]
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"checksum mismatch (stored {crc:#010x}, computed {zlib.crc32(bytes(raw[:-4])):#010x}): "
            "file is corrupt or truncated")):
        TpuBinary.from_bytes(bytes(raw))


def test_every_single_byte_flip_is_detected():
    raw = TpuBinary(H1, 0x40, encode_program([make("HALT")]), meta={"m": 1}).to_bytes()
    for pos in range(len(raw)):
        bad = bytearray(raw)
        bad[pos] ^= 0x80
        if pos < 4:
            msg = "bad magic"
        elif pos < 6:
            msg = "unsupported format version"
        else:
            msg = "checksum mismatch"
        with pytest.raises(BinaryFormatError, match=re.escape(msg)):
            TpuBinary.from_bytes(bytes(bad))


def test_every_truncation_is_an_error():
    raw = TpuBinary(H1, 0x40, encode_program([make("HALT")]), consts=[(0, b"xyz")],
                    meta={"m": 1}).to_bytes()
    for n in range(len(raw)):
        with pytest.raises(BinaryFormatError) as ei:
            TpuBinary.from_bytes(raw[:n])
        if n < HDR.size + 4:
            assert str(ei.value) == f"file of {n} bytes is too short for a .tpubin header"
        else:
            assert "checksum mismatch" in str(ei.value) and "file is corrupt or truncated" in str(ei.value)


def test_every_truncation_with_valid_crc_is_an_error():
    """Truncated bodies re-sealed with a correct CRC reach the section checks: still a clean error."""
    body = sample().to_bytes()[:-4]
    for n in range(HDR.size, len(body)):
        with pytest.raises(BinaryFormatError, match=r"section|too short"):
            TpuBinary.from_bytes(with_crc(body[:n]))


@pytest.mark.parametrize("seed", range(4))
def test_random_garbage_is_a_clean_error(seed):
    rng = np.random.default_rng(seed)
    good = sample().to_bytes()
    for _ in range(200):
        body = bytearray(good[:-4])
        for pos in rng.integers(HDR.size, len(body), size=int(rng.integers(1, 6))):
            body[pos] = int(rng.integers(0, 256))
        try:
            TpuBinary.from_bytes(with_crc(bytes(body)))
        except BinaryFormatError:
            pass


def test_wrong_config_hash():
    raw = pack([code_sec()], chash=H1)
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"built for hardware config {H1.hex()[:16]}…, but the selected config is {H2.hex()[:16]}…: "
            "recompile for this config")):
        TpuBinary.from_bytes(raw, expected_config_hash=H2)
    assert TpuBinary.from_bytes(raw).config_hash == H1  # no expectation: accepted


# ---- section table errors -----------------------------------------------------------------
def test_section_table_past_end():
    raw = pack([code_sec()], nsec=1000)
    with pytest.raises(BinaryFormatError, match=re.escape(
            "section table of 1000 entries runs past the end of the file")):
        TpuBinary.from_bytes(raw)


def test_section_table_huge_count():
    raw = pack([code_sec()], nsec=0xFFFFFFFF)
    with pytest.raises(BinaryFormatError, match=re.escape(f"section table of {0xFFFFFFFF} entries runs past")):
        TpuBinary.from_bytes(raw)


def test_section_offset_past_end():
    secs = [code_sec(), js(META, {})]
    good = pack(secs)
    end = len(good) - 4
    raw = pack(secs, fix=lambda i, k, r, o, s: (k, r, end, 1) if i == 1 else None)
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"section 1 (META) at offset {end} size 1 is outside the file ({end} bytes of payload)")):
        TpuBinary.from_bytes(raw)


def test_section_size_past_end():
    secs = [code_sec(), js(META, {})]
    end = len(pack(secs)) - 4
    raw = pack(secs, fix=lambda i, k, r, o, s: (k, r, o, s + 1) if i == 1 else None)
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"section 1 (META) at offset {end - 2} size 3 is outside the file ({end} bytes of payload)")):
        TpuBinary.from_bytes(raw)
    raw = pack(secs, fix=lambda i, k, r, o, s: (k, r, o, 2 ** 64 - 1) if i == 1 else None)
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"section 1 (META) at offset {end - 2} size {2 ** 64 - 1} is outside the file")):
        TpuBinary.from_bytes(raw)


def test_section_offset_inside_header():
    raw = pack([code_sec()], fix=lambda i, k, r, o, s: (k, r, 10, 8))
    with pytest.raises(BinaryFormatError, match=re.escape("section 0 (CODE) at offset 10 size 8 is outside the file")):
        TpuBinary.from_bytes(raw)


def test_unknown_section_kind():
    raw = pack([code_sec(), (9, b"??")])
    with pytest.raises(BinaryFormatError, match=re.escape("section 1 has unknown kind 9")):
        TpuBinary.from_bytes(raw)
    raw = pack([code_sec()], fix=lambda i, k, r, o, s: (77, r, o, s))
    with pytest.raises(BinaryFormatError, match=re.escape("section 0 has unknown kind 77")):
        TpuBinary.from_bytes(raw)


def test_missing_code():
    raw = pack([const_sec(0, b"ab"), js(META, {})])
    with pytest.raises(BinaryFormatError, match=re.escape("no CODE section")):
        TpuBinary.from_bytes(raw)
    with pytest.raises(BinaryFormatError, match=re.escape("no CODE section")):
        TpuBinary.from_bytes(pack([]))


@pytest.mark.parametrize("kind, name", [(CODE, "CODE"), (CONST, "CONST")])
@pytest.mark.parametrize("size", [0, 1, 7])
def test_address_sections_shorter_than_address(kind, name, size):
    raw = pack([(kind, bytes(size))] + ([code_sec()] if kind == CONST else []))
    with pytest.raises(BinaryFormatError, match=re.escape(f"section 0 ({name}) is truncated ({size} bytes)")):
        TpuBinary.from_bytes(raw)


def test_const_past_2_pow_40():
    lim = 1 << 40
    ok = TpuBinary.from_bytes(pack([code_sec(), const_sec(lim - 8, bytes(8))]))   # ends exactly at 2^40
    assert ok.consts == [(lim - 8, bytes(8))]
    raw = pack([code_sec(), const_sec(lim - 7, bytes(8))])
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"section 1 (CONST) at DDR {lim - 7:#x} + 8 bytes passes 2^40")):
        TpuBinary.from_bytes(raw)
    raw = pack([code_sec(), const_sec(2 ** 64 - 1, b"")])
    with pytest.raises(BinaryFormatError, match=re.escape("section 1 (CONST) at DDR 0xffffffffffffffff + 0 bytes")):
        TpuBinary.from_bytes(raw)


def test_code_past_2_pow_40():
    raw = pack([code_sec(1 << 40, bytes(32))])
    with pytest.raises(BinaryFormatError, match=re.escape(
            "section 0 (CODE) at DDR 0x10000000000 + 32 bytes passes 2^40")):
        TpuBinary.from_bytes(raw)


# ---- JSON sections ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind, name", [(FILL, "FILL"), (IO, "IO"), (META, "META")])
@pytest.mark.parametrize("payload", [b"{", b"", b"{'a': 1}", b"\xff\xfe\x00", b"[1, 2,]"])
def test_invalid_json(kind, name, payload):
    raw = pack([code_sec(), (kind, payload)])
    with pytest.raises(BinaryFormatError, match=re.escape(f"section 1 ({name}) is not valid JSON: ")):
        TpuBinary.from_bytes(raw)


@pytest.mark.parametrize("obj", [[], "x", 5, None, {"inputs": 5}, {"outputs": {"a": 1}}])
def test_io_wrong_structure(obj):
    raw = pack([code_sec(), js(IO, obj)])
    with pytest.raises(BinaryFormatError, match=re.escape(
            'section 1 (IO) must be a JSON object with lists "inputs" and "outputs"')):
        TpuBinary.from_bytes(raw)


@pytest.mark.parametrize("d, why", [
    ({"shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8}, "'name'"),
    ({"name": "x", "shape": 5, "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8}, "not iterable"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": "big", "zero_point": 0, "ddr_addr": 0, "blk": 8},
     "could not convert"),
    ({"name": "x", "shape": [1, 3, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8},
     "shape must be (1, C, H, W) with positive integers"),
    ({"name": "x", "shape": [2, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8},
     "shape must be (1, C, H, W)"),
    ({"name": "x", "shape": [1, 0, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8},
     "shape must be (1, C, H, W)"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8, "pads": [1]},
     "pads must be 4 non-negative integers"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 0},
     "blk must be positive"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8,
      "channels": [[0, 0, 2], [1, 8, 1]]}, "channels segment [1, 8, 1] must start at logical channel 2"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8,
      "channels": [[0, 8, 2], [2, 0, 1]]}, "channels segment [2, 0, 1] must start at logical channel 2, lane >= 10"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8,
      "channels": [[0, 0, 2]]}, "channels cover 2 channels, the shape has 3"),
    ({"name": "x", "shape": [1, 3, 4, 4], "scale": 1, "zero_point": 0, "ddr_addr": 0, "blk": 8,
      "channels": [[0, 0]]}, "channels [[0, 0]] must be a non-empty list of [logical, lane, count]"),
    (7, "not subscriptable"),
])
def test_io_bad_descriptor(d, why):
    raw = pack([code_sec(), js(IO, {"inputs": [d], "outputs": []})])
    with pytest.raises(BinaryFormatError, match=re.escape(f"bad tensor descriptor {d!r}: ") + ".*" + re.escape(why)):
        TpuBinary.from_bytes(raw)


@pytest.mark.parametrize("obj, msg", [
    ({}, "section 1 (FILL) must be a JSON list, got dict"),
    ([1], "section 1 (FILL): bad entry 1, expected"),
    ([{"addr": 0, "size": 4}], "section 1 (FILL): bad entry {'addr': 0, 'size': 4}, expected"),
    ([{"addr": 0, "size": "4", "value": 0}], "bad entry"),
    ([{"addr": 0, "size": 1.5, "value": 0}], "bad entry"),
    ([{"addr": -1, "size": 4, "value": 0}], "section 1 (FILL): region at DDR -0x1 + 4 bytes is outside [0, 2^40)"),
    ([{"addr": (1 << 40) - 2, "size": 4, "value": 0}], "region at DDR 0xfffffffffe + 4 bytes is outside"),
])
def test_fill_bad_entries(obj, msg):
    raw = pack([code_sec(), js(FILL, obj)])
    with pytest.raises(BinaryFormatError, match=re.escape(msg)):
        TpuBinary.from_bytes(raw)


def test_meta_any_json_object():
    b = TpuBinary.from_bytes(pack([code_sec(), js(META, {"a": [1, {"b": None}], "c": 1.5})]))
    assert b.meta == {"a": [1, {"b": None}], "c": 1.5}


_LAYER = {"name": "conv1", "op": "QConv", "instr_begin": 0, "instr_end": 2}


@pytest.mark.parametrize("layers, msg", [
    ({"conv1": {}}, "section 1 (META): layers must be a list, got dict"),
    ([7], "section 1 (META): layers[0] must be an object, got int"),
    ([_LAYER, {**_LAYER, "name": None}], "section 1 (META): layers[1]: name must be a string, got None"),
    ([{k: v for k, v in _LAYER.items() if k != "op"}], "layers[0]: op must be a string, got None"),
    ([{**_LAYER, "instr_begin": "0"}], "layers[0]: instr_begin must be an integer >= 0, got '0'"),
    ([{**_LAYER, "instr_end": 2.5}], "layers[0]: instr_end must be an integer >= instr_begin, got 2.5"),
    ([{**_LAYER, "instr_begin": -4}], "layers[0] ('conv1'): instruction range [-4, 2) is not 0 <= instr_begin <= instr_end"),
    ([{**_LAYER, "instr_begin": 3}], "layers[0] ('conv1'): instruction range [3, 2) is not"),
    ([{**_LAYER, "macs": "many"}], "layers[0] ('conv1'): macs must be an integer >= 0, got 'many'"),
    ([{**_LAYER, "macs": 1e9}], "layers[0] ('conv1'): macs must be an integer >= 0, got 1000000000.0"),
    ([{**_LAYER, "compulsory_bytes": -1}], "layers[0] ('conv1'): compulsory_bytes must be an integer >= 0, got -1"),
    ([{**_LAYER, "instr_end": True}], "layers[0]: instr_end must be an integer >= instr_begin, got True"),
    ([_LAYER, {**_LAYER, "name": "conv2", "instr_begin": 1, "instr_end": 4}],
     "section 1 (META): layers[1] ('conv2') instructions [1, 4) overlap layers[0] ('conv1') [0, 2)"),
])
def test_meta_layers_checked(layers, msg):
    """A hand-edited meta["layers"] (read by the profiler, cosim, the sweep) is refused naming the
    layer and the field, not met with a traceback later."""
    raw = pack([code_sec(), js(META, {"layers": layers})])
    with pytest.raises(BinaryFormatError, match=re.escape(msg)):
        TpuBinary.from_bytes(raw)


def test_meta_layers_may_be_empty_or_adjacent():
    """Views (no instructions) may sit anywhere; adjacent ranges do not overlap."""
    layers = [_LAYER, {**_LAYER, "name": "view", "instr_begin": 1, "instr_end": 1},
              {**_LAYER, "name": "conv2", "instr_begin": 2, "instr_end": 5}]
    assert TpuBinary.from_bytes(pack([code_sec(), js(META, {"layers": layers})])).meta["layers"] == layers


def test_meta_layers_extra_keys_kept():
    L = {**_LAYER, "macs": 0, "compulsory_bytes": 12, "fused": ["conv1", "add1"], "tiling": {"k": 1}}
    assert TpuBinary.from_bytes(pack([code_sec(), js(META, {"layers": [L]})])).meta["layers"] == [L]


# ---- DDR image --------------------------------------------------------------------------------
def test_ddr_segments_order_and_contents():
    b = sample()
    x = bytes(b.inputs[0].size_bytes)
    segs = b.ddr_segments({"input.1": x})
    assert segs[0] == (0x1000, bytes([0xFD]) * 420)       # value -3 as a byte
    assert segs[1] == (0x2000, b"\x7f" * 64)
    assert segs[2:5] == [(a, d) for a, d in b.consts]
    assert segs[5] == (0x4000, b.code)
    assert segs[6] == (0x1000, x)
    assert len(segs) == 7
    assert b.ddr_segments() == segs[:6]


def test_ddr_segments_unknown_input():
    with pytest.raises(BinaryFormatError, match=re.escape("binary has no input named 'y'; inputs: ['input.1']")):
        sample().ddr_segments({"y": b""})


# ---- TensorDesc --------------------------------------------------------------------------------
def test_tensor_desc_geometry():
    d = desc(shape=(1, 19, 5, 7), blk=8, pads=(1, 2, 3, 4))
    assert d.padded_hw == (5 + 1 + 3, 7 + 2 + 4)
    assert d.nblocks == 3
    assert d.size_bytes == 3 * 9 * 13 * 8
    assert desc(shape=(1, 16, 2, 2), blk=8, pads=(0, 0, 0, 0)).nblocks == 2
    assert desc(shape=(1, 1, 1, 1), blk=128, pads=(0, 0, 0, 0)).size_bytes == 128


def test_tensor_desc_json_round_trip():
    d = desc()
    j = d.to_json()
    assert j == {"name": "x", "shape": [1, 3, 4, 5], "scale": 0.05, "zero_point": -3, "ddr_addr": 0x1000,
                 "blk": 8, "pads": [1, 2, 1, 0], "dtype": "int8"}
    assert TensorDesc.from_json(json.loads(json.dumps(j))) == d
    j.pop("pads"), j.pop("dtype")
    assert TensorDesc.from_json(j) == TensorDesc("x", (1, 3, 4, 5), 0.05, -3, 0x1000, 8)


def test_blocked_round_trip_with_channel_map():
    """Logical channels 0..4 at lanes 0..4, 5..10 at lanes 8..13 (a Concat of 5 + 6 on blk 8):
    two blocks, the gap lanes zero when written, skipped when read."""
    rng = np.random.default_rng(5)
    d = desc(shape=(1, 11, 3, 4), blk=8, pads=(1, 0, 0, 1), channels=((0, 0, 5), (5, 8, 6)))
    assert d.nblocks == 2 and d.lanes == 14
    x = rng.integers(-128, 128, size=(1, 11, 3, 4), dtype=np.int8)
    raw = d.to_blocked(x, fill=9)
    np.testing.assert_array_equal(d.from_blocked(raw), x)
    buf = np.frombuffer(raw, np.int8).reshape(2, 4, 5, 8)
    np.testing.assert_array_equal(buf[1, 1:, :4, 0:6].transpose(2, 0, 1), x[0, 5:])
    assert not buf[0, 1:, :4, 5:].any() and not buf[1, 1:, :4, 6:].any()
    assert TensorDesc.from_json(json.loads(json.dumps(d.to_json()))) == d


@pytest.mark.parametrize("c, blk, pads", [(3, 8, (1, 2, 1, 0)), (8, 8, (0, 0, 0, 0)), (19, 8, (2, 1, 0, 3)),
                                          (1, 4, (1, 1, 1, 1)), (130, 128, (0, 1, 0, 0)), (16, 8, (3, 3, 3, 3))])
def test_blocked_round_trip(c, blk, pads):
    rng = np.random.default_rng(c * 1000 + blk)
    h, w = 5, 6
    d = desc(shape=(1, c, h, w), blk=blk, pads=pads)
    x = rng.integers(-128, 128, size=(1, c, h, w), dtype=np.int8)
    fill = -77
    raw = d.to_blocked(x, fill=fill)
    assert len(raw) == d.size_bytes
    back = d.from_blocked(raw)
    assert back.dtype == np.int8 and back.shape == (1, c, h, w)
    np.testing.assert_array_equal(back, x)
    # explicit layout: [C/blk][Hp][Wp][blk]
    hp, wp = d.padded_hw
    t, l, b, r = pads
    buf = np.frombuffer(raw, dtype=np.int8).reshape(d.nblocks, hp, wp, blk)
    for ch in range(d.nblocks * blk):
        plane = buf[ch // blk, t:t + h, l:l + w, ch % blk]
        if ch < c:
            np.testing.assert_array_equal(plane, x[0, ch])
        else:
            assert (plane == 0).all(), "padding channels are zero inside the image"
    # the border, every channel (padding channels too), holds the fill value
    border = np.ones((hp, wp), bool)
    border[t:t + h, l:l + w] = False
    assert border.sum() == hp * wp - h * w
    assert (buf[:, border, :] == fill).all()


def test_blocked_hand_example():
    # C=3, blk=4, H=1, W=2, pads top=1 left=0 bottom=0 right=1 -> [1][2][3][4]
    d = desc(shape=(1, 3, 1, 2), blk=4, pads=(1, 0, 0, 1))
    x = np.array([[[[1, 2]], [[3, 4]], [[5, 6]]]], dtype=np.int8)
    raw = d.to_blocked(x, fill=9)
    assert raw == bytes([9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9,      # row 0: border
                         1, 3, 5, 0, 2, 4, 6, 0, 9, 9, 9, 9])     # row 1: px0, px1, right border
    np.testing.assert_array_equal(d.from_blocked(raw), x)


@pytest.mark.parametrize("fill", [-128, -1, 0, 127])
def test_fill_values_at_border(fill):
    d = desc(shape=(1, 2, 2, 2), blk=4, pads=(1, 1, 1, 1))
    x = np.full((1, 2, 2, 2), 5, dtype=np.int8)
    buf = np.frombuffer(d.to_blocked(x, fill=fill), dtype=np.int8).reshape(1, 4, 4, 4)
    assert (buf[0, 0] == fill).all() and (buf[0, 3] == fill).all()
    assert (buf[0, :, 0] == fill).all() and (buf[0, :, 3] == fill).all()
    assert (buf[0, 1:3, 1:3, :2] == 5).all() and (buf[0, 1:3, 1:3, 2:] == 0).all()


@pytest.mark.parametrize("shape", [(1, 3, 5, 4), (3, 4, 5), (2, 3, 4, 5), (1, 4, 4, 5)])
def test_to_blocked_wrong_shape(shape):
    d = desc(shape=(1, 3, 4, 5))
    with pytest.raises(BinaryFormatError, match=re.escape(
            f"tensor 'x': expected shape (1, 3, 4, 5), got {shape}")):
        d.to_blocked(np.zeros(shape, np.int8), fill=0)


@pytest.mark.parametrize("delta", [-1, 1, -8])
def test_from_blocked_wrong_length(delta):
    d = desc()
    n = d.size_bytes + delta
    with pytest.raises(BinaryFormatError, match=re.escape(f"tensor 'x': expected {d.size_bytes} bytes, got {n}")):
        d.from_blocked(bytes(n))


def test_header_layout_is_the_documented_one():
    """The module docstring's layout: magic 4 | version u16 | reserved u16 | SHA-256 32 | count u32,
    then entries kind u32 | reserved u32 | offset u64 | size u64, all little endian."""
    assert (HDR.format, HDR.size) == ("<4sHH32sI", 44)
    assert (SEC.format, SEC.size) == ("<IIQQ", 24)
