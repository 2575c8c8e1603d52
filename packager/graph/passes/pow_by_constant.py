"""Pow by a constant scalar exponent becomes the arithmetic it stands for.

``x ** 2`` (a power spectrum's square, a variance) with the exponent a model constant
compiled to a powf call per element with the exponent read from memory: scalar code
with a libm call, 10 ns an element. As ``x * x`` (``sqrt(x)`` for 0.5, a copy for 1)
it is one vector multiply and fuses like any elementwise op. Runs after
fuse_layer_norm, which matches the Pow of a decomposed LayerNorm itself.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node

_FLOAT = ("float32", "float64")


def _rewrite(node: Node, graph: Graph) -> Node:
    if node.op != "pow" or len(node.inputs) != 2:
        return node
    x, e = (graph.values[i] for i in node.inputs)
    out = graph.values[node.outputs[0]]
    if not e.is_const or e.data.size != 1 or x.dtype not in _FLOAT or out.shape != x.shape:
        return node
    k = float(e.data.reshape(-1)[0])
    if k == 2.0:
        return replace(node, op="mul", inputs=[x.name, x.name], attrs={})
    if k == 0.5:
        return replace(node, op="sqrt", inputs=[x.name], attrs={})
    if k == 1.0:
        return replace(node, op="identity", inputs=[x.name], attrs={})
    return node


def pow_by_constant(graph: Graph, ctx=None) -> Graph:
    nodes = [_rewrite(n, graph) for n in graph.nodes]
    if all(a is b for a, b in zip(nodes, graph.nodes, strict=True)):
        return graph
    return replace(graph, nodes=nodes)
