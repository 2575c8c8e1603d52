"""Whether a blocked region pays for its layout transforms.

A region is a set of nodes joined by blocked values: the blocked convs and the ops that
follow them, with the layout_transform nodes at its edges. A transform moves each
element once (a strided copy); a conv does (input channels per group) * KH * KW
multiply-adds per output element. A region whose convs do little arithmetic for the
data its transforms move (a lone depthwise or narrow 1x1 conv between NCHW-only ops,
as in ShuffleNet's channel shuffles) is faster left in NCHW.
"""

from __future__ import annotations

import math

from ..ir import Graph

MIN_MACS_PER_MOVED = 16


def poor_regions(graph: Graph, blocked_values: set[str]) -> list[list[str]]:
    """Output names of the convs of each region below MIN_MACS_PER_MOVED."""
    parent: dict[str, str] = {}
    touched = [[v for v in (*n.inputs, *n.outputs) if v in blocked_values] for n in graph.nodes]
    for values in touched:
        for v in values[1:]:
            parent[_root(parent, v)] = _root(parent, values[0])
    regions: dict[str, dict] = {}
    for node, values in zip(graph.nodes, touched, strict=True):
        if not values:
            continue
        r = regions.setdefault(_root(parent, values[0]), {"convs": [], "macs": 0, "moved": 0})
        size = math.prod(graph.values[node.outputs[0]].shape)
        if node.op == "layout_transform":
            r["moved"] += size
        elif node.op == "conv2d_nchwc":
            r["convs"].append(node.outputs[0])
            r["macs"] += size * math.prod(graph.values[node.inputs[1]].shape[1:5])
    return [
        r["convs"]
        for r in regions.values()
        if r["moved"] and r["macs"] < MIN_MACS_PER_MOVED * r["moved"]
    ]


def _root(parent: dict[str, str], v: str) -> str:
    while parent.get(v, v) != v:
        v = parent[v]
    return v
