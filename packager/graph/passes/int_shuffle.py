"""Channel shuffles of quantized activations on the integers.

``DequantizeLinear(x, s, z) -> channel_shuffle -> QuantizeLinear(s, z)`` with the same
per-tensor scale and zero point, and the same integer type out as in, is the shuffle of
x itself: a shuffle only moves values, and Q(DQ(v)) is v. The calibrated range of a
permuted tensor is its input's, so a quantizer gives both sides the same parameters
(ShuffleNet between its grouped convs). The Q then reads x through a shuffle of its own;
the DQ and the float shuffle go when nothing else reads them (dce). int8_layout keeps
such a shuffle blocked between blocked integer convs.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node
from ..uses import consumers, producers

_INT = ("int8", "uint8")


def int_shuffle(graph: Graph, ctx=None) -> Graph:
    prod, cons = producers(graph), consumers(graph)
    replaced: dict[int, Node] = {}
    for k, q in enumerate(graph.nodes):
        if q.op != "quantize_linear" or q.inputs[0] in graph.outputs:
            continue
        sk = prod.get(q.inputs[0])
        shuffle = graph.nodes[sk] if sk is not None else None
        if shuffle is None or shuffle.op != "channel_shuffle" or cons[q.inputs[0]] != [k]:
            continue
        dk = prod.get(shuffle.inputs[0])
        dq = graph.nodes[dk] if dk is not None else None
        if dq is None or dq.op != "dequantize_linear":
            continue
        x = graph.values[dq.inputs[0]]
        same = _params(graph, q) is not None and _params(graph, q) == _params(graph, dq)
        if same and x.dtype in _INT and graph.values[q.outputs[0]].dtype == x.dtype:
            replaced[k] = replace(shuffle, name=q.name, inputs=[dq.inputs[0]], outputs=q.outputs)
    if not replaced:
        return graph
    return replace(graph, nodes=[replaced.get(k, n) for k, n in enumerate(graph.nodes)])


def _params(graph: Graph, node: Node) -> tuple[float, int] | None:
    """(scale, zero point) of a Q/DQ node with constant per-tensor parameters."""
    if len(node.inputs) != 3:
        return None
    s, z = (graph.values[i] for i in node.inputs[1:])
    if not (s.is_const and z.is_const) or s.data.size != 1 or z.data.size != 1:
        return None
    return float(s.data.reshape(-1)[0]), int(z.data.reshape(-1)[0])
