"""The back end's pass pipeline: every stage runs and verifies, a corrupted stage is caught by its
verifier with a message naming what is wrong, and --dump-ir writes every stage."""
from __future__ import annotations

import dataclasses

import pytest
import qnets
from test_backend_ops import CFG, B

from tpucompile import driver
from tpucompile.backend.compile import assemble, compile_qgraph
from tpucompile.backend.layout import align_px
from tpucompile.backend.pipeline import PASSES, BackendOptions, DeviceGraph
from tpucompile.ops import QMaxPool
from tpucompile.ops import pool as pool_ops
from tpusim.arch.errors import CompileError

STAGES = [p.name for p in PASSES]


def _graph():
    """conv 3x3 (a bordered input) -> maxpool -> conv 1x1, and an add of the two convs' paths (the
    maxpool a layer of its own: its 2 x 2 window, pad 2 on the left, is not one a conv fuses)."""
    g = B((1, 6, 9, 9), seed=21)
    a = g.conv(g.x, 8, 3, p=1, relu=True)
    X = g.tensors[a]
    m = g.t((1, 8, 5, 6), zp=X.zero_point, scale=X.scale)
    g.ops.append(QMaxPool(f"pool{len(g.ops)}", a, m, (3, 3), (2, 2), (1, 3, 1, 1)))
    b = g.conv(m, 8, 1)
    c = g.conv(m, 8, 1, relu=True)
    y = g.add(b, c)
    return g.graph([y])


def run_to(stage: str, qg=None, **opts):
    """Run the passes up to and including ``stage`` (each verified); the stage's state."""
    state = DeviceGraph(qg or _graph(), CFG, BackendOptions(**opts))
    for p in PASSES:
        state = p.run(state)
        p.verify(state)
        if p.name == stage:
            return state
    raise KeyError(stage)


def verify(stage: str, state):
    next(p for p in PASSES if p.name == stage).verify(state)


def test_stages_in_order_and_binary_same_as_compile_qgraph():
    assert STAGES == ["host_transforms", "layout", "memplan", "tiling", "emission", "token_check"]
    qg = _graph()
    b = assemble(run_to("token_check", qg), "", 0.0)
    ref = compile_qgraph(qg, CFG)
    assert b.code == ref.code and b.consts == ref.consts and b.fills == ref.fills
    # (compile_qgraph adds each layer's compulsory bytes on top: test_estimate.py checks them)
    assert b.meta["layers"] == [{k: v for k, v in L.items() if k != "compulsory_bytes"} for L in ref.meta["layers"]]


def test_host_transform_verifier():
    g = B((1, 3, 11, 11), seed=22)
    y = g.conv(g.x, 8, 5, s=2, p=2)
    dg = run_to("host_transforms", g.graph([y]))
    assert [t["kind"] for t in dg.transforms] == ["im2col"]
    dg.transforms[0] = dict(dg.transforms[0], device_shape=[1, 74, 6, 6])
    with pytest.raises(CompileError, match=r"host_transforms: im2col of input 't0': device tensor shape "
                                           r"\(1, 75, 6, 6\) != transform's \(1, 74, 6, 6\)"):
        verify("host_transforms", dg)


def test_layout_verifier_border_too_narrow():
    lp = run_to("layout")
    lay = next(L for L in lp.tensors.values() if any(L.need))
    lay.pads = (0,) + lay.pads[1:]
    with pytest.raises(CompileError, match=rf"layout: tensor {lay.name!r}: border .* narrower than"):
        verify("layout", lp)


def test_layout_verifier_unaligned_row():
    lp = run_to("layout")
    lay = next(iter(lp.tensors.values()))
    t, l, b, r = lay.pads
    lay.pads = (t, l, b, r + 1)
    with pytest.raises(CompileError, match=rf"layout: tensor {lay.name!r}: left border {l} or row of "
                                           rf"{lay.Wp} pixels not a multiple of the {align_px(CFG)}-pixel"):
        verify("layout", lp)


def test_memplan_verifier_live_tensors_sharing_a_buffer():
    mp = run_to("memplan")
    qg = mp.layout.qg
    # the maxpool's and the first 1x1 conv's outputs: both live until the second 1x1 conv fused with the add
    a, b = mp.layout.tensors[qg.ops[1].out], mp.layout.tensors[qg.ops[2].out]
    if a.size > b.size:
        a, b = b, a
    buf = mp.ddr.buffers[b.buf_id]
    mp.ddr.buffers[a.buf_id].tensors.remove(a.name)
    a.ddr_addr, a.buf_id = b.ddr_addr, b.buf_id
    buf.tensors.append(a.name)
    with pytest.raises(CompileError, match=r"memplan: tensors '.*' \(live to op 3\) and '.*' "
                                           rf"\(defined by op \d\) share buffer {buf.id} at {buf.addr:#x}"):
        verify("memplan", mp)


