"""The .tpubin container: code, constants and I/O descriptors for one hardware configuration.

Layout (all integers little endian):

  header   magic b"TPUB" | version u16 | reserved u16 | config SHA-256 (32 bytes) |
           section count u32
  table    per section: kind u32 | reserved u32 | offset u64 | size u64   (offsets from file start)
  payload  the sections' bytes
  trailer  CRC-32 (zlib) of everything before it, u32

Section kinds:
  CODE (1)   u64 DDR byte address, then the instructions (32 bytes each, tpusim.arch.isa)
  CONST (2)  u64 DDR byte address, then bytes (weights, bias and requant tables)
  FILL (3)   JSON list of {"addr", "size", "value"}: DDR regions preset to one byte value
             (e.g. the zero-point padding around activation tensors)
  IO (4)     JSON {"inputs": [...], "outputs": [...]}: TensorDesc dicts (below)
  META (5)   JSON: compiler metadata (model name, host ops such as Softmax, per-layer info)

A TensorDesc gives name, logical shape (N, C, H, W), dtype "int8", scale, zero_point, and the DDR
layout: blocked channels ``[C/blk][H + pad_t + pad_b][W + pad_l + pad_r][blk]`` int8 at
``ddr_addr`` with ``blk`` = the array rows (padding channels are zero). Optional ``channels``
(format version 2): a channel map ``[[logical, lane, count], ...]`` for a tensor whose channels
do not sit at lanes 0..C-1 (a Concat of parts that do not fill whole blocks): logical channels
``logical .. logical + count - 1`` are lanes ``lane ..`` of the blocked buffer, the segments in
logical order covering [0, C), their lanes increasing; the other lanes are unused.

Versions: 1, and 2 = 1 + ``channels``. A binary is written with the lowest version that describes
it (2 only when a TensorDesc of IO or of META ``tensors`` has a channel map), so a tool reading
only version 1 refuses it by its version instead of misreading the tensors; both are read.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tpusim.arch.errors import BinaryFormatError, SimulationError
from tpusim.arch.fileio import write_bytes_atomic
from tpusim.arch.limits import DDR_ADDR_LIMIT

MAGIC = b"TPUB"
VERSION = 1
#: the version of a binary with channel maps; the versions this module reads
VERSION_CHANNELS = 2
VERSIONS = (VERSION, VERSION_CHANNELS)
KIND_CODE, KIND_CONST, KIND_FILL, KIND_IO, KIND_META = 1, 2, 3, 4, 5
_KINDS = {KIND_CODE: "CODE", KIND_CONST: "CONST", KIND_FILL: "FILL", KIND_IO: "IO", KIND_META: "META"}
#: header: magic, version, reserved, config SHA-256, section count (module docstring)
HEADER = struct.Struct("<4sHH32sI")
#: one section table entry: kind, reserved, offset from file start, size in bytes
SECTION_ENTRY = struct.Struct("<IIQQ")
#: Largest FILL total and largest I/O tensor the host tools materialise (bytes): a region this
#: big is far beyond any compiled model and would exhaust the host's memory.
HOST_BYTES_LIMIT = 1 << 32


@dataclass
class TensorDesc:
    """Where and how a device tensor lives in DDR (blocked int8 layout, see module docstring)."""
    name: str
    shape: tuple          # logical (N, C, H, W)
    scale: float
    zero_point: int
    ddr_addr: int
    blk: int              # channels per block (= array rows)
    pads: tuple = (0, 0, 0, 0)  # top, left, bottom, right (the DDR buffer's border)
    dtype: str = "int8"
    channels: tuple | None = None  # ((logical, lane, count), ...) or None: channel c at lane c

    @property
    def padded_hw(self) -> tuple[int, int]:
        _, _, h, w = self.shape
        t, l, b, r = self.pads
        return h + t + b, w + l + r

    @property
    def lanes(self) -> int:
        """Lanes the channels span (C without a channel map)."""
        return self.shape[1] if self.channels is None else max(p + n for _, p, n in self.channels)

    @property
    def nblocks(self) -> int:
        return -(-self.lanes // self.blk)

    def _segments(self) -> tuple:
        return ((0, 0, self.shape[1]),) if self.channels is None else self.channels

    @property
    def size_bytes(self) -> int:
        hp, wp = self.padded_hw
        return self.nblocks * hp * wp * self.blk

    def to_blocked(self, x: np.ndarray, fill: int) -> bytes:
        """int8 NCHW (N=1) array → the bytes of the whole padded blocked buffer."""
        n, c, h, w = self.shape
        if x.shape != (n, c, h, w):
            raise BinaryFormatError(f"tensor {self.name!r}: expected shape {(n, c, h, w)}, got {x.shape}")
        hp, wp = self.padded_hw
        t, l, _, _ = self.pads
        buf = np.full((self.nblocks, hp, wp, self.blk), fill, dtype=np.int8)
        buf[:, t:t + h, l:l + w, :] = 0  # padding channels are zero inside the image
        xc = np.zeros((self.nblocks * self.blk, h, w), dtype=np.int8)
        for lc, p, k in self._segments():
            xc[p:p + k] = x[0, lc:lc + k]
        buf[:, t:t + h, l:l + w, :] = xc.reshape(self.nblocks, self.blk, h, w).transpose(0, 2, 3, 1)
        return buf.tobytes()

    def from_blocked(self, raw: bytes) -> np.ndarray:
        """The bytes of the padded blocked buffer → int8 NCHW (N=1) array."""
        if len(raw) != self.size_bytes:
            raise BinaryFormatError(f"tensor {self.name!r}: expected {self.size_bytes} bytes, got {len(raw)}")
        n, c, h, w = self.shape
        hp, wp = self.padded_hw
        t, l, _, _ = self.pads
        buf = np.frombuffer(raw, dtype=np.int8).reshape(self.nblocks, hp, wp, self.blk)
        x = buf[:, t:t + h, l:l + w, :].transpose(0, 3, 1, 2).reshape(self.nblocks * self.blk, h, w)
        if self.channels is None:
            return x[:c][None].copy()
        return np.concatenate([x[p:p + k] for _, p, k in self.channels])[None]

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "scale": self.scale,
                "zero_point": self.zero_point, "ddr_addr": self.ddr_addr, "blk": self.blk,
                "pads": list(self.pads), "dtype": self.dtype,
                **({} if self.channels is None else {"channels": [list(s) for s in self.channels]})}

    @classmethod
    def from_json(cls, d: dict) -> "TensorDesc":
        try:
            t = cls(d["name"], tuple(d["shape"]), float(d["scale"]), int(d["zero_point"]),
                    int(d["ddr_addr"]), int(d["blk"]), tuple(d.get("pads", (0, 0, 0, 0))),
                    d.get("dtype", "int8"), _channels(d))
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: {e}") from None
        if len(t.shape) != 4 or not all(_is_int(v) and v > 0 for v in t.shape) or t.shape[0] != 1:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: shape must be (1, C, H, W) "
                                    "with positive integers")
        if len(t.pads) != 4 or not all(_is_int(v) and v >= 0 for v in t.pads):
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: pads must be 4 non-negative integers")
        if not _is_int(t.blk) or t.blk <= 0:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: blk must be positive")
        _check_channels(t, d)
        if not isinstance(t.name, str) or t.dtype != "int8":
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: name must be a string and dtype 'int8'")
        if not (np.isfinite(t.scale) and t.scale > 0) or not -128 <= t.zero_point <= 127:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: scale must be positive and finite, "
                                    "zero_point in [-128, 127]")
        if t.size_bytes > HOST_BYTES_LIMIT or not 0 <= t.ddr_addr <= DDR_ADDR_LIMIT - t.size_bytes:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: {t.size_bytes} bytes at DDR "
                                    f"{t.ddr_addr:#x} is outside [0, 2^40) or larger than 2^32 bytes")
        return t


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _channels(d: dict):
    """The ``channels`` of a TensorDesc dict as a tuple of triples (None if absent)."""
    ch = d.get("channels")
    if ch is None:
        return None
    if not isinstance(ch, list) or not ch or not all(isinstance(s, list) and len(s) == 3 for s in ch):
        raise ValueError(f"channels {ch!r} must be a non-empty list of [logical, lane, count]")
    return tuple(tuple(s) for s in ch)


def _check_channels(t: TensorDesc, d: dict) -> None:
    """A channel map covers [0, C) in logical order with lanes increasing and disjoint."""
    if t.channels is None:
        return
    at = lane = 0
    for s in t.channels:
        lc, p, n = s
        if not all(_is_int(v) for v in s) or lc != at or p < lane or n <= 0:
            raise BinaryFormatError(f"bad tensor descriptor {d!r}: channels segment {list(s)} must start "
                                    f"at logical channel {at}, lane >= {lane}, with a positive count")
        at, lane = lc + n, p + n
    if at != t.shape[1]:
        raise BinaryFormatError(f"bad tensor descriptor {d!r}: channels cover {at} channels, the shape has "
                                f"{t.shape[1]}")


def _check_fills(obj, w: str, i: int) -> list:
    """The FILL section must be a list of {"addr", "size", "value"} integers inside 2^40."""
    if not isinstance(obj, list):
        raise BinaryFormatError(f"{w}section {i} (FILL) must be a JSON list, got {type(obj).__name__}")
    total = 0
    for f in obj:
        if not (isinstance(f, dict) and all(_is_int(f.get(k)) for k in ("addr", "size", "value"))):
            raise BinaryFormatError(f"{w}section {i} (FILL): bad entry {f!r}, expected "
                                    "{\"addr\", \"size\", \"value\"} integers")
        if f["addr"] < 0 or f["size"] < 0 or f["addr"] + f["size"] > DDR_ADDR_LIMIT:
            raise BinaryFormatError(f"{w}section {i} (FILL): region at DDR {f['addr']:#x} "
                                    f"+ {f['size']} bytes is outside [0, 2^40)")
        if not -128 <= f["value"] <= 255:
            raise BinaryFormatError(f"{w}section {i} (FILL): region at DDR {f['addr']:#x} has fill "
                                    f"value {f['value']}, not a byte")
        total += f["size"]
        if total > HOST_BYTES_LIMIT:
            raise BinaryFormatError(f"{w}section {i} (FILL): regions total {total} bytes, more than "
                                    f"the {HOST_BYTES_LIMIT} bytes the tools preload")
    return obj


def _check_meta(obj, w: str, i: int) -> dict:
    """META is a JSON object; its ``input_transforms`` (read by ``tpusim run``) a list of
    {"name", "orig_shape", ...} objects; its ``layers`` (read by the profiler, cosim and the
    sweep) a list of entries that pass ``_check_layer``, their instruction ranges disjoint."""
    if not isinstance(obj, dict):
        raise BinaryFormatError(f"{w}section {i} (META) must be a JSON object, got {type(obj).__name__}")
    trs = obj.get("input_transforms", [])
    if not isinstance(trs, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str)
                                            and isinstance(t.get("orig_shape"), list) for t in trs):
        raise BinaryFormatError(f"{w}section {i} (META): input_transforms must be a list of "
                                "{\"name\", \"orig_shape\", ...} objects")
    layers = obj.get("layers", [])
    if not isinstance(layers, list):
        raise BinaryFormatError(f"{w}section {i} (META): layers must be a list, got {type(layers).__name__}")
    for k, L in enumerate(layers):
        _check_layer(L, f"{w}section {i} (META): layers[{k}]")
    _check_disjoint(layers, f"{w}section {i} (META)")
    return obj


def _check_disjoint(layers: list, where: str) -> None:
    """The instruction ranges of the layers that have instructions do not overlap (each
    instruction belongs to one layer: the profiler counts it there; an overlapping layer lost its
    instructions to the other and vanished from the profile). BinaryFormatError naming both."""
    spans = sorted((L["instr_begin"], L["instr_end"], k) for k, L in enumerate(layers) if L["instr_end"] > L["instr_begin"])
    for (b0, e0, k0), (b1, e1, k1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise BinaryFormatError(f"{where}: layers[{k1}] ({layers[k1]['name']!r}) instructions [{b1}, {e1}) "
                                    f"overlap layers[{k0}] ({layers[k0]['name']!r}) [{b0}, {e0})")


#: the keys of a ``meta["layers"]`` entry that the tools read, and the check each must pass
_LAYER_KEYS = {"name": (str, "a string"), "op": (str, "a string"), "instr_begin": (int, "an integer >= 0"),
               "instr_end": (int, "an integer >= instr_begin")}
_LAYER_COUNTS = ("macs", "compulsory_bytes")


def _check_layer(L, where: str) -> None:
    """A ``meta["layers"]`` entry (read by the profiler, cosim and the sweep): an object with a
    ``name`` and ``op`` (strings), an instruction range 0 <= ``instr_begin`` <= ``instr_end``, and
    ``macs`` / ``compulsory_bytes``, when present, integers >= 0. BinaryFormatError naming the
    layer and the field."""
    if not isinstance(L, dict):
        raise BinaryFormatError(f"{where} must be an object, got {type(L).__name__}")
    for key, (typ, what) in _LAYER_KEYS.items():
        v = L.get(key)
        if not isinstance(v, typ) or isinstance(v, bool):
            raise BinaryFormatError(f"{where}: {key} must be {what}, got {v!r}")
    if L["instr_begin"] < 0 or L["instr_end"] < L["instr_begin"]:
        raise BinaryFormatError(f"{where} ({L['name']!r}): instruction range [{L['instr_begin']}, "
                                f"{L['instr_end']}) is not 0 <= instr_begin <= instr_end")
    for key in _LAYER_COUNTS:
        v = L.get(key, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise BinaryFormatError(f"{where} ({L['name']!r}): {key} must be an integer >= 0, got {v!r}")


@dataclass
class TpuBinary:
    """An in-memory .tpubin. ``code`` is loaded at ``code_addr``; ``consts`` are (addr, bytes)."""
    config_hash: bytes
    code_addr: int
    code: bytes
    consts: list = field(default_factory=list)     # [(ddr_addr, bytes)]
    fills: list = field(default_factory=list)      # [{"addr", "size", "value"}]
    inputs: list = field(default_factory=list)     # [TensorDesc]
    outputs: list = field(default_factory=list)    # [TensorDesc]
    meta: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- writing
    @property
    def version(self) -> int:
        """The lowest format version describing the binary (module docstring)."""
        kept = self.meta.get("tensors", []) if isinstance(self.meta, dict) else []
        mapped = any(t.channels is not None for t in self.inputs + self.outputs) or \
            any(isinstance(t, dict) and "channels" in t for t in kept)
        return VERSION_CHANNELS if mapped else VERSION

    def to_bytes(self) -> bytes:
        secs = [(KIND_CODE, struct.pack("<Q", self.code_addr) + self.code)]
        secs += [(KIND_CONST, struct.pack("<Q", a) + bytes(b)) for a, b in self.consts]
        secs.append((KIND_FILL, json.dumps(self.fills).encode()))
        secs.append((KIND_IO, json.dumps({"inputs": [t.to_json() for t in self.inputs],
                                          "outputs": [t.to_json() for t in self.outputs]}).encode()))
        secs.append((KIND_META, json.dumps(self.meta).encode()))
        off = HEADER.size + SECTION_ENTRY.size * len(secs)
        table, payload = [], []
        for kind, data in secs:
            table.append(SECTION_ENTRY.pack(kind, 0, off, len(data)))
            payload.append(data)
            off += len(data)
        body = HEADER.pack(MAGIC, self.version, 0, self.config_hash, len(secs)) + b"".join(table) + b"".join(payload)
        return body + struct.pack("<I", zlib.crc32(body))

    def write(self, path: str | Path) -> None:
        """Write atomically (temporary file in the same folder, then rename)."""
        write_bytes_atomic(path, self.to_bytes())

    # ---------------------------------------------------------------- reading
    @classmethod
    def from_bytes(cls, raw: bytes, expected_config_hash: bytes | None = None, where: str = "") -> "TpuBinary":
        """Parse and check a .tpubin. BinaryFormatError names what is wrong (magic, version,
        checksum, config hash, section bounds, JSON)."""
        w = f"{where}: " if where else ""
        if len(raw) < HEADER.size + 4:
            raise BinaryFormatError(f"{w}file of {len(raw)} bytes is too short for a .tpubin header")
        magic, version, _, chash, nsec = HEADER.unpack_from(raw, 0)
        if magic != MAGIC:
            raise BinaryFormatError(f"{w}bad magic {magic!r}, expected {MAGIC!r}: not a .tpubin file")
        if version not in VERSIONS:
            raise BinaryFormatError(f"{w}unsupported format version {version} (this tool reads "
                                    f"{' and '.join(map(str, VERSIONS))})")
        (crc,) = struct.unpack_from("<I", raw, len(raw) - 4)
        if zlib.crc32(raw[:-4]) != crc:
            raise BinaryFormatError(f"{w}checksum mismatch (stored {crc:#010x}, computed "
                                    f"{zlib.crc32(raw[:-4]):#010x}): file is corrupt or truncated")
        if expected_config_hash is not None and chash != expected_config_hash:
            raise BinaryFormatError(f"{w}built for hardware config {chash.hex()[:16]}…, but the selected "
                                    f"config is {expected_config_hash.hex()[:16]}…: recompile for this config")
        end = len(raw) - 4
        if HEADER.size + nsec * SECTION_ENTRY.size > end:
            raise BinaryFormatError(f"{w}section table of {nsec} entries runs past the end of the file")
        b = cls(chash, 0, b"")
        seen_code = False
        for i in range(nsec):
            kind, _, off, size = SECTION_ENTRY.unpack_from(raw, HEADER.size + i * SECTION_ENTRY.size)
            if off + size > end or off < HEADER.size:
                raise BinaryFormatError(f"{w}section {i} ({_KINDS.get(kind, kind)}) at offset {off} "
                                        f"size {size} is outside the file ({end} bytes of payload)")
            data = raw[off:off + size]
            if kind in (KIND_CODE, KIND_CONST):
                if size < 8:
                    raise BinaryFormatError(f"{w}section {i} ({_KINDS[kind]}) is truncated ({size} bytes)")
                (addr,) = struct.unpack_from("<Q", data, 0)
                if addr + size - 8 > DDR_ADDR_LIMIT:
                    raise BinaryFormatError(f"{w}section {i} ({_KINDS[kind]}) at DDR {addr:#x} "
                                            f"+ {size - 8} bytes passes 2^40")
                if kind == KIND_CODE:
                    b.code_addr, b.code, seen_code = addr, data[8:], True
                else:
                    b.consts.append((addr, data[8:]))
            elif kind in (KIND_FILL, KIND_IO, KIND_META):
                try:
                    obj = json.loads(data)
                except (ValueError, UnicodeDecodeError) as e:
                    raise BinaryFormatError(f"{w}section {i} ({_KINDS[kind]}) is not valid JSON: {e}") from None
                if kind == KIND_FILL:
                    b.fills = _check_fills(obj, w, i)
                elif kind == KIND_IO:
                    if not isinstance(obj, dict) or not all(isinstance(obj.get(k, []), list)
                                                            for k in ("inputs", "outputs")):
                        raise BinaryFormatError(f"{w}section {i} (IO) must be a JSON object with "
                                                "lists \"inputs\" and \"outputs\"")
                    b.inputs = [TensorDesc.from_json(d) for d in obj.get("inputs", [])]
                    b.outputs = [TensorDesc.from_json(d) for d in obj.get("outputs", [])]
                else:
                    b.meta = _check_meta(obj, w, i)
            else:
                raise BinaryFormatError(f"{w}section {i} has unknown kind {kind}")
        if not seen_code:
            raise BinaryFormatError(f"{w}no CODE section")
        return b

    @classmethod
    def read(cls, path: str | Path, expected_config_hash: bytes | None = None) -> "TpuBinary":
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise BinaryFormatError(f"cannot read {p}: {e.strerror}") from None
        return cls.from_bytes(raw, expected_config_hash, str(p))

    # ---------------------------------------------------------------- DDR image
    def ddr_segments(self, inputs: dict[str, bytes] | None = None) -> list[tuple[int, bytes]]:
        """Everything to preload into DDR, in order: fills, constants, code, then the given inputs
        (name → bytes of the whole blocked buffer). Later segments overwrite earlier ones."""
        segs = [(f["addr"], bytes([f["value"] & 0xFF]) * f["size"]) for f in self.fills]
        segs += [(a, bytes(d)) for a, d in self.consts]
        segs.append((self.code_addr, self.code))
        for name, data in (inputs or {}).items():
            desc = next((t for t in self.inputs if t.name == name), None)
            if desc is None:
                raise BinaryFormatError(f"binary has no input named {name!r}; inputs: "
                                        f"{[t.name for t in self.inputs]}")
            segs.append((desc.ddr_addr, data))
        return segs


def input_blobs(binary: TpuBinary, inputs: dict) -> dict[str, bytes]:
    """name -> bytes of the whole blocked DDR buffer (padding = the input's zero point) for every
    input of ``binary``; SimulationError for a missing, unknown or non-int8 input. Used by the
    SimPy model and by the RTL testbench, so both load the same bytes."""
    known = {t.name for t in binary.inputs}
    extra = sorted(set(inputs) - known)
    if extra:
        raise SimulationError(f"unknown input(s) {extra}; the binary's inputs are {sorted(known)}")
    blobs = {}
    for desc in binary.inputs:
        if desc.name not in inputs:
            raise SimulationError(f"missing input {desc.name!r} (shape {tuple(desc.shape)}, int8 NCHW)")
        x = np.asarray(inputs[desc.name])
        if x.dtype != np.int8:
            raise SimulationError(f"input {desc.name!r} has dtype {x.dtype}, expected int8")
        blobs[desc.name] = desc.to_blocked(x, fill=desc.zero_point)
    return blobs


__all__ = ["TpuBinary", "TensorDesc", "MAGIC", "VERSION", "VERSION_CHANNELS", "VERSIONS", "HEADER", "SECTION_ENTRY", "input_blobs"]
