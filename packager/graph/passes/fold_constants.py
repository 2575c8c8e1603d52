"""Evaluate at package time every node whose inputs are all constants.

The importer already folds ONNX nodes with onnx's reference evaluator; this pass covers
library nodes made later (by other passes, e.g. a weight's layout transform). Each is
evaluated through the op's own compute with the numpy interpreter of tensor expressions,
so a folded value is by construction what the kernel would have computed. A node whose
evaluation grid would be huge (a convolution of constants, say) is left to run on the
board instead: correct either way, and packaging stays fast and small in memory.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ... import te
from ...ops.registry import get_op
from ...te.evaluator import evaluate, grid_elements
from ..ir import Graph, Node, Value, np_dtype

MAX_GRID = 1 << 24
NOT_FOLDED = ("fused", "if", "loop")  # elements per array the interpreter may build for one compute


def fold_constants(graph: Graph, ctx=None) -> Graph:
    values = dict(graph.values)
    kept = []
    for node in graph.nodes:
        folded = _evaluate(node, values) if _all_const(node, values) else None
        if folded is None:
            kept.append(node)
            continue
        for name, data in zip(node.outputs, folded, strict=True):
            v = values[name]
            values[name] = Value(name, v.shape, v.dtype, data)
    return replace(graph, nodes=kept, values=values)


def _all_const(node: Node, values: dict[str, Value]) -> bool:
    # a control-flow node's subgraphs may read more than its inputs: never folded here
    return node.op not in NOT_FOLDED and all(values[i].is_const for i in node.inputs)


def _evaluate(node: Node, values: dict[str, Value]) -> list[np.ndarray] | None:
    with te.fresh_names():
        args = [te.placeholder(values[i].shape, values[i].dtype) for i in node.inputs]
        outs = list(get_op(node.op).compute(args, node.attrs))
    if grid_elements(outs) > MAX_GRID:
        return None
    feeds = {t: values[i].data for t, i in zip(args, node.inputs, strict=True)}
    results = evaluate(outs, feeds)
    return [
        np.ascontiguousarray(r, dtype=np_dtype(values[name].dtype)).reshape(values[name].shape)
        for r, name in zip(results, node.outputs, strict=True)
    ]
