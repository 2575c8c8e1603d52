"""Channel shuffles as one op: Reshape (N, C, H, W) -> (N, g, C/g, H, W), Transpose
perm (0, 2, 1, 3, 4), Reshape back to (N, C, H, W) becomes ``channel_shuffle``
(ops/shuffle.py), which the layout pass keeps blocked between blocked convs instead of
transforming to NCHW and back around a 5-D copy."""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node
from ..uses import use_counts

_PERM = [0, 2, 1, 3, 4]


def fuse_shuffle(graph: Graph, ctx=None) -> Graph:
    producer = {o: n for n in graph.nodes for o in n.outputs}
    uses = use_counts(graph)
    kept_out = set(graph.outputs)
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    for node in graph.nodes:
        chain = _chain(graph, producer, node)
        if chain is None:
            continue
        split, perm = chain
        if any(uses[n.outputs[0]] != 1 or n.outputs[0] in kept_out for n in (split, perm)):
            continue
        groups = graph.values[split.outputs[0]].shape[1]
        replaced[id(node)] = replace(
            node, op="channel_shuffle", inputs=[split.inputs[0]], attrs={"groups": groups}
        )
        dropped |= {id(split), id(perm)}
    if not replaced:
        return graph
    nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in dropped]
    return replace(graph, nodes=nodes)


def _chain(graph: Graph, producer: dict, node: Node) -> tuple[Node, Node] | None:
    """(the splitting reshape, the transpose) if ``node`` ends a channel shuffle."""
    if node.op != "reshape":
        return None
    perm = producer.get(node.inputs[0])
    if perm is None or perm.op != "transpose" or list(perm.attrs.get("perm", [])) != _PERM:
        return None
    split = producer.get(perm.inputs[0])
    if split is None or split.op != "reshape":
        return None
    x = graph.values[split.inputs[0]].shape
    mid = graph.values[split.outputs[0]].shape
    out = graph.values[node.outputs[0]].shape
    if len(x) != 4 or tuple(out) != tuple(x) or len(mid) != 5:
        return None
    n, c, h, w = x
    ok = tuple(mid) == (n, mid[1], c // mid[1], h, w) and mid[1] * mid[2] == c
    return (split, perm) if ok else None
