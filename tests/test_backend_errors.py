"""Back end refusals (checked by message) and the tpucompile command line."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from test_backend_ops import CFG, B, check

from tpucompile.backend.compile import compile_qgraph
from tpucompile.ops import QMaxPool
from tpucompile.qgraph import QGraph, QTensor
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import load_config
from tpusim.arch.errors import CompileError

ROOT = Path(__file__).resolve().parents[1]


def test_untileable_layer_names_node():
    tiny = dataclasses.replace(CFG, name="tiny", sram_size_bytes=4 * 64 * 8, sram_banks=4)
    g = B((1, 8, 64, 64), seed=1)
    y = g.conv(g.x, 8, 15, p=7)      # a 15x(15+3)-word window cannot fit the 256-word SRAM
    with pytest.raises(CompileError, match=r"QConv 'conv0'.*cannot be tiled.*tiny"):
        compile_qgraph(g.graph([y]), tiny, im2col=False)


def test_footprint_past_2_to_40():
    big = 1 << 19
    x = QTensor("x", (1, 8, big, big // 2), 0.1, 0)
    y = QTensor("y", (1, 8, big, big // 2), 0.1, 0)
    y2 = QTensor("y2", (1, 8, big, big // 2), 0.1, 0)
    qg = QGraph({"x": x, "y": y, "y2": y2},
                [QMaxPool("mp", "x", "y", (1, 1), (1, 1), (0, 0, 0, 0)),
                 QMaxPool("mp2", "y", "y2", (1, 1), (1, 1), (0, 0, 0, 0))], ["x"], ["y2"])
    with pytest.raises(CompileError, match=r"2\^40"):
        compile_qgraph(qg, CFG)


def test_two_pad_values_refused():
    g = B((1, 8, 8, 8), seed=2, zp=5)
    a = g.conv(g.x, 8, 1)
    c = g.conv(a, 8, 3, p=1)
    m = g.maxpool(a, 3, 2, 1)
    with pytest.raises(CompileError, match=r"two different pad values.*conv1|conv1.*pool2"):
        compile_qgraph(g.graph([c, m]), CFG)


def test_meta_and_io():
    g = B((1, 16, 8, 8), seed=3)
    y = g.conv(g.x, 24, 3, p=1, relu=True)
    z = g.maxpool(y, 3, 2, 1)
    b = check(g.graph([z, y]), g.input(), interleavings=())    # y an output too: the pool does not fuse
    L = b.meta["layers"]
    assert [l["op"] for l in L] == ["QConv", "QMaxPool"]
    assert L[0]["macs"] == 8 * 8 * 24 * 16 * 9
    assert L[0]["pc_begin"] == 0 and L[0]["pc_end"] == L[1]["pc_begin"] and L[1]["pc_end"] <= len(b.code) - 32
    assert b.code_addr % CFG.dma_burst_bytes == 0
    d = b.outputs[0]
    assert d.shape == (1, 24, 4, 4) and d.blk == CFG.array_rows
    # round trip through the file format
    b2 = TpuBinary.from_bytes(b.to_bytes(), CFG.hash_bytes())
    assert b2.meta["layers"] == b.meta["layers"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tpucompile.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_cli_compiles_and_reports(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    import onnx
    import qnets
    m = qnets.conv_maxpool()
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    out = tmp_path / "m.tpubin"
    r = _cli(p, "--hw", "small", "-o", out, "--calib", "2", "--dump-ir", tmp_path / "ir")
    assert r.returncode == 0, r.stderr
    assert "instructions" in r.stdout and "DDR footprint" in r.stdout
    b = TpuBinary.read(out, load_config("small").hash_bytes())
    assert b.meta["layers"]
    assert (tmp_path / "ir" / "program.s").exists()


@pytest.mark.parametrize("args,msg", [
    (("missing.onnx", "--hw", "small"), "not found"),
    (("{model}", "--hw", "nosuchcfg"), "nosuchcfg"),
])
def test_cli_errors_one_line(tmp_path, args, msg):
    sys.path.insert(0, str(ROOT / "tests"))
    import onnx
    import qnets
    p = tmp_path / "m.onnx"
    onnx.save(qnets.conv_maxpool(), p)
    r = _cli(*[a.format(model=p) for a in args], "-o", tmp_path / "o.tpubin")
    assert r.returncode == 2
    assert msg in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
