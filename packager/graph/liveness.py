"""Lifetimes of the graph's intermediate tensors, and which nodes may work in place.

Steps are node indices in execution order (``graph.nodes``). An intermediate tensor (the
output of a node that is not a model output) is alive from the step that writes it to
the last step that reads it (its own step when nothing reads it). Model inputs, weights
and model outputs have storage of their own and are not tracked here.
"""

from __future__ import annotations

from .ir import Graph
from .patterns import pattern_of

INPLACE_PATTERNS = ("elementwise", "broadcast")


def intermediates(graph: Graph) -> list[str]:
    """Tensors that live in the arena, in the order they are written."""
    outputs = set(graph.outputs)
    return [name for node in graph.nodes for name in node.outputs if name not in outputs]


def lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    """Intermediate tensor -> (first step, last step), both inclusive."""
    live = {}
    for step, node in enumerate(graph.nodes):
        for name in node.outputs:
            live[name] = (step, step)
    for step, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name in live:
                live[name] = (live[name][0], max(live[name][1], step))
    return {name: live[name] for name in intermediates(graph)}


def inplace_pairs(graph: Graph, live: dict[str, tuple[int, int]]) -> dict[int, list]:
    """Node index -> [(output position, input position)] that may share a buffer.

    An elementwise or broadcast kernel reads each input element at most once, at the
    index it writes (for an input of the output's own shape and dtype), before writing
    it; so when that input dies at this node, the output can overwrite it. The input
    must appear once among the node's inputs: a kernel whose output aliases two of its
    arguments is beyond what the runtime accepts.
    """
    pairs: dict[int, list] = {}
    for step, node in enumerate(graph.nodes):
        if pattern_of(node) not in INPLACE_PATTERNS:
            continue
        taken: set[int] = set()
        for o, out in enumerate(node.outputs):
            if out not in live:
                continue
            i = _dying_input(graph, node, step, out, live, taken)
            if i is not None:
                taken.add(i)
                pairs.setdefault(step, []).append((o, i))
    return pairs


def _dying_input(graph, node, step, out, live, taken) -> int | None:
    want = graph.values[out]
    for i, name in enumerate(node.inputs):
        v = graph.values[name]
        if (
            i not in taken
            and name in live
            and live[name][1] == step
            and node.inputs.count(name) == 1
            and tuple(v.shape) == tuple(want.shape)
            and v.dtype == want.dtype
        ):
            return i
    return None
