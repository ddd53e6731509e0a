"""Run the passes in order, verifying the IR after each and optionally dumping it.

Order: constant_fold, fold_batchnorm, canonicalize, fuse_relu. With ``dump_dir``, writes
``00_import.mlir`` and ``NN_<pass>.mlir`` after each pass.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from tpucompile.ir import Graph, dump, verify
from tpucompile.passes import canonicalize, constant_fold, fold_batchnorm, fuse_relu

PASSES = (constant_fold, fold_batchnorm, canonicalize, fuse_relu)


def run_passes(graph: Graph, dump_dir: Optional[Union[str, Path]] = None) -> Graph:
    """Apply every pass of PASSES; raise CompileError if the IR fails verification after one."""
    if dump_dir is not None:
        dump_dir = Path(dump_dir)
        dump_dir.mkdir(parents=True, exist_ok=True)
        (dump_dir / "00_import.mlir").write_text(dump(graph))
    verify(graph)
    for i, p in enumerate(PASSES, 1):
        graph = p.run(graph)
        verify(graph)
        if dump_dir is not None:
            (dump_dir / f"{i:02d}_{p.NAME}.mlir").write_text(dump(graph))
    return graph
