"""A host tail: the nodes at the end of a graph that have no device mapping (a detector's box
decoding: Reshape / Transpose into 5-D, Sigmoid, grid arithmetic, Concat of the scales) run on
the host after the device, in float32 by onnxruntime, like a classifier's final Softmax (what
TPU-MLIR and other NPU compilers call a CPU fallback at the end of the network).

``OnnxTail`` host op (a ``QGraph.host_ops`` dict): ``inputs`` the ONNX names of the device
tensors the tail reads (they become device outputs; ``inp`` the first), ``shapes`` their ONNX
shapes, ``outputs`` the graph outputs it computes (``out`` the first), ``nodes`` its node count
by op type, ``model`` the tail as an ONNX model (``onnx.utils.Extractor`` of the source model
between those tensors and the graph outputs), base64. ``quantize.quantize_graph`` makes one when
every refused node's successors are refused too (nothing on the device reads them) and the tail
holds at most ``MAX_TAIL_WEIGHT_SHARE`` of the model's constant values or ``MAX_TAIL_CONSTANTS``
(anchor grids, a small table): a real layer refused in the middle or at the end (a Conv, a large
MatMul) is still an error naming it, not hidden on the host. The verdict lists the host tail's
ops; accuracy is compared on the device tensors it reads.
"""
from __future__ import annotations

import base64

import numpy as np
import onnx
import onnxruntime as ort
from onnx import utils

from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "MAX_TAIL_WEIGHT_SHARE", "MAX_TAIL_CONSTANTS", "tail_host_op", "HoldsWeights"]


class HoldsWeights(CompileError):
    """The would-be tail holds layers (more than MAX_TAIL_WEIGHT_SHARE of the weights): the
    compiler reports the refused nodes as they are."""

#: a host tail may hold at most this share of the model's constant values (weights), or this many
MAX_TAIL_WEIGHT_SHARE = 0.01
MAX_TAIL_CONSTANTS = 65536


def _constant_values(model: onnx.ModelProto, nodes) -> int:
    inits = {i.name: int(np.prod(i.dims, dtype=np.int64)) for i in model.graph.initializer}
    return sum(inits.get(i, 0) for n in nodes for i in set(n.input))


def tail_host_op(model: onnx.ModelProto, inputs: list, outputs: list) -> dict:
    """The OnnxTail host op computing ONNX tensors ``outputs`` from ``inputs`` (module
    docstring); CompileError saying why when the tail is not one (it holds weights, or onnx
    cannot cut it there)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)   # the extractor needs every shape
        sub = utils.Extractor(inferred).extract_model(list(inputs), list(outputs))
    except Exception as e:  # the extractor's ValueError / KeyError on a cut it cannot make
        raise CompileError(f"the nodes without a device mapping cannot be cut off as a host tail between "
                           f"{list(inputs)} and {list(outputs)}: {str(e).splitlines()[0][:200]}") from None
    total = max(_constant_values(model, model.graph.node), 1)
    held = _constant_values(model, sub.graph.node)
    if held > max(MAX_TAIL_WEIGHT_SHARE * total, MAX_TAIL_CONSTANTS):
        raise HoldsWeights(f"the nodes without a device mapping hold {held:,} of the model's {total:,} constant "
                           f"values ({held / total:.1%}): layers, not post-processing, so they are not run on the host")
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in sub.graph.input}
    counts: dict = {}
    for n in sub.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return {"op": "OnnxTail", "inp": inputs[0], "out": outputs[0], "inputs": list(inputs),
            "shapes": [shapes[i] for i in inputs], "outputs": list(outputs), "nodes": counts,
            "model": base64.b64encode(sub.SerializeToString()).decode("ascii")}


def _host(h: dict, *xs: np.ndarray) -> dict:
    """Run the tail on the dequantized device tensors (in its inputs' ONNX shapes): {output: array}."""
    sess = ort.InferenceSession(base64.b64decode(h["model"]), providers=["CPUExecutionProvider"])
    outs = sess.run(list(h["outputs"]), {n: np.asarray(x, np.float32) for n, x in zip(h["inputs"], xs)})
    return dict(zip(h["outputs"], outs))


@refusal
def _not_in_the_ir(q, node) -> None:
    raise CompileError(f"internal: node {node.name!r}: OnnxTail is a host op, never an IR node")


OPS = (OpDef("OnnxTail", quantize=_not_in_the_ir, calibrated=False, host=_host),)   # made by quantize.quantize_graph
