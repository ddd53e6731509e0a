"""End to end on the 'small' config: ONNX graph → compiler → golden, SimPy model and Verilator RTL.

Every graph must give bit-identical outputs on all three (every layer golden vs SimPy), and the
SimPy model and the RTL must agree on the total cycle count and on the retire time of every
instruction. These tests build the small RTL once (cached under build/rtl/).
"""
from __future__ import annotations

import pytest

from tests import qnets
from tests.test_token_input import token_ffn
from tpusim.flow.cosim import run

pytestmark = pytest.mark.rtl

GRAPHS = {
    "conv_bn_relu": qnets.conv_bn_relu,
    "conv_stride2": qnets.conv_stride2,
    "conv_maxpool": qnets.conv_maxpool,
    "conv_global_avgpool": lambda: qnets.conv_avgpool(global_pool=True),
    "residual_add": qnets.residual_add,
    "gemm_softmax": lambda: qnets.gemm_head(softmax=True),
    "same_pad_dropout": qnets.same_pad_dropout,
    "flatten_gemm": qnets.flatten_gemm,
    "caffe2_bn": qnets.caffe2_bn,
    "preact_bn": qnets.preact_bn,
    "avgpool_exclude_pad_rows": lambda: qnets.avgpool_pads(pads=(1, 0, 2, 0)),
    "avgpool_include_pad_s2": lambda: qnets.avgpool_pads(count_include_pad=1, s=2, pads=(1, 0, 1, 2)),
    "maxpool_ceil_mode": lambda: qnets.ceil_pool("MaxPool", hw=(8, 8)),    # extra bottom row and right column
    "avgpool_ceil_include_pad": lambda: qnets.ceil_pool("AveragePool", count_include_pad=1, hw=(8, 9),
                                                        pads=(1, 1, 1, 1)),  # last row's divisor 6, not 9
    "fire": qnets.fire,                                               # Concat of whole blocks
    "fire_odd_maxpool": lambda: qnets.fire(e1=5, e3=6, pool=True),    # gap lanes, MaxPool after
    "fire_concat_output": lambda: qnets.fire(e1=5, e3=6, head=False),
    "concat_input_nested": qnets.concat_mixed,
    "grouped_dilated": qnets.grouped_dilated,
    "shuffle_unit": qnets.shuffle_unit,
    "mlp_784": qnets.mlp,
    "yolo_neck": qnets.yolo_neck,       # Resize nearest x2 (POOL copy, DMA row repeat) into a Concat, SiLU
    "prelu_channels": qnets.prelu_net,  # per-channel PRelu: LUT max/min(x, 0) into a Concat, 1x1 Conv
    "pad_values": qnets.pad_net,        # Pad by a value (QPad: LUT of the value, LOAD at the offset, STORE)
    "spatial_slices": qnets.spatial_slices,     # Slice / Split of H, W: DMA rows, POOL 1x1 strided columns
    "glu_lanes": qnets.glu,             # a * sigmoid(b) of two halves on different lanes: identity 1x1 Conv copy
    "relayout": qnets.relayout_net,     # Reshape keeping C (DMA rows) and Transpose [0,1,3,2] (POOL transposed read)
    "bilinear_neck": qnets.bilinear_neck,   # Resize linear x2 (edge pad, nearest, crop, DW blur), Pad modes edge, reflect
    "lrn_net": qnets.lrn_net,           # LRN: LUT x^2, band Conv, LUT power, MUL
    "se_block": qnets.se_block,         # MUL: a (1, C, 1, 1) gate (stride_b 0) and a product + relu
    "unary_lut": qnets.unary_lut,       # LUT: SiLU, HardSwish, Tanh, LeakyRelu, x*HardSigmoid, Elu, ...
    "mobilenet_block": qnets.mobilenet_block,   # DWCONV: depthwise 3x3 + BN + ReLU6, 5x5 stride 2, part blocks
    "dense_mlp": qnets.dense_mlp,       # MatMul by a constant + bias Add + BatchNorm1d: 1x1 Convs on (1, K, 1, 1)
    "csp_split": qnets.csp_split,
    "row_ops": qnets.row_ops,           # LAYERNORM and SOFTMAX over 3-word rows (POOL transposing copies)
    "token_ffn": token_ffn,             # a (1, T, C) encoder FFN block: LN, Linears, Erf GELU LUT, residual, LN
    "long_sequence_gap": qnets.long_sequence_gap,   # a global pool over 300 columns: two POOL stages
    "large_gap": lambda: qnets.large_gap(48),   # a global pool over 48x48, too large for the SRAM: row partials, their mean       # Split / Slice on the channels: views (gap lanes), copied into a Concat
}


def _check(v):
    assert v.layers_compared >= 1
    for name, m in v.mismatches.items():
        assert m["golden_vs_simpy"] == 0, (name, m)
        assert m["simpy_vs_rtl"] == 0, (name, m)
    assert sum(v.layer_mismatches.values()) == 0, v.layer_mismatches
    assert v.cycles_simpy == v.cycles_rtl, (v.cycles_simpy, v.cycles_rtl)
    assert v.first_retire_diff is None, v.first_retire_diff
    assert not v.counter_diffs, v.counter_diffs
    assert v.passed


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_small_graph_three_way(graph, tmp_path):
    model = GRAPHS[graph]()
    shape = qnets.in_shape(model)
    xs = qnets.inputs(shape, 5, seed=3)
    v = run(model, "small", tmp_path, rtl=True, data=(xs[0], xs[1:]), name=graph)
    _check(v)
    assert v.accuracy["cosine"] > 0.98


def test_reduced_resnet50_three_way(tmp_path):
    """Stem + stage 1 of the real ResNet-50 graph (32x32 crop of a real photograph)."""
    v = run("resnet50-reduced", "small", tmp_path, rtl=True, calib=2)
    _check(v)
    assert v.layers_compared >= 13        # 16 layers, 3 Conv + residual Add pairs fused into one each
    assert v.accuracy["cosine"] > 0.99
    assert (tmp_path / "verdict.json").exists()
