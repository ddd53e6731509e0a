"""tpucompile back end: QGraph -> .tpubin (layout, memplan, tiling, emit, compile)."""
from tpucompile.backend.compile import compile_qgraph
from tpucompile.backend.layout import host_input_transform

__all__ = ["compile_qgraph", "host_input_transform"]
