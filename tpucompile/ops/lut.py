"""Element-wise functions of one tensor by table lookup on the vector unit (LUT instruction).

ONNX ops (formulas from the ONNX operator spec): Sigmoid ``1/(1+e^-x)``, Tanh, HardSigmoid
``max(0, min(1, alpha x + beta))`` (alpha 0.2, beta 0.5), HardSwish ``x max(0, min(1, x/6 + 1/2))``,
LeakyRelu ``x < 0 ? alpha x : x`` (alpha 0.01), Elu ``x < 0 ? alpha (e^x - 1) : x`` (alpha 1),
Selu ``gamma (x <= 0 ? alpha (e^x - 1) : x)``, Softplus ``ln(1 + e^x)``, Softsign ``x/(1+|x|)``,
Erf, Gelu (opset 20; ``approximate`` none or tanh), Mish ``x tanh(ln(1+e^x))``, Exp, Sqrt,
Reciprocal, Abs, Neg, Pow (and PRelu with one slope, ``ops/prelu.py``). None of them is a
device op by itself: the ``fuse_elementwise`` pass (``tpucompile.passes.fuse_elementwise``) turns every connected group of element-wise nodes
that are functions of one tensor x (these, Relu, Clip, and Mul/Add/Sub/Div/Pow by scalar
constants or of two such functions: SiLU ``x * Sigmoid(x)``, the Erf-form GELU
``x * 0.5 * (1 + Erf(x / sqrt 2))``, HardSwish written out) into one ``Lut`` node per tensor the
rest of the graph reads. Its function is evaluated in float64 with each op's ``fold`` hook
(``evaluate``), so the intermediate tensors are never quantized.

Integer semantics (``QLut``): ``y = arith.lut_int8(x, table)``, table entry ``k`` (input byte k,
value ``v = k`` for k < 128, ``k - 256`` above) =
``clamp(floor(f(s_x (v - zp_x)) / s_y + 1/2) + zp_y, -128, 127)`` (``lut_table``): exact on
int8, i.e. the int8 result is f at the input's dequantized value rounded to the output's grid
(TFLite's int8 Logistic/Tanh/HardSwish kernels tabulate the same way). The output's scale and
zero point come from its calibrated range.

Device: per tile of th x tw pixels x kbg channel blocks: LOAD, one LUT in place, STORE; two
slots (``backend.tiling.tile_vector``); the table (256 bytes, ``cfg.lut_words`` words) is a DDR
constant loaded once into its own region. Lane-wise, so channel maps pass through.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpucompile.backend.tiling import (
    EltTiling,
    elt_tiles,
    field_max,
    load_bw,
    place_slot_groups,
    tile_vector,
    untileable,
)
from tpucompile.backend.work import elt_work
from tpucompile.ir import Node
from tpucompile.ops.common import bad_attr, lane_wise_channels, no_attrs, no_input_transform, no_macs
from tpucompile.ops.registry import DeviceOp, OpDef
from tpucompile.qgraph import QOp
from tpusim.arch import arith
from tpusim.arch.errors import CompileError
from tpusim.arch.operands import LUT_TABLE_BYTES

__all__ = ["QLut", "OPS", "FUNCTIONS", "FOLDS", "lut_table", "lut_qop", "lut_node", "unary_function", "evaluate", "is_scalar",
           "elementwise_unary", "elementwise_binary"]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _softplus(x):
    return np.logaddexp(0.0, x)


#: op type -> (attribute defaults, f(x, attrs) in float64)
FUNCTIONS = {
    "Sigmoid": ({}, lambda x, a: 1.0 / (1.0 + np.exp(-x))),
    "Tanh": ({}, lambda x, a: np.tanh(x)),
    "HardSigmoid": ({"alpha": 0.2, "beta": 0.5},
                    lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0)),
    "HardSwish": ({}, lambda x, a: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
    "LeakyRelu": ({"alpha": 0.01}, lambda x, a: np.where(x < 0, a["alpha"] * x, x)),
    "Elu": ({"alpha": 1.0}, lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(np.minimum(x, 0)), x)),
    "Selu": ({"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
             lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(np.minimum(x, 0)), x)),
    "Softplus": ({}, lambda x, a: _softplus(x)),
    "Softsign": ({}, lambda x, a: x / (1.0 + np.abs(x))),
    "Erf": ({}, lambda x, a: _erf(x)),
    "Gelu": ({"approximate": "none"},
             lambda x, a: 0.5 * x * (1.0 + (np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))
                                            if a["approximate"] == "tanh" else _erf(x / math.sqrt(2))))),
    "Mish": ({}, lambda x, a: x * np.tanh(_softplus(x))),
    "Exp": ({}, lambda x, a: np.exp(x)),
    "Sqrt": ({}, lambda x, a: np.sqrt(x)),
    "Reciprocal": ({}, lambda x, a: 1.0 / x),
    "Abs": ({}, lambda x, a: np.abs(x)),
    "Neg": ({}, lambda x, a: -x),
}

#: op type -> numpy fold of each op a ``Lut`` step may name (filled by ``tpucompile.ops`` from the
#: op table's ``fold`` hooks, so a step is evaluated exactly as constant folding would)
FOLDS: dict = {}


def unary_function(op_type: str, attrs: dict):
    """f(x: float64 ndarray) -> float64 ndarray of an op of FUNCTIONS."""
    _, f = FUNCTIONS[op_type]
    return lambda x: f(x, attrs)


def evaluate(attrs: dict, x: np.ndarray) -> np.ndarray:
    """The function of a ``Lut`` node at ``x`` (float64): its ``steps`` (op, inputs, output,
    attrs as sorted (key, value) pairs), in order, from ``input`` = x; scalar constants by name in
    ``consts``; each step by its op's ``fold`` (FOLDS)."""
    env = {attrs["input"]: np.asarray(x, np.float64)}
    consts = dict(attrs["consts"])
    for op, inputs, output, step_attrs in attrs["steps"]:
        node = Node(op, output, list(inputs), [output], dict(step_attrs))
        vals = [env[i] if i in env else np.float64(consts[i]) for i in inputs if i]
        env[output] = np.asarray(FOLDS[op](node, *vals), np.float64)
    return env[attrs["output"]]


