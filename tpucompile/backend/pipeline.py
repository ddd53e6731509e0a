"""The back end as a pass pipeline over explicit IR stages (``tpucompile.stages`` runs it).

  pass              -> stage           verified after it (backend/verify.py)
  host_transforms   DeviceGraph       the QGraph is valid; each input transform matches its tensor
  layout            LayoutPlan        channel maps applied (lanes graph valid), every tensor laid
                                      out, views inside their buffer with its geometry, borders
                                      cover what readers need, aligned
  memplan           MemPlan           buffers aligned and disjoint, tensors sharing one never live
                                      at once, bordered buffers filled, constants placed, < 2^40
  tiling            TiledProgram      every layer's SRAM slots inside the SRAM and disjoint, its
                                      accumulator rows inside the accumulator
  emission          EmittedProgram    every DMA inside one DDR buffer or the constants, layers cover
                                      the program, HALT last
  token_check       CheckedProgram    per engine pair the outstanding tokens fit the counter, and
                                      every wait has an earlier matching signal

Each pass dispatches per op through the op table (``tpucompile.ops``: ``DeviceOp`` hooks); each
stage has a readable dump (backend/dumps.py) written as ``NN_<pass>.txt`` with ``--dump-ir``.
``compile.py`` then assembles the binary (encoding, code placement, IO descriptors, meta).
Per-op lists of a stage (``consts``, ``tilings``) are in ``qg.ops`` order.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tpucompile.backend import dumps, verify
from tpucompile.backend.channels import remap_graph
from tpucompile.backend.emit import Program
from tpucompile.backend.fuse_residual import fuse_residual
from tpucompile.backend.layout import ActLayout, check_input_borders, merge_view_borders, round_up
from tpucompile.backend.memplan import DdrMap, place_consts, plan_activations
from tpucompile.ops import OP_TABLE
from tpucompile.ops.act_matmul import head_slice_maps, key_mask_transform
from tpucompile.qgraph import QGraph
from tpucompile.stages import Pass
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import Engine

__all__ = ["BackendOptions", "DeviceGraph", "LayoutPlan", "MemPlan", "TiledProgram", "EmittedProgram",
           "CheckedProgram", "PASSES"]


@dataclass(frozen=True)
class BackendOptions:
    """im2col: let the host im2col a first conv's image (ops/conv.py). keep_intermediates: every
    layer output keeps its own DDR buffer and is described in meta["tensors"]."""
    im2col: bool = True
    keep_intermediates: bool = False


@dataclass
class DeviceGraph:
    """The QGraph the device runs, after the host's input transforms (meta["input_transforms"])."""
    qg: QGraph
    cfg: HwConfig
    options: BackendOptions = BackendOptions()
    transforms: list = field(default_factory=list)


@dataclass
class LayoutPlan:
    """tensors: device tensor name -> ActLayout (blocked DDR layout, border, no address yet).
    lanes: the device graph on physical lanes (``backend.channels.remap_graph``: tensors with
    gap lanes at their physical channel count, their readers rewritten); ``graph.qg`` when no
    tensor has a channel map. Every later stage works on ``qg``, the lanes graph."""
    graph: DeviceGraph
    tensors: dict
    lanes: QGraph | None = None

    @property
    def qg(self) -> QGraph:
        return self.graph.qg if self.lanes is None else self.lanes

    @property
    def cfg(self) -> HwConfig:
        return self.graph.cfg


@dataclass
class MemPlan:
    """The DDR map (ActLayouts now have ddr_addr and buf_id), the constant blob at
    ``ddr.const_addr``, and per op {constant segment: DDR byte address}."""
    layout: LayoutPlan
    ddr: DdrMap
    blob: bytes
    consts: list


@dataclass
class TiledProgram:
    """Per op its tiling record (SRAM regions, slot sizes, accumulator rows, loop bounds)."""
    mem: MemPlan
    tilings: list


@dataclass
class EmittedProgram:
    """The instructions with their tokens (``program``), and meta["layers"] (instruction ranges)."""
    tiled: TiledProgram
    program: Program
    layers: list


@dataclass
class CheckedProgram:
    """outstanding: (sender, receiver engine) -> most tokens outstanding at once (<= limit)."""
    emitted: EmittedProgram
    outstanding: dict
    limit: int


# ---------------------------------------------------------------- passes
def host_transforms(dg: DeviceGraph) -> DeviceGraph:
    """A run-time attention mask (a graph input every reader of which takes as its ``key_bias``)
    becomes the host's bias row (``ops/act_matmul.key_mask_transform``); with ``options.im2col``,
    offer every other graph input read by exactly one op (and not a graph output) to that op's
    ``input_transform`` hook; apply the rewrites they return. CompileError naming the graph
    input (and its shape) whose batch is not 1."""
    qg, cfg = dg.qg, dg.cfg
    for name in qg.inputs:              # first: the input at fault, not the first tensor it reaches
        shape = tuple(int(d) for d in qg.tensors[name].shape)
        if shape[0] != 1:
            raise CompileError(f"graph input {name!r} of shape {shape}: batch {shape[0]} unsupported "
                               "(batch 1 only; export the model with a batch of 1)")
    users: dict = {}
    for op in qg.ops:
        for t in op.inputs:
            users.setdefault(t, []).append(op)
    outputs = [qg.resolve(o) for o in qg.outputs]
    tensors, ops, transforms = dict(qg.tensors), list(qg.ops), []
    for name in qg.inputs:
        us = users.get(name, [])
        if us and all(getattr(u, "key_bias", "") == name for u in us):   # a run-time attention mask
            tensors[name], meta = key_mask_transform(name, qg, cfg)
            transforms.append(meta)
            continue
        if len(us) != 1 or name in outputs or not dg.options.im2col:
            continue
        rewrite = OP_TABLE.device(us[0]).input_transform(us[0], qg, cfg)
        if rewrite is not None:
            tensors[name], ops[ops.index(us[0])], meta = rewrite
            transforms.append(meta)
    if transforms:
        qg = QGraph(tensors, ops, list(qg.inputs), list(qg.outputs), list(qg.host_ops),
                    list(qg.fp32_outputs), dict(qg.aliases))
    return DeviceGraph(qg, cfg, dg.options, transforms)


