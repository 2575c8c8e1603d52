"""Constant gemm weights stored the way the kernel reads them.

A classifier exported with ``transB=1`` keeps B as (N, K): each output column then reads
B with a stride of K, and the vectorized column loop of the gemm template falls back to
scalar code. Transposing a constant B once at package time (and clearing trans_b) makes
those reads contiguous. The old constant is dropped by dead-value pruning when unused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, Value


def pack_gemm_weights(graph: Graph, ctx=None) -> Graph:
    values = dict(graph.values)
    nodes = [_packed(n, values) for n in graph.nodes]
    return replace(graph, nodes=nodes, values=values)


def _packed(node: Node, values: dict[str, Value]) -> Node:
    if node.op != "gemm" or not node.attrs.get("trans_b") or len(node.inputs) < 2:
        return node
    b = values[node.inputs[1]]
    if not b.is_const or b.data.ndim != 2:
        return node
    name = f"{b.name}__t"
    if name not in values:  # weights shared by several gemms are transposed once
        data = np.ascontiguousarray(b.data.T)
        values[name] = Value(name, tuple(data.shape), b.dtype, data)
    inputs = [node.inputs[0], name, *node.inputs[2:]]
    return replace(node, inputs=inputs, attrs={**node.attrs, "trans_b": 0})
