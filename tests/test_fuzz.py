"""Property tests (hypothesis) over the four parsers of user input: each either accepts the
input or raises a TpuError subclass, never anything else. Short runs here (<= 200 examples per
property, derandomized); the long run is ``python -m tpusim.flow.fuzz --cases 100000`` (make fuzz)."""
from __future__ import annotations

import struct
import zlib

import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpucompile.frontend.onnx_import import SUPPORTED_OPS, import_onnx
from tpucompile.ir import verify
from tpucompile.ops import OP_TABLE
from tpucompile.passes.pipeline import run_passes
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import config_from_dict, parse_config_text
from tpusim.arch.errors import BinaryFormatError, CompileError, ConfigError, IsaError, TpuError
from tpusim.arch.isa import BY_CODE, decode, encode
from tpusim.flow import fuzz

FAST = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOWER = settings(FAST, max_examples=100)


def load_or_reject(raw: bytes) -> None:
    try:
        fuzz.run_loader(raw)
    except BinaryFormatError:
        pass
    except IsaError:
        pass


@FAST
@given(st.binary(max_size=400))
def test_loader_random_bytes(raw):
    load_or_reject(raw)


@FAST
@given(st.sampled_from(range(2)), st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)),
                                           min_size=1, max_size=8), st.booleans(), st.integers(0, 1 << 12))
def test_loader_mutated_valid_binary(which, edits, fix_crc, cut):
    raw = bytearray(fuzz.valid_binaries()[which])
    for pos, val in edits:
        raw[pos % len(raw)] = val
    if cut:
        raw = raw[:max(0, len(raw) - cut)]
    raw = bytes(raw)
    if fix_crc and len(raw) >= 4:
        raw = raw[:-4] + struct.pack("<I", zlib.crc32(raw[:-4]))
    load_or_reject(raw)


@FAST
@given(st.randoms(use_true_random=False))
def test_loader_structured_mutations(r):
    load_or_reject(fuzz.gen_loader(r))


def test_valid_binaries_load():
    for raw in fuzz.valid_binaries():
        assert TpuBinary.from_bytes(raw).code


@FAST
@given(st.binary(min_size=32, max_size=32))
def test_decoder_random_words(raw):
    try:
        ins = decode(raw, 0x40)
    except IsaError:
        return
    assert encode(ins) == raw


@FAST
@given(st.sampled_from(sorted(BY_CODE)), st.integers(0, (1 << 248) - 1))
def test_decoder_valid_opcodes_round_trip(code, rest):
    raw = (code | rest << 8).to_bytes(32, "little")
    try:
        ins = decode(raw)
    except IsaError as e:
        assert f"uses bits 0-{BY_CODE[code].used_bits - 1}, bits {BY_CODE[code].used_bits} and up must be zero" in str(e)
        return
    assert encode(ins) == raw and ins.op == BY_CODE[code].name


@SLOWER
@given(st.randoms(use_true_random=False))
def test_importer_mutated_models(r):
    try:
        fuzz.run_importer(fuzz.gen_importer(r))
    except CompileError:
        pass
    except TpuError:
        pass


def test_importer_seed_models_import():
    """The fuzzer's seed models are valid, import and pass into a verified graph of ops the op
    table knows, and together cover every ONNX op the importer accepts (else mutating them
    would not reach every import handler)."""
    covered = set()
    for raw in fuzz.seed_models():
        fuzz.run_importer(raw)
        m = onnx.ModelProto.FromString(raw)
        covered |= {n.op_type for n in m.graph.node}
        g = run_passes(import_onnx(m))
        verify(g)
        assert g.nodes and all(OP_TABLE.get(n.op) is not None for n in g.nodes), [n.op for n in g.nodes]
    assert covered == set(SUPPORTED_OPS), sorted(set(SUPPORTED_OPS) - covered)


_yamlish = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["name", "array", "rows", "cols", "sram", "size_bytes", "banks", "clocks",
                         "core", "freq_mhz", "phase_ps", "x"]), kids, max_size=5),
    max_leaves=20)


@FAST
@given(_yamlish)
def test_config_random_values(d):
    try:
        config_from_dict(d)
    except ConfigError:
        pass


@FAST
@given(st.randoms(use_true_random=False))
def test_config_mutated_valid(r):
    try:
        fuzz.run_config(fuzz.gen_config(r))
    except ConfigError:
        pass


@FAST
@given(st.text(max_size=200))
def test_config_random_text(text):
    try:
        parse_config_text(text, "t.yaml")
    except ConfigError:
        pass


def test_fuzz_driver_counts_and_catches_hangs(monkeypatch):
    s = fuzz.fuzz(200, seed=1, timeout_s=10, out=None)
    assert s["cases"] == 200 and s["crashes"] == s["hangs"] == s["failures"] == 0, s["problems"]
    import time
    monkeypatch.setitem(fuzz.RUNNERS, "decoder", lambda case: time.sleep(5))
    assert fuzz.run_case("decoder", b"", 0.05) == "hang"
    monkeypatch.setitem(fuzz.RUNNERS, "decoder", lambda case: [][0])
    assert fuzz.run_case("decoder", b"", 1) == "crash:IndexError"


@pytest.mark.parametrize("argv", [["--cases", "0"], ["--targets", "nope"]])
def test_fuzz_cli_refuses_bad_arguments(argv, capsys):
    assert fuzz.main(argv) == 2
    assert "tpusim.flow.fuzz: error:" in capsys.readouterr().err
