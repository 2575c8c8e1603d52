"""Scaled dot-product attention becomes one attention node.

The chain MatMul(Q, K^T), a scale (Div or Mul by a scalar constant, optional), a mask
Add (optional), Softmax over the last axis, MatMul(P, V) is five kernels with the scores
and probabilities written out and read back between them. As one node (ops/attention.py)
a block of query rows keeps them in scratch. Runs after fold_transpose, so Q, K^T and V
carry the transposes folded into the matmuls; every intermediate must be read by the
chain alone.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node
from ..uses import consumers, producers


class _Uses:
    def __init__(self, graph: Graph):
        self.g, self.prod, self.cons = graph, producers(graph), consumers(graph)

    def sole_reader(self, name: str) -> Node | None:
        readers = self.cons.get(name, [])
        if len(readers) != 1 or name in self.g.outputs:
            return None
        return self.g.nodes[readers[0]]

    def scalar(self, name: str) -> float | None:
        v = self.g.values[name]
        return float(v.data.reshape(-1)[0]) if v.is_const and v.data.size == 1 else None


def _scale(u: _Uses, node: Node, x: str) -> float | None:
    """The factor of a Div/Mul of ``x`` by a scalar constant, else None."""
    other = [i for i in node.inputs if i != x]
    k = u.scalar(other[0]) if len(other) == 1 else None
    if node.op == "mul" and k is not None:
        return k
    if node.op == "div" and k and node.inputs[0] == x:
        return 1.0 / k
    return None


def _match(u: _Uses, mm: Node):
    """(attention node, nodes it replaces) for the chain starting at matmul ``mm``."""
    if mm.op != "matmul" or mm.attrs.get("b_block") or len(u.g.values[mm.outputs[0]].shape) < 2:
        return None
    chain, x, scale, bias = [mm], mm.outputs[0], 1.0, None
    node = u.sole_reader(x)
    if node is not None and (k := _scale(u, node, x)) is not None:
        chain.append(node)
        scale, x, node = scale * k, node.outputs[0], u.sole_reader(node.outputs[0])
    if node is not None and node.op == "add":
        bias = [i for i in node.inputs if i != x]
        shape = u.g.values[x].shape
        if len(bias) != 1 or u.g.values[node.outputs[0]].shape != shape:
            return None
        bias = bias[0]
        chain.append(node)
        x, node = node.outputs[0], u.sole_reader(node.outputs[0])
    ndim = len(u.g.values[x].shape)
    if node is None or node.op != "softmax" or [a % ndim for a in node.attrs["axes"]] != [ndim - 1]:
        return None
    chain.append(node)
    mm2 = u.sole_reader(node.outputs[0])
    if mm2 is None or mm2.op != "matmul" or mm2.inputs[0] != node.outputs[0]:
        return None
    if mm2.attrs.get("perm_a") or mm2.attrs.get("b_block"):
        return None
    chain.append(mm2)
    attrs = {"scale": scale, "has_bias": int(bias is not None)}
    for key, src in (("perm_q", mm.attrs.get("perm_a")), ("perm_kt", mm.attrs.get("perm_b"))):
        if src:
            attrs[key] = src
    if mm2.attrs.get("perm_b"):
        attrs["perm_v"] = mm2.attrs["perm_b"]
    inputs = [mm.inputs[0], mm.inputs[1], mm2.inputs[1], *([bias] if bias else [])]
    fused = Node("attention", mm2.name, inputs, list(mm2.outputs), attrs, source=mm.source)
    return fused, chain


def fuse_attention(graph: Graph, ctx=None) -> Graph:
    u = _Uses(graph)
    drop, at = set(), {}
    for mm in graph.nodes:
        m = _match(u, mm)
        if m is None or any(id(n) in drop for n in m[1]):
            continue
        fused, chain = m
        drop.update(id(n) for n in chain)
        at[id(chain[-1])] = fused
    if not at:
        return graph
    nodes = [at.get(id(n), n) for n in graph.nodes if id(n) not in drop or id(n) in at]
    return replace(graph, nodes=nodes)
