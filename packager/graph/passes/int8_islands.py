"""Float chains between an integer conv and a quantize, computed in the int8 block.

A quantized model can leave float ops per element between an integer conv and the
next quantize: ``qconv2d -> DequantizeLinear -> Mul(scale[c]) -> Q -> DQ ->
Add(shift[c]) -> Relu -> QuantizeLinear`` (a Caffe-style Scale layer after a conv, which
a quantizer brackets op by op; DenseNet's bottlenecks are made of them). Every op of
such a chain computes each element from the same element and at most a per-channel or
per-tensor constant, so the chain runs as well on the conv's blocked output
(N, C/B, H, W, B) as on NCHW: the conv writes its block, the chain's values are blocked
alike (its constants re-laid out at package time), and the last quantize writes the
block the next integer op reads. The fuser then makes conv, chain and quantize one
kernel that stores a byte block per pixel, where it would otherwise store a float NCHW
plane per channel and quantize it into blocks in a kernel of its own.

An island is such a chain: its head a per-tensor DequantizeLinear, the only reader of a
4-d qconv2d output, its tail a per-tensor QuantizeLinear, every value between read only
by the next op of the chain and of the conv's shape, with whole blocks of channels.
int8_layout.py decides whether the conv's output and the tail's are blocked; an island
is used only when both are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...ops.registry import get_op
from ..ir import Graph, Node, Value
from ..uses import add_const, scalar_qparams
from .layout_pack import pack_channels, pack_operand

# float ops of two operands: the chain's value and a per-channel or per-tensor constant
_WITH_CONSTANT = ("add", "sub", "mul", "div", "maximum", "minimum", "prelu")
_PER_CHANNEL = ("scale_shift", "batch_norm")  # x, then (C,) constants


@dataclass(frozen=True)
class Island:
    source: str  # the qconv2d output the head reads
    nodes: tuple[int, ...]  # head ... tail, in chain order
    tail: str  # the tail's output (integer)
    block: int  # the conv's channel block

    def values(self, graph: Graph) -> list[str]:
        """The values the island makes, the tail's included."""
        return [graph.nodes[k].outputs[0] for k in self.nodes]


def find_islands(graph: Graph, prod: dict, cons: dict) -> dict[str, Island]:
    """Source value -> its island, for every qconv2d output that starts one."""
    islands = {}
    for node in graph.nodes:
        if node.op != "qconv2d" or len(graph.values[node.outputs[0]].shape) != 4:
            continue
        island = _walk(graph, cons, node)
        if island is not None:
            islands[island.source] = island
    return islands


def _walk(graph: Graph, cons: dict, conv: Node) -> Island | None:
    vals = graph.values
    src = conv.outputs[0]
    block = vals[conv.inputs[1]].shape[4]
    shape = vals[src].shape
    if block % 4 or shape[1] % block or src in graph.outputs or len(cons.get(src, [])) != 1:
        return None
    chain, x = [], src
    while True:
        (k,) = cons[x]
        node = graph.nodes[k]
        if not _step(graph, node, x, block) or vals[node.outputs[0]].shape != shape:
            return None
        chain.append(k)
        x = node.outputs[0]
        readers = cons.get(x, [])
        ends = len(readers) != 1 or x in graph.outputs
        if not ends:  # the chain goes on only through an op that may be in it
            nxt = graph.nodes[readers[0]]
            ends = not _step(graph, nxt, x, block) or nxt.inputs.count(x) != 1
        if ends:
            head = graph.nodes[chain[0]]
            if head.op != "dequantize_linear" or node.op != "quantize_linear" or not readers:
                return None
            return Island(src, tuple(chain), x, block)


def _step(graph: Graph, node: Node, x: str, block: int) -> bool:
    """Whether ``node`` computes each element of its output from element x alone and
    constants that re-lay out to the block."""
    vals = graph.values
    if len(node.outputs) != 1 or not node.inputs or node.inputs[0] != x:
        return False
    out = vals[node.outputs[0]]
    channels = vals[x].shape[1]
    if node.op in ("dequantize_linear", "quantize_linear"):
        return scalar_qparams(vals, node) is not None
    if out.dtype != "float32":
        return False
    if node.op in _WITH_CONSTANT:
        other = node.inputs[1:]
        return len(other) == 1 and _packable(vals[other[0]], channels, block)
    if node.op in _PER_CHANNEL:
        params = [vals[p] for p in node.inputs[1:]]
        return all(p.is_const and p.shape == (channels,) for p in params)
    try:
        elementwise = get_op(node.op).pattern == "elementwise"
    except KeyError:
        return False
    return elementwise and len(node.inputs) == 1


def _packable(v: Value, channels: int, block: int) -> bool:
    return v.is_const and v.dtype == "float32" and pack_operand(v.data, channels, block) is not None


def rewrite_island(graph: Graph, island: Island, values: dict[str, Value]) -> dict[int, Node]:
    """The island's nodes on blocked values: node index -> its node reading constants
    re-laid out to the block (added to ``values``); the values' own shapes are the
    caller's to change."""
    out = {}
    b = island.block
    for k in island.nodes:
        node = graph.nodes[k]
        channels = graph.values[node.inputs[0]].shape[1]
        c = graph.values[node.inputs[1]] if len(node.inputs) > 1 else None
        if node.op in _WITH_CONSTANT and any(d != 1 for d in c.shape):  # scalars as they are
            packed = pack_operand(c.data, channels, b)
            node = replace(node, inputs=[node.inputs[0], _const(values, packed, c.name, b)])
        elif node.op in _PER_CHANNEL:
            params = [
                _const(values, pack_channels(graph.values[p].data, b), p, b)
                for p in node.inputs[1:]
            ]
            node = replace(node, inputs=[node.inputs[0], *params])
        out[k] = node
    return out


def _const(values: dict[str, Value], data: np.ndarray, source: str, block: int) -> str:
    return add_const(values, data, f"{source}__{block}c")
