"""Back end, op by op on the 'small' config: compile a QGraph, run it on the device model
(tpusim.sim.run_binary) and on the ISA-level functional executor under several token-respecting
interleavings, compare each bit-exactly with tpucompile.golden.run_golden."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tests import qnets
from tpucompile.backend.compile import compile_qgraph
from tpucompile.driver import compile_onnx
from tpucompile.golden import run_golden
from tpucompile.ops import QAdd, QAvgPool, QConcat, QConv, QMaxPool
from tpucompile.qgraph import QGraph, QTensor
from tpucompile.selfcheck import run_on_executor
from tpusim.arch import arith
from tpusim.arch.config import load_config
from tpusim.arch.host_transforms import host_input_transform
from tpusim.arch.isa import decode_program
from tpusim.flow.cosim import run
from tpusim.sim import run_binary

CFG = load_config("small")



# ------------------------------------------------------------------ QGraph builders
class B:
    """Tiny QGraph builder with seeded random quantization parameters."""

    def __init__(self, shape, seed=0, zp=None):
        self.rng = np.random.default_rng(seed)
        self.tensors, self.ops = {}, []
        self.x = self.t(shape, zp)
        self.inputs = [self.x]

    def t(self, shape, zp=None, scale=None):
        name = f"t{len(self.tensors)}"
        zp = int(self.rng.integers(-20, 20)) if zp is None else zp
        scale = float(self.rng.uniform(0.02, 0.1)) if scale is None else scale
        self.tensors[name] = QTensor(name, tuple(shape), scale, zp)
        return name

    def conv(self, x, cout, k, s=1, p=0, relu=False, pads=None, zp=None, scale=None):
        X = self.tensors[x]
        _, cin, h, w = X.shape
        kh, kw = (k, k) if np.isscalar(k) else k
        sh, sw = (s, s) if np.isscalar(s) else s
        pads = pads or (p, p, p, p)
        oh = (h + pads[0] + pads[2] - kh) // sh + 1
        ow = (w + pads[1] + pads[3] - kw) // sw + 1
        y = self.t((1, cout, oh, ow), zp, scale)
        wt = self.rng.integers(-127, 128, (cout, cin, kh, kw)).astype(np.int8)
        bias = self.rng.integers(-5000, 5000, cout).astype(np.int32)
        ms = [arith.quantize_multiplier(self.rng.uniform(1e-4, 2e-3)) for _ in range(cout)]
        mult = np.array([m for m, _ in ms], np.int32)
        shift = np.array([s_ for _, s_ in ms], np.int32)
        self.ops.append(QConv(f"conv{len(self.ops)}", x, y, wt, bias, mult, shift, (sh, sw), tuple(pads),
                              relu, X.zero_point, self.tensors[y].zero_point))
        return y

    def maxpool(self, x, k, s, p):
        X = self.tensors[x]
        _, c, h, w = X.shape
        oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        y = self.t((1, c, oh, ow), zp=X.zero_point, scale=X.scale)
        self.ops.append(QMaxPool(f"pool{len(self.ops)}", x, y, (k, k), (s, s), (p, p, p, p)))
        return y

    def avgpool(self, x, k=None, s=1):
        X = self.tensors[x]
        _, c, h, w = X.shape
        kh, kw = (h, w) if k is None else (k, k)
        oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
        y = self.t((1, c, oh, ow))
        m, sh = arith.quantize_multiplier(X.scale / (kh * kw * self.tensors[y].scale))
        self.ops.append(QAvgPool(f"avg{len(self.ops)}", x, y, (kh, kw), (s, s), (0, 0, 0, 0), m, sh,
                                 X.zero_point, self.tensors[y].zero_point))
        return y

    def add(self, a, b, relu=True):
        A, Bt = self.tensors[a], self.tensors[b]
        y = self.t(A.shape)
        Y = self.tensors[y]
        (ma, sa), (mb, sb), (mo, so) = arith.add_multipliers(A.scale, Bt.scale, Y.scale)
        self.ops.append(QAdd(f"add{len(self.ops)}", a, b, y, A.zero_point, ma, sa, Bt.zero_point, mb, sb,
                             Y.zero_point, mo, so, relu))
        return y

    def concat(self, parts):
        """Channel concatenation; the parts must share one scale and zero point."""
        P = [self.tensors[p] for p in parts]
        counts = tuple(t.shape[1] for t in P)
        y = self.t((1, sum(counts)) + P[0].shape[2:], zp=P[0].zero_point, scale=P[0].scale)
        self.ops.append(QConcat(f"cat{len(self.ops)}", tuple(parts), y,
                                tuple(int(o) for o in np.cumsum((0,) + counts[:-1])), counts))
        return y

    def graph(self, outs):
        return QGraph(self.tensors, self.ops, self.inputs, list(outs))

    def input(self, seed=1):
        X = self.tensors[self.x]
        return np.random.default_rng(seed).integers(-128, 128, X.shape).astype(np.int8)


def run_device(qg, x, cfg=CFG, im2col=True, interleavings=(0, 1)):
    """Compile, run on the device model, return (binary, {output: int8}, golden env)."""
    b = compile_qgraph(qg, cfg, im2col=im2col)
    env = run_golden(qg, x)
    xin = host_input_transform(b.meta, qg.inputs[0], x)
    d = b.inputs[0]
    fill = b.meta["input_pad_value"][d.name]
    results = [dict(run_binary(b, cfg, {d.name: xin}).outputs)]        # the SimPy model
    for seed in interleavings:
        results.append(run_on_executor(b, cfg, {d.name: d.to_blocked(xin, fill)}, sched_seeds=(seed,)))
    return b, results, env


def check(qg, x, **kw):
    b, results, env = run_device(qg, x, **kw)
    for out in results:
        for o in b.outputs:
            got, want = np.asarray(out[o.name]), env[qg.resolve(o.name)]
            assert got.shape == want.shape, (o.name, got.shape, want.shape)
            bad = np.argwhere(got != want)
            assert bad.size == 0, f"{o.name}: {len(bad)} mismatches, first at {bad[:3].tolist()}"
    return b


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("cin,cout,hw", [(8, 8, 4), (5, 3, 7), (20, 12, 6), (17, 30, 5)])
def test_conv1x1(cin, cout, hw):
    g = B((1, cin, hw, hw))
    y = g.conv(g.x, cout, 1)
    check(g.graph([y]), g.input())


@pytest.mark.parametrize("s,p", [(1, 1), (2, 1), (2, 0), (1, 0)])
def test_conv3x3(s, p):
    g = B((1, 12, 11, 9), seed=s * 10 + p)
    y = g.conv(g.x, 10, 3, s=s, p=p, relu=True)
    check(g.graph([y]), g.input())


def test_conv_asymmetric_pads_5x5():
    g = B((1, 4, 15, 13), seed=3)
    y = g.conv(g.x, 6, 5, s=2, pads=(2, 1, 1, 2))
    check(g.graph([y]), g.input(), im2col=False)


def test_conv_many_tiles():
    """Output larger than the accumulator and the SRAM: several row/column strips, channel blocks."""
    g = B((1, 24, 40, 36), seed=5)
    y = g.conv(g.x, 20, 3, p=1, relu=True)
    b = check(g.graph([y]), g.input(), interleavings=(0,))
    t = b.meta["layers"][0]["tiling"]
    assert t["th"] * t["tw"] < 40 * 36 and t["kbg"] * t["nbg"] < 9


def test_cout_groups_of_a_tile_alternate_accumulator_halves():
    """A 1x1 conv 16 -> 64 over 12 x 12 on 'small' (one tile of 144 rows, 8 one-block cout
    groups, two fit the 512-row accumulator): each group's MATMULs write the other half from the
    one before (its REQUANTs then overlap them), golden = SimPy = the executor's interleavings."""
    g = B((1, 16, 12, 12), seed=7)
    y = g.conv(g.x, 64, 1, relu=True)
    b = check(g.graph([y]), g.input())
    t = b.meta["layers"][0]["tiling"]
    assert (t["th"], t["tw"], t["nbg"], t["acc_halves"]) == (12, 12, 1, True)
    firsts = []     # the accumulator row of each group's first MATMUL (accumulate 0, cin block 0)
    for ins in decode_program(b.code):
        if ins.op == "MATMUL" and not ins.args["accumulate"]:
            firsts.append(ins.args["acc_addr"])
    assert firsts == [0, 256] * 4


