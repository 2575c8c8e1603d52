"""The static memory plan: where each value of the graph lives at run time.

Model inputs, weights and model outputs get storage of their own (kinds ``input``,
``param``, ``output``). Every other tensor lives in one arena:

1. liveness (graph/liveness.py): each intermediate is alive from the node that writes
   it to the last node that reads it, steps being node indices in execution order;
2. in place: an elementwise/broadcast node whose input of the output's shape and dtype
   dies at that node writes its output over that input. The two tensors form one
   *buffer* (chains of such nodes form one buffer), recorded in ``plan.inplace`` so the
   kernel is generated without ``restrict`` on that pair and graph.json says so;
3. placement (graph/arena.py): each buffer gets an offset in the arena, buffers whose
   lifetimes intersect never sharing a byte (greedy by size with best-fit gaps).

Each buffer is one ``arena`` storage of graph.json: the tensors of an in-place chain
share its storage id (exactly aliased: same offset); different storages may cover the
same bytes when their lifetimes are disjoint, which the runtime checks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .arena import Block, live_lower_bound, place
from .ir import Graph
from .liveness import inplace_pairs, lifetimes

ALIGN = 64


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass
class MemoryPlan:
    """storage: graph.json's storage list; storage_of: value name -> storage id;
    inplace: node index -> [(output position, input position)] pairs that share storage
    (the kernel for such a node must not assume those buffers are distinct);
    lifetimes: arena tensor -> (first step, last step); the byte totals are for
    reports (manifest stats, ``packager inspect --plan``)."""

    storage: list[dict]
    storage_of: dict[str, int]
    arena_bytes: int
    inplace: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    lifetimes: dict[str, tuple[int, int]] = field(default_factory=dict)
    no_reuse_bytes: int = 0  # every arena tensor in a slot of its own
    live_lower_bound_bytes: int = 0  # most bytes of buffers alive at one step


def plan_memory(graph: Graph) -> MemoryPlan:
    live = lifetimes(graph)
    pairs = inplace_pairs(graph, live)
    buffers = _buffers(graph, live, pairs)
    blocks = [_block(graph, live, names) for names in buffers]
    offsets, arena = place(blocks)
    storage, storage_of = _io_storage(graph)
    for names, offset in zip(buffers, offsets, strict=True):
        for name in names:
            storage_of[name] = len(storage)
        storage.append({"kind": "arena", "bytes": _nbytes(graph, names), "offset": offset})
    _order_storage(graph, storage, storage_of)
    return MemoryPlan(
        storage,
        storage_of,
        arena,
        pairs,
        live,
        sum(align(graph.values[n].nbytes) for n in live),
        live_lower_bound(blocks),
    )


def _io_storage(graph: Graph) -> tuple[list[dict], dict[str, int]]:
    """Storages of model inputs, weights and model outputs (one each)."""
    storage: list[dict] = []
    storage_of: dict[str, int] = {}
    for name in graph.inputs:
        storage_of[name] = len(storage)
        storage.append({"kind": "input", "bytes": graph.values[name].nbytes})
    for v in graph.consts():
        storage_of[v.name] = len(storage)
        storage.append({"kind": "param", "bytes": v.nbytes, "param": v.name})
    produced = {name for node in graph.nodes for name in node.outputs}
    for name in graph.outputs:
        if name in produced and name not in storage_of:
            storage_of[name] = len(storage)
            storage.append({"kind": "output", "bytes": graph.values[name].nbytes})
    return storage, storage_of


def _buffers(graph: Graph, live, pairs) -> list[list[str]]:
    """Arena tensors grouped into buffers (in-place chains), in the order written."""
    buffer_of: dict[str, list[str]] = {}
    buffers: list[list[str]] = []
    for step, node in enumerate(graph.nodes):
        shared = {o: node.inputs[i] for o, i in pairs.get(step, ())}
        for o, name in enumerate(node.outputs):
            if name not in live:
                continue
            if o in shared:
                buf = buffer_of[shared[o]]
                buf.append(name)
            else:
                buf = [name]
                buffers.append(buf)
            buffer_of[name] = buf
    return buffers


def _nbytes(graph: Graph, names: list[str]) -> int:
    return max(graph.values[n].nbytes for n in names)


def _block(graph: Graph, live, names: list[str]) -> Block:
    return Block(align(_nbytes(graph, names)), live[names[0]][0], live[names[-1]][1])


def _order_storage(graph: Graph, storage: list[dict], storage_of: dict[str, int]) -> None:
    """Renumber storages in the order graph.json's entries first use them (inputs,
    params, then node outputs): ids read in entry order, whatever the planner did."""
    order: list[int] = []
    seen: set[int] = set()
    names = list(graph.inputs) + [v.name for v in graph.consts()]
    names += [n for node in graph.nodes for n in node.outputs]
    for name in names:
        sid = storage_of[name]
        if sid not in seen:
            seen.add(sid)
            order.append(sid)
    new_id = {old: new for new, old in enumerate(order)}
    storage[:] = [storage[old] for old in order]
    for name, sid in storage_of.items():
        storage_of[name] = new_id[sid]
