"""Who produces and who reads each value of a graph: the lookups the passes share."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .ir import Graph, Value


def producers(graph: Graph) -> dict[str, int]:
    """Value name -> index of the node that writes it."""
    return {name: k for k, node in enumerate(graph.nodes) for name in node.outputs}


def consumers(graph: Graph) -> dict[str, list[int]]:
    """Value name -> indices of the nodes that read it (each node once, in order)."""
    out: dict[str, list[int]] = {}
    for k, node in enumerate(graph.nodes):
        for name in dict.fromkeys(node.inputs):
            out.setdefault(name, []).append(k)
    return out


def use_counts(graph: Graph) -> Counter:
    """Value name -> number of reads, a graph output counting as one."""
    return Counter([i for n in graph.nodes for i in n.inputs] + list(graph.outputs))


def add_const(values: dict[str, Value], array: np.ndarray, hint: str) -> str:
    """A new constant value named after ``hint`` (made unique in ``values``)."""
    name, k = hint, 0
    while name in values:
        k += 1
        name = f"{hint}_{k}"
    arr = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
    dtype = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
    values[name] = Value(name, tuple(arr.shape), dtype, arr)
    return name


def scalar_qparams(values: dict[str, Value], node) -> tuple[float, int] | None:
    """(scale, zero point) of a quantize_linear / dequantize_linear node whose parameters
    are per-tensor constants, None otherwise (the importer gives both ops all three
    inputs, a missing zero point as a constant 0)."""
    s, z = (values[i] for i in node.inputs[1:3])
    if not (s.is_const and z.is_const) or s.data.size != 1 or z.data.size != 1:
        return None
    return float(s.data.reshape(-1)[0]), int(z.data.reshape(-1)[0])
