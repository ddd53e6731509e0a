"""Verifiers of the back end's stages (backend/pipeline.py), one per pass, run after it.

Each re-checks the invariants the next stages and the chip rely on, independently of how the pass
computed its result, and raises CompileError naming the stage and the node, tensor or address
at fault.
"""
from __future__ import annotations

import bisect

import numpy as np

from tpucompile.backend.layout import align_px, ddr_granule
from tpucompile.backend.memplan import group_lives, owners
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import Engine
from tpusim.arch.limits import DDR_ADDR_LIMIT

__all__ = ["device_graph", "layout_plan", "mem_plan", "tiled_program", "emitted_program",
           "checked_program"]


def device_graph(dg) -> None:
    """The QGraph is valid, and every input transform names a graph input of its device shape."""
    dg.qg.validate()
    for tr in dg.transforms:
        name = tr["name"]
        if name not in dg.qg.inputs:
            raise CompileError(f"host_transforms: {tr['kind']} of {name!r}, which is not a graph input")
        shape = tuple(dg.qg.tensors[name].shape)
        if shape != tuple(tr["device_shape"]):
            raise CompileError(f"host_transforms: {tr['kind']} of input {name!r}: device tensor shape "
                               f"{shape} != transform's {tuple(tr['device_shape'])}")


def layout_plan(lp) -> None:
    """Every device tensor has a layout of one word per block, a border at least as wide as its
    readers need on every side with an int8 value, a DDR-granule aligned left border and row."""
    cfg = lp.cfg
    ap = align_px(cfg)
    for name in lp.qg.tensors:
        lay = lp.tensors.get(name)
        if lay is None:
            raise CompileError(f"layout: tensor {name!r} has no layout")
        if lay.blk != cfg.word_bytes:
            raise CompileError(f"layout: tensor {name!r}: block of {lay.blk} channels, not one "
                               f"{cfg.word_bytes}-byte word")
        if any(p < n for p, n in zip(lay.pads, lay.need)):
            raise CompileError(f"layout: tensor {name!r}: border {lay.pads} narrower than the "
                               f"{lay.need} its readers need")
        if any(lay.need) and (lay.pad_value is None or not -128 <= lay.pad_value <= 127):
            raise CompileError(f"layout: tensor {name!r}: border {lay.need} with pad value {lay.pad_value}")
        if lay.pads[1] % ap or lay.Wp % ap:
            raise CompileError(f"layout: tensor {name!r}: left border {lay.pads[1]} or row of {lay.Wp} "
                               f"pixels not a multiple of the {ap}-pixel DDR granule")
    _check_view_blocks(lp.tensors)


def _check_view_blocks(lays: dict) -> None:
    """Views lie inside their parent's blocks with its rows and border; views written in place
    (Concat parts) one after the other."""
    taken: dict = {}
    for name, lay in lays.items():
        if lay.view_of is None:
            continue
        p = lays[lay.view_of]
        lo, hi = lay.view_block, lay.view_block + lay.nblocks
        if hi > p.nblocks or lay.shape[2:] != p.shape[2:] or (lay.pads, lay.pad_value) != (p.pads, p.pad_value):
            raise CompileError(f"layout: view {name!r} (blocks [{lo}, {hi}) of {lay.shape}, pads {lay.pads}) "
                               f"does not fit {lay.view_of!r} ({p.nblocks} blocks of {p.shape}, pads {p.pads})")
        if not lay.view_written:
            continue
        for other, (a, b) in taken.get(lay.view_of, {}).items():
            if lo < b and a < hi:
                raise CompileError(f"layout: views {other!r} and {name!r} of {lay.view_of!r} share blocks")
        taken.setdefault(lay.view_of, {})[name] = (lo, hi)


