"""DDR layout of activations, weights and requant tables; the host-side input transform.

Activations: blocked int8 ``[C/blk][H + pad_t + pad_b][W + pad_l + pad_r][blk]`` with
blk = array rows = the SRAM word (tpusim.arch.binary.TensorDesc). A buffer's border is the largest
padding any consumer needs: a QConv pads with its input zero point, a QMaxPool with -128. A tensor
whose consumers need two different pad values is refused (CompileError naming both nodes).

DMA alignment: DDR addresses and strides must be multiples of ``G = max(W, 32)`` bytes, so when
a word is smaller than 32 bytes (the 'small' config) the left border and the padded row width are
rounded up to ``G / W`` pixels; the extra columns are never read by a consumer's MATMUL/POOL.

Weights: per (layer, cout block nb, cin block kb, tap) a tile of C words; word n holds the R
int8 weights ``W[nb*C + n, kb*R : kb*R + R, ky, kx]`` (zero for padded channels). Tiles are
stored in the order nb, kb, ky, kx.

Requant tables: per (layer, cout block) ``param_words = 9C/W`` words: bias int32[C], mult
int32[C], shift int8[C] (little endian); padded channels have bias 0, mult 0, shift 0 (output =
zero point). Each table is padded to a multiple of G bytes in DDR.

First conv (``im2col_input``): when a graph input has few channels (Cin*kh*kw <= 4*R... see
``wants_im2col``) and is read only by one QConv with a kernel larger than 1x1, the host does an
im2col of the int8 image: the device input becomes ``(1, Cin*kh*kw, OH, OW)`` with channel
``k = (c*kh + ky)*kw + kx`` holding ``xpad[c, oy*sh + ky, ox*sw + kx]`` (xpad = the image padded
with its zero point), and the conv becomes a 1x1 conv over K = Cin*kh*kw channels that the device
computes. The binary's IO descriptor then describes that device buffer; meta["input_transforms"]
records {"name", "kind": "im2col", "orig_shape", "kernel", "strides", "pads", "pad_value"} and
``host_input_transform`` applies it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpusim.arch.binary import TensorDesc
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpucompile.qgraph import QAdd, QAvgPool, QConv, QGraph, QMaxPool, QTensor, op_inputs


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def ddr_granule(cfg: HwConfig) -> int:
    """DDR address/stride granularity of DMA descriptors in bytes."""
    return max(cfg.word_bytes, 32)


def align_px(cfg: HwConfig) -> int:
    """Pixels per DDR granule (1 when the word is >= 32 bytes)."""
    return ddr_granule(cfg) // cfg.word_bytes


@dataclass
class ActLayout:
    """One activation tensor's DDR buffer (blocked int8 with a border)."""
    name: str
    shape: tuple            # (1, C, H, W)
    scale: float
    zero_point: int
    blk: int
    pads: tuple = (0, 0, 0, 0)   # t, l, b, r of the buffer
    need: tuple = (0, 0, 0, 0)   # border consumers actually read (<= pads)
    pad_value: int | None = None  # value of the needed border (None: no border needed)
    pad_by: str = ""             # consumer that set pad_value (for messages)
    ddr_addr: int = -1
    buf_id: int = -1             # DDR buffer (memplan) id, for hazards

    @property
    def C(self): return self.shape[1]

    @property
    def H(self): return self.shape[2]

    @property
    def W(self): return self.shape[3]

    @property
    def nblocks(self) -> int:
        return ceil_div(self.shape[1], self.blk)

    @property
    def Hp(self) -> int:
        return self.H + self.pads[0] + self.pads[2]

    @property
    def Wp(self) -> int:
        return self.W + self.pads[1] + self.pads[3]

    @property
    def row_bytes(self) -> int:
        return self.Wp * self.blk

    @property
    def block_bytes(self) -> int:
        return self.Hp * self.Wp * self.blk

    @property
    def size(self) -> int:
        return self.nblocks * self.block_bytes

    @property
    def has_border(self) -> bool:
        return self.pad_value is not None and any(self.need)

    def addr(self, kb: int, row: int, col: int) -> int:
        """DDR byte address of pixel (row, col) (buffer coordinates, border included) of block kb."""
        return self.ddr_addr + ((kb * self.Hp + row) * self.Wp + col) * self.blk

    def iaddr(self, kb: int, y: int, x: int) -> int:
        """Address of image pixel (y, x) (interior coordinates)."""
        return self.addr(kb, y + self.pads[0], x + self.pads[1])

    def geometry(self) -> tuple:
        return (self.nblocks, self.Hp, self.Wp, self.pads, self.pad_value)

    def desc(self, name: str | None = None) -> TensorDesc:
        return TensorDesc(name or self.name, tuple(self.shape), float(self.scale), int(self.zero_point),
                          int(self.ddr_addr), self.blk, tuple(self.pads))


