"""The op table's record types: one ``OpDef`` per op type, one ``DeviceOp`` per QGraph op class.

Every driver of the compiler asks the table instead of knowing op kinds itself:

  driver                           reads
  frontend/onnx_import             OpDef.import_node (and the table's list of supported ONNX types)
  passes/constant_fold             OpDef.fold
  passes/canonicalize              OpDef.canonicalize
  passes/fold_affine               OpDef.affine
  passes/fuse_relu                 OpDef.fuses_relu
  quantize/quantize                OpDef.quantize, OpDef.calibrated, OpDef.shared_range
  qgraph.QGraph.validate           QOp.inputs, QOp.verify (methods of the op class itself)
  golden                           DeviceOp.golden, OpDef.host (host ops)
  backend/pipeline                 DeviceOp.input_transform, remap_channels, plan_layout, constants,
                                   tile, emit, describe, macs

A hook that does not apply to an op is ``None`` in an ``OpDef`` (e.g. ``fold`` of Conv, whose
inputs are never all constant); a ``DeviceOp`` has every hook (no-op ones are explicit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from tpusim.arch.errors import CompileError

__all__ = ["OpDef", "DeviceOp", "OpTable", "refusal"]


def refusal(fn: Callable) -> Callable:
    """Marks a ``quantize`` hook that only raises CompileError saying why the op has no mapping
    here (Pad not absorbed, PRelu with per-channel slopes): not listed among the mapped ops."""
    fn.refuses = True
    return fn


@dataclass(frozen=True)
class DeviceOp:
    """How one QGraph op class (``qop``, a ``tpucompile.qgraph.QOp`` subclass) runs on the chip.

    golden(op, *inputs) -> int8 NCHW output; ``inputs`` are the int8 NCHW arrays of ``op.inputs``,
        computed with ``tpusim.arch.arith`` only (independent of tiling and of the binary).
    input_transform(op, qg, cfg) -> (device QTensor, new op, meta dict) or None: a host-side
        rewrite of the graph input ``op.inp``, which this op alone reads (the first conv's im2col).
    remap_channels(op, maps, blk) -> (op, output ChannelMap or None): the op on inputs laid out
        with channel maps (``maps``: device tensor -> ``backend.channels.ChannelMap``, identity
        ones absent; ``blk`` channels per block): a channel-reducing op widens its weights to
        the lanes (zero on gap lanes), a lane-wise op passes its input's map on; CompileError
        naming the op if it cannot.
    plan_layout(op, qg, lays) -> None: check the op's shapes against its window arithmetic and
        record on ``lays[input]`` (``backend.layout.ActLayout``) the border and pad value it reads.
    constants(op, cfg) -> {segment name: bytes}: the op's DDR constants, in DDR order (each segment
        starts on a burst boundary).
    tile(op, lays, cfg) -> tiling record (``regions``: name -> slot base words, ``slot_words``: name
        -> words per slot, ``acc_rows``: accumulator rows per half), or CompileError naming the op.
    emit(P, op, lays, tiling, consts) -> None: append the op's instructions to ``P``
        (``backend.emit.Program``); ``consts`` maps segment name -> DDR byte address.
    describe(op, tiling) -> dict: the op's own keys of ``meta["layers"][i]``.
    macs(op, qg) -> int: multiply-accumulates of the op (0 for vector-unit ops).
    remap_output(op, m) -> op writing its output laid out with channel map ``m`` (a conv widens
        its output channels onto the lanes), asked for when a lane-wise consumer of two operands
        (Add) needs its operand in the other one's map. None (the default): the op cannot.
    work(op, lays, tiling, cfg) -> ``backend.estimate.LayerWork`` (DMA instructions, engine
        cycles) for the fast cost model, or None for a view that moves nothing. None (the
        default): ``backend.estimate.generic_work``.
    fuse_producer(op, producer, lays, cfg) -> one op doing both, or None: ``producer`` makes an
        input of ``op`` that ``op`` alone reads (``backend.fuse_residual``: a residual Add and its
        Conv, ops/conv_add.py; a MaxPool and its Conv, ops/conv_pool.py, when the tilers'
        estimates on ``lays`` and ``cfg`` favour it; lays and cfg None: decided already, fuse). None (the default): the op never fuses.
    conv_shape(op, lays) -> (kernel, strides, cin, cout, oh, ow, skip, pool): the arguments besides
        the op's name and the config with which its ``tile`` hook calls ``backend.tiling.tile_conv``
        (a conv-tiled op: the estimator looks its tiling up per DMA price, ``tiling.known_pick``).
        None (the default): ``tile`` is another tiler.
    """
    qop: type
    golden: Callable
    input_transform: Callable
    remap_channels: Callable
    plan_layout: Callable
    constants: Callable
    tile: Callable
    emit: Callable
    describe: Callable
    macs: Callable
    remap_output: Optional[Callable] = None
    work: Optional[Callable] = None
    fuse_producer: Optional[Callable] = None
    conv_shape: Optional[Callable] = None

    HOOKS = ("golden", "input_transform", "remap_channels", "plan_layout", "constants", "tile", "emit", "describe", "macs")


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one op type of the float IR (``tpucompile.ir``).

    op_type: the ONNX op type (``Conv``) or an op only the passes create (``Alias``).
    import_node(node, attrs, opset) -> normalised attrs for ``ir.Node.attrs``; CompileError naming
        the node, attribute and value if unsupported. None: not an ONNX op, never imported.
    fold(node, *constant inputs) -> ndarray: constant folding (numpy). None: never folded.
    fold_shape(node, input shapes) -> ndarray: the value from the inputs' static shapes alone
        (Shape, Size), folded whatever the inputs hold. None: not such an op.
    canonicalize(graph, node, producers) -> [Node, ...]: the nodes replacing ``node`` (e.g. Gemm ->
        Conv on a (1, K, 1, 1) view). None: kept as it is.
    affine(graph, node, cout, bias) -> (s, b') or None: the op is y = s * x + t per channel on the
        output of a Conv with ``cout`` channels and float64 ``bias`` (None: zero); returns float64
        [cout] arrays s and the folded bias b' (``passes/fold_affine``), None if it is not (e.g. Add
        of two activations). None: never folded.
    fuses_relu: a following Relu is folded into this op (``attrs["relu"]``).
    quantize(q, node) -> None: add the op's QTensors and QOp (or alias, or host op) through ``q``
        (``quantize.quantize.Quantizer``). None: no int8 mapping (refused by name).
    calibrated: the op's outputs need a calibrated float range (False when they reuse the input's
        scale and zero point, or are host floats).
    shared_range(node) -> [tensor names]: IR tensors that must share one scale and zero point (a
        Concat's inputs and output: its inputs are views of its output); the quantizer calibrates
        them as one range (the union). None: no constraint.
    range_from_zero(node) -> bool: the group of ``shared_range`` starts at 0 (a Relu fused into a
        Concat: every producer's saturation at zero point -128 is the clamp). None: never.
    elementwise(graph, node) -> True / False / None: the node is an element-wise function of its
        one non-constant input (or of two that are functions of one tensor) that may join a table
        lookup (``passes/fuse_elementwise``): True if it is non-linear enough to be worth a table
        on its own (Sigmoid, x * y), False if it only joins one (Relu, Clip, Mul by a scalar:
        alone they fold into their producer), None if not element-wise that way (e.g. Mul by a
        per-channel constant). None (the default hook): never.
    device: the DeviceOp of the QGraph op it quantizes to, if any.
    host(h, x) -> float32 output: a host op (dict ``h`` of ``QGraph.host_ops``) on dequantized ``x``.
    symmetric_inputs(node) -> [tensor names]: IR tensors the op reads that must be quantized
        symmetrically (zero point 0: a data operand of the array, ops/act_matmul.py); the
        quantizer gives them, and the tensors they are views of, symmetric ranges. None: none.
    layer: a layer with weights (Conv, Gemm, MatMul): a refused one is an error, never part of a
        host tail (ops/host_tail.py).
    """
    op_type: str
    import_node: Optional[Callable] = None
    fold: Optional[Callable] = None
    fold_shape: Optional[Callable] = None
    canonicalize: Optional[Callable] = None
    affine: Optional[Callable] = None
    fuses_relu: bool = False
    quantize: Optional[Callable] = None
    calibrated: bool = True
    shared_range: Optional[Callable] = None
    range_from_zero: Optional[Callable] = None
    elementwise: Optional[Callable] = None
    device: Optional[DeviceOp] = None
    host: Optional[Callable] = None
    layer: bool = False
    symmetric_inputs: Optional[Callable] = None

    HOOKS = ("import_node", "fold", "fold_shape", "canonicalize", "affine", "quantize", "shared_range", "range_from_zero",
             "elementwise", "host", "symmetric_inputs")


