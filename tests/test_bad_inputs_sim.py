"""Bad binaries and device errors through ``tpusim run``: exit status 2, one exact line on
stderr naming what is wrong (section, instruction index and PC, field, address, value), no
traceback. Corpus: tests/badinputs.py (a small valid program for the ``small`` config, broken
one way at a time)."""
from __future__ import annotations

import re

import badinputs as B
import numpy as np
import pytest

from tpusim.arch.config import load_config
from tpusim.flow.cli import main

H = load_config("small").hash_bytes()


def run_cli(tmp_path, capsys, raw: bytes, *extra):
    """``tpusim run`` on the image ``raw``; returns (path, the single stderr line)."""
    p = tmp_path / "b.tpubin"
    p.write_bytes(raw)
    x = tmp_path / "x.npy"
    np.save(x, np.arange(16, dtype=np.int8).reshape(1, 8, 1, 2))
    rc = main(["run", str(p), "--input", str(x), "--hw", "small", *extra])
    cap = capsys.readouterr()
    assert rc == 2, cap.out
    assert "Traceback" not in cap.err and len(cap.err.strip().splitlines()) == 1, cap.err
    return p, cap.err.strip()


def test_valid_binary_runs(tmp_path, capsys):
    p = tmp_path / "b.tpubin"
    p.write_bytes(B.valid_binary(H))
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.int8).reshape(1, 8, 1, 2))
    out = tmp_path / "out"
    assert main(["run", str(p), "--input", str(tmp_path / "x.npy"), "--hw", "small", "--out", str(out)]) == 0
    assert (np.load(out / "y.npy") == np.arange(16, dtype=np.int8).reshape(1, 8, 1, 2)).all()


@pytest.mark.parametrize("kind,msg", [
    ("magic", "bad magic b'ELF\\x7f', expected b'TPUB': not a .tpubin file"),
    ("version", "unsupported format version 7 (this tool reads 1 and 2)"),
    ("checksum", "checksum mismatch (stored 0x{crc}, computed 0x{calc}): file is corrupt or truncated"),
    ("truncated", "checksum mismatch (stored 0x{crc}, computed 0x{calc}): file is corrupt or truncated"),
    ("truncated_section", "section 0 (CODE) is truncated (4 bytes)"),
    ("offset", "section 1 (FILL) at offset 4294967296 size 2 is outside the file ({payload} bytes of payload)"),
    ("code_addr", "section 0 (CODE) at DDR 0xfffffffff8 + 96 bytes passes 2^40"),
    ("json", "section 2 (IO) is not valid JSON: Expecting property name enclosed in double quotes: "
             "line 1 column 2 (char 1)"),
])
def test_bad_container(tmp_path, capsys, kind, msg):
    import struct
    import zlib
    raw = B.bad_binary(kind, H)
    fmt = {"crc": f"{struct.unpack('<I', raw[-4:])[0]:08x}", "calc": f"{zlib.crc32(raw[:-4]):08x}",
           "payload": len(raw) - 4}
    p, err = run_cli(tmp_path, capsys, raw)
    assert err == f"tpusim: error: {p}: " + msg.format(**fmt)


def test_too_short_file(tmp_path, capsys):
    p, err = run_cli(tmp_path, capsys, b"TPUB\x01\x00")
    assert err == f"tpusim: error: {p}: file of 6 bytes is too short for a .tpubin header"


def test_wrong_config_hash(tmp_path, capsys):
    seed = load_config("seed").hash_bytes()
    p, err = run_cli(tmp_path, capsys, B.valid_binary(seed))
    assert err == (f"tpusim: error: {p}: built for hardware config '?' ({seed.hex()[:16]}…), but --hw small is "
                   f"config 'small' ({H.hex()[:16]}…): recompile for this config (tpucompile --hw small) or run it "
                   "with the config it was built for")


def test_binary_read_once(tmp_path, capsys, monkeypatch):
    """``tpusim run`` reads the file once: the config hash is checked on that one read (by
    ``_config_for``, the message above), not by a second ``TpuBinary.read``."""
    from tpusim.arch.binary import TpuBinary
    reads = []
    real = TpuBinary.read.__func__
    monkeypatch.setattr(TpuBinary, "read", classmethod(lambda cls, *a, **k: reads.append(a) or real(cls, *a, **k)))
    p = tmp_path / "b.tpubin"
    p.write_bytes(B.valid_binary(H))
    np.save(tmp_path / "x.npy", np.arange(16, dtype=np.int8).reshape(1, 8, 1, 2))
    assert main(["run", str(p), "--input", str(tmp_path / "x.npy"), "--hw", "small"]) == 0
    assert reads == [(str(p),)]


def test_bad_io_descriptor(tmp_path, capsys):
    b = B.binary_for(B.valid_program(), H)
    b.outputs[0].ddr_addr = (1 << 40) - 8
    p, err = run_cli(tmp_path, capsys, b.to_bytes())
    assert err.startswith("tpusim: error: bad tensor descriptor {'name': 'y'")
    assert err.endswith("16 bytes at DDR 0xfffffffff8 is outside [0, 2^40) or larger than 2^32 bytes")


def test_huge_fill_refused(tmp_path, capsys):
    b = B.binary_for(B.valid_program(), H)
    b.fills = [{"addr": 0, "size": 1 << 39, "value": 0}]
    p, err = run_cli(tmp_path, capsys, b.to_bytes())
    assert err == (f"tpusim: error: {p}: section 1 (FILL): regions total {1 << 39} bytes, more than the "
                   f"{1 << 32} bytes the tools preload")