def layout(dg: DeviceGraph) -> LayoutPlan:
    """Channel placement first (``remap_graph``: each op's ``remap_channels``), then an ActLayout
    per device tensor; each op's ``plan_layout`` records the borders it reads (and the views it
    makes); views share their buffer's border; then the graph inputs' border values are checked
    and every row aligned (``unfused_layout``); last, each residual Add is fused into the Conv it
    reads (``fuse_residual``: the conv's output then has no layout and no DDR buffer)."""
    return fuse_residual(unfused_layout(dg))


def unfused_layout(dg: DeviceGraph) -> LayoutPlan:
    """``layout`` before ``fuse_residual``: it reads the config's array, word and alignment
    fields, never its DDR timing or clocks (the fusion's hooks may: the estimator caches the two
    apart, tpucompile.backend.estimate)."""
    cfg = dg.cfg
    qg, maps, logical = remap_graph(dg.qg, cfg.word_bytes, OP_TABLE.device, head_slice_maps(dg.qg, cfg.word_bytes))
    if logical is not dg.qg:            # lane copies inserted: the rest of the compile sees them
        dg = dataclasses.replace(dg, qg=logical)
    lays = {name: ActLayout.for_tensor(t, cfg) for name, t in qg.tensors.items()}
    for name, m in maps.items():
        lays[name].chan_map = m
    for op in qg.ops:
        OP_TABLE.device(op).plan_layout(op, qg, lays)
    merge_view_borders(lays)
    check_input_borders(qg, lays)
    for lay in lays.values():
        lay.align(cfg)
    return LayoutPlan(dg, lays, qg if maps else None)


def memplan(lp: LayoutPlan) -> MemPlan:
    """Activation buffers (backend/memplan.py), then every op's constant segments, each on a
    burst boundary, in op order, placed after the activations."""
    qg, cfg = lp.qg, lp.cfg
    ddr = plan_activations(qg, lp.tensors, cfg, keep_all=lp.graph.options.keep_intermediates)
    parts, size = [], 0              # the blob's pieces, joined once (VGG-19: 143 MB)
    offsets = []
    for op in qg.ops:
        offs = {}
        for seg, data in OP_TABLE.device(op).constants(op, cfg).items():
            pad = round_up(size, cfg.dma_burst_bytes) - size
            parts.append(bytes(pad))
            offs[seg] = size + pad
            parts.append(data)
            size += pad + memoryview(data).nbytes
        offsets.append(offs)
    blob = b"".join(parts)
    caddr = place_consts(ddr, len(blob), cfg)
    consts = [{seg: caddr + off for seg, off in offs.items()} for offs in offsets]
    return MemPlan(lp, ddr, blob, consts)


def tiling(mp: MemPlan) -> TiledProgram:
    """Every op's ``tile`` hook (CompileError naming the op if nothing fits the SRAM)."""
    lp = mp.layout
    return TiledProgram(mp, [OP_TABLE.device(op).tile(op, lp.tensors, lp.cfg) for op in lp.qg.ops])


def emission(tp: TiledProgram) -> EmittedProgram:
    """Every op's ``emit`` hook in graph order, then HALT; meta["layers"] per op."""
    lp = tp.mem.layout
    qg, lays = lp.qg, lp.tensors
    P = Program(lp.cfg)
    layers = []
    logical = lp.graph.qg       # MACs count real channels, not the zero weights on gap lanes
    for op, orig, tl, consts in zip(qg.ops, logical.ops, tp.tilings, tp.mem.consts):
        dev = OP_TABLE.device(op)
        i0 = len(P)
        info = {"name": op.name, "op": type(op).__name__, "out": op.out, "out_shape": list(logical.tensors[op.out].shape)}
        dev.emit(P, op, lays, tl, consts)
        info.update(dev.describe(op, tl))
        i1 = len(P)
        info.update(macs=dev.macs(orig, logical), ddr_bytes_in=int(sum(P.nbytes_in[i0:i1])),
                    ddr_bytes_out=int(sum(P.nbytes_out[i0:i1])), instr_begin=i0, instr_end=i1)
        layers.append(info)
    P.halt()
    return EmittedProgram(tp, P, layers)


def token_check(em: EmittedProgram) -> CheckedProgram:
    """The tokens outstanding per (sender, receiver) must stay within ``Program.token_limit``."""
    P = em.program
    limit = P.token_limit()
    outstanding = P.max_outstanding()
    for (x, y), m in outstanding.items():
        if m > limit:
            raise CompileError(f"internal: {m} tokens {Engine(x).name}->{Engine(y).name} could be "
                               f"outstanding (limit {limit})")
    return CheckedProgram(em, outstanding, limit)


PASSES = (
    Pass("host_transforms", host_transforms, verify.device_graph, dumps.device_graph),
    Pass("layout", layout, verify.layout_plan, dumps.layout_plan),
    Pass("memplan", memplan, verify.mem_plan, dumps.mem_plan),
    Pass("tiling", tiling, verify.tiled_program, dumps.tiled_program),
    Pass("emission", emission, verify.emitted_program, dumps.emitted_program),
    Pass("token_check", token_check, verify.checked_program, dumps.checked_program),
)
