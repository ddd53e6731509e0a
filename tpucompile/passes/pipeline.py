"""Run the front-end passes in order, verifying the IR after each and optionally dumping it.

Order: fold_qdq, constant_fold, fuse_elementwise, fold_affine, canonicalize, fuse_relu. With ``dump_dir``, writes
``00_import.mlir`` and ``NN_<pass>.mlir`` after each pass (``tpucompile.stages``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from tpucompile.frontend.onnx_import import grouped_report
from tpucompile.ir import Graph, dump, verify
from tpucompile.passes import canonicalize, constant_fold, fold_affine, fold_qdq, fuse_elementwise, fuse_relu
from tpucompile.stages import IrDumps, Pass, run_pipeline
from tpusim.arch.errors import CompileError

PASSES = (fold_qdq, constant_fold, fuse_elementwise, fold_affine, canonicalize, fuse_relu)


def _ir_pass(name: str, run) -> Pass:
    return Pass(name, run, verify, dump, ext="mlir")


def run_passes(graph: Graph, dump_dir: Optional[Union[str, Path, IrDumps]] = None, host_tail: bool = False) -> Graph:
    """Apply every pass of PASSES; raise CompileError if the IR fails verification after one, or
    naming every node the passes refused (``attrs["refused"]``, all at once) unless ``host_tail``
    (the quantizer may then run them on the host). ``dump_dir``: a directory, or the IrDumps of
    the whole compile."""
    passes = (_ir_pass("import", lambda g: g),) + tuple(_ir_pass(p.NAME, p.run) for p in PASSES)
    g = run_pipeline(passes, graph, IrDumps.open(dump_dir))
    refused = [(n.op, CompileError(n.attrs["refused"])) for n in g.nodes if "refused" in n.attrs]
    if refused and not host_tail:
        raise grouped_report(refused, "are refused by the compiler's passes")
    return g
