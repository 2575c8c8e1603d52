"""Choosing each conv's algorithm: direct, or Winograd F(2x2, 3x3) / F(4x4, 3x3).

A blocked 3x3 stride-1 conv (``conv2d_nchwc``, alone or anchoring a fused group) can
instead run as ``conv2d_winograd_nchwc`` on filters transformed at package time. Which
is faster depends on the shape and the board, and Winograd's results differ from the
direct sum by rounding (about 1e-4 of the output's scale for F(4x4)), so it is never a
silent default: each variant is a kernel of its own (its own kernel key, hence its own
tuning task), and a build uses a Winograd variant where the tuning records measured it
faster than every other variant of the same conv, or where the caller forces it.

``variants(node, graph)`` gives the rewritten nodes (and the transformed filters) the
tuner extracts as tasks; ``choose(graph, plan, pick)`` rewrites a planned graph by a
``pick`` policy. Only constants change: activations, their shapes and the memory plan
stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..ops.conv_winograd import TILES, transform_weight
from .ir import Graph, Node, Value

DIRECT = "direct"
ALGORITHMS = (DIRECT, *(f"winograd_{m}" for m in TILES))


@dataclass
class Variant:
    algorithm: str
    node: Node
    weight: Value  # the transformed filters the node reads


def _inner_conv(node: Node) -> dict | None:
    """The conv2d_nchwc a node is or anchors (its inner node dict for a fused node)."""
    if node.op == "conv2d_nchwc":
        return {"op": node.op, "attrs": node.attrs, "inputs": node.inputs}
    if node.op == "fused":
        for inner in node.attrs["nodes"]:
            if inner["op"] == "conv2d_nchwc":
                return inner
    return None


def eligible(node: Node, graph: Graph) -> bool:
    """A blocked, ungrouped 3x3 stride-1 undilated conv with constant filters."""
    conv = _inner_conv(node)
    if conv is None or len(conv["inputs"]) < 2:
        return False
    a = conv["attrs"]
    x, w = (graph.values.get(i) for i in conv["inputs"][:2])
    if x is None or w is None or not w.is_const or len(x.shape) != 5 or len(w.shape) != 6:
        return False
    return (
        int(a.get("groups", 1)) == 1
        and list(a.get("strides") or [1, 1]) == [1, 1]
        and list(a.get("dilations") or [1, 1]) == [1, 1]
        and tuple(w.shape[2:4]) == (3, 3)
        and w.shape[4] == x.shape[4] == w.shape[5]
        and x.dtype == w.dtype == "float32"
    )


def _unpack(w: np.ndarray) -> np.ndarray:
    """Packed filters (OC/y, C/x, 3, 3, x, y) -> (OC, C, 3, 3)."""
    ob, cb, kh, kw, x, y = w.shape
    return w.transpose(0, 5, 1, 4, 2, 3).reshape(ob * y, cb * x, kh, kw)


def variants(node: Node, graph: Graph) -> list[Variant]:
    """The Winograd forms of an eligible conv node (none for any other node)."""
    if not eligible(node, graph):
        return []
    conv = _inner_conv(node)
    w = graph.values[conv["inputs"][1]]
    block = w.shape[5]
    out = []
    for m in TILES:
        data = transform_weight(_unpack(w.data), m, block)
        u = Value(f"{w.name}__winograd{m}", tuple(data.shape), w.dtype, data)
        attrs = {"pads": list(conv["attrs"].get("pads") or [0, 0, 0, 0]), "tile": m}
        inputs = [conv["inputs"][0], u.name, *conv["inputs"][2:]]
        new_inner = {**conv, "op": "conv2d_winograd_nchwc", "attrs": attrs, "inputs": inputs}
        if node.op == "fused":
            inner = [new_inner if n is conv else n for n in node.attrs["nodes"]]
            outer = [u.name if i == w.name else i for i in node.inputs]
            new = replace(node, inputs=outer, attrs={**node.attrs, "nodes": inner})
        else:
            new = replace(node, op="conv2d_winograd_nchwc", inputs=inputs, attrs=attrs)
        out.append(Variant(f"winograd_{m}", new, u))
    return out


# pick(node index, node, [(algorithm, node, graph-with-it)]) -> the algorithm to use
Pick = Callable[[int, Node, list], str]


def choose(graph: Graph, pick: Pick) -> Graph:
    """``graph`` with every eligible conv in the algorithm ``pick`` names."""
    values = dict(graph.values)
    nodes = list(graph.nodes)
    for k, node in enumerate(graph.nodes):
        options = variants(node, graph)
        if not options:
            continue
        trial = [(DIRECT, node, graph)]
        for v in options:
            g = replace(graph, values={**graph.values, v.weight.name: v.weight})
            trial.append((v.algorithm, v.node, g))
        algorithm = pick(k, node, trial)
        for v in options:
            if v.algorithm == algorithm:
                nodes[k] = v.node
                values[v.weight.name] = v.weight
    return replace(graph, nodes=nodes, values=values)


def forced(algorithm: str) -> Pick:
    """A policy using ``algorithm`` wherever it applies (benchmarks, tests, --conv-algorithm)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown conv algorithm {algorithm!r}: one of {', '.join(ALGORITHMS)}")
    return lambda k, node, trial: algorithm
