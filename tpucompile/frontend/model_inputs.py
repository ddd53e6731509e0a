"""The run-time inputs of an ONNX model (below the importer and the model rewrites that use it)."""
from __future__ import annotations

import onnx

__all__ = ["runtime_inputs"]


def runtime_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs fed at run time (ValueInfoProto): those that are not initializers. IR-3
    models (4 of the 9 in the onnx wheel) also list every weight among the graph inputs."""
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]