def test_first_conv_im2col_and_direct():
    g = B((1, 3, 19, 19), seed=6)
    y = g.conv(g.x, 16, 7, s=2, p=3, relu=True)
    qg = g.graph([y])
    b = check(qg, g.input(), im2col=True)
    assert b.meta["input_transforms"][0]["kind"] == "im2col"
    b = check(qg, g.input(), im2col=False)
    assert b.meta["input_transforms"] == []


def test_maxpool():
    g = B((1, 10, 13, 13), seed=7)
    y = g.conv(g.x, 12, 1, relu=True)
    z = g.maxpool(y, 3, 2, 1)
    check(g.graph([z]), g.input())


def test_global_avgpool():
    g = B((1, 20, 7, 7), seed=8)
    y = g.avgpool(g.x)
    check(g.graph([y]), g.input())


def test_avgpool_2x2():
    g = B((1, 9, 8, 10), seed=9)
    y = g.avgpool(g.x, 2, 2)
    check(g.graph([y]), g.input())


def test_residual_add():
    g = B((1, 16, 9, 9), seed=10)
    a = g.conv(g.x, 16, 3, p=1, relu=True)
    b = g.conv(a, 16, 1)
    y = g.add(b, g.x, relu=True)
    check(g.graph([y]), g.input())


def test_gemm():
    g = B((1, 40, 1, 1), seed=11)
    y = g.conv(g.x, 19, 1)
    check(g.graph([y]), g.input())


