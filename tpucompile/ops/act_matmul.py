"""MatMul of two activations on the systolic array (``QActMatMul``): the attention products of a
transformer (Q·Kᵀ per head, P·V with Vᵀ), docs/backend.md "Transformers".

Shapes and layout (device tensors, blocked NCHW): ``a`` int8 (1, K, H, W), the streamed operand
(M = H*W pixels, K channels); ``b`` int8 (1, K, 1, N), the stationary operand: its pixel ``n`` is
column ``n`` of the weight tile. Output ``out`` int8 (1, N, H, W):
``acc[n, p] = sum_k a[k, p] * b[k, n]`` (int32), ``y = clamp(requant(acc, mult, shift) + zp_out)``
(``arith.requant_conv`` with bias 0, per-tensor multiplier; the output stage of a 1x1 Conv).

Why no transpose: LOAD_WEIGHTS takes SRAM word ``j`` of a tile as column ``j`` (byte ``k`` =
``W[k][j]``), and ``b``'s blocked layout stores pixel ``n`` of channel block ``kb`` as one word
(lanes = channels ``kb*R ..``): the C consecutive pixels ``n0 .. n0 + C - 1`` of a block are a
weight tile as they lie in DDR, one DMA_LOAD from ``b``'s buffer (token-tracked on it). The loop
nest, tiling and requant are the 1x1 Conv's (``ops/conv.py``, with ``weight_tile`` reading
``b``); the weight tile of a last partial N tile loads only the pixels left (the slot's other words hold
an earlier tile: their output channels have multiplier 0 in the requant table, give the zero
point, and are never stored).

Zero points: with data as weights no zero-point correction can be folded into a constant bias,
so ``a`` and ``b`` must have zero point 0 (symmetric quantization of Q, K, Vᵀ and P); a
``CompileError`` naming the op otherwise (the quantizer gives both operands symmetric ranges:
``OpDef.symmetric_inputs``). From ONNX: the ``Einsum("bkxn,bkxm->bnxm", B, A)`` that the
attention rewrite writes (``frontend/attention.py``; the op type ``ActMatMul`` of the IR takes
(A, B)); a constant A (the identity that transposes Vᵀ) is a ``QConstAct`` (``ops/const_act.py``).

Run-time attention mask (``key_bias``): the scores ``s = Kᵀ·Q`` (output channels = keys) of a
model whose attention-mask Add reads a key-mask input (``frontend/host_embeddings.py``,
``frontend/attention.py``: ``Add(s, m)`` with ``m`` (1, T, 1) = 0 or a large negative per key) take
the Add into their output stage: the IR Add is fused here (``fuse_key_mask``), its output is the
scores' tensor (the scores' calibrated parameters, not the Add's). The graph input ``m`` is int8
(1, T, 1, 1) with scale 1, zero point 0 (0 attended, -128 masked); the host turns it into the int32
bias row ``KEY_MASK_BIAS`` / 0 per key (``tpusim.arch.host_transforms`` ``key_mask_bias``: a
documented host step like the embedding Gather), which the device DMA-loads into the bias part of
every score REQUANT table (its multipliers and shifts still from the constants): the REQUANT adds
it, a masked key's score saturates to -128 and the SOFTMAX after it (``mask`` = 1) gives it
probability 0. No device cycle is added but one DMA_LOAD of ``4C`` bytes per table load. The
bias words must be whole SRAM words (``4*cols`` a multiple of the word bytes) and one N tile per
table (R <= C); else a CompileError naming the op.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.channels import ChannelMap
from tpucompile.backend.layout import out_tiles, param_tables, round_up
from tpucompile.ops.common import bad_attr, no_input_transform
from tpucompile.ops.const_act import QConstAct
from tpucompile.ops.conv import DEVICE as CONV
from tpucompile.ops.conv import QConv, conv_int8, weight_cols
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.ops.slice import QSlice
from tpucompile.qgraph import QTensor
from tpusim.arch import arith
from tpusim.arch.errors import CompileError
from tpusim.arch.host_transforms import KEY_MASK_BIAS, key_mask_bias

__all__ = ["QActMatMul", "OPS", "act_matmul_qop", "fuse_key_mask", "masked_scores", "key_mask_transform",
           "head_slice_maps"]


@dataclass(frozen=True)
class QActMatMul(QConv):
    """A 1x1 QConv whose weight is the activation ``b`` (int8 (1, K, 1, N), zero point 0) at run
    time: ``weight`` is an int8 zeros placeholder [N, K, 1, 1] giving the shapes; bias 0;
    ``x_zp`` (of ``inp``) 0. ``key_bias``: "" or the key-mask graph input (int8 (1, N, 1, 1), 0 /
    -128) whose bias row the host makes (module docstring)."""
    b: str = ""
    key_bias: str = ""

    @property
    def inputs(self) -> tuple:
        return (self.inp, self.b) + ((self.key_bias,) if self.key_bias else ())

    def constant_bytes(self) -> int:
        """None: ``weight`` is a placeholder; the data operand is an input (``QOp``)."""
        return 0

    def verify(self, qg) -> None:
        super().verify(qg)
        a, b = qg.tensors[self.inp], qg.tensors[self.b]
        n, k = self.weight.shape[:2]
        if len(b.shape) != 4 or b.shape[1] != k or b.shape[2] != 1 or b.shape[3] != n:
            raise CompileError(f"QActMatMul {self.name!r}: stationary operand {self.b!r} {b.shape} is not "
                               f"(1, {k}, 1, {n})")
        if a.zero_point != 0 or b.zero_point != 0:
            raise CompileError(f"QActMatMul {self.name!r}: operands {self.inp!r} (zero point {a.zero_point}) and "
                               f"{self.b!r} (zero point {b.zero_point}) must be quantized symmetrically (zero "
                               "point 0): a data weight cannot carry a zero-point correction")
        if self.key_bias:
            m = qg.tensors[self.key_bias]
            c, w = (m.shape[1], m.shape[3]) if len(m.shape) == 4 else (0, 0)
            if tuple(m.shape) != (1, c, 1, w) or not ((c, w) == (n, 1) or (c * w % 4 == 0 and c * w >= 4 * n)):
                raise CompileError(f"QActMatMul {self.name!r}: key mask {self.key_bias!r} {m.shape} is neither "
                                   f"(1, {n}, 1, 1), one value per key (output channel), nor the host's int32 bias "
                                   f"row of at least {n} keys in words (1, W, 1, n)")
            acc = k * 127 * 127 + int(np.max(self.bias))
            low = arith.requant_conv(np.array([acc], np.int64), np.array([KEY_MASK_BIAS], np.int64),
                                     self.mult[:1], self.shift[:1], self.y_zp, False)
            if int(low[0]) != -128:
                raise CompileError(f"QActMatMul {self.name!r}: a masked key's score (bias {KEY_MASK_BIAS}) "
                                   f"requantizes to {int(low[0])}, not -128 (multiplier {int(self.mult[0])}, "
                                   f"shift {int(self.shift[0])})")


def act_matmul_qop(name: str, a, b, out, mult: int, shift: int) -> QActMatMul:
    """The QActMatMul of QTensors ``a`` (1, K, H, W) by ``b`` (1, K, 1, N) into ``out``
    (1, N, H, W) with the per-tensor requant ``mult``/``shift`` (quantize_multiplier(s_a * s_b /
    s_out))."""
    k, n = b.shape[1], b.shape[3]
    z = np.zeros(n, np.int32)
    return QActMatMul(name, a.name, out.name, np.zeros((n, k, 1, 1), np.int8), z, np.full(n, mult, np.int32),
                      np.full(n, shift, np.int32), (1, 1), (0, 0, 0, 0), False, a.zero_point, out.zero_point, b.name)


def _quantize(q, node) -> None:
    """IR node ActMatMul(a (1, K, H, W), b (1, K, 1, N)) -> out (1, N, H, W): output parameters
    from calibration, mult/shift = quantize_multiplier(s_a * s_b / s_out); CompileError naming the
    node for other shapes (zero points: ``QActMatMul.verify``)."""
    _add_matmul(q, node, q.input(node, 0), q.input(node, 1))


def _add_matmul(q, node, a, b) -> None:
    """The QActMatMul of QTensors ``a`` by ``b`` into the node's output; CompileError naming the
    node for shapes other than (1, K, H, W) and (1, K, 1, N)."""
    if len(a.shape) != 4 or len(b.shape) != 4 or b.shape[1] != a.shape[1] or b.shape[2] != 1:
        raise CompileError(f"node {node.name!r} ({node.op}): operands {a.shape} and {b.shape} are not (1, K, H, W) "
                           "and (1, K, 1, N)")
    sy, zy = q.out_params(node)
    out = q.add_tensor(node.outputs[0], sy, zy, shape=(1, b.shape[3]) + tuple(a.shape[2:]))
    q.add_op(act_matmul_qop(node.name, a, b, out, *arith.quantize_multiplier(a.scale * b.scale / sy)))


#: the ONNX Einsum the transformer front end writes (frontend/attention.py), lifted to 4-D:
#: y[n, m] = sum_k B[k, n] A[k, m] with inputs (B, A): B stationary, A streamed
EINSUM = "bkxn,bkxm->bnxm"


def _import_einsum(node, a: dict, opset: int) -> dict:
    eq = a.get("equation", b"")
    eq = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")
    if eq != EINSUM:
        raise bad_attr(node, "equation", eq, f"unsupported (only {EINSUM!r}: a MatMul of activations over the "
                       "channels, as frontend/attention.py writes it)")
    return {}


def _symmetric(node) -> list:
    """Both operands of a matmul of activations need zero point 0 (QActMatMul.verify)."""
    return list(node.inputs[:2])


def _const_operand(q, node, name: str):
    """A constant streamed operand (1, K, H, W): symmetric per-tensor int8 and its QConstAct."""
    if name in q.qg.tensors:                 # another head's: made once
        return q.qg.tensors[name]
    c = np.asarray(q.const(name), np.float64)
    m = float(np.max(np.abs(c))) if c.size else 0.0
    scale = m / 127 if m > 0 else 1.0
    t = QTensor(name, tuple(c.shape), scale, 0)
    q.qg.tensors[name] = t
    q.add_op(QConstAct(f"{node.name}__const", name, np.clip(np.round(c / scale), -127, 127).astype(np.int8)))
    return t


def _quantize_einsum(q, node) -> None:
    """IR node Einsum(B (1, K, 1, N), A (1, K, H, W)) -> (1, N, H, W): the ActMatMul of A by B; a
    constant A is a QConstAct (the identity of Vᵀ)."""
    a = _const_operand(q, node, node.inputs[1]) if q.const(node.inputs[1]) is not None else q.input(node, 1)
    _add_matmul(q, node, a, q.input(node, 0))


def fuse_key_mask(q, node, scores: str, mask: str) -> None:
    """IR ``Add(scores, mask)`` of a run-time key mask (module docstring): the QActMatMul making
    ``scores`` takes ``key_bias = mask`` and the Add's output is an alias of the scores.
    CompileError naming the node if ``scores`` is not a QActMatMul's output or has a mask already."""
    r = q.qg.resolve(scores)
    i = next((i for i, o in enumerate(q.qg.ops) if isinstance(o, QActMatMul) and o.out == r), None)
    if i is None or q.qg.ops[i].key_bias:
        raise CompileError(f"node {node.name!r} (Add): the attention mask {mask!r} is added to {scores!r}, which is "
                           "not the output of an unmasked matmul of activations (the Q·Kᵀ scores)")
    q.qg.ops[i] = dataclasses.replace(q.qg.ops[i], key_bias=mask)
    q.add_alias(node.outputs[0], r)