def conv_out_hw(h, w, kernel, strides, pads):
    kh, kw = kernel
    sh, sw = strides
    t, l, b, r = pads
    return (h + t + b - kh) // sh + 1, (w + l + r - kw) // sw + 1


def _needed_pads(op, x: QTensor, y: QTensor) -> tuple:
    """Border of x the op reads: top/left as given, bottom/right only as far as windows reach."""
    kh, kw = op.kernel
    sh, sw = op.strides
    t, l, _, _ = op.pads
    _, _, h, w = x.shape
    _, _, oh, ow = y.shape
    b = max(0, (oh - 1) * sh + kh - t - h)
    r = max(0, (ow - 1) * sw + kw - l - w)
    return (t, l, b, r)


def plan_layouts(qg: QGraph, cfg: HwConfig) -> dict:
    """name -> ActLayout for every device tensor, with consumers' borders and alignment."""
    R = cfg.word_bytes
    ap = align_px(cfg)
    lays = {}
    for name, t in qg.tensors.items():
        if int(t.shape[0]) != 1:
            raise CompileError(f"tensor {name!r}: batch {t.shape[0]} unsupported (batch 1 only)")
        lays[name] = ActLayout(name, tuple(int(d) for d in t.shape), float(t.scale), int(t.zero_point), R)
    for op in qg.ops:
        y = qg.tensors[op.out]
        if isinstance(op, (QConv, QMaxPool)):
            x = qg.tensors[op.inp]
            oh, ow = conv_out_hw(x.shape[2], x.shape[3], op.kernel, op.strides, op.pads)
            if (oh, ow) != tuple(y.shape[2:]):
                raise CompileError(f"{type(op).__name__} {op.name!r}: output {y.shape[2:]} does not match "
                                   f"the window arithmetic {(oh, ow)}")
            need = _needed_pads(op, x, y)
            if any(need):
                val = op.x_zp if isinstance(op, QConv) else -128
                lay = lays[op.inp]
                if lay.pad_value is not None and lay.pad_value != val:
                    raise CompileError(
                        f"tensor {op.inp!r} needs border value {lay.pad_value} for {lay.pad_by!r} and "
                        f"{val} for {op.name!r}: two different pad values on one tensor are unsupported")
                lay.pad_value, lay.pad_by = val, op.name
                lay.need = tuple(max(a, b) for a, b in zip(lay.need, need))
        elif isinstance(op, QAvgPool):
            if any(op.pads):
                raise CompileError(f"QAvgPool {op.name!r}: padding {op.pads} unsupported")
            x = qg.tensors[op.inp]
            oh, ow = conv_out_hw(x.shape[2], x.shape[3], op.kernel, op.strides, (0, 0, 0, 0))
            if (oh, ow) != tuple(y.shape[2:]):
                raise CompileError(f"QAvgPool {op.name!r}: output {y.shape[2:]} does not match {(oh, ow)}")
        elif isinstance(op, QAdd):
            if qg.tensors[op.a].shape != y.shape or qg.tensors[op.b].shape != y.shape:
                raise CompileError(f"QAdd {op.name!r}: operand shapes {qg.tensors[op.a].shape}, "
                                   f"{qg.tensors[op.b].shape} differ from output {y.shape}")
        else:
            raise CompileError(f"op {getattr(op, 'name', op)!r}: unsupported type {type(op).__name__}")
    for name in qg.inputs:
        lay = lays[name]
        if lay.has_border and lay.pad_value != lay.zero_point:
            raise CompileError(f"graph input {name!r} needs border value {lay.pad_value} for "
                               f"{lay.pad_by!r}, but the host fills input borders with the zero point "
                               f"{lay.zero_point}")
    for lay in lays.values():
        t, l, b, r = lay.need
        l = ceil_div(l, ap) * ap
        wp = round_up(lay.W + l + r, ap)
        lay.pads = (t, l, b, wp - lay.W - l)
    return lays


