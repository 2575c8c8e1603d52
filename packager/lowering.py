"""Graph to kernels: each node's compute, through its schedule, to a C function.

Nodes that compute the same thing (op, attributes, input shapes and dtypes) share one
kernel. Names are given in graph order, so the same graph always gives the same sources.
The target (packager/target.py) chooses each op's template by its family and gives the
templates its facts; without one, lowering uses the generic cpu target.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from . import te
from .codegen.c import codegen_c
from .codegen.opencl import GPU_DTYPES, Launch, check_kernel, codegen_opencl
from .errors import PackagerError
from .graph.ir import Graph, Node
from .graph.memory import MemoryPlan
from .ops.knobs import Config
from .ops.opencl.generic import gpu_default_schedule
from .ops.registry import ScheduleContext, get_op
from .target import CpuTarget, Target
from .te.alias import allow_alias
from .te.ir import PrimFunc
from .te.passes import insert_barriers
from .te.schedule import default_schedule

# The schedule of an op whose family has no template of its own.
GENERIC = {"cpu": default_schedule, "opencl": gpu_default_schedule}


@dataclass
class Kernel:
    func: str  # function name
    source: str  # the translation unit (C; for opencl, the kernel alone in OpenCL C)
    op: str
    # One "dtype[d0,d1,...]" per argument (inputs, then outputs): the runtime checks every
    # node calling the function against it (docs/bundle-format.md, Kernels).
    signature: tuple[str, ...] = ()
    device: str = "cpu"  # the family it runs on: cpu | opencl | accel
    launch: Launch | None = None  # opencl: work sizes
    # accel: the accelerator's program (packager/accel/program.py), named ``func``
    program: object | None = field(default=None, repr=False, compare=False)
    prim: PrimFunc | None = field(default=None, repr=False, compare=False)
    # Why a node that could have run on the board's GPU runs on the CPU ("" otherwise).
    cpu_reason: str = ""
    key: str = ""  # kernel_key of its node (a tuning task's key), set by lower_graph


def arg_signature(shape, dtype: str) -> str:
    """An argument as kernels/registry.c spells it: float32[1,3,8,8]; a scalar is float32[]."""
    return f"{dtype}[{','.join(str(int(d)) for d in shape)}]"


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
    if "subgraphs" in node.attrs:  # a control-flow node: no kernel of its own, none shared
        return json.dumps([node.op, node.name])
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


ANCHORS = ("out_elemwise_fusable", "reduction")


def node_computes(node: Node, graph: Graph):
    """Placeholders for the node's inputs, its output tensors, and its anchor: (op name,
    attrs, tensor) of the op whose schedule template applies. A fused node builds each
    inner op's compute on the tensors of its inputs, so the group is one tensor
    expression and its schedule can inline producers into consumers."""
    args = [
        te.placeholder(graph.values[i].shape, graph.values[i].dtype, f"in{k}")
        for k, i in enumerate(node.inputs)
    ]
    if node.op != "fused":
        outs = list(get_op(node.op).compute(args, node.attrs))
        return args, outs, (node.op, node.attrs, outs[0])
    env = dict(zip(node.inputs, args, strict=True))
    anchor = None
    for n in node.attrs["nodes"]:
        outs = get_op(n["op"]).compute([env[i] for i in n["inputs"]], n["attrs"])
        env.update(zip(n["outputs"], outs, strict=True))
        if anchor is None and get_op(n["op"]).pattern in ANCHORS:
            anchor = (n["op"], n["attrs"], outs[0])
    outs = [env[o] for o in node.outputs]
    return args, outs, anchor or (None, {}, outs[0])


def schedule_for(outs, anchor, target: Target | None = None, knobs: dict | None = None):
    """The anchor op's template for the target's family if it has one, else the generic
    schedule."""
    target = target or CpuTarget()
    op, attrs, tensor = anchor
    template = get_op(op).schedules.get(target.family) if op else None
    if template is None:
        if target.family not in GENERIC:
            raise PackagerError(f"{op or 'this kernel'} has no schedule for {target.family}")
        return GENERIC[target.family](outs, target)
    return template(ScheduleContext(outs, tensor, attrs, Config(dict(knobs or {})), target))


def lower_node(
    node: Node, graph: Graph, func: str, target: Target | None = None, inplace=(), knobs=None
) -> Kernel:
    """``inplace``: (output position, input position) pairs the memory plan lets share
    a buffer; the kernel is checked to allow it and generated without ``restrict`` there."""
    with te.fresh_names():
        args, outs, anchor = node_computes(node, graph)
    sch = schedule_for(outs, anchor, target, knobs)
    try:
        prim = allow_alias(te.lower(sch, args + outs, func), inplace, len(args))
    except Exception as e:
        raise PackagerError(f"node '{node.source}' ({node.op}): lowering failed: {e}") from e
    if target is not None and target.family == "opencl":  # work-groups share local memory
        prim = insert_barriers(prim)
    values = [graph.values[n] for n in [*node.inputs, *node.outputs]]
    signature = tuple(arg_signature(v.shape, v.dtype) for v in values)
    if target is None or target.family == "cpu":
        return Kernel(func, codegen_c(prim), node.op, signature, prim=prim)
    try:
        launch = check_kernel(prim, target)
        source = codegen_opencl(prim)
    except PackagerError as e:
        raise PackagerError(f"node '{node.source}' ({node.op}): {e}") from e
    return Kernel(func, source, node.op, signature, "opencl", launch, prim=prim)


# Ops the accelerator runs, each node one program (graph/passes/place_accel.py).
ACCEL_OPS = ("accel_conv2d", "accel_dense")


def lower_accel(node: Node, graph: Graph, func: str, target: Target, knobs=None) -> Kernel:
    """The node as a program of the board's accelerator: its accel schedule, lowered,
    through the accelerator's code generator (one argument per input and output)."""
    try:
        from .accel.codegen import codegen_accel
    except ImportError as e:
        raise PackagerError(
            f"node '{node.source}' ({node.op}): the accelerator's code generator is "
            f"missing from this packager ({e})"
        ) from e
    with te.fresh_names():
        args, outs, anchor = node_computes(node, graph)
    values = [graph.values[n] for n in [*node.inputs, *node.outputs]]
    signature = tuple(arg_signature(v.shape, v.dtype) for v in values)
    try:
        prim = te.lower(schedule_for(outs, anchor, target, knobs), args + outs, func)
        program = codegen_accel(prim, target, len(args) + len(outs))
    except (PackagerError, ValueError, NotImplementedError) as e:
        raise PackagerError(f"node '{node.source}' ({node.op}): accelerator: {e}") from e
    program.name = func  # the runtime finds a node's program by its function's name
    return Kernel(func, "", node.op, signature, "accel", prim=prim, program=program)


