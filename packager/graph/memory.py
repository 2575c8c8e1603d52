"""The static memory plan: where each value of the graph lives at run time.

Model inputs, weights and outputs get storage of their own; every other tensor lives in
one arena at a fixed offset. This plan gives each intermediate its own slot; sharing
slots between tensors whose lifetimes do not overlap is a graph pass of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ir import Graph

ALIGN = 64


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class MemoryPlan:
    """storage: graph.json's storage list; storage_of: value name -> storage id;
    inplace: node index -> [(output position, input position)] pairs that share storage
    (the kernel for such a node must not assume those buffers are distinct)."""

    storage: list[dict]
    storage_of: dict[str, int]
    arena_bytes: int
    inplace: dict[int, list[tuple[int, int]]] = field(default_factory=dict)


def plan_memory(graph: Graph) -> MemoryPlan:
    storage: list[dict] = []
    storage_of: dict[str, int] = {}
    arena = 0

    def add(name: str, entry: dict) -> None:
        storage_of[name] = len(storage)
        storage.append(entry)

    for name in graph.inputs:
        add(name, {"kind": "input", "bytes": graph.values[name].nbytes})
    for v in graph.consts():
        add(v.name, {"kind": "param", "bytes": v.nbytes, "param": v.name})
    outputs = set(graph.outputs)
    for node in graph.nodes:
        for name in node.outputs:
            nbytes = graph.values[name].nbytes
            if name in outputs:
                add(name, {"kind": "output", "bytes": nbytes})
            else:
                add(name, {"kind": "arena", "bytes": nbytes, "offset": arena})
                arena += align(nbytes)
    return MemoryPlan(storage, storage_of, arena)
