"""Channel shuffles and channel concats of quantized activations on the integers.

``DequantizeLinear(x, s, z) -> channel_shuffle -> QuantizeLinear(s, z)`` with the same
per-tensor scale and zero point, and the same integer type out as in, is the shuffle of
x itself: a shuffle only moves values, and Q(DQ(v)) is v. The calibrated range of a
permuted tensor is its input's, so a quantizer gives both sides the same parameters
(ShuffleNet between its grouped convs). Likewise a channel Concat of DequantizeLinears
whose parts and QuantizeLinear share one scale and zero point (`packager quantize` gives
a concat's parts and output one range: quantize/qdq.concat_shared_ranges) is the concat
of the integers. The Q then reads the integers through a shuffle or concat of its own;
the DQs and the float op go when nothing else reads them (dce). int8_layout keeps such
ops blocked between blocked integer convs.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node
from ..uses import consumers, producers, scalar_qparams

_INT = ("int8", "uint8")


def int_moves(graph: Graph, ctx=None) -> Graph:
    prod, cons = producers(graph), consumers(graph)

    def made_by(name: str, op: str) -> Node | None:
        k = prod.get(name)
        return graph.nodes[k] if k is not None and graph.nodes[k].op == op else None

    replaced: dict[int, Node] = {}
    for k, q in enumerate(graph.nodes):
        if q.op != "quantize_linear" or cons[q.inputs[0]] != [k] or q.inputs[0] in graph.outputs:
            continue
        move = made_by(q.inputs[0], "channel_shuffle") or made_by(q.inputs[0], "concat")
        if move is None or move.op == "concat" and move.attrs.get("axis") != 1:
            continue
        dqs = [made_by(i, "dequantize_linear") for i in move.inputs]
        want = scalar_qparams(graph.values, q)
        out = graph.values[q.outputs[0]].dtype
        if want is None or any(d is None or scalar_qparams(graph.values, d) != want for d in dqs):
            continue
        if all(graph.values[d.inputs[0]].dtype == out for d in dqs) and out in _INT:
            ins = [d.inputs[0] for d in dqs]
            replaced[k] = replace(move, name=q.name, inputs=ins, outputs=list(q.outputs))
    if not replaced:
        return graph
    return replace(graph, nodes=[replaced.get(k, n) for k, n in enumerate(graph.nodes)])
