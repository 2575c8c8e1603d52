"""The static memory plan: where each entry of the graph lives at run time.

Model inputs, weights and outputs get storage of their own; every other tensor lives in
one arena at a fixed offset. This plan gives each intermediate its own slot; sharing
slots between tensors whose lifetimes do not overlap is a graph pass of its own.
"""

from __future__ import annotations

from .ir import Graph, Node

ALIGN = 64


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(graph: Graph, entries: list[str], nodes: list[Node]):
    """(storage list, storage id per entry, arena bytes) for entries in entry order."""
    storage: list[dict] = []
    ids: list[int] = []
    outputs = set(graph.outputs)
    inputs = set(graph.inputs)
    arena = 0
    for name in entries:
        v = graph.values[name]
        if name in inputs:
            storage.append({"kind": "input", "bytes": v.nbytes})
        elif v.is_const:
            storage.append({"kind": "param", "bytes": v.nbytes, "param": name})
        elif name in outputs:
            storage.append({"kind": "output", "bytes": v.nbytes})
        else:
            storage.append({"kind": "arena", "bytes": v.nbytes, "offset": arena})
            arena += align(v.nbytes)
        ids.append(len(storage) - 1)
    return storage, ids, arena
