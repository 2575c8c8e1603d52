"""Graph to kernels: each node's compute, through its schedule, to a C function.

Nodes that compute the same thing (op, attributes, input shapes and dtypes) share one
kernel. Names are given in graph order, so the same graph always gives the same sources.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import te
from .codegen.c import codegen_c
from .errors import PackagerError
from .graph.ir import Graph, Node
from .graph.memory import MemoryPlan
from .ops.registry import get_op
from .te.alias import allow_alias
from .te.schedule import default_schedule


@dataclass
class Kernel:
    func: str  # C function name
    source: str  # the translation unit
    op: str


def _canon(x):
    """A JSON-able, order-stable form of attribute values (numpy included)."""
    if isinstance(x, np.ndarray):
        return {"array": x.tolist(), "dtype": str(x.dtype)}
    if isinstance(x, (np.integer, np.floating, np.bool_)):
        return x.item()
    if isinstance(x, dict):
        return {str(k): _canon(v) for k, v in sorted(x.items())}
    if isinstance(x, (list, tuple)):
        return [_canon(v) for v in x]
    return x


def kernel_key(node: Node, graph: Graph, inplace=()) -> str:
    ins = [(graph.values[i].shape, graph.values[i].dtype) for i in node.inputs]
    return json.dumps([node.op, _canon(node.attrs), ins, len(node.outputs), list(inplace)])


def lower_node(node: Node, graph: Graph, func: str, target: str = "cpu", inplace=()) -> Kernel:
    """``inplace``: (output position, input position) pairs the memory plan lets share
    a buffer; the kernel is checked to allow it and generated without ``restrict`` there."""
    opdef = get_op(node.op)
    with te.fresh_names():
        args = [
            te.placeholder(graph.values[i].shape, graph.values[i].dtype, f"in{k}")
            for k, i in enumerate(node.inputs)
        ]
        outs = list(opdef.compute(args, node.attrs))
    schedule = opdef.schedules.get(target)
    sch = schedule(outs, node.attrs) if schedule else default_schedule(outs)
    try:
        prim = allow_alias(te.lower(sch, args + outs, func), inplace, len(args))
    except Exception as e:
        raise PackagerError(f"node '{node.source}' ({node.op}): lowering failed: {e}") from e
    return Kernel(func, codegen_c(prim), node.op)


def lower_graph(
    graph: Graph, plan: MemoryPlan | None = None, target: str = "cpu", progress=None
) -> tuple[list[Kernel], list[str]]:
    """Kernels (unique) and, per node, the name of the function it calls."""
    by_key: dict[str, Kernel] = {}
    funcs: list[str] = []
    inplace = plan.inplace if plan else {}
    for k, node in enumerate(graph.nodes):
        key = kernel_key(node, graph, inplace.get(k, ()))
        if key not in by_key:
            name = f"k_{len(by_key)}_{_ident(node.op)}"
            by_key[key] = lower_node(node, graph, name, target, inplace.get(k, ()))
        funcs.append(by_key[key].func)
        if progress:
            progress(k + 1, len(graph.nodes))
    return list(by_key.values()), funcs


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)
