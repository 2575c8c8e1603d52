"""Immediate post-dominators of a DAG's nodes, with a virtual sink after every exit.

Node ``d`` post-dominates ``n`` when every path from ``n`` to the sink passes ``d``;
fusion merges a node with its immediate post-dominator and everything between them.
"""

from __future__ import annotations

SINK = -1


def post_dominators(succ: list[list[int]], exits: list[bool]) -> list[int]:
    """ipdom per node; ``succ`` lists each node's consumers (all after it, the nodes
    being in topological order); ``exits[k]``: node k also flows to the sink (it is a
    graph output). A node with no consumers flows to the sink too."""
    n = len(succ)
    ipdom = [SINK] * n
    depth = {SINK: 0}
    for k in range(n - 1, -1, -1):
        if not exits[k] and succ[k]:
            d = succ[k][0]
            for s in succ[k][1:]:
                d = _meet(d, s, ipdom, depth)
            ipdom[k] = d
        depth[k] = depth[ipdom[k]] + 1
    return ipdom


def _meet(a: int, b: int, ipdom: list[int], depth: dict) -> int:
    """The nearest common post-dominator of ``a`` and ``b``."""
    while a != b:
        if depth[a] >= depth[b]:
            a = ipdom[a]
        else:
            b = ipdom[b]
    return a
