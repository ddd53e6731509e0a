"""DDR memory plan: activation buffers (liveness-based reuse), constants, code.

Map (byte addresses, 40-bit): activation buffers from 0 up, then the constant blob (weight tiles
and requant tables), then the code at a burst-aligned address. Every buffer starts on a multiple
of the DDR granule G = max(W, 32); buffers of at least one burst start on a burst boundary.

Reuse: a tensor's buffer is free after the last op that reads it (graph outputs and inputs are
never freed). A freed buffer is reused, without splitting, by a later tensor that fits:
* a tensor with no border (no consumer pads it) takes the smallest free borderless buffer that
  fits;
* a tensor with a border (filled once by the FILL section with its pad value) only takes a free
  buffer of exactly the same geometry and pad value: earlier occupants wrote only the interior,
  so the border still holds the fill.
Views (``ActLayout.view_of``: a Concat part) own no buffer: a buffer belongs to its owner
(``layout.view_root``) and all its views, is allocated when the first of them is defined (with
the owner's geometry and fill) and freed after the last read of any of them; a view's address is
its first block in the owner's buffer.
CompileError if the footprint passes 2^40 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tpucompile.backend.layout import ActLayout, ddr_granule, round_up, view_root
from tpucompile.qgraph import QGraph
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.limits import DDR_ADDR_LIMIT


@dataclass
class Buffer:
    id: int
    addr: int
    size: int
    key: tuple | None          # geometry key for bordered buffers, None for the general pool
    tensors: list = field(default_factory=list)       # owners, in allocation order
    pad_value: int | None = None
    views: list = field(default_factory=list)         # views of the owners, in definition order


@dataclass
class DdrMap:
    """The DDR address map: activation buffers from 0 to ``act_end``, the constants, the code."""
    buffers: list
    act_end: int
    const_addr: int = 0
    const_size: int = 0
    code_addr: int = 0
    code_size: int = 0
    fills: list = field(default_factory=list)

    @property
    def footprint(self) -> int:
        return self.code_addr + self.code_size


class _Bump:
    def __init__(self, cfg: HwConfig, top: int = 0):
        self.top = top
        self.g = ddr_granule(cfg)
        self.bb = cfg.dma_burst_bytes

    def take(self, size: int) -> int:
        a = round_up(self.top, self.bb if size >= self.bb else self.g)
        self.top = a + size
        return a


def last_uses(qg: QGraph, names, keep_all: bool = False) -> dict:
    """tensor name -> index of the last op reading it; len(ops) + 1 for graph inputs and outputs
    (and every tensor with keep_all), -2 for a tensor nothing reads."""
    n = len(qg.ops)
    last = {name: -2 for name in names}
    for i, op in enumerate(qg.ops):
        for t in op.inputs:
            last[t] = max(last[t], i)
    pinned = set(qg.inputs) | {qg.resolve(o) for o in qg.outputs}
    if keep_all:
        pinned |= set(names)
    for t in pinned:
        last[t] = n + 1
    return last


def owners(lays: dict) -> dict:
    """tensor -> (the tensor owning its buffer, its first block there): itself and 0 unless it
    is a view."""
    return {name: view_root(lays, name) for name in lays}


def group_lives(qg: QGraph, lays: dict, own: dict, keep_all: bool = False) -> tuple:
    """({owner: index of the op defining the first tensor of its buffer (-1: a graph input)},
    {owner: last use of any tensor of its buffer}) (``last_uses``)."""
    last = last_uses(qg, lays, keep_all)
    defined = {t: -1 for t in qg.inputs} | {op.out: i for i, op in enumerate(qg.ops)}
    first, glast = {}, {}
    for t, (o, _) in own.items():
        first[o] = min(first.get(o, len(qg.ops)), defined.get(t, -1))
        glast[o] = max(glast.get(o, -2), last[t])
    return first, glast


def plan_activations(qg: QGraph, lays: dict, cfg: HwConfig, keep_all: bool = False) -> DdrMap:
    """Assign ddr_addr/buf_id to every ActLayout (in place). Returns the map (code not placed).

    keep_all: no reuse; every tensor keeps its own buffer, so every layer output can be read back
    after the run (for layer-by-layer comparison with the golden model).
    """
    own = owners(lays)
    _, last = group_lives(qg, lays, own, keep_all)
    bump = _Bump(cfg)
    bufs: list[Buffer] = []
    free: list[Buffer] = []
    held: dict = {}          # owner -> its buffer

    def alloc(view: ActLayout):
        root, block = own[view.name]
        lay = lays[root]
        if root in held:
            b = held[root]
            if view is not lay:
                b.views.append(view.name)
            view.ddr_addr, view.buf_id = b.addr + block * lay.block_bytes, b.id
            return
        key = lay.geometry() if lay.has_border else None
        best = None
        for b in free:
            if b.key == key and b.size >= lay.size and (best is None or b.size < best.size):
                best = b
        if best is not None:
            free.remove(best)
            b = best
        else:
            b = Buffer(len(bufs), bump.take(lay.size), lay.size, key, pad_value=lay.pad_value)
            bufs.append(b)
            if bump.top > DDR_ADDR_LIMIT:
                raise CompileError(f"DDR footprint passes 2^40 bytes at tensor {lay.name!r} "
                                   f"({lay.size} bytes at {b.addr:#x}): the model does not fit the "
                                   f"40-bit address space")
        b.tensors.append(root)
        held[root] = b
        lay.ddr_addr, lay.buf_id = b.addr, b.id
        if view is not lay:
            b.views.append(view.name)
            view.ddr_addr, view.buf_id = b.addr + block * lay.block_bytes, b.id

    for t in qg.inputs:
        alloc(lays[t])
    for i, op in enumerate(qg.ops):
        alloc(lays[op.out])
        for o in dict.fromkeys(own[t][0] for t in op.inputs):   # first-use order: deterministic
            if last[o] == i:
                free.append(held.pop(o))
        o = own[op.out][0]
        if last[o] == -2:               # never read and not an output: free at once
            free.append(held.pop(o))
    plan = DdrMap(bufs, bump.top)
    for b in bufs:
        if b.pad_value is not None:
            plan.fills.append({"addr": b.addr, "size": b.size, "value": int(b.pad_value)})
    return plan


def place_consts(plan: DdrMap, const_size: int, cfg: HwConfig) -> int:
    bump = _Bump(cfg, plan.act_end)
    plan.const_addr = round_up(bump.top, cfg.dma_burst_bytes)
    plan.const_size = const_size
    if plan.const_addr + const_size > DDR_ADDR_LIMIT:
        raise CompileError(f"DDR footprint passes 2^40 bytes: constants of {const_size} bytes at "
                           f"{plan.const_addr:#x}")
    return plan.const_addr


def place_code(plan: DdrMap, code_size: int, cfg: HwConfig) -> int:
    plan.code_addr = round_up(plan.const_addr + plan.const_size, cfg.dma_burst_bytes)
    plan.code_size = code_size
    if plan.footprint > DDR_ADDR_LIMIT:
        raise CompileError(f"DDR footprint {plan.footprint} bytes passes 2^40 (code at {plan.code_addr:#x})")
    return plan.code_addr
