"""The run-time inputs of an ONNX model and its shape inference without the weights (below the
importer and the model rewrites that use them)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, shape_inference

from tpusim.arch.errors import CompileError

__all__ = ["runtime_inputs", "without_big_weights", "inferred_shapes", "static_shape", "BIG_WEIGHT_ELEMENTS"]


def runtime_inputs(model: onnx.ModelProto) -> list:
    """The graph inputs fed at run time (ValueInfoProto): those that are not initializers. IR-3
    models (4 of the 9 in the onnx wheel) also list every weight among the graph inputs."""
    inits = {i.name for i in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


#: initializers of more elements than this leave the model the checker and shape inference see
#: (shapes that depend on values -- Reshape shapes, axes, pads -- come from small ones)
BIG_WEIGHT_ELEMENTS = 4096


def without_big_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose float initializers of more than BIG_WEIGHT_ELEMENTS elements are
    typed graph inputs of the same name, dtype and shape (vgg19: 548 MB that onnx.checker and
    shape inference would otherwise serialize three times)."""
    c = onnx.ModelProto()
    g = model.graph
    big = [i for i in g.initializer if i.data_type == onnx.TensorProto.FLOAT and int(np.prod(i.dims, dtype=np.int64)) > BIG_WEIGHT_ELEMENTS]
    if not big:
        c.CopyFrom(model)
        return c
    names = {i.name for i in big}
    keep = [i for i in g.initializer if i.name not in names]
    c.CopyFrom(onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import,
                               producer_name=model.producer_name, domain=model.domain,
                               model_version=model.model_version))
    c.graph.name = g.name
    c.graph.node.extend(g.node)
    c.graph.initializer.extend(keep)
    c.graph.input.extend(g.input)
    listed = {vi.name for vi in g.input}
    c.graph.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                         for i in big if i.name not in listed)
    c.graph.output.extend(g.output)
    c.graph.value_info.extend(g.value_info)
    c.functions.extend(model.functions)
    return c


def inferred_shapes(model: onnx.ModelProto, **options) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, **options)`` run on ``without_big_weights(model)``
    (the weights are neither copied nor serialized: BERT-base 440 MB, about 2 s a call), with the
    graph inputs that copy adds for the weights removed again: its ``graph.input``,
    ``graph.value_info`` and ``graph.output`` are those of inference on ``model`` itself (a big
    float initializer's shape comes from its dims either way; shapes that depend on values come
    from small initializers, which stay). Its ``graph.initializer`` lacks the big weights: read
    them from ``model``. Raises what infer_shapes raises (InferenceError)."""
    light = without_big_weights(model)
    inferred = shape_inference.infer_shapes(light, **options)
    n_inputs = len(model.graph.input)
    if len(inferred.graph.input) > n_inputs:
        del inferred.graph.input[n_inputs:]
    return inferred


def static_shape(vi, name: str) -> tuple:
    """The static shape of value info ``vi`` (tensor ``name``); CompileError naming the tensor for a
    missing shape or a dynamic / unknown dimension (a ``dim_param`` such as an exporter's
    ``sequence``)."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        raise CompileError(f"tensor {name!r} has no static shape (shape inference failed)")
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            raise CompileError(f"tensor {name!r} has a dynamic/unknown dimension "
                               f"({d.dim_param or '?'}); only static shapes are supported")
        dims.append(int(d.dim_value))
    return tuple(dims)
