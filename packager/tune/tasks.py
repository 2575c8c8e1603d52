"""Tunable tasks of a packaged graph: unique kernels whose anchor op has a cpu template,
and how a task lowers with a knob setting.

A task is identified by its kernel key (what the kernel computes, input shapes and
dtypes, in-place pairs) plus the board: the same key the build uses to share kernels,
so a tuning record applies to exactly the kernels it was measured for. Its target (the
board's cpu target) is what the template is given. Config spaces (space.py) and
measurement (measure.py) build on this module; it needs neither.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np

from .. import te
from ..boards import Board
from ..graph.conv_algorithms import DIRECT, variants
from ..graph.ir import Graph, Node
from ..lowering import kernel_key, node_computes, schedule_for
from ..ops.registry import get_op
from ..target import CpuTarget, Target
from ..te.alias import allow_alias
from ..te.ir import PrimFunc
from .features import flop_count

TARGET = CpuTarget.family  # the family whose templates are tuned

# Below this many flops per byte of its arguments a kernel is bound by memory traffic
# (elementwise ops, pools, a matrix-vector product): its speed is told in GB/s.
MEMORY_BOUND_FLOPS_PER_BYTE = 2.0


@dataclass
class Task:
    key: str  # lowering.kernel_key: matches the build's kernel sharing
    template: str  # the anchor op whose schedule template is tuned
    node: Node
    graph: Graph
    inplace: tuple
    board: Board
    weight: int = 1  # how many nodes of the graph call this kernel
    flops: float = 0.0  # one call, estimated from the default schedule's loop IR
    conv: str = ""  # for each form of a conv (conv_algorithms): the direct form's key
    bytes: float = 0.0  # one call's arguments (inputs and outputs), read or written once

    @property
    def memory_bound(self) -> bool:
        return self.flops < MEMORY_BOUND_FLOPS_PER_BYTE * self.bytes

    @property
    def unit(self) -> str:
        """What its speed is told in: GB/s for a memory-bound kernel, else GFLOP/s;
        "effective" for a transformed conv (Winograd), whose count is the direct form's."""
        if self.memory_bound:
            return "GB/s"
        return "effective GFLOP/s" if self.conv and self.conv != self.key else "GFLOP/s"

    def rate(self, seconds: float) -> float:
        """The speed of one call taking ``seconds``, in ``unit`` (0 for no measurement)."""
        if not seconds or not math.isfinite(seconds):
            return 0.0
        return (self.bytes if self.memory_bound else self.flops) / seconds / 1e9

    @property
    def label(self) -> str:
        shapes = [list(self.graph.values[i].shape) for i in self.node.inputs[:1]]
        name = self.template
        inner = self.node.attrs.get("nodes", [{"op": self.node.op, "attrs": self.node.attrs}])
        conv = [n["attrs"] for n in inner if n["op"] == "conv2d_winograd_nchwc"]
        tile = conv[0].get("tile") if conv else None
        name += f" F{tile}x{tile}" if tile else ""  # the Winograd forms of one conv differ here
        return f"{name} {'x'.join(map(str, shapes[0])) if shapes else ''}".strip()

    def workload(self) -> list:
        return json.loads(self.key)

    @property
    def target(self) -> CpuTarget:
        return Target.cpu(self.board)

    def computes(self):
        """(args, outs, anchor) with reproducible names."""
        with te.fresh_names():
            return node_computes(self.node, self.graph)


def lower_config(task: Task, values: dict | None, name: str) -> PrimFunc:
    """The candidate kernel for a knob setting (raises when the setting is invalid)."""
    args, outs, anchor = task.computes()
    sch = schedule_for(outs, anchor, task.target, values or {})
    prim = te.lower(sch, args + outs, name)
    return allow_alias(prim, task.inplace, len(args))


def default_func(task: Task) -> PrimFunc:
    """The kernel with the template's defaults (the reference candidates are checked against)."""
    return lower_config(task, None, "pk_default")


def template_of(node: Node, graph: Graph) -> str | None:
    """The anchor op's name when it has a cpu schedule template (else not tunable)."""
    with te.fresh_names():
        _, _, (op, _, _) = node_computes(node, graph)
    return op if op and TARGET in get_op(op).schedules else None


def _forms(node: Node, graph: Graph, algorithms=None) -> tuple[list, bool]:
    """The node and each other algorithm it may run as (conv_algorithms), as (node,
    graph) pairs to tune (the build takes the fastest), and whether it has other forms.
    ``algorithms`` keeps only those forms (a node with no other form is always kept)."""
    others = variants(node, graph)
    forms = []
    if not others or algorithms is None or DIRECT in algorithms:
        forms.append((node, graph))
    for v in others:
        if algorithms is None or v.algorithm in algorithms:
            forms.append((v.node, replace(graph, values={**graph.values, v.weight.name: v.weight})))
    return forms, bool(others)


def extract_tasks(
    graph: Graph, board: Board, inplace: dict | None = None, algorithms=None
) -> list[Task]:
    """Unique tunable tasks (every algorithm of a conv is a task of its own), costliest
    (weight x FLOPs) first."""
    tasks: dict[str, Task] = {}
    direct: dict[str, Task] = {}  # each conv's direct form, tuned or not, by its key
    inplace = inplace or {}
    for k, node in enumerate(graph.nodes):
        pairs = tuple(inplace.get(k, ()))
        forms, has_forms = _forms(node, graph, algorithms)
        own = kernel_key(node, graph, pairs) if has_forms else ""
        if has_forms and own not in direct:
            direct[own] = Task(own, "conv2d_nchwc", node, graph, pairs, board)
        for n, g in forms:
            key = kernel_key(n, g, pairs)
            if key in tasks:
                tasks[key].weight += 1
                continue
            template = template_of(n, g)
            if template:
                tasks[key] = Task(key, template, n, g, pairs, board, conv=own)
    work: dict[str, tuple[float, float]] = {}
    for t in tasks.values():  # every form of a conv counts its direct form's work
        base = direct[t.conv] if t.conv else t
        if base.key not in work:
            prim = default_func(base)
            work[base.key] = (
                flop_count(prim),
                sum(b.size * np.dtype(b.dtype).itemsize for b in prim.params),
            )
        t.flops, t.bytes = work[base.key]
    return sorted(tasks.values(), key=lambda t: -t.weight * t.flops)