def test_reserved_opcode(tmp_path, capsys):
    _, err = run_cli(tmp_path, capsys, B.binary_for(B.reserved_opcode_code(), H).to_bytes())
    assert err == ("tpusim: error: reserved opcode 0xee at instruction #1 (pc 0x20): device halted "
                   "with error_code 1 after 30 cycles")


@pytest.mark.parametrize("kind,msg", [
    ("zero_dma", "DMA_LOAD): inner_bytes=0x0 (0) is zero: zero-length DMA"),
    ("misaligned_dma", "DMA_LOAD): sram_addr=0x4 (4) is not a multiple of the 8-byte SRAM word"),
    ("dma_ddr_2_40", "DMA_LOAD): ddr_addr=0xffffffffe0 (1099511627744) with these strides reaches "
                     "DDR byte 0x1000000001f >= 2^40"),
    ("sram_past_end", "DMA_LOAD): sram_addr=0x3ff8 (16376) with these strides reaches SRAM byte "
                      "0x4007, past the end of the 16384-byte SRAM"),
    ("mxu_past_end", "MATMUL): act_addr=0x7f8 (2040) reaches SRAM word 0x807, past the last word 0x7ff"),
    ("acc_past_end", "MATMUL): acc_addr=0x1fe (510) + 4 rows runs past the end of the 512-row accumulator"),
    ("qreg_unloaded", "REQUANT): qreg=0x5 (5) (bank 0, entry 5) reads a quant register that was never "
                      "loaded"),
])
def test_device_error_names_instruction_field_and_value(tmp_path, capsys, kind, msg):
    _, err = run_cli(tmp_path, capsys, B.binary_for(B.bad_program(kind), H).to_bytes())
    assert err == "tpusim: error: instruction #1 at pc 0x20 (" + msg


def test_deadlock_names_waiting_engines_and_pcs(tmp_path, capsys):
    _, err = run_cli(tmp_path, capsys, B.binary_for(B.bad_program("deadlock"), H).to_bytes())
    assert err == ("tpusim: error: deadlock: no event left at 42600 ps (core cycle 43) and the device "
                   "has not halted; MXU at instruction #1 at pc 0x20 (MATMUL) waits for a token from "
                   "LOAD; decoder at instruction #2 (pc 0x40) waits for HALT: MXU (1 not retired) to retire")


def test_unused_instruction_bits(tmp_path, capsys):
    """Set bits above an opcode's fields: ``isa.decode`` refuses them (software); the device
    flags them as unused_bits (docs/architecture.md, clarification 5; tests/test_model_decoder)."""
    from tpusim.arch.errors import IsaError
    from tpusim.arch.isa import decode_program
    code = B.out_of_range_field_code()
    with pytest.raises(IsaError, match=r"^NOP at pc 0x20: bit=0x.* is set: NOP uses bits 0-17, bits 18 and up must be zero$"):
        decode_program(code)


def test_bad_input_values_and_outputs(tmp_path, capsys):
    p = tmp_path / "b.tpubin"
    p.write_bytes(B.valid_binary(H))
    np.save(tmp_path / "f.npy", np.full((1, 8, 1, 2), np.nan, np.float32))
    assert main(["run", str(p), "--input", str(tmp_path / "f.npy"), "--hw", "small"]) == 2
    assert capsys.readouterr().err.strip() == (f"tpusim: error: --input {tmp_path / 'f.npy'}: input 'x': 16 "
                                               "non-finite values (NaN or infinity) cannot be quantized")
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 1, 2), np.int8))
    (tmp_path / "file").write_text("")
    assert main(["run", str(p), "--input", str(tmp_path / "x.npy"), "--hw", "small",
                 "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tpusim: error: --out ") and err.rstrip().endswith(": cannot create it (File exists)") and "Traceback" not in err


def test_output_names_cannot_escape_out_dir(tmp_path, capsys):
    b = B.binary_for(B.valid_program(), H)
    b.outputs[0].name = "../../escaped"
    p = tmp_path / "b.tpubin"
    p.write_bytes(b.to_bytes())
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 1, 2), np.int8))
    out = tmp_path / "a" / "out"
    assert main(["run", str(p), "--input", str(tmp_path / "x.npy"), "--hw", "small", "--out", str(out)]) == 0
    assert (out / ".._.._escaped.npy").exists() and not (tmp_path / "escaped.npy").exists()


@pytest.mark.parametrize("kind, msg", [
    ("text", r"^tpusim: error: input 'x': .*t\.npy is not a \.npy file \(no NumPy header\): save the array with "
             r"numpy\.save$"),
    ("empty", r"^tpusim: error: cannot load input 'x' from .*e\.npy: (No data left in file|EOFError)$"),
    ("npz", r"^tpusim: error: input 'x': .*z\.npz holds several arrays \(\.npz\); give one \.npy file$"),
    ("twice", r"^tpusim: error: input 'x' is given twice \(--input\)$"),
])
def test_unreadable_or_repeated_input_files(tmp_path, capsys, kind, msg):
    p = tmp_path / "b.tpubin"
    p.write_bytes(B.valid_binary(H))
    (tmp_path / "e.npy").write_bytes(b"")
    np.savez(tmp_path / "z.npz", a=np.zeros(2, np.int8))
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 1, 2), np.int8))
    (tmp_path / "t.npy").write_text("1 2 3\n")
    arg = {"text": ["x=" + str(tmp_path / "t.npy")], "empty": ["x=" + str(tmp_path / "e.npy")],
           "npz": ["x=" + str(tmp_path / "z.npz")],
           "twice": ["x=" + str(tmp_path / "x.npy"), "x=" + str(tmp_path / "x.npy")]}[kind]
    argv = ["run", str(p), "--hw", "small"]
    for a in arg:
        argv += ["--input", a]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert re.match(msg, err), err
