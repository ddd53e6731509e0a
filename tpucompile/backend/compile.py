"""compile_qgraph: QGraph + HwConfig -> TpuBinary: the pass pipeline (backend/pipeline.py), then
assembly (encoding, code placement, IO descriptors, meta)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Union

import numpy as np

from tpucompile.backend.memplan import place_code
from tpucompile.backend.pipeline import PASSES, BackendOptions, CheckedProgram, DeviceGraph
from tpucompile.qgraph import QGraph
from tpucompile.stages import IrDumps, run_pipeline
from tpusim.arch.binary import TpuBinary
from tpusim.arch.config import HwConfig
from tpusim.arch.isa import INSTR_BYTES, encode_program

__all__ = ["compile_qgraph", "assemble", "true_compulsory"]


def compile_qgraph(qg: QGraph, cfg: HwConfig, *, im2col: bool = True, model_name: str = "",
                   keep_intermediates: bool = False,
                   dump_ir: Optional[Union[str, Path, IrDumps]] = None) -> TpuBinary:
    """Compile a validated QGraph for ``cfg``. CompileError (naming the node) if it cannot.

    im2col: let the host im2col the image of a first conv with few input channels (see
    ops/conv.py); the binary's meta["input_transforms"] then says so.
    keep_intermediates: give every layer output its own DDR buffer (no reuse) and describe each
    one in meta["tensors"] (TensorDesc JSON), so a run can be compared layer by layer.
    dump_ir: a directory (or the IrDumps of the whole compile) for ``NN_<stage>.txt`` after
    every back-end pass.
    """
    t0 = time.perf_counter()
    qg.validate()
    start = DeviceGraph(qg, cfg, BackendOptions(im2col=im2col, keep_intermediates=keep_intermediates))
    binary = assemble(run_pipeline(PASSES, start, IrDumps.open(dump_ir)), model_name, t0)
    binary.meta["stats"]["true_compulsory"] = true_compulsory(qg, binary.meta["layers"], cfg)
    for L, nbytes in zip(binary.meta["layers"], layer_compulsory_bytes(qg, binary.meta["layers"])):
        if nbytes is not None:
            L["compulsory_bytes"] = nbytes
    return binary


def layer_compulsory_bytes(qg: QGraph, layers: list) -> list:
    """Per layer of ``meta["layers"]`` the DDR bytes no schedule of it can avoid (None for a view,
    which moves nothing), in unpadded int8 bytes of the graph as given (``true_compulsory``'s
    terms, one layer at a time): its constants once (``QOp.constant_bytes``), the part of each
    tensor it reads from outside itself that it needs (``QOp.needed_bytes``) once, its output
    once. A fused layer (``L["fused"]``: a Conv with its residual Add or pool) is its ops
    together: the tensor one of them hands the other never reaches DDR and does not count (so the
    layers' sum can be below ``true_compulsory``'s ``total``, which counts the pair as two layers). The profiler's per-layer memory floor (tpusim.flow.profile)."""
    by_name = {op.name: op for op in qg.ops}
    out = []
    for L in layers:
        ops = [by_name[n] for n in L.get("fused", [L["name"]]) if n in by_name]
        if L["instr_end"] <= L["instr_begin"] or not ops:
            out.append(None)
            continue
        made = {qg.resolve(op.out) for op in ops}
        read = {}                          # tensor read from outside the layer -> bytes it needs of it
        for op in ops:
            for t in map(qg.resolve, op.inputs):
                if t not in made and t in qg.tensors:
                    read[t] = max(read.get(t, 0), op.needed_bytes(t, qg))
        inner = {qg.resolve(t) for op in ops for t in op.inputs} & made
        out.append(sum(op.constant_bytes() for op in ops) + sum(read.values())
                   + sum(qg.tensors[t].size_bytes for t in made - inner if t in qg.tensors))
    return out


def true_compulsory(qg: QGraph, layers: list, cfg: HwConfig) -> dict:
    """The DDR traffic no schedule can avoid, in unpadded int8 bytes of the graph as given (before
    host transforms and channel padding): every weight once, each graph input once, each
    layer's output written once and read once by each layer that reads it (layers that move
    data: views move nothing; a fused Conv and Add, ``meta["layers"][i]["fused"]``, count as the
    two layers they were). The physical floor, computed here only (the verdict and bench read
    it): ``floor_compute_cycles`` = round(MACs / PEs), ``floor_ddr_cycles`` = round(``total`` /
    ``ddr_bytes_per_cycle``), the DDR's peak bytes per core cycle (beat bytes x DDR MHz / core
    MHz), ``floor_cycles`` = their max. Keys: ``weights``, ``input``, ``writes``, ``reads``,
    ``total`` (bytes), ``floor_compute_cycles``, ``floor_ddr_cycles``, ``floor_cycles`` (core
    cycles), ``ddr_bytes_per_cycle`` (float)."""
    size = {n: t.size_bytes for n, t in qg.tensors.items()}
    moving = {n for L in layers if L["instr_end"] > L["instr_begin"] for n in [L["name"], *L.get("fused", ())]}
    ops = [op for op in qg.ops if op.name in moving]
    out = {"weights": sum(int(op.weight.size) for op in qg.ops if isinstance(getattr(op, "weight", None), np.ndarray)),
           "input": sum(size[n] for n in qg.inputs),
           "writes": sum(size[op.out] for op in ops),
           "reads": sum(size[qg.resolve(t)] for op in ops for t in dict.fromkeys(op.inputs) if qg.resolve(t) in size)}
    out["total"] = out["weights"] + out["input"] + out["writes"] + out["reads"]
    peak = cfg.ddr_peak_bytes_per_cycle
    macs = sum(int(L.get("macs", 0)) for L in layers)
    out["floor_compute_cycles"] = int(round(macs / cfg.pes))
    out["floor_ddr_cycles"] = int(round(out["total"] / peak))
    out["floor_cycles"] = max(out["floor_compute_cycles"], out["floor_ddr_cycles"])
    out["ddr_bytes_per_cycle"] = peak
    return out


def assemble(cp: CheckedProgram, model_name: str, t0: float) -> TpuBinary:
    """The binary of a checked program: code encoded and placed after the constants, IO
    descriptors of the graph inputs and outputs, meta (layers, host ops, transforms, stats;
    compile_seconds counted from ``t0``, a time.perf_counter())."""
    em = cp.emitted
    mp = em.tiled.mem
    lp = mp.layout
    dg, qg, cfg, lays, plan, P = lp.graph, lp.qg, lp.cfg, lp.tensors, mp.ddr, em.program
    layers, blob, transforms = em.layers, mp.blob, dg.transforms
    keep_intermediates = dg.options.keep_intermediates
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
    moving = [op for op, L in zip(qg.ops, layers) if L["instr_end"] > L["instr_begin"]]   # views move nothing
    comp_load = len(blob) + sum(interior(t) for op in moving for t in op.inputs)
    comp_store = sum(interior(op.out) for op in moving)
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
    return TpuBinary(cfg.hash_bytes(), code_addr, code, [(plan.const_addr, bytes(blob))] if blob else [],
                     plan.fills, inputs, outputs, meta)
