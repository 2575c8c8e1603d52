"""Dead-node elimination: drop nodes none of whose outputs reach a graph output."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph


def dce(graph: Graph, ctx=None) -> Graph:
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(name in live for name in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    return replace(graph, nodes=kept[::-1])
