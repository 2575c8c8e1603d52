"""Operator fusion by pattern kind, grouping along post-dominators (as TVM does).

Each node is visited in graph order and offered to its immediate post-dominator: if
every node between them (and the post-dominator) is of a kind the group may absorb,
the group, the post-dominator and everything between them become one group. Because
the region is everything between a node and a node that all its paths pass, it is
path-closed; a cycle check guards the merge of groups made earlier. Phase 0 settles
the anchors; phase 1 then joins chains of injective ops, so that a convolution
always gets first pick of the elementwise ops after it.

The rules, by the kind of the group being offered:
- out_elemwise_fusable (conv, matmul...) and reduction: absorbs elementwise and
  broadcast ops that keep its output's shape (bias, batch norm, activations, a
  residual add whose other operand comes from elsewhere); a group holds one anchor,
  so a second conv stops at the first one's group.
- elementwise and broadcast: inlined into a consumer that is elementwise, broadcast,
  injective or a reduction (possibly one already in another group).
- injective (phase 1): joins injective, broadcast and elementwise consumers.
- opaque: alone.

A group of several nodes becomes one node of op "fused": its inputs are the values it
reads from outside, its outputs every value read outside it or a graph output; attrs
"pattern" (its kind) and "nodes" (the inner nodes, as dicts, in order). The inner
values keep their entries in graph.values (their shapes), but no storage.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from ..dominators import SINK, post_dominators
from ..ir import Graph, Node
from ..patterns import combine, pattern_of
from ..uses import consumers

MAX_GROUP = 32  # nodes per group: keeps generated kernels readable and compile fast
POINTWISE = ("elementwise", "broadcast")
INLINE_INTO = ("elementwise", "broadcast", "injective", "reduction")
UP_TO_INJECTIVE = ("elementwise", "broadcast", "injective")


def fuse(graph: Graph, ctx=None) -> Graph:
    fuser = _Fuser(graph)
    for phase in (0, 1):
        for k in range(len(graph.nodes)):
            fuser.offer(k, phase)
    return fuser.result()


class _Fuser:
    def __init__(self, graph: Graph):
        self.graph = graph
        nodes = graph.nodes
        cons = consumers(graph)
        outs = set(graph.outputs)
        self.succ = [sorted({c for o in n.outputs for c in cons.get(o, [])}) for n in nodes]
        self.ipdom = post_dominators(self.succ, [any(o in outs for o in n.outputs) for n in nodes])
        self.kind = [pattern_of(n) for n in nodes]
        self.root = list(range(len(nodes)))
        self.members = {k: [k] for k in range(len(nodes))}
        self.group_kind = dict(enumerate(self.kind))

    def find(self, k: int) -> int:
        while self.root[k] != k:
            self.root[k] = self.root[self.root[k]]
            k = self.root[k]
        return k

    # --- deciding ---

    def offer(self, k: int, phase: int) -> None:
        d = self.ipdom[k]
        rule = RULES.get((phase, self.kind_of(k)))
        if d == SINK or rule is None or self.find(k) == self.find(d):
            return
        region = self._between(k, d)
        if rule(self, k, d, region):
            self._merge(k, region)

    def _between(self, k: int, d: int) -> list[int]:
        """Every node on a path from k to d, d included, k not."""
        seen, stack = {d}, list(self.succ[k])
        while stack:
            s = stack.pop()
            if s not in seen:
                seen.add(s)
                stack.extend(self.succ[s])
        return sorted(seen)

    def kind_of(self, k: int) -> str:
        """The kind of node k's group."""
        return self.group_kind[self.find(k)]

    def shape(self, k: int) -> tuple:
        return self.graph.values[self.graph.nodes[k].outputs[0]].shape

    # --- merging ---

    def _merge(self, k: int, region: list[int]) -> None:
        groups = sorted({self.find(x) for x in [k, *region]})
        if sum(len(self.members[g]) for g in groups) > MAX_GROUP or self._cycle(set(groups)):
            return
        keep = groups[0]
        for g in groups[1:]:
            self.root[g] = keep
            self.members[keep] += self.members.pop(g)
            self.group_kind[keep] = combine(self.group_kind[keep], self.group_kind.pop(g))

    def _cycle(self, groups: set[int]) -> bool:
        """Whether some path leaves ``groups`` and comes back: merging would then make
        a group that both feeds and reads another."""
        stack = [self.find(s) for g in groups for m in self.members[g] for s in self.succ[m]]
        seen = set()
        while stack:
            g = stack.pop()
            if g in seen or g in groups:
                continue
            seen.add(g)
            for m in self.members[g]:
                for s in self.succ[m]:
                    if self.find(s) in groups:
                        return True
                    stack.append(self.find(s))
        return False

    # --- the new graph ---

    def result(self) -> Graph:
        order = self._group_order()
        nodes = [self._node(sorted(self.members[g])) for g in order]
        return replace(self.graph, nodes=nodes)

    def _group_order(self) -> list[int]:
        """Groups in a topological order, each as early as its first node allows."""
        preds = {g: set() for g in self.members}
        for g, ms in self.members.items():
            for m in ms:
                for s in self.succ[m]:
                    if self.find(s) != g:
                        preds[self.find(s)].add(g)
        first = {g: min(ms) for g, ms in self.members.items()}
        ready = [(first[g], g) for g, p in preds.items() if not p]
        heapq.heapify(ready)
        order = []
        while ready:
            _, g = heapq.heappop(ready)
            order.append(g)
            for s in {self.find(x) for m in self.members[g] for x in self.succ[m]} - {g}:
                preds[s].discard(g)
                if not preds[s]:
                    heapq.heappush(ready, (first[s], s))
        return order

    def _node(self, members: list[int]) -> Node:
        inner = [self.graph.nodes[m] for m in members]
        if len(inner) == 1:
            return inner[0]
        inside = set(members)
        made = {o for n in inner for o in n.outputs}
        graph_outs = set(self.graph.outputs)
        outside_readers = {
            o
            for m in members
            for s in self.succ[m]
            if s not in inside
            for o in self.graph.nodes[s].inputs
        }
        return Node(
            "fused",
            inner[0].name,
            list(dict.fromkeys(i for n in inner for i in n.inputs if i not in made)),
            [o for n in inner for o in n.outputs if o in graph_outs or o in outside_readers],
            {"pattern": combine(*(pattern_of(n) for n in inner)), "nodes": _inner(inner)},
            "+".join(n.source for n in inner),
        )