def lut_node(graph, name: str, x: str, y: str, steps=()) -> Node:
    """The IR ``Lut`` node computing ``y`` from ``x`` by the IR nodes ``steps`` (topological order;
    their constant operands are scalars, inlined by value; none: ``y`` is ``x`` requantized to its
    own grid), with its ``expr`` text for dumps and the layer report (``evaluate`` reads it)."""
    consts = {}
    for n in steps:
        for i in n.inputs:
            if i and graph.const(i) is not None:
                consts[i] = float(graph.const(i).reshape(-1)[0])
    text = {x: "x"}
    for n in steps:
        args = [text.get(i, f"{consts[i]:g}" if i in consts else i) for i in n.inputs if i]
        text[n.outputs[0]] = f"{n.op}({', '.join(args)})"
    out = y if steps else x
    attrs = {"input": x, "output": out, "expr": text[out],
             "steps": tuple((n.op, tuple(n.inputs), n.outputs[0], tuple(sorted(n.attrs.items()))) for n in steps),
             "consts": tuple(sorted(consts.items()))}
    return Node("Lut", name, [x], [y], attrs)


def lut_table(f, x_scale: float, x_zp: int, y_scale: float, y_zp: int) -> np.ndarray:
    """int8[256] table of f (module docstring), entry k for input byte k. ValueError if f gives a
    NaN or infinity on one of the 256 inputs (e.g. Exp beyond float64), naming the input."""
    v = (np.arange(LUT_TABLE_BYTES) + 128) % 256 - 128
    real = x_scale * (v.astype(np.float64) - x_zp)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(f(real), np.float64)
    bad = ~np.isfinite(y)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"f({real[k]:g}) (input code {v[k]}) is {y[k]}, not a finite number")
    q = np.floor(y / y_scale + 0.5) + y_zp
    return np.clip(q, -128, 127).astype(np.int8)


@dataclass(frozen=True, eq=False)
class QLut(QOp):
    """``y = lut_int8(x, table)`` lane-wise (module docstring); ``func`` the function as text
    (e.g. ``Mul(x, Sigmoid(x))``, for dumps and the layer report), ``table`` int8[256]."""
    name: str
    inp: str
    out: str
    func: str
    table: np.ndarray

    def verify(self, qg) -> None:
        if self.table.shape != (LUT_TABLE_BYTES,) or self.table.dtype != np.int8:
            raise CompileError(f"QLut {self.name!r}: table {self.table.dtype}{self.table.shape}, need int8[256]")
        if qg.tensors[self.inp].shape != qg.tensors[self.out].shape:
            raise CompileError(f"QLut {self.name!r}: input {qg.tensors[self.inp].shape} and output "
                               f"{qg.tensors[self.out].shape} shapes differ")


# ---------------------------------------------------------------- import, passes, quantization
def _importer(op_type: str):
    defaults, _ = FUNCTIONS[op_type]

    def import_node(node, a: dict, opset: int) -> dict:
        out = dict(defaults)
        for k, v in a.items():
            if k not in defaults:
                raise bad_attr(node, k, v, "is not supported")
            if k == "approximate":
                v = v.decode() if isinstance(v, bytes) else str(v)
                if v not in ("none", "tanh"):
                    raise bad_attr(node, k, v, "is not one of 'none', 'tanh'")
                out[k] = v
            else:
                out[k] = float(v)
        return out
    return import_node


def _folder(op_type: str):
    def fold(node, x):
        with np.errstate(all="ignore"):
            return unary_function(op_type, node.attrs)(np.asarray(x, np.float64)).astype(np.asarray(x).dtype)
    return fold


def _quantize(q, node) -> None:
    x = q.input(node)
    sy, zy = q.out_params(node)
    out = q.add_tensor(node.outputs[0], sy, zy, shape=x.shape)
    q.add_op(lut_qop(node.name, x, out, lambda v: evaluate(node.attrs, v), node.attrs["expr"]))


