"""Small graphs built by hand, and a reference runner for them.

``run_graph`` runs a graph node by node, each node's tensor expression either through
the numpy interpreter or, with ``compiled=True``, through lowering and the C compiler:
so a pass is checked by running the graph before and after it.
"""

from __future__ import annotations

import numpy as np

from packager import te
from packager.codegen import build_kernel
from packager.frontend.importer import infer_node
from packager.graph.ir import Graph, Node, Value, np_dtype
from packager.lowering import node_computes
from packager.te.evaluator import evaluate


class Builder:
    def __init__(self):
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []

    def input(self, name: str, shape, dtype: str = "float32") -> str:
        self.values[name] = Value(name, tuple(shape), dtype)
        self.inputs.append(name)
        return name

    def const(self, name: str, array) -> str:
        arr = np.asarray(array)
        self.values[name] = Value(name, arr.shape, str(arr.dtype), arr)
        return name

    def op(self, op: str, inputs: list[str], name: str, n_out: int = 1, **attrs) -> str:
        outs = [name] if n_out == 1 else [f"{name}:{k}" for k in range(n_out)]
        node = Node(op, name, list(inputs), outs, attrs, source=name)
        infer_node(node, self.values, "test")
        self.nodes.append(node)
        return name

    def graph(self, outputs: list[str]) -> Graph:
        return Graph("test", list(self.inputs), list(outputs), list(self.nodes), dict(self.values))


def run_graph(graph: Graph, feeds: dict, compiled: bool = False) -> list[np.ndarray]:
    env = {name: v.data for name, v in graph.values.items() if v.is_const}
    env.update(feeds)
    for node in graph.nodes:
        with te.fresh_names():
            args, outs, _ = node_computes(node, graph)
        ins = [np.asarray(env[i], order="C") for i in node.inputs]
        if compiled:
            func = te.lower(te.default_schedule(outs), args + outs, "k_test")
            results = [np.empty(t.shape, np_dtype(t.dtype)) for t in outs]
            build_kernel(func)(*ins, *results)
        else:
            results = evaluate(outs, dict(zip(args, ins, strict=True)))
        env.update(zip(node.outputs, results, strict=True))
    return [env[o] for o in graph.outputs]


def ops(graph: Graph) -> list[str]:
    """Each node's op; a fused node as 'a+b+c' of its inner ops."""
    return [
        "+".join(n["op"] for n in node.attrs["nodes"]) if node.op == "fused" else node.op
        for node in graph.nodes
    ]


def feeds_for(graph: Graph, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        n: rng.uniform(-1, 1, graph.values[n].shape).astype(graph.values[n].dtype)
        for n in graph.inputs
    }
