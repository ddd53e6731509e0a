"""tpucompile back end: QGraph -> .tpubin, a pass pipeline (host_transforms, layout, memplan,
tiling, emission, token_check; backend/pipeline.py) then assembly (backend/compile.py).

The modules here are also the kit the op modules' lowering hooks use (layout.py: DDR formats,
tiling.py: tile searches, emit.py: Program). The op modules are imported by the pipeline, so
``compile_qgraph`` is imported on first use, not when an op module imports the kit.
"""

__all__ = ["compile_qgraph"]


def __getattr__(name):
    if name == "compile_qgraph":
        from tpucompile.backend.compile import compile_qgraph
        return compile_qgraph
    raise AttributeError(f"module 'tpucompile.backend' has no attribute {name!r}")
