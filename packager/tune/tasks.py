"""Tunable tasks of a packaged graph: unique kernels whose anchor op has a schedule
template for the family the kernel runs on, and how a task lowers with a knob setting.

A task is identified by its kernel key (what the kernel computes, input shapes and
dtypes, in-place pairs) plus its target: the same key the build uses to share kernels,
so a tuning record applies to exactly the kernels it was measured for. Its target is
the one the build places the kernel on (lowering.place_node): the board's accelerator for
an accelerator op (``lowering.ACCEL_OPS``) on a board with one, the board's OpenCL GPU
when the board has one and the node runs there, else its cpu; the template of that
family is what is tuned. Config spaces (space.py) and
measurement (measure.py) build on this module; it needs neither.

A measurement holds only for the code it timed, and templates and code generators change
between packager versions while kernel keys stay. So a record also carries its kernel's
code (``kernel_code``: a hash of the source the board compiles) and the task's base (the
code of its default config then): a record whose base is not today's default was
measured on kernels that have changed since, and is no evidence for today's (the build
and a resumed tune leave it out; the cost model may still learn from it).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from .. import te
from ..boards import Board
from ..codegen.c import codegen_c
from ..codegen.opencl import codegen_opencl
from ..graph.conv_algorithms import DIRECT, variants
from ..graph.ir import Graph, Node
from ..graph.passes.pixel_tiles import tile_pixels
from ..lowering import (
    ACCEL_OPS,
    gpu_obstacle,
    kernel_key,
    lower_node,
    node_computes,
    schedule_for,
)
from ..ops.registry import get_op
from ..ops.winograd_schedule import tile_multiple
from ..target import Target, targets_of
from ..te.alias import allow_alias
from ..te.ir import PrimFunc
from ..te.passes import insert_barriers
from .features import flop_count

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
    target: Target | None = None  # what the kernel runs on (None: the board's cpu)
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
        if self.family == "accel":  # convs of one input differ by their (blocked) weights
            shapes.append(list(self.graph.values[self.node.inputs[1]].shape))
            return f"{name} {' * '.join('x'.join(map(str, s)) for s in shapes)}"
        return f"{name} {'x'.join(map(str, shapes[0])) if shapes else ''}".strip()

    def __post_init__(self) -> None:
        if self.target is None:
            self.target = Target.cpu(self.board)

    @property
    def family(self) -> str:
        return self.target.family

    def workload(self) -> list:
        return json.loads(self.key)

    def computes(self):
        """(args, outs, anchor) with reproducible names."""
        with te.fresh_names():
            return node_computes(self.node, self.graph)

    @cached_property
    def base_code(self) -> str | None:
        """The code of the default config (kernel_code), lowered once per task."""
        return kernel_code(self, default_func(self))


# Families whose records hold for the code they timed: the accelerator's are simulated
# cycles of a program, not a board's measurement of compiled code.
CODE_FAMILIES = ("cpu", "opencl")


def kernel_code(task: Task, prim: PrimFunc | None) -> str | None:
    """What a measurement of ``prim`` timed, as a short hash: the source the board compiles
    (C with the toolchain's compiler and flags, or OpenCL C) with the function's name left
    out, so the tuner's candidate and the build's kernel of one config agree. None for a
    config that does not lower, and for families whose records are not of compiled code."""
    if prim is None or task.family not in CODE_FAMILIES:
        return None
    if task.family == "opencl":
        source = codegen_opencl(prim)
    else:
        tools = task.board.toolchain
        source = "\n".join([tools.cc, *tools.cflags, codegen_c(prim)])
    return hashlib.sha256(source.replace(prim.name, "@").encode()).hexdigest()[:16]


def lower_config(task: Task, values: dict | None, name: str) -> PrimFunc:
    """The candidate kernel for a knob setting (raises when the setting is invalid)."""
    args, outs, anchor = task.computes()
    sch = schedule_for(outs, anchor, task.target, values or {})
    prim = allow_alias(te.lower(sch, args + outs, name), task.inplace, len(args))
    # as lowering.lower_node: a GPU kernel's work-items wait where they share local memory
    return insert_barriers(prim) if task.family == "opencl" else prim


def default_func(task: Task) -> PrimFunc:
    """The kernel with the template's defaults (the reference candidates are checked against)."""
    return lower_config(task, None, "pk_default")


def template_of(node: Node, graph: Graph, family: str = "cpu") -> str | None:
    """The anchor op's name when it has a schedule template of ``family`` (else not
    tunable)."""
    with te.fresh_names():
        _, _, (op, _, _) = node_computes(node, graph)
    tunable = op and family in get_op(op).schedules and family not in get_op(op).fixed
    return op if tunable else None


def placed_target(node: Node, graph: Graph, targets, inplace=()) -> Target:
    """The target the build runs the node on with default schedules (lowering.place_node):
    the accelerator for an accelerator op when ``targets`` has one, else the first OpenCL
    GPU that takes it, else the cpu."""
    cpu = next(t for t in targets if t.family == "cpu")
    accel = [t for t in targets if t.family == "accel"]
    if node.op in ACCEL_OPS:
        return accel[0] if accel else cpu
    for gpu in [t for t in targets if t.family == "opencl"]:
        if gpu_obstacle(node, graph):
            break
        try:
            lower_node(node, graph, "pk_place", gpu, inplace)
            return gpu
        except Exception:  # the GPU refuses it: the build runs it on the cpu
            continue
    return cpu


def accel_macs(task: Task) -> int:
    """Multiply-accumulates of one call of an accelerator kernel, as the GEMM core does
    them (blocked channels: padded ones included)."""
    from ..ops.accel import conv_shape

    x, w = (task.graph.values[i].shape for i in task.node.inputs[:2])
    s = conv_shape(task.template, task.node.attrs, [x, w])
    block_in, block_out = w[-1], w[-2]
    return s.ob * block_out * s.cb * block_in * s.oh * s.ow * s.kh * s.kw


def _forms(node: Node, graph: Graph, algorithms=None, multiple: int = 1) -> tuple[list, bool]:
    """The node and each other algorithm it may run as (conv_algorithms), as (node,
    graph) pairs to tune (the build takes the fastest), and whether it has other forms.
    ``algorithms`` keeps only those forms (a node with no other form is always kept);
    ``multiple``: the Winograd forms' tile_multiple, as the build makes them."""
    others = variants(node, graph, tile_multiple=multiple)
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
    (weight x FLOPs) first. Each kernel is tuned for the target it is placed on: on a board
    with an accelerator its accelerator ops are tasks of the accel target; on a board with
    a GPU convolutions are direct (as the build makes them there)."""
    targets = targets_of(board)
    gpu = any(t.family == "opencl" for t in targets)
    if gpu:
        algorithms = (DIRECT,)
    tasks: dict[str, Task] = {}
    cpu = next(t for t in targets if t.family == "cpu")
    multiple = tile_multiple(cpu)
    if not gpu and board.accel is None:  # as the build does: CPU kernels only
        graph = tile_pixels(graph, cpu)
    direct: dict[str, Task] = {}  # each conv's direct form, tuned or not, by its key
    inplace = inplace or {}
    for k, node in enumerate(graph.nodes):
        pairs = tuple(inplace.get(k, ()))
        forms, has_forms = _forms(node, graph, algorithms, multiple)
        own = kernel_key(node, graph, pairs) if has_forms else ""
        if has_forms and own not in direct:
            direct[own] = Task(own, "conv2d_nchwc", node, graph, pairs, board)
        for n, g in forms:
            key = kernel_key(n, g, pairs)
            if key in tasks:
                tasks[key].weight += 1
                continue
            target = placed_target(n, g, targets, pairs)
            template = template_of(n, g, target.family)
            if template:
                tasks[key] = Task(key, template, n, g, pairs, board, target, conv=own)
    work: dict[str, tuple[float, float]] = {}
    for t in tasks.values():  # every form of a conv counts its direct form's work
        base = direct[t.conv] if t.conv else t
        if base.key not in work:
            prim = default_func(base)
            work[base.key] = (
                # integer GEMMs have no float ops: 2 per multiply-accumulate
                2.0 * accel_macs(base) if base.family == "accel" else flop_count(prim),
                sum(b.size * np.dtype(b.dtype).itemsize for b in prim.params),
            )
        t.flops, t.bytes = work[base.key]
    return sorted(tasks.values(), key=lambda t: -t.weight * t.flops)
