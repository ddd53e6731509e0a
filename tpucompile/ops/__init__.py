"""The compiler's op table: one module per op family, each holding everything its ops need.

  module        ONNX ops                                  QGraph op     runs on
  conv          Conv (grouped, dilated: dense)            QConv         systolic array
  depthwise     Conv with group = C = M (-> DepthwiseConv) QDwConv       vector unit (DWCONV)
  batchnorm     BatchNormalization (folded into Conv)     -             -
  relu          Relu, Clip (fused into Conv / Add)        -             -
  add           Sum (of two), Add                         QAdd          vector unit
  pool          MaxPool, AveragePool, GlobalAveragePool,  QMaxPool,     vector unit
                ReduceMean (spatial axes)                 QAvgPool
  reshape       Reshape, Flatten (FC views -> Alias),     (alias)       -
                Unsqueeze, Squeeze (folded)
  gemm          Gemm, MatMul by a constant (-> 1x1 Conv)  QConv         systolic array
  conv_add      (ConvAdd: a Conv and the residual Add     QConvAdd      systolic array
                reading it, fused by the back end)                      + vector unit (ADD)
  conv_pool     (ConvPool: a Conv and the MaxPool reading  QConvPool     systolic array
                it, fused by the back end)                              + vector unit (POOL)
  act_matmul    Einsum "bkxn,bkxm->bnxm" (the attention's QActMatMul    systolic array
                MatMuls, frontend/attention.py; ActMatMul:
                the stationary one as the weight tiles)
  const_act     (a constant streamed operand)            QConstAct     DMA
  softmax       Softmax (inside the network; a graph's    QSoftmax      vector unit (SOFTMAX);
                final one stays on the host)              (host op)     host, float32
  layernorm     LayerNormalization (over the channels)    QLayerNorm    vector unit (LAYERNORM)
  host_tail     (the refused tail of a graph: post-         (host op)     host, onnxruntime
                processing, OnnxTail)
  constant      Constant, ConstantOfShape (folded)        -             -
  identity      Identity, Dropout (inference; -> Alias)   (alias)       -
  mul           Mul: by constants (folded into the Conv     QMul          vector unit
                as a per-channel affine), of two tensors
                (also a (1, C, 1, 1) channel gate)
  lrn           LRN (-> LUT x^2, band 1x1 Conv, LUT       QLut, QConv,  vector unit,
                d^-beta, MUL)                             QMul          systolic array
  resize        Resize, Upsample (nearest, integer        QResize       vector unit
                factors; linear x2: edge pad, nearest,    (POOL copy) + DMA;
                crop, depthwise [1,2,1] blur)             + QDwConv
  shapes        Shape, Size, Gather, Cast, Expand,        -             - (folded)
                Range, Equal, Less, Greater, And, Or, Not,
                Where (exporters' shape subgraphs)
  qdq           QuantizeLinear, DequantizeLinear (pairs   -             - (params pinned,
                pin their params: passes/fold_qdq;                      weights folded)
                on constants folded)
  scale         Sub, Div by constants (folded into        -             -
                Conv as per-channel affine, with BN, Add)
  concat        Concat (channels; inputs are views)       QConcat       - (no copy)
  slice         Slice, Split (channels; outputs are       QSlice        - (no copy)
                views; on constants folded)
  spatial_slice Slice, Split of H, W (a copy: DMA rows,     QSpatialSlice vector unit
                POOL 1x1 picking strided columns)                       (POOL) + DMA
  relayout      Reshape keeping C (1,C,H,W)->(1,C,H',W'),  QRegroup,     DMA;
                Transpose [0,1,3,2]: copies (made by the   QSpatial-     vector unit
                Reshape / Transpose quantize hooks)        Transpose     (POOL) + DMA
  transpose     Transpose (folded; a channel shuffle is   -             -
                absorbed by the Conv reading it)
  pad           Pad (folded; zeros on H, W absorbed by    QPad,         vector unit (LUT)
                the Conv reading it; else a copy; modes   QEdgePad      + DMA; DMA
                edge, reflect: DMAs of border pixels)
  lut           Sigmoid, Tanh, HardSigmoid, HardSwish,    QLut          vector unit
                LeakyRelu, Elu, Selu, Softplus, Softsign,  (one per group
                Erf, Gelu, Mish, Exp, Sqrt, Reciprocal,    of element-wise
                Abs, Neg, Pow (-> Lut: fuse_elementwise)   functions of x)
  prelu         PRelu (one slope: a Lut; per-channel:     QLut, QConcat, vector unit,
                LUTs max/min(x, 0) into a Concat, 1x1     QConv         systolic array
                Conv with weights 1 and slope)

A module defines its ops' ``OpDef`` records (``OPS``: import handler, folding, canonical form,
quantization rule, host function) and, for a device op, its QGraph op class and ``DeviceOp``
(golden int8 function, layout, constants, tiling, emission); see ``registry.py`` for every hook.
The importer, the passes, the quantizer, the golden model and the back end all dispatch through
``OP_TABLE``. Adding an op = adding one module (and its tests) and one name to ``FAMILIES``.
The order of ``FAMILIES`` is the order of the supported-op lists in error messages.
"""
from tpucompile.ops import (
                            act_matmul,
                            add,
                            batchnorm,
                            concat,
                            const_act,
                            constant,
                            conv,
                            conv_add,
                            conv_pool,
                            depthwise,
                            gemm,
                            host_tail,
                            identity,
                            layernorm,
                            lrn,
                            lut,
                            mul,
                            pad,
                            pool,
                            prelu,
                            qdq,
                            relayout,
                            relu,
                            reshape,
                            resize,
                            scale,
                            shapes,
                            slice,
                            softmax,
                            spatial_slice,
                            transpose,
)
from tpucompile.ops.add import QAdd
from tpucompile.ops.concat import QConcat
from tpucompile.ops.conv import QConv
from tpucompile.ops.depthwise import QDwConv
from tpucompile.ops.lut import QLut
from tpucompile.ops.mul import QMul
from tpucompile.ops.pad import QEdgePad, QPad
from tpucompile.ops.pool import QAvgPool, QMaxPool
from tpucompile.ops.registry import DeviceOp, OpDef, OpTable
from tpucompile.ops.relayout import QRegroup, QSpatialTranspose
from tpucompile.ops.resize import QResize
from tpucompile.ops.slice import QSlice
from tpucompile.ops.spatial_slice import QSpatialSlice

FAMILIES = (conv, depthwise, batchnorm, relu, add, pool, reshape, gemm, conv_add, conv_pool, act_matmul, const_act, softmax, layernorm,
            constant, identity,
            mul, scale, concat, transpose, lut, prelu, lrn, resize, shapes, qdq, pad, slice, spatial_slice, relayout,
            host_tail)
OP_TABLE = OpTable(d for family in FAMILIES for d in family.OPS)
lut.FOLDS.update({d.op_type: d.fold for d in OP_TABLE if d.fold is not None})

__all__ = ["OP_TABLE", "FAMILIES", "OpDef", "DeviceOp", "OpTable", "QConv", "QDwConv", "QMaxPool", "QAvgPool", "QAdd", "QConcat", "QLut", "QMul", "QResize", "QSlice", "QPad", "QSpatialSlice", "QRegroup", "QSpatialTranspose", "QEdgePad"]