def gpu_obstacle(node: Node, graph: Graph) -> str:
    """Why the node cannot run on a GPU whatever its schedule ("" when it can)."""
    for n in [*node.inputs, *node.outputs]:
        if graph.values[n].dtype not in GPU_DTYPES:
            return f"{graph.values[n].dtype} has no GPU kernels"
    return ""


def place_node(node, graph, func, targets, inplace=(), knobs_for=None) -> Kernel:
    """The node's kernel on the first of ``targets`` (the GPU first when the board has
    one) whose lowering takes it; a node the GPU cannot take runs on the CPU, with the
    reason recorded in the kernel. ``knobs_for(target)``: tuned knobs of the node's
    kernel on that target, or None for its template's defaults (a tuned setting the GPU
    or the accelerator refuses falls back to the defaults there). An accelerator op goes
    to the board's accel target when ``targets`` has one, else to the CPU (its generic
    schedule)."""
    *others, cpu = targets
    knobs_for = knobs_for or (lambda target: None)
    accel = [t for t in others if t.family == "accel"]
    if node.op in ACCEL_OPS and accel:
        tuned = knobs_for(accel[0])
        if tuned:
            try:
                return lower_accel(node, graph, func, accel[0], tuned)
            except PackagerError:  # a tuned setting the accelerator refuses: the defaults
                pass
        return lower_accel(node, graph, func, accel[0])
    gpus = [t for t in others if t.family != "accel"]
    reason = ""
    for gpu in gpus:
        reason = gpu_obstacle(node, graph)
        if reason:
            break
        tuned = knobs_for(gpu)
        for knobs in [tuned, None] if tuned else [None]:
            try:
                return lower_node(node, graph, func, gpu, inplace, knobs)
            except (PackagerError, ValueError, NotImplementedError, TypeError) as e:
                reason = str(e)  # a template or the GPU check refused the node
    kernel = lower_node(node, graph, func, cpu, inplace, knobs_for(cpu))
    kernel.cpu_reason = reason
    return kernel


def lower_graph(
    graph: Graph,
    plan: MemoryPlan | None = None,
    target: Target | None = None,
    progress=None,
    knobs_for=None,
    gpu: Target | None = None,
    accel: Target | None = None,
) -> tuple[list[Kernel], list[str]]:
    """Kernels (unique) and, per node, the name of the function it calls. ``knobs_for(key,
    node, graph, inplace, target)``: tuned knobs for a kernel on that target, or None for
    the template's defaults.
    With a ``gpu`` target each node runs there when it can, else on ``target``; with an
    ``accel`` target the accelerator's ops run there."""
    by_key: dict[str, Kernel] = {}
    targets = [t for t in (gpu, accel, target or CpuTarget()) if t is not None]
    funcs = _lower_into(graph, plan, by_key, targets, progress, knobs_for)
    return list(by_key.values()), funcs


def _lower_into(graph, plan, by_key, targets, progress=None, knobs_for=None) -> list[str]:
    """Lower ``graph``'s nodes into ``by_key`` (kernels shared by every graph of the
    bundle) and return each node's function. A control-flow node calls no function ("");
    its subgraphs are planned and lowered here, for the CPU only, into
    ``attrs["plans"]`` and ``attrs["funcs"]``."""
    from .graph.memory import plan_memory

    funcs: list[str] = []
    inplace = plan.inplace if plan else {}
    for k, node in enumerate(graph.nodes):
        if "subgraphs" in node.attrs:
            plans = [plan_memory(g) for g in node.attrs["subgraphs"]]
            node.attrs["plans"] = plans
            node.attrs["funcs"] = [
                _lower_into(g, p, by_key, targets[-1:], None, knobs_for)
                for g, p in zip(node.attrs["subgraphs"], plans, strict=True)
            ]
            funcs.append("")
            continue
        key = kernel_key(node, graph, inplace.get(k, ()))
        if len(targets) == 1 and key in by_key and by_key[key].device != targets[0].family:
            key += "#" + targets[0].family  # a subgraph's own CPU kernel
        if key not in by_key:
            name = f"k_{len(by_key)}_{_label(node)}"
            pairs = inplace.get(k, ())
            knobs = _knobs_on(knobs_for, key, node, graph, pairs)
            by_key[key] = place_node(node, graph, name, targets, pairs, knobs)
            by_key[key].key = key
        funcs.append(by_key[key].func)
        if progress:
            progress(k + 1, len(graph.nodes))
    return funcs


def _knobs_on(knobs_for, key, node, graph, pairs):
    """``knobs_for`` bound to one kernel: a function of the target it is lowered for."""
    if knobs_for is None:
        return None
    return lambda target: knobs_for(key, node, graph, pairs, target)


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
