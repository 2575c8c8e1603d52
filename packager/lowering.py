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
    return json.dumps([_structure(node), ins, len(node.outputs), list(inplace)])


def _structure(node: Node) -> list:
    """What the kernel computes: op and attrs; for a fused node its inner nodes with
    value names replaced by their place (in0.. for inputs, v0.. inside), so groups
    that compute alike share a kernel whatever their tensors are called."""
    if node.op != "fused":
        return [node.op, _canon(node.attrs)]
    ids = {name: f"in{k}" for k, name in enumerate(node.inputs)}
    inner = []
    for n in node.attrs["nodes"]:
        ins = [ids[i] for i in n["inputs"]]
        for o in n["outputs"]:
            ids.setdefault(o, f"v{len(ids)}")
        inner.append([n["op"], _canon(n["attrs"]), ins, [ids[o] for o in n["outputs"]]])
    return ["fused", inner, [ids[o] for o in node.outputs]]


def node_computes(node: Node, graph: Graph) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """Placeholders for the node's inputs and its output tensors. A fused node builds
    each inner op's compute on the tensors of its inputs, so the group is one tensor
    expression and its schedule can inline producers into consumers."""
    args = [
        te.placeholder(graph.values[i].shape, graph.values[i].dtype, f"in{k}")
        for k, i in enumerate(node.inputs)
    ]
    if node.op != "fused":
        return args, list(get_op(node.op).compute(args, node.attrs))
    env = dict(zip(node.inputs, args, strict=True))
    for n in node.attrs["nodes"]:
        outs = get_op(n["op"]).compute([env[i] for i in n["inputs"]], n["attrs"])
        env.update(zip(n["outputs"], outs, strict=True))
    return args, [env[o] for o in node.outputs]


def lower_node(node: Node, graph: Graph, func: str, target: str = "cpu", inplace=()) -> Kernel:
    """``inplace``: (output position, input position) pairs the memory plan lets share
    a buffer; the kernel is checked to allow it and generated without ``restrict`` there."""
    with te.fresh_names():
        args, outs = node_computes(node, graph)
    # A fused group takes the generic schedule (inline, reductions at their reader);
    # an op's own template is written for the op alone.
    schedule = get_op(node.op).schedules.get(target) if node.op != "fused" else None
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
            name = f"k_{len(by_key)}_{_label(node)}"
            by_key[key] = lower_node(node, graph, name, target, inplace.get(k, ()))
        funcs.append(by_key[key].func)
        if progress:
            progress(k + 1, len(graph.nodes))
    return list(by_key.values()), funcs


def _label(node: Node, most: int = 4) -> str:
    """What a kernel is named after: its op, or a fused node's inner ops in order (the
    first ``most`` of them, then how many more)."""
    if node.op != "fused":
        return _ident(node.op)
    ops = [_ident(n["op"]) for n in node.attrs["nodes"]]
    more = [f"{len(ops) - most}more"] if len(ops) > most else []
    return "_".join(ops[:most] + more)


def _ident(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s)