def masked_scores(qg, name: str) -> bool:
    """Whether device tensor ``name`` is the output of a QActMatMul with a key mask."""
    r = qg.resolve(name)
    return any(isinstance(o, QActMatMul) and o.key_bias and o.out == r for o in qg.ops)


def _golden(op: QActMatMul, a: np.ndarray, b: np.ndarray, m: np.ndarray | None = None) -> np.ndarray:
    w = np.ascontiguousarray(np.asarray(b, np.int8)[0, :, 0, :].T[:, :, None, None])     # [N, K, 1, 1]
    bias = op.bias if m is None else op.bias + key_mask_bias(op.key_bias, m)
    return conv_int8(dataclasses.replace(op, weight=w, bias=bias), a)


def _layout(op: QActMatMul, qg, lays) -> None:
    op.verify(qg)
    CONV.plan_layout(op, qg, lays)


def _constants(op: QActMatMul, cfg) -> dict:
    return {"requant": param_tables(op.bias, op.mult, op.shift, cfg)}


def key_mask_transform(name: str, qg, cfg) -> tuple:
    """(device QTensor, meta) of the key-mask graph input ``name`` (int8 (1, T, 1, 1)): the host's
    ``key_mask_bias`` transform into the int32 bias row of ``out_tiles(T)`` whole N tiles, its
    bytes as int8 (1, W, 1, n) (n words, ``tpusim.arch.host_transforms``)."""
    m = qg.tensors[name]
    t, W = int(m.shape[1]), cfg.word_bytes
    dev = (1, W, 1, -(-4 * out_tiles(t, cfg) * cfg.array_cols // W))
    meta = {"name": name, "kind": "key_mask_bias", "orig_shape": list(m.shape), "device_shape": list(dev)}
    return QTensor(name, dev, 1.0, 0), meta


def _bias_words(op: QActMatMul, cfg) -> int:
    """SRAM words of a REQUANT table's int32 bias part (the key mask's); CompileError naming the
    op when they are not whole words or a table load holds several N tiles."""
    C, W = cfg.array_cols, cfg.word_bytes
    if (4 * C) % W or cfg.lane_groups > 1:
        raise CompileError(f"QActMatMul {op.name!r}: a run-time key mask needs the {C} int32 biases of a requant "
                           f"table to be whole {W}-byte words and one N tile per table (config {cfg.name!r}: "
                           f"{cfg.array_rows} rows x {C} columns)")
    return 4 * C // W


def _emit(P, op: QActMatMul, lays: dict, tl, consts: dict) -> None:
    B = lays[op.b]
    cfg = P.cfg
    C, W = cfg.array_cols, cfg.word_bytes

    def weight_tile(t, nb, kb):
        return B.iaddr(kb, 0, nb * C), B.buf_id, weight_cols(B.W, nb, C) * W
    table_load = None
    if op.key_bias:
        M, bw, pw = lays[op.key_bias], _bias_words(op, cfg), cfg.param_words

        def table_load(P, addr, b0, slot):
            # the bias words from the host's row (byte 4*C*b0 on), the rest from the constants
            P.dma("DMA_LOAD", M.iaddr(0, 0, b0 * bw), slot, bw * W, buf=M.buf_id)
            P.dma("DMA_LOAD", addr + bw * W, slot + bw, (pw - bw) * W)
    CONV.emit(P, op, lays, tl, consts, weight_tile=weight_tile, table_load=table_load)


def head_slice_maps(qg, blk: int) -> dict:
    """{tensor: ChannelMap} of the conv outputs split into heads (``frontend/attention.py``: the
    projection of every head's Q, K and V): a QConv output that is no graph output, read only by
    channel slices that tile its channels in order, each read only by QActMatMuls, one of them
    off a ``blk``-lane block. Each slice then starts its own block (lanes past it gaps up to the
    next block), so it is a view from lane 0, as the array reads a data operand; the conv writes
    that map (``conv._remap_output``: zero multipliers on the gaps, whose weight columns are not
    loaded, ``conv.tile_cols``)."""
    readers: dict = {}
    for op in qg.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    out = {}
    for op in qg.ops:
        if not isinstance(op, QConv) or isinstance(op, QActMatMul) or op.out in qg.outputs:
            continue
        parts = sorted(readers.get(op.out, []), key=lambda s: getattr(s, "start", -1))
        if not parts or not all(isinstance(s, QSlice) and s.out not in qg.outputs and readers.get(s.out) and
                                all(isinstance(r, QActMatMul) for r in readers[s.out]) for s in parts):
            continue
        if [s.start for s in parts] != [0] + [s.start + s.count for s in parts[:-1]] or \
                parts[-1].start + parts[-1].count != qg.tensors[op.out].shape[1] or all(s.start % blk == 0 for s in parts):
            continue
        segs, lane = [], 0
        for s in parts:
            segs.append((s.start, lane, s.count))
            lane = round_up(lane + s.count, blk)
        out[op.out] = ChannelMap.of(segs)
    return out


def _remap_channels(op: QActMatMul, maps: dict, blk: int):
    for t in (op.inp, op.b):
        if maps.get(t) is not None:
            raise CompileError(f"QActMatMul {op.name!r}: operand {t!r} has its channels in lanes "
                               f"{maps[t].as_json()}; a matmul of activations reads them in order")
    return op, None


def _work(op: QActMatMul, lays: dict, tl, cfg):
    """The 1x1 Conv's work (ops/conv.py): its weight tiles are the pixels of ``b`` each N tile
    holds, ``conv.weight_cols`` of the [N, K] placeholder's N = b's width (a last partial N tile
    loads fewer words), as ``_emit`` loads them."""
    if op.key_bias:
        bw = _bias_words(op, cfg)
        return CONV.work(op, lays, tl, cfg, table_parts=(bw * cfg.word_bytes, (cfg.param_words - bw) * cfg.word_bytes))
    return CONV.work(op, lays, tl, cfg)


DEVICE = DeviceOp(QActMatMul, golden=_golden, input_transform=no_input_transform, remap_channels=_remap_channels,
                  plan_layout=_layout, constants=_constants, tile=CONV.tile, emit=_emit, describe=CONV.describe,
                  macs=CONV.macs, work=_work)

OPS = (OpDef("ActMatMul", quantize=_quantize, device=DEVICE, symmetric_inputs=_symmetric),
       OpDef("Einsum", import_node=_import_einsum, quantize=_quantize_einsum, symmetric_inputs=_symmetric,
             layer=True))
