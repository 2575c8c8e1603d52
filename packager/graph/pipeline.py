"""The graph optimizer: the passes run between import and lowering, in order.

Each pass is a function ``(graph, ctx) -> graph`` registered here under a name; adding
one is adding a line to PASSES. ``ctx.disabled`` switches passes off by name (for
benchmarks that compare with and without a pass, and for debugging).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..boards import Board
from .ir import Graph


@dataclass
class PassContext:
    board: Board | None = None
    disabled: set[str] = field(default_factory=set)


# (name, function) in the order they run.
PASSES: list[tuple[str, object]] = []


def optimize(graph: Graph, ctx: PassContext) -> Graph:
    for name, run in PASSES:
        if name not in ctx.disabled:
            graph = run(graph, ctx)
    return graph
