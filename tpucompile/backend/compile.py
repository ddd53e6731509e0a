"""compile_qgraph: QGraph + HwConfig -> TpuBinary (layout, memory plan, tiling, emission)."""
from __future__ import annotations

import time

from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import HwConfig
from tpusim.arch.errors import CompileError
from tpusim.arch.isa import encode_program, INSTR_BYTES
from tpucompile.backend.emit import Program, emit_add, emit_conv, emit_pool
from tpucompile.backend.layout import (im2col_rewrite, param_tables, plan_layouts, round_up,
                                       weight_tiles)
from tpucompile.backend.memplan import place_code, place_consts, plan_activations
from tpucompile.backend.tiling import tile_conv, tile_elementwise
from tpucompile.qgraph import QAdd, QAvgPool, QConv, QGraph, QMaxPool, op_inputs

__all__ = ["compile_qgraph"]


def _macs(op, qg: QGraph) -> int:
    if isinstance(op, QConv):
        y = qg.tensors[op.out]
        return int(y.shape[2] * y.shape[3] * op.weight.size)
    return 0


def compile_qgraph(qg: QGraph, cfg: HwConfig, *, im2col: bool = True, model_name: str = "",
                  keep_intermediates: bool = False) -> TpuBinary:
    """Compile a validated QGraph for ``cfg``. CompileError (naming the node) if it cannot.

    im2col: let the host im2col the image of a first conv with few input channels (see
    backend/layout.py); the binary's meta["input_transforms"] then says so.
    keep_intermediates: give every layer output its own DDR buffer (no reuse) and describe each
    one in meta["tensors"] (TensorDesc JSON), so a run can be compared layer by layer.
    """
    t0 = time.perf_counter()
    qg.validate()
    transforms = []
    if im2col:
        qg, transforms = im2col_rewrite(qg, cfg)
    lays = plan_layouts(qg, cfg)
    plan = plan_activations(qg, lays, cfg, keep_all=keep_intermediates)

    # constants: per conv, weight tiles then requant tables (burst aligned)
    blob = bytearray()
    cinfo = {}
    for op in qg.ops:
        if isinstance(op, QConv):
            blob += bytes(round_up(len(blob), cfg.dma_burst_bytes) - len(blob))
            woff = len(blob)
            blob += weight_tiles(op, cfg)
            blob += bytes(round_up(len(blob), cfg.dma_burst_bytes) - len(blob))
            poff = len(blob)
            tabs, pstride = param_tables(op, cfg)
            blob += tabs
            cinfo[op.name] = (woff, poff, pstride)
    caddr = place_consts(plan, len(blob), cfg)

    P = Program(cfg)
    layers = []
    for op in qg.ops:
        i0 = len(P)
        Y = lays[op.out]
        info = {"name": op.name, "op": type(op).__name__, "out": op.out, "out_shape": list(Y.shape)}
        if isinstance(op, QConv):
            X = lays[op.inp]
            cout, cin = op.weight.shape[:2]
            tl = tile_conv(op.name, op.kernel, op.strides, cin, cout, Y.H, Y.W, cfg)
            woff, poff, pstride = cinfo[op.name]
            emit_conv(P, op, X, Y, tl, caddr + woff, caddr + poff, pstride)
            info.update(kernel=list(op.kernel), strides=list(op.strides), cin=int(cin), cout=int(cout),
                        relu=bool(op.relu),
                        tiling={"th": tl.th, "tw": tl.tw, "nbg": tl.nbg, "kbg": tl.kbg, "ni": tl.ni,
                                "nw": tl.nw, "acc_halves": tl.acc_halves, "bank_aligned": tl.aligned, "est_cycles": int(tl.est_cycles)})
        elif isinstance(op, (QMaxPool, QAvgPool)):
            X = lays[op.inp]
            tl = tile_elementwise(op.name, "pool", X.nblocks, op.kernel, op.strides, Y.H, Y.W, cfg)
            emit_pool(P, op, X, Y, tl, isinstance(op, QAvgPool))
            info.update(kernel=list(op.kernel), strides=list(op.strides),
                        tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})
        elif isinstance(op, QAdd):
            tl = tile_elementwise(op.name, "add", Y.nblocks, (1, 1), (1, 1), Y.H, Y.W, cfg)
            emit_add(P, op, lays[op.a], lays[op.b], Y, tl)
            info.update(relu=bool(op.relu), tiling={"th": tl.th, "tw": tl.tw, "kbg": tl.kbg})
        else:
            raise CompileError(f"op {getattr(op, 'name', op)!r}: unsupported type {type(op).__name__}")
        i1 = len(P)
        info.update(macs=_macs(op, qg), ddr_bytes_in=int(sum(P.nbytes_in[i0:i1])),
                    ddr_bytes_out=int(sum(P.nbytes_out[i0:i1])), instr_begin=i0, instr_end=i1)
        layers.append(info)
    P.halt()
    P.check_tokens()
    code = encode_program(P.instructions())
    code_addr = place_code(plan, len(code), cfg)
    for L in layers:
        L["pc_begin"] = L["instr_begin"] * INSTR_BYTES     # byte offsets from the code start
        L["pc_end"] = L["instr_end"] * INSTR_BYTES         # (as in SimResult.retire), exclusive

    inputs = [lays[n].desc(n) for n in qg.inputs]
    outputs = [lays[qg.resolve(n)].desc(n) for n in qg.outputs]
    counts = {}
    for op, _ in P.ops:
        counts[op] = counts.get(op, 0) + 1
    act_bytes = sum(b.size for b in plan.buffers)

    def interior(name):
        L = lays[name]
        return L.nblocks * L.blk * L.H * L.W
    comp_load = len(blob) + sum(interior(t) for op in qg.ops for t in op_inputs(op))
    comp_store = sum(interior(op.out) for op in qg.ops)
    meta = {
        "model": model_name,
        "config": cfg.name,
        "compiler": "tpucompile.backend",
        "host_ops": [{**h, "shape": list(h.get("shape", ()))} for h in qg.host_ops],
        "fp32_outputs": list(qg.fp32_outputs),
        "aliases": dict(qg.aliases),
        "input_transforms": transforms,
        "input_pad_value": {n: (lays[n].pad_value if lays[n].pad_value is not None else lays[n].zero_point)
                            for n in qg.inputs},
        "layers": layers,
        "tensors": [lays[op.out].desc(op.out).to_json() for op in qg.ops] if keep_intermediates else [],
        "stats": {
            "instructions": len(P.ops), "by_opcode": counts, "qreg_loads": P.qregs.loads,
            "tokens": len(P.pairs),
            "ddr_footprint": plan.footprint, "activation_bytes": act_bytes,
            "activation_buffers": len(plan.buffers), "const_bytes": len(blob), "code_bytes": len(code),
            "ddr_load_bytes": int(sum(P.nbytes_in)), "ddr_store_bytes": int(sum(P.nbytes_out)),
            "compulsory_load_bytes": int(comp_load), "compulsory_store_bytes": int(comp_store),
            "compile_seconds": round(time.perf_counter() - t0, 3),
        },
    }
    return TpuBinary(cfg.hash_bytes(), code_addr, code, [(caddr, bytes(blob))] if blob else [],
                     plan.fills, inputs, outputs, meta)
