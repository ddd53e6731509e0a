"""Pad (ONNX Pad, mode constant): folded on constants; on an activation when a Conv reads it and
it pads H and W only, with 0: the Conv reads the Pad's input with the pads added to its own
(``absorbed_pads``, used by conv.py's canonicalize), which is exact: a Conv's padding is real 0
(the input zero point on int8). Torch's ``F.pad`` before a conv and TensorFlow exports' explicit
``Pad`` -> ``Conv`` (padding VALID) become one padded Conv, no data moves. A Pad left over
(another consumer, another value, mode or axis) has no int8 mapping and is refused by name.
"""
from __future__ import annotations

import numpy as np

from tpucompile.ops.common import bad_attr
from tpucompile.ops.registry import OpDef, refusal
from tpusim.arch.errors import CompileError

__all__ = ["OPS", "absorbed_pads"]


def _import(node, a: dict, opset: int) -> dict:
    out = {}
    for k, v in a.items():
        if k == "mode":
            mode = v.decode() if isinstance(v, bytes) else v
            if mode != "constant":
                raise bad_attr(node, "mode", mode, "unsupported (only constant)")
        elif k in ("pads", "paddings") and opset < 11:
            out["pads"] = tuple(int(p) for p in v)
        elif k == "value" and opset < 11:
            out["value"] = float(v)
        else:
            raise bad_attr(node, k, v, "is not supported")
    return out


def _pads_value(graph, node):
    """(pads [begin..., end...], value) of ``node`` from its attributes (opset < 11) or constant
    inputs; None if they are not constants (or an ``axes`` input is given)."""
    if "pads" in node.attrs:
        return list(node.attrs["pads"]), float(node.attrs.get("value", 0.0))
    if len(node.inputs) > 3 and node.inputs[3]:
        return None
    pads = graph.const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
    if pads is None:
        return None
    val = 0.0
    if len(node.inputs) > 2 and node.inputs[2]:
        c = graph.const(node.inputs[2])
        if c is None:
            return None
        val = float(np.asarray(c).reshape(-1)[0]) if np.asarray(c).size else 0.0
    return [int(p) for p in np.asarray(pads).reshape(-1)], val


def _fold(node, x, *rest):
    if "pads" in node.attrs:
        pads, val = list(node.attrs["pads"]), float(node.attrs.get("value", 0.0))
    else:
        pads = [int(p) for p in np.asarray(rest[0]).reshape(-1)]
        val = float(np.asarray(rest[1]).reshape(-1)[0]) if len(rest) > 1 and np.asarray(rest[1]).size else 0.0
    n = x.ndim
    if len(pads) != 2 * n or min(pads) < 0:
        raise CompileError(f"node {node.name!r} (Pad): pads {pads} for a {n}-D constant (2 x {n} values >= 0)")
    return np.pad(x, [(pads[i], pads[i + n]) for i in range(n)], constant_values=val)


def absorbed_pads(graph, producers, name: str):
    """(source tensor, (top, left, bottom, right)) if ``name`` is the output of a Pad of a 4-D
    (N, C, H, W) tensor with constant non-negative pads on H and W only and value 0; None
    otherwise."""
    p = producers.get(name)
    if p is None or p.op != "Pad":
        return None
    pv = _pads_value(graph, p)
    if pv is None:
        return None
    pads, val = pv
    if val != 0.0 or len(pads) != 8 or min(pads) < 0 or any(pads[i] for i in (0, 1, 4, 5)):
        return None
    return p.inputs[0], (pads[2], pads[3], pads[6], pads[7])


@refusal
def _refuse(q, node) -> None:
    """A Pad the passes left: CompileError saying why it was not absorbed."""
    pv = _pads_value(q.g, node)
    readers = sorted({n.op for n in q.g.nodes if node.outputs[0] in n.inputs}) or ["the graph output"]
    if pv is None:
        why = "its pads are not constants"
    elif pv[1] != 0.0:
        why = f"it pads with {pv[1]:g}, not 0"
    elif len(pv[0]) != 8 or min(pv[0]) < 0 or any(pv[0][i] for i in (0, 1, 4, 5)):
        why = f"pads {pv[0]} are not non-negative pads of H and W only"
    else:
        why = f"it is read by {', '.join(readers)}, not by a Conv alone"
    raise CompileError(f"node {node.name!r} (Pad): not absorbed into a Conv's padding ({why}); only a Pad "
                       "of zeros on H and W that Convs read is supported")


OPS = (OpDef("Pad", import_node=_import, fold=_fold, quantize=_refuse),)
