"""tpucompile back end: QGraph -> .tpubin (layout, memplan, tiling, emit, compile)."""
from tpucompile.backend.compile import compile_qgraph

__all__ = ["compile_qgraph"]