def mem_plan(mp) -> None:
    """Buffers start on the granule (on a burst when at least a burst long), do not overlap each
    other or the constants; tensors sharing a buffer fit it, are never live at the same time and
    (bordered) have its geometry and fill; constants are burst aligned; the map ends below 2^40."""
    lp, ddr = mp.layout, mp.ddr
    cfg, qg, lays = lp.cfg, lp.qg, lp.tensors
    g, bb = ddr_granule(cfg), cfg.dma_burst_bytes
    end = 0
    for b in sorted(ddr.buffers, key=lambda b: b.addr):
        if b.addr % (bb if b.size >= bb else g):
            raise CompileError(f"memplan: buffer {b.id} ({', '.join(b.tensors)}) at {b.addr:#x} is not "
                               f"aligned to {bb if b.size >= bb else g} bytes")
        if b.addr < end:
            raise CompileError(f"memplan: buffer {b.id} ({', '.join(b.tensors)}) at {b.addr:#x} overlaps "
                               f"the buffer ending at {end:#x}")
        end = b.addr + b.size
    if end > ddr.act_end or ddr.act_end > ddr.const_addr or ddr.const_addr % bb:
        raise CompileError(f"memplan: activations end at {end:#x} (map: {ddr.act_end:#x}), constants at "
                           f"{ddr.const_addr:#x} (must follow them, on a {bb}-byte burst)")
    if ddr.const_addr + ddr.const_size > DDR_ADDR_LIMIT:
        raise CompileError(f"memplan: constants end at {ddr.const_addr + ddr.const_size:#x}, past 2^40")
    fills = {(f["addr"], f["size"], f["value"]) for f in ddr.fills}
    own = owners(lays)
    defined, last = group_lives(qg, lays, own, lp.graph.options.keep_intermediates)
    for b in ddr.buffers:
        _check_views(b, lays, own)
        if b.pad_value is not None and (b.addr, b.size, b.pad_value) not in fills:
            raise CompileError(f"memplan: bordered buffer {b.id} at {b.addr:#x} has no FILL with {b.pad_value}")
        prev = None
        for t in sorted(b.tensors, key=lambda t: defined.get(t, -1)):
            lay = lays[t]
            if lay.ddr_addr != b.addr or lay.buf_id != b.id or lay.size > b.size:
                raise CompileError(f"memplan: tensor {t!r} ({lay.size} bytes at {lay.ddr_addr:#x}) does not "
                                   f"match its buffer {b.id} ({b.size} bytes at {b.addr:#x})")
            if lay.has_border and (lay.geometry() != b.key or lay.pad_value != b.pad_value):
                raise CompileError(f"memplan: bordered tensor {t!r} shares buffer {b.id} at {b.addr:#x} "
                                   "with a different geometry or pad value")
            d = defined.get(t, -1)
            if prev is not None and d <= prev[1]:
                raise CompileError(f"memplan: tensors {prev[0]!r} (live to op {prev[1]}) and {t!r} "
                                   f"(defined by op {d}) share buffer {b.id} at {b.addr:#x}")
            prev = (t, max(d, last.get(t, -2)))
    for op, consts in zip(qg.ops, mp.consts):
        for seg, addr in consts.items():
            if addr % bb or not ddr.const_addr <= addr < ddr.const_addr + ddr.const_size:
                raise CompileError(f"memplan: {seg} constants of {op.name!r} at {addr:#x} outside the "
                                   f"constant region or not burst aligned")


def _check_views(b, lays: dict, own: dict) -> None:
    """Every view of buffer ``b`` lies in its owner's blocks there, with the owner's geometry."""
    for v in b.views:
        root, block = own[v]
        lay, r = lays[v], lays[root]
        if root not in b.tensors or lay.buf_id != b.id or lay.ddr_addr != b.addr + block * r.block_bytes \
                or block + lay.nblocks > r.nblocks:
            raise CompileError(f"memplan: view {v!r} ({lay.nblocks} blocks at {lay.ddr_addr:#x}) is not "
                               f"blocks {block}.. of {root!r} in buffer {b.id} at {b.addr:#x}")
        if (lay.Hp, lay.Wp, lay.pads, lay.pad_value) != (r.Hp, r.Wp, r.pads, r.pad_value):
            raise CompileError(f"memplan: view {v!r} has geometry {(lay.Hp, lay.Wp, lay.pads, lay.pad_value)}, "
                               f"its buffer's owner {root!r} {(r.Hp, r.Wp, r.pads, r.pad_value)}")