def lut_qop(name: str, x, out, f, text: str) -> "QLut":
    """The QLut of function ``f`` (float64 -> float64, ``text`` its formula) from int8 device tensor
    ``x`` to ``out`` (QTensors); CompileError naming ``name`` and the input where f is not finite."""
    try:
        table = lut_table(f, x.scale, x.zero_point, out.scale, out.zero_point)
    except ValueError as e:
        raise CompileError(f"node {name!r} (Lut {text}): {e}") from None
    return QLut(name, x.name, out.name, text, table)


# ---------------------------------------------------------------- golden
def _golden(op: QLut, x: np.ndarray) -> np.ndarray:
    return arith.lut_int8(x, op.table)


# ---------------------------------------------------------------- device lowering
def _layout(op: QLut, qg, lays) -> None:
    op.verify(qg)


def _constants(op: QLut, cfg) -> dict:
    return {"lut": op.table.tobytes() + bytes(cfg.lut_words * cfg.word_bytes - LUT_TABLE_BYTES)}


def _tile(op: QLut, lays: dict, cfg) -> EltTiling:
    """Two slots of kbg blocks of th x tw pixels (the LUT runs in place), and the table."""
    Y = lays[op.out]
    W, bw = cfg.word_bytes, load_bw(cfg)

    def cost(th, tw, ih, iw, kbg, nt):
        n = kbg * th * tw
        fits = (n <= field_max("LUT", "count")) & (2 * n + cfg.lut_words <= cfg.sram_words)
        return np.where(fits, nt * n * W * 2 / bw + 60 * nt * 2, np.inf)

    tl = tile_vector(Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg, cost)
    if tl is None:
        raise untileable(f"QLut {op.name!r}", (1, 1), Y.H, Y.W, cfg)
    n = tl.kbg * tl.th * tl.tw
    place_slot_groups(tl, {"x": n, "t": cfg.lut_words}, cfg)
    return tl


def _describe(op: QLut, tl: EltTiling) -> dict:
    return dict(function=op.func, tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})


def _emit(P, op: QLut, lays: dict, tl: EltTiling, consts: dict) -> None:
    """The table once, then per tile: LOAD, LUT in place, STORE."""
    cfg = P.cfg
    X, Y = lays[op.inp], lays[op.out]
    W, tw_words = cfg.word_bytes, cfg.lut_words
    _, _, Ho, Wo = Y.shape
    reg = tl.regions
    t = reg["t"][0]
    P.dma("DMA_LOAD", consts["lut"], t, tw_words * W)
    for tile in elt_tiles(Y.nblocks, Ho, Wo, tl):
        s, n = reg["x"][tile.slot], tile.words
        P.tile_dma("DMA_LOAD", X, s, tile)
        P.add("LUT", rs=[(s, s + n), (t, t + tw_words)], ws=[(s, s + n)], src_addr=s, dst_addr=s, count=n,
              table_addr=t)
        P.tile_dma("DMA_STORE", Y, s, tile)


def _work(op: QLut, lays: dict, tl: EltTiling, cfg):
    """The table once, then per tile: LOAD, one LUT (2 accesses per word and the table), STORE."""
    Y = lays[op.out]
    w = elt_work(tl, Y.nblocks, Y.H, Y.W, cfg, vpu_per_output=2, vpu_per_block=cfg.lut_words, block_instrs=False)
    w.load(1, cfg.lut_words * cfg.word_bytes, cfg.dma_burst_bytes)
    return w


DEVICE = DeviceOp(QLut, golden=_golden, input_transform=no_input_transform, remap_channels=lane_wise_channels,
                  plan_layout=_layout, constants=_constants, tile=_tile, emit=_emit, describe=_describe,
                  macs=no_macs, work=_work)
def is_scalar(graph, name: str) -> bool:
    """``name`` is a constant of one element."""
    c = graph.const(name)
    return c is not None and np.asarray(c).size == 1


def elementwise_unary(graph, node) -> bool:
    """The ``elementwise`` hook of FUNCTIONS: always a table on its own."""
    return True


def elementwise_binary(graph, node):
    """The ``elementwise`` hook of Mul/Add/Sub/Div/Pow: True with two non-constant operands (or
    Pow), False with one scalar constant, None with any other constant (per-channel: not a
    function of one value)."""
    if len(node.inputs) != 2:
        return None
    consts = [i for i in node.inputs if graph.const(i) is not None]
    if not consts:
        return True
    if len(consts) == 1 and is_scalar(graph, consts[0]):
        return node.op == "Pow"
    return None


def _fold_pow(node, a, b):
    with np.errstate(all="ignore"):
        return np.power(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(np.result_type(a, b))


OPS = tuple(OpDef(t, import_node=_importer(t), fold=_folder(t), elementwise=elementwise_unary)
            for t in FUNCTIONS) + (
    OpDef("Pow", import_node=no_attrs, fold=_fold_pow, elementwise=elementwise_binary),
    OpDef("Lut", quantize=_quantize, device=DEVICE),
)