# ---------------------------------------------------------------- constants
def weight_tiles(op: QConv, cfg: HwConfig) -> bytes:
    """All weight tiles of a conv, order (nb, kb, ky, kx), each C words of R bytes."""
    R, C = cfg.array_rows, cfg.array_cols
    cout, cin, kh, kw = op.weight.shape
    nbk, kbk = ceil_div(cout, C), ceil_div(cin, R)
    w = np.zeros((nbk * C, kbk * R, kh, kw), np.int8)
    w[:cout, :cin] = op.weight
    # [nb, n, kb, k, ky, kx] -> [nb, kb, ky, kx, n, k]
    t = w.reshape(nbk, C, kbk, R, kh, kw).transpose(0, 2, 4, 5, 1, 3)
    return np.ascontiguousarray(t).tobytes()


def param_tables(op: QConv, cfg: HwConfig) -> tuple[bytes, int]:
    """Requant tables of every cout block, each padded to the DDR granule. Returns (bytes, stride)."""
    C = cfg.array_cols
    cout = op.weight.shape[0]
    nbk = ceil_div(cout, C)
    tbytes = cfg.param_words * cfg.word_bytes
    stride = round_up(tbytes, ddr_granule(cfg))
    out = bytearray()
    for nb in range(nbk):
        sl = slice(nb * C, min(cout, nb * C + C))
        bias = np.zeros(C, "<i4"); mult = np.zeros(C, "<i4"); shift = np.zeros(C, np.int8)
        n = sl.stop - sl.start
        bias[:n] = op.bias[sl]; mult[:n] = op.mult[sl]; shift[:n] = op.shift[sl]
        tab = bias.tobytes() + mult.tobytes() + shift.tobytes()
        tab += bytes(tbytes - len(tab))
        out += tab + bytes(stride - tbytes)
    return bytes(out), stride


# ---------------------------------------------------------------- first conv: host im2col
def wants_im2col(qg: QGraph, cfg: HwConfig) -> list:
    """Input convs worth an im2col: graph input read only by one QConv with a kernel > 1x1 and
    few channels (Cin < R/2: otherwise the direct tiling keeps the array reasonably full)."""
    users = {}
    for op in qg.ops:
        for t in op_inputs(op):
            users.setdefault(t, []).append(op)
    out = []
    for name in qg.inputs:
        us = users.get(name, [])
        if len(us) != 1 or not isinstance(us[0], QConv) or name in [qg.resolve(o) for o in qg.outputs]:
            continue
        op = us[0]
        cin = op.weight.shape[1]
        if op.kernel != (1, 1) and 2 * cin < cfg.array_rows:
            out.append(op)
    return out


def im2col_rewrite(qg: QGraph, cfg: HwConfig) -> tuple[QGraph, list]:
    """Rewrite input convs (see module doc). Returns (new QGraph, transforms for meta)."""
    convs = wants_im2col(qg, cfg)
    if not convs:
        return qg, []
    tensors = dict(qg.tensors)
    ops = list(qg.ops)
    transforms = []
    for op in convs:
        x = qg.tensors[op.inp]
        y = qg.tensors[op.out]
        cout, cin, kh, kw = op.weight.shape
        k = cin * kh * kw
        tensors[op.inp] = QTensor(x.name, (1, k, y.shape[2], y.shape[3]), x.scale, x.zero_point)
        new = QConv(op.name, op.inp, op.out, np.ascontiguousarray(op.weight.reshape(cout, k, 1, 1)),
                    op.bias, op.mult, op.shift, (1, 1), (0, 0, 0, 0), op.relu, op.x_zp, op.y_zp)
        ops[ops.index(op)] = new
        transforms.append({"name": x.name, "kind": "im2col", "orig_shape": list(x.shape),
                           "kernel": [kh, kw], "strides": list(op.strides), "pads": list(op.pads),
                           "pad_value": int(op.x_zp), "device_shape": [1, k, int(y.shape[2]), int(y.shape[3])]})
    g2 = QGraph(tensors, ops, list(qg.inputs), list(qg.outputs), list(qg.host_ops),
                list(qg.fp32_outputs), dict(qg.aliases))
    return g2, transforms
