"""The graph optimizer: the passes run between import and lowering, in order.

Each pass is a function ``(graph, ctx) -> graph``; adding one is adding a line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..boards import Board
from .ir import Graph


@dataclass
class PassContext:
    board: Board | None = None


PASSES: list = []


def optimize(graph: Graph, ctx: PassContext) -> Graph:
    for run in PASSES:
        graph = run(graph, ctx)
    return graph