def tiled_program(tp) -> None:
    """Every layer's SRAM slots lie inside the SRAM and do not overlap each other (a region whose
    slots are all one, single-buffered, counts once); its accumulator rows (both halves, when it
    alternates) fit the accumulator."""
    lp = tp.mem.layout
    cfg, ops = lp.cfg, lp.qg.ops
    if len(tp.tilings) != len(ops):
        raise CompileError(f"tiling: {len(tp.tilings)} tilings for {len(ops)} layers")
    for op, tl in zip(ops, tp.tilings):
        slots = []
        for name, bases in tl.regions.items():
            if name not in tl.slot_words:
                raise CompileError(f"tiling: layer {op.name!r}: region {name!r} has no slot size")
            for k, base in enumerate(dict.fromkeys(bases)):
                slots.append((base, base + tl.slot_words[name], f"{name}[{k}]"))
        slots.sort()
        for (lo, hi, what), nxt in zip(slots, slots[1:] + [None]):
            if lo < 0 or hi > cfg.sram_words:
                raise CompileError(f"tiling: layer {op.name!r}: SRAM slot {what} words [{lo}, {hi}) outside "
                                   f"the {cfg.sram_words}-word SRAM")
            if nxt is not None and nxt[0] < hi:
                raise CompileError(f"tiling: layer {op.name!r}: SRAM slots {what} [{lo}, {hi}) and {nxt[2]} "
                                   f"[{nxt[0]}, {nxt[1]}) overlap")
        rows = tl.acc_rows * (2 if getattr(tl, "acc_halves", False) else 1)
        if rows > cfg.acc_depth_rows:
            raise CompileError(f"tiling: layer {op.name!r}: {rows} accumulator rows, the accumulator has "
                               f"{cfg.acc_depth_rows}")


def _dma_extent(args: dict) -> tuple:
    lo = args["ddr_addr"]
    return lo, lo + (args["count2"] - 1) * args["ddr_stride2"] + (args["count1"] - 1) * args["ddr_stride1"] \
        + args["inner_bytes"]


def emitted_program(em) -> None:
    """The layers' instruction ranges tile the program, which ends with its only HALT; every DMA
    stays inside one activation buffer, or (a LOAD) inside the constants."""
    mp = em.tiled.mem
    ddr = mp.ddr
    ops = em.program.ops
    if not ops or ops[-1][0] != "HALT" or any(op == "HALT" for op, _ in ops[:-1]):
        raise CompileError("emission: the program must end with its only HALT")
    at = 0
    for L in em.layers:
        if L["instr_begin"] != at or L["instr_end"] < at:
            raise CompileError(f"emission: layer {L['name']!r} covers instructions [{L['instr_begin']}, "
                               f"{L['instr_end']}), expected to start at {at}")
        at = L["instr_end"]
    if at != len(ops) - 1:
        raise CompileError(f"emission: layers end at instruction {at}, the program has {len(ops) - 1} before HALT")
    bufs = sorted((b.addr, b.addr + b.size) for b in ddr.buffers)
    starts = [lo for lo, _ in bufs]
    cregion = (ddr.const_addr, ddr.const_addr + ddr.const_size)
    layer = iter(em.layers)
    L = next(layer, None)
    for i, (op, args) in enumerate(ops):
        while L is not None and i >= L["instr_end"]:
            L = next(layer, None)
        if op not in ("DMA_LOAD", "DMA_STORE"):
            continue
        lo, hi = _dma_extent(args)
        k = bisect.bisect_right(starts, lo) - 1
        inside = k >= 0 and hi <= bufs[k][1]
        if not inside and op == "DMA_LOAD":
            inside = cregion[0] <= lo and hi <= cregion[1]
        if not inside:
            raise CompileError(f"emission: instruction #{i} ({op}) of layer {L['name'] if L else '?'!r} "
                               f"{'reads' if op == 'DMA_LOAD' else 'writes'} DDR [{lo:#x}, {hi:#x}), outside "
                               f"every activation buffer{' and the constants' if op == 'DMA_LOAD' else ''}")


def checked_program(cp) -> None:
    """Per (sender X, receiver Y), the k-th wait of Y on X is matched by the k-th signal of X to Y,
    which comes earlier in program order; the outstanding tokens are within the limit."""
    P = cp.emitted.program
    eng = np.array(P.eng)
    wait = np.array(P.wait)
    signal = np.array(P.signal)
    for x in Engine:
        for y in Engine:
            sig = np.flatnonzero((eng == x) & (signal >> y & 1 == 1))
            wt = np.flatnonzero((eng == y) & (wait >> x & 1 == 1))
            if len(sig) != len(wt):
                raise CompileError(f"token_check: {x.name}->{y.name}: {len(sig)} signals but {len(wt)} waits")
            bad = np.flatnonzero(sig >= wt)
            if bad.size:
                k = int(bad[0])
                raise CompileError(f"token_check: wait #{k} of {y.name} on {x.name} at instruction #{wt[k]} "
                                   f"does not follow its signal at instruction #{sig[k]}")
    for (x, y), m in cp.outstanding.items():
        if m > cp.limit:
            raise CompileError(f"token_check: {m} tokens {Engine(x).name}->{Engine(y).name} outstanding "
                               f"(limit {cp.limit})")