# --- the rules: (phase, kind of the group offered) -> may it join its post-dominator ---


def _anchor_takes_pointwise(f: _Fuser, k: int, d: int, region: list[int]) -> bool:
    """A conv/matmul or reduction group takes pointwise ops that keep its shape (so the
    anchor is read at each output's own index, and computed once per element)."""
    shape = f.shape(k)
    return all(f.kind_of(r) in POINTWISE and f.shape(r) == shape for r in region)


def _pointwise_inlines(f: _Fuser, k: int, d: int, region: list[int]) -> bool:
    """A pointwise group is inlined into a consumer that can take it, through injective
    ops at most (the consumer may already belong to an anchor's group)."""
    return f.kind[d] in INLINE_INTO and all(
        f.kind_of(r) in UP_TO_INJECTIVE for r in region if r != d
    )


def _injective_joins(f: _Fuser, k: int, d: int, region: list[int]) -> bool:
    return all(f.kind_of(r) in UP_TO_INJECTIVE for r in region)


RULES = {
    (0, "out_elemwise_fusable"): _anchor_takes_pointwise,
    (0, "reduction"): _anchor_takes_pointwise,
    (0, "elementwise"): _pointwise_inlines,
    (0, "broadcast"): _pointwise_inlines,
    (1, "injective"): _injective_joins,
}


def _inner(nodes: list[Node]) -> list[dict]:
    keys = ("op", "inputs", "outputs", "attrs", "source")
    return [{k: getattr(n, k) for k in keys} for n in nodes]