class OpTable:
    """The op table: OpDefs in a fixed order (the order of the supported-op lists in messages),
    looked up by op type, and DeviceOps looked up by QGraph op class."""

    def __init__(self, ops):
        self.ops = tuple(ops)
        self._by_type = {}
        for d in self.ops:
            if d.op_type in self._by_type:
                raise ValueError(f"op table: {d.op_type} defined twice")
            self._by_type[d.op_type] = d
        self.device_ops = tuple(dict.fromkeys(d.device for d in self.ops if d.device is not None))
        self._by_qop = {dev.qop: dev for dev in self.device_ops}

    def __iter__(self):
        return iter(self.ops)

    def get(self, op_type: str) -> Optional[OpDef]:
        """The OpDef of an IR op type, None if the table has none."""
        return self._by_type.get(op_type)

    @property
    def onnx_types(self) -> tuple:
        """ONNX op types the importer accepts, in table order."""
        return tuple(d.op_type for d in self.ops if d.import_node is not None)

    def importer(self, op_type: str, node_name: str) -> Callable:
        """The import hook of an ONNX op type; CompileError naming the node if unsupported."""
        d = self._by_type.get(op_type)
        if d is None or d.import_node is None:
            raise CompileError(f"node {node_name!r}: op {op_type} unsupported; supported ops: "
                               f"{', '.join(self.onnx_types)}")
        return d.import_node

    def device(self, op) -> DeviceOp:
        """The DeviceOp of a QGraph op; CompileError naming the op if its class has none."""
        dev = self._by_qop.get(type(op))
        if dev is None:
            raise CompileError(f"op {getattr(op, 'name', op)!r}: unsupported type {type(op).__name__}")
        return dev