def test_chain_and_multiple_outputs():
    g = B((1, 6, 12, 12), seed=12)
    a = g.conv(g.x, 9, 3, p=1, relu=True)
    m = g.maxpool(a, 3, 2, 1)
    b = g.conv(m, 11, 3, s=2, p=1, relu=True)
    c = g.avgpool(b)
    d = g.conv(c, 5, 1)
    check(g.graph([b, d]), g.input())


def test_concat_views_with_gap_lanes():
    """Parts of 5 and 8 channels written in place (lanes 0..4 and 8..15 of one buffer, no copy),
    read by a padded conv, a max pool (whose result keeps the channel map), an Add of two mapped
    tensors and the host (a graph output with a channel map)."""
    g = B((1, 6, 7, 7), seed=13)
    a = g.conv(g.x, 5, 1, zp=3, scale=0.05)
    b = g.conv(g.x, 8, 3, p=1, relu=True, zp=3, scale=0.05)
    c = g.concat([a, b])
    m = g.maxpool(c, 3, 2, 0)
    n = g.maxpool(c, 2, 2, 0)
    s = g.add(m, g.maxpool(n, 1, 1, 0), relu=False)
    y = g.conv(c, 4, 3, p=1)
    z = g.conv(s, 3, 1)
    b_ = check(g.graph([c, y, z]), g.input())
    assert b_.version == 2 and b_.outputs[0].channels == ((0, 0, 5), (5, 8, 8))
    layers = {L["name"]: L for L in b_.meta["layers"]}
    assert layers["cat2"]["instr_begin"] == layers["cat2"]["instr_end"]        # no copy
    assert layers["conv7"]["macs"] == 4 * 13 * 9 * 49                          # real channels only


def test_concat_of_whole_blocks_and_nested():
    """Parts of whole blocks (8 + 16 channels) need no channel map; a Concat of a Concat is a
    view of a view; the last part is computed from the first (one DDR buffer read and written by
    one conv: DenseNet's pattern)."""
    g = B((1, 4, 5, 5), seed=14)
    a = g.conv(g.x, 8, 1, zp=-2, scale=0.04)
    b = g.conv(g.x, 16, 3, p=1, zp=-2, scale=0.04)
    c = g.concat([a, b])
    d = g.conv(c, 3, 3, p=1, zp=-2, scale=0.04)
    e = g.concat([c, d])
    y = g.conv(e, 5, 3, p=1)
    b_ = check(g.graph([y, c]), g.input())
    assert b_.version == 1 and all(o.channels is None for o in b_.outputs)


def test_a_window_that_does_not_fit_twice_is_single_buffered(tmp_path):
    """A global average pool over 32 x 32 on 'small' (1,120 words of window with its DMA slack,
    2,048 words of SRAM): one slot group instead of two, golden = SimPy."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")]
    model = qnets.make_model(nodes, {"w": qnets.conv_w(rng, 16, 3, 3)}, (1, 3, 32, 32), "y", (1, 16, 1, 1))
    xs = qnets.inputs(qnets.in_shape(model), 3, seed=1)
    res = compile_onnx(model, load_config("small"), xs[1:], keep_intermediates=True)
    gap = next(L for L in res.binary.meta["layers"] if L["name"] == "gap")
    assert gap["instr_end"] > gap["instr_begin"]
    v = run(model, "small", tmp_path, rtl=False, data=(xs[0], xs[1:]), name="gap32")
    assert v.passed and sum(v.layer_mismatches.values()) == 0, (v.notes, v.mismatches)