def test_memplan_verifier_misaligned_buffer():
    mp = run_to("memplan")
    buf = mp.ddr.buffers[-1]
    buf.addr += 16
    with pytest.raises(CompileError, match=rf"memplan: buffer {buf.id} .* at {buf.addr:#x} is not aligned"):
        verify("memplan", mp)


def test_tiling_verifier_overlapping_slots():
    tp = run_to("tiling")
    tl = tp.tilings[0]
    tl.regions["o"][1] = tl.regions["o"][0] + 1
    with pytest.raises(CompileError, match=r"tiling: layer 'conv0': SRAM slots o\[0\] .* and o\[1\] .* overlap"):
        verify("tiling", tp)


def test_tiling_verifier_slot_past_the_sram():
    tp = run_to("tiling")
    tl = tp.tilings[1]
    tl.regions["i"][-1] = CFG.sram_words - 1
    with pytest.raises(CompileError, match=rf"tiling: layer 'pool1': SRAM slot i\[1\] words \[{CFG.sram_words - 1}, "
                                           rf"\d+\) outside the {CFG.sram_words}-word SRAM"):
        verify("tiling", tp)


def test_emission_verifier_dma_outside_every_buffer():
    em = run_to("emission")
    i = next(i for i, (op, _) in enumerate(em.program.ops) if op == "DMA_STORE")
    em.program.ops[i][1]["ddr_addr"] = em.tiled.mem.ddr.const_addr
    with pytest.raises(CompileError, match=rf"emission: instruction #{i} \(DMA_STORE\) of layer 'conv0' writes "
                                           r"DDR \[0x[0-9a-f]+, 0x[0-9a-f]+\), outside every activation buffer$"):
        verify("emission", em)


def test_emission_verifier_needs_halt_last():
    em = run_to("emission")
    em.program.ops.pop()
    with pytest.raises(CompileError, match="emission: the program must end with its only HALT"):
        verify("emission", em)


def test_token_check_verifier_unmatched_wait():
    cp = run_to("token_check")
    P = cp.emitted.program
    i = next(i for i, s in enumerate(P.signal) if s)
    P.signal[i] = 0
    with pytest.raises(CompileError, match=r"token_check: \w+->\w+: \d+ signals but \d+ waits"):
        verify("token_check", cp)


def test_token_check_pass_limit():
    em = run_to("emission")
    em.program.cfg = dataclasses.replace(CFG, queue_depth=254)    # token limit 0
    with pytest.raises(CompileError, match=r"internal: 1 tokens \w+->\w+ could be outstanding \(limit 0\)"):
        next(p for p in PASSES if p.name == "token_check").run(em)


def test_dump_ir_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setattr(pool_ops, "fused_conv_pool", lambda conv, pool: None)     # the two layers apart
    m = qnets.conv_maxpool()
    shape = qnets.in_shape(m)
    driver.compile_onnx(m, CFG, qnets.inputs(shape, 2, seed=1), dump_ir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00_import.mlir", "01_fold_qdq.mlir", "02_constant_fold.mlir", "03_fuse_elementwise.mlir",
                     "04_fold_affine.mlir", "05_canonicalize.mlir", "06_fuse_relu.mlir", "07_quantize.txt",
                     "08_host_transforms.txt", "09_layout.txt", "10_memplan.txt", "11_tiling.txt",
                     "12_emission.txt", "13_token_check.txt"]
    text = {p.name[3:-4]: p.read_text() for p in tmp_path.iterdir()}
    assert "%y = QMaxPool(%c) {kernel=[3,3], strides=[2,2], pads=[1,1,1,1]}  // pool" in text["quantize"]
    assert "host transform im2col" not in text["host_transforms"] and "QConv(%x)" in text["host_transforms"]
    assert "%c: 1x8x14x14 -> 1x15x20x8 pads=[1, 4, 0, 2] need=[1, 1, 0, 0] border=-128 for 'pool'" in text["layout"]
    assert "fill=-128: %c" in text["memplan"] and "conv: weights @ 0x" in text["memplan"]
    assert "conv (QConv): th=" in text["tiling"] and "pool (QMaxPool): th=" in text["tiling"]
    assert "pool (QMaxPool) -> %y: [" in text["emission"] and "DMA_LOAD 1, POOL 1, DMA_STORE 1" in text["emission"]
    assert "waits: STORE->LOAD 1, MXU->LOAD 1, LOAD->VPU 1, VPU->STORE 1" in text["emission"]
    assert "LOAD->MXU:" in text["token_check"] and "at most" in text["token_check"]
