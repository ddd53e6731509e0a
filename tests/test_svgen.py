"""The generated SystemVerilog packages are current and consistent with tpusim.isa / config."""
import re
import subprocess
import sys

from tpusim import isa, svgen
from tpusim.config import load_config


def test_isa_pkg_is_current():
    assert svgen.isa_pkg_is_current(), "rtl/tpu_isa_pkg.sv is stale: run `python -m tpusim.svgen`"


def test_check_cli_exit_code(tmp_path, monkeypatch):
    r = subprocess.run([sys.executable, "-m", "tpusim.svgen", "--check"], capture_output=True)
    assert r.returncode == 0, r.stderr
    stale = tmp_path / "tpu_isa_pkg.sv"
    stale.write_text(svgen.isa_pkg_text().replace("8'h06", "8'h66"))
    assert not svgen.isa_pkg_is_current(stale)
    monkeypatch.setattr(svgen, "ISA_PKG_PATH", stale)
    assert svgen.main(["--check"]) == 1


def _params(text):
    return {m[1]: m[2] for m in re.finditer(r"localparam\s+[\w\s\[\]:]+?\s(\w+)\s*=\s*([^;]+);", text)}


def test_isa_pkg_contents_match_isa():
    p = _params(svgen.isa_pkg_text())
    assert p["INSTR_BITS"] == "256"
    for spec in isa.OPCODES.values():
        assert p[f"OP_{spec.name}"] == f"8'h{spec.code:02X}"
        for f, lsb in spec.layout():
            assert int(p[f"{spec.name}_{f.name.upper()}_LSB"]) == lsb
            assert int(p[f"{spec.name}_{f.name.upper()}_BITS"]) == f.bits
    for e in isa.Engine:
        assert int(p[f"ENG_{e.name}"]) == e
    assert int(p["MATMUL_ACT_ADDR_LSB"]) == 16


def test_isa_pkg_fields_decode_like_python():
    ins = isa.make("MATMUL", wait=1, signal=8, act_addr=0x1234, count_x=3, stride_x=2, count_y=5,
                   stride_y=7, acc_addr=9, accumulate=1)
    word = int.from_bytes(isa.encode(ins), "little")
    p = _params(svgen.isa_pkg_text())
    for f in ins.spec.fields:
        lsb, bits = (int(p[f"MATMUL_{f.name.upper()}_{s}"]) for s in ("LSB", "BITS"))
        assert (word >> lsb) & ((1 << bits) - 1) == ins[f.name]


def test_cfg_pkg(tmp_path):
    cfg = load_config("seed")
    path = svgen.write_cfg_pkg(cfg, tmp_path)
    p = _params(path.read_text())
    assert int(p["ROWS"]) == 128 and int(p["WORD_BYTES"]) == 128
    assert int(p["SRAM_WORDS"]) == cfg.sram_words and int(p["BANK_WORDS"]) == cfg.bank_words
    assert int(p["PARAM_WORDS"]) == cfg.param_words and int(p["NUM_QREGS"]) == 64
    assert int(p["DDR_PERIOD_PS"]) == 1250 and int(p["DMA_PHASE_PS"]) == 50
    for k in ("COLS", "SRAM_BANKS", "ACC_DEPTH", "BEAT_BYTES", "BURST_BYTES", "DDR_LATENCY_CYCLES",
              "QUEUE_DEPTH", "FETCH_LINE_BUFFERS", "CORE_PERIOD_PS", "CORE_PHASE_PS"):
        assert k in p
