"""tpucompile back end: QGraph -> .tpubin, a pass pipeline (host_transforms, layout, memplan,
tiling, emission, token_check; backend/pipeline.py) then assembly (``compile.compile_qgraph``).

The modules here are also the kit the op modules' lowering hooks use (layout.py: DDR formats,
tiling.py: tile searches, emit.py: Program); the pipeline imports the op table. This package
file imports nothing, so an op module can import the kit without importing the pipeline.
"""
