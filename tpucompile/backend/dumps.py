"""Readable text of the back end's stages (backend/pipeline.py), written by ``--dump-ir``."""
from __future__ import annotations

import dataclasses

from tpucompile.qgraph import dump_qgraph
from tpusim.arch.isa import Engine

__all__ = ["device_graph", "layout_plan", "mem_plan", "tiled_program", "emitted_program",
           "checked_program"]


def device_graph(dg) -> str:
    """The device QGraph, then the host's input transforms."""
    lines = [f"// config {dg.cfg.name}; im2col={dg.options.im2col}, "
             f"keep_intermediates={dg.options.keep_intermediates}", dump_qgraph(dg.qg).rstrip()]
    for tr in dg.transforms:
        how = (f" (kernel {tr['kernel']}, strides {tr['strides']}, pads {tr['pads']}, pad value {tr['pad_value']})"
               if tr["kind"] == "im2col" else " (0 / -128 per key -> int32 bias row bytes)")
        lines.append(f"host transform {tr['kind']} %{tr['name']}: {tr['orig_shape']} -> {tr['device_shape']}{how}")
    return "\n".join(lines) + "\n"


def layout_plan(lp) -> str:
    """One line per device tensor: blocks, border (t, l, b, r) and its value, buffer bytes; a view
    names its buffer's tensor and first block, a tensor with gap lanes its channel map
    ([logical, lane, count] segments)."""
    lines = [f"// blocked int8 [C/blk][Hp][Wp][blk], blk = {lp.cfg.word_bytes}; pads (top, left, bottom, right)"]
    for name, L in lp.tensors.items():
        border = "none" if L.pad_value is None else f"{L.pad_value} for {L.pad_by!r}"
        extra = "" if L.view_of is None else f" view of %{L.view_of} blocks {L.view_block}.."
        extra += "" if L.chan_map is None else f" channels={L.chan_map.as_json()}"
        lines.append(f"%{name}: {'x'.join(map(str, L.shape))} -> {L.nblocks}x{L.Hp}x{L.Wp}x{L.blk} "
                     f"pads={list(L.pads)} need={list(L.need)} border={border} size={L.size} bytes{extra}")
    return "\n".join(lines) + "\n"


def mem_plan(mp) -> str:
    """The DDR map: activation buffers (tensors, fill), then the constants per op."""
    ddr = mp.ddr
    lines = [f"activations [0x0, {ddr.act_end:#x}): {len(ddr.buffers)} buffers"]
    for b in ddr.buffers:
        fill = "" if b.pad_value is None else f" fill={b.pad_value}"
        lines.append(f"  buf {b.id}: [{b.addr:#x}, {b.addr + b.size:#x}) {b.size} bytes{fill}: "
                     + ", ".join(f"%{t}" for t in b.tensors)
                     + ("" if not b.views else " (views " + ", ".join(f"%{t}" for t in b.views) + ")"))
    lines.append(f"constants [{ddr.const_addr:#x}, {ddr.const_addr + ddr.const_size:#x}): {ddr.const_size} bytes")
    for op, consts in zip(mp.layout.qg.ops, mp.consts):
        if consts:
            lines.append(f"  {op.name}: " + ", ".join(f"{seg} @ {addr:#x}" for seg, addr in consts.items()))
    return "\n".join(lines) + "\n"


def tiled_program(tp) -> str:
    """Per layer its tiling fields, then each SRAM region: slots x words at base words."""
    lines = []
    for op, tl in zip(tp.mem.layout.qg.ops, tp.tilings):
        fields = ", ".join(f"{f.name}={getattr(tl, f.name):.0f}" if isinstance(getattr(tl, f.name), float)
                           else f"{f.name}={getattr(tl, f.name)}" for f in dataclasses.fields(tl)
                           if f.name not in ("regions", "slot_words"))
        lines.append(f"{op.name} ({type(op).__name__}): {fields + ', ' if fields else ''}acc_rows={tl.acc_rows}")
        for name, bases in tl.regions.items():
            lines.append(f"    {name}: {len(bases)} x {tl.slot_words.get(name)} words at {bases}")
    return "\n".join(lines) + "\n"


def emitted_program(em) -> str:
    """Per layer: its instruction range, the instructions by opcode, the tokens its instructions
    wait on (sender->receiver) and its DDR traffic. The listing itself is ``program.s``
    (``tpucompile --dump-ir``) or ``decode_program(binary.code)``: for a real model it is
    megabytes, larger than the binary."""
    P = em.program
    lines = [f"// {len(P)} instructions ({len(P) - 1} + HALT); per layer: [first, end) by opcode, token waits"]
    for L in em.layers:
        i0, i1 = L["instr_begin"], L["instr_end"]
        ops: dict = {}
        waits: dict = {}
        for i in range(i0, i1):
            ops[P.ops[i][0]] = ops.get(P.ops[i][0], 0) + 1
            for x in Engine:
                if P.wait[i] >> x & 1:
                    edge = f"{x.name}->{Engine(P.eng[i]).name}"
                    waits[edge] = waits.get(edge, 0) + 1
        lines.append(f"{L['name']} ({L['op']}) -> %{L['out']}: [{i0}, {i1}), DDR in {L['ddr_bytes_in']} / out "
                     f"{L['ddr_bytes_out']} bytes, {L['macs']} MACs")
        lines.append("    " + ", ".join(f"{op} {n}" for op, n in ops.items()))
        lines.append("    waits: " + (", ".join(f"{e} {n}" for e, n in waits.items()) or "none"))
    return "\n".join(lines) + "\n"


def checked_program(cp) -> str:
    """Per (sender, receiver) engine pair: tokens and the most outstanding at once."""
    P = cp.emitted.program
    count: dict = {}
    for x, y, _, _ in P.pairs:
        count[(x, y)] = count.get((x, y), 0) + 1
    lines = [f"// tokens per engine pair; limit {cp.limit} outstanding (counter maximum less the queue depth)"]
    for (x, y), m in cp.outstanding.items():
        lines.append(f"{Engine(x).name}->{Engine(y).name}: {count[(x, y)]} tokens, at most {m} outstanding")
    return "\n".join(lines) + "\n"
