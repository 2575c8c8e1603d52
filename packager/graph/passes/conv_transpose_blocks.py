"""A transposed conv whose kernel equals its stride becomes a 1x1 conv and a depth_to_space.

With kernel == stride (DB heads' 2x2 stride-2 upsampling, U-Net decoders), no padding
and no dilation, every output pixel (s*i + a, s*j + b) comes from input pixel (i, j) alone
through weights w[:, :, a, b]: a 1x1 conv to M*s*s channels (channel m*s*s + a*s + b)
followed by depth_to_space in CRD order. The direct conv_transpose computes this over
a zero-dilated input, s*s times the work with most of it on zeros; the 1x1 conv is a
dense gemm the conv schedules block and vectorize. An elementwise op that alone reads
the result (the head's ReLU or Sigmoid) moves before the shuffle so it fuses into the
conv. Runs after fold_scale_shift (a batch norm is in the weights by then).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...ops.registry import get_op
from ..ir import Graph, Node, Value
from ..uses import add_const, consumers


def _block(node: Node, graph: Graph) -> int | None:
    """The stride s when ``node`` is a 2-D conv_transpose with an s x s kernel, stride
    s, no pads, dilation, groups or extra output, and constant weights; else None."""
    if node.op != "conv_transpose" or len(node.inputs) < 2:
        return None
    w = graph.values[node.inputs[1]]
    a = node.attrs
    if not w.is_const or len(w.shape) != 4 or int(a.get("groups", 1)) != 1:
        return None
    s = w.shape[2]
    plain = (
        w.shape[3] == s > 1
        and list(a.get("strides") or []) == [s, s]
        and all(int(v) == 1 for v in a.get("dilations") or [1, 1])
        and not any(a.get("pads") or [])
        and not any(a.get("output_padding") or [])
    )
    x = graph.values[node.inputs[0]]
    natural = [x.shape[2] * s, x.shape[3] * s]
    if not plain or list(a.get("output_shape") or natural) != natural:
        return None
    bias = graph.values[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    return s if bias is None or bias.is_const else None


_CONV_1X1 = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "groups": 1}


def _rewrite(node: Node, s: int, graph: Graph, values: dict, follower: Node | None):
    """[conv, (follower,) depth_to_space] computing ``node`` (and ``follower`` after it)."""
    w = graph.values[node.inputs[1]].data
    cin, m = w.shape[:2]
    w1 = np.ascontiguousarray(w.transpose(1, 2, 3, 0).reshape(m * s * s, cin, 1, 1))
    inputs = [node.inputs[0], add_const(values, w1, f"{node.name}_w1x1")]
    if len(node.inputs) > 2 and node.inputs[2]:
        bias = graph.values[node.inputs[2]].data
        inputs.append(add_const(values, np.repeat(bias, s * s), f"{node.name}_b1x1"))
    out = graph.values[node.outputs[0]]
    n, _, h, wd = graph.values[node.inputs[0]].shape
    blocks = f"{node.name}_blocks"
    values[blocks] = Value(blocks, (n, m * s * s, h, wd), out.dtype)
    conv = Node("conv", node.name, inputs, [blocks], _CONV_1X1, node.source)
    shuffle_in, last = blocks, node.outputs[0]
    chain = [conv]
    if follower is not None:
        moved = f"{follower.name}_blocks"
        values[moved] = Value(moved, values[blocks].shape, values[follower.outputs[0]].dtype)
        chain.append(replace(follower, inputs=[blocks], outputs=[moved]))
        shuffle_in, last = moved, follower.outputs[0]
    attrs = {"blocksize": s, "mode": "CRD"}
    chain.append(Node("depth_to_space", f"{node.name}_d2s", [shuffle_in], [last], attrs))
    return chain


def conv_transpose_blocks(graph: Graph, ctx=None) -> Graph:
    readers = consumers(graph)
    values = dict(graph.values)
    nodes: list[Node] = []
    moved: set[int] = set()
    changed = False
    for k, node in enumerate(graph.nodes):
        if k in moved:
            continue
        s = _block(node, graph)
        if s is None:
            nodes.append(node)
            continue
        out = node.outputs[0]
        after = readers.get(out, [])
        follower = graph.nodes[after[0]] if len(after) == 1 else None
        if (
            follower is None
            or out in graph.outputs
            or len(follower.inputs) != 1
            or get_op(follower.op).pattern != "elementwise"
        ):
            follower = None
        else:
            moved.add(after[0])
        nodes += _rewrite(node, s, graph, values, follower)
        changed = True
    if not changed:
        return graph
    return replace(graph, nodes=nodes, values=values)
