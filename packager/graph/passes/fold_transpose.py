"""A Transpose feeding a matmul is folded into the matmul's operand indexing.

Attention as exporters write it transposes Q, K and V to (batch, heads, tokens, dim)
(K to (batch, heads, dim, tokens)) before the products: each Transpose is a copy kernel
whose output the matmul then reads once. The matmul reads the Transpose's input through
the permutation instead (its ``perm_a``/``perm_b``), and the copy disappears when nothing
else reads it (dce). Chains of transposes compose. A constant B is left to
pack_gemm_weights (the folding pass of constants has already transposed it). B is folded
only when its last dim stays its last (the kernel loads a vector of B's columns at once;
K^T read as K strides them, which measured 5x slower than the copy and the contiguous
product together).
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph
from ..uses import producers

_ATTR = ("perm_a", "perm_b")


def _compose(producer: list[int], reader: list[int] | None) -> list[int]:
    """The perm by which a matmul reading through ``reader`` reads the input of a
    Transpose of perm ``producer``."""
    return [producer[p] for p in reader] if reader else list(producer)


def fold_transpose(graph: Graph, ctx=None) -> Graph:
    prod = producers(graph)
    nodes = list(graph.nodes)
    for k, node in enumerate(nodes):
        if node.op != "matmul" or node.attrs.get("b_block"):
            continue
        attrs, inputs = dict(node.attrs), list(node.inputs)
        for slot, key in enumerate(_ATTR):
            while (tr := _transpose(graph, nodes, prod, inputs[slot])) is not None:
                perm = _compose([int(p) for p in tr.attrs["perm"]], attrs.get(key))
                if slot == 1 and perm[-1] != len(perm) - 1:
                    break  # B's columns are its vector lanes: they must stay contiguous
                inputs[slot], attrs[key] = tr.inputs[0], perm
        if inputs != node.inputs:
            nodes[k] = replace(node, inputs=inputs, attrs=attrs)
    return replace(graph, nodes=nodes)


def _transpose(graph: Graph, nodes: list, prod: dict, name: str):
    """The Transpose of a runtime tensor that writes ``name``, if one does."""
    k = prod.get(name)
    tr = nodes[k] if k is not None else None
    if tr is None or tr.op != "transpose" or graph.values[tr.inputs[0]].is_const:
        return None
    return tr
