"""What a compiled model looks like after the graph optimizer and the memory plan.

Shared by ``manifest.json``'s ``stats``, ``packager inspect --plan`` and
``bench/graph_stats.py``: the kernel calls with the ops each one fuses, and the memory
plan (each arena tensor's bytes, offset, lifetime and storage) with its totals.
"""

from __future__ import annotations

from .ir import Graph, Node
from .memory import MemoryPlan, align
from .plan_png import Rect, draw_plan


def group_ops(node: Node) -> list[str]:
    """The op types a kernel computes: a fused node's members, else its own op."""
    if node.op != "fused":
        return [node.op]
    inner = node.attrs.get("ops") or node.attrs.get("nodes") or []
    ops = [m if isinstance(m, str) else getattr(m, "op", None) or m.get("op") for m in inner]
    return [str(op) for op in ops] or ["fused"]


def plan_stats(graph: Graph, plan: MemoryPlan, num_kernels: int) -> dict:
    """manifest.json's ``stats`` (see docs/bundle-format.md)."""
    return {
        "kernels": num_kernels,
        "nodes": len(graph.nodes),
        "fused_groups": [group_ops(n) for n in graph.nodes],
        "arena_bytes": plan.arena_bytes,
        "no_reuse_bytes": plan.no_reuse_bytes,
        "live_lower_bound_bytes": plan.live_lower_bound_bytes,
        "inplace_nodes": len(plan.inplace),
        "params_bytes": sum(v.nbytes for v in graph.consts()),
    }


def _shape(graph: Graph, name: str) -> str:
    v = graph.values[name]
    dims = "x".join(str(d) for d in v.shape) or "scalar"
    return dims if v.dtype == "float32" else f"{dims} {v.dtype}"


def kernel_rows(graph: Graph, funcs: list[str]) -> list[list[str]]:
    """One row per kernel call: step, function, ops, input shapes, output shapes."""
    rows = []
    for step, (node, func) in enumerate(zip(graph.nodes, funcs, strict=True)):
        ins = [_shape(graph, i) for i in node.inputs if not graph.values[i].is_const]
        outs = [_shape(graph, o) for o in node.outputs]
        name = func or f"({node.op}: subgraphs)"  # a control-flow node calls no kernel
        rows.append([str(step), name, "+".join(group_ops(node)), ", ".join(ins), ", ".join(outs)])
    return rows


def memory_rows(graph: Graph, plan: MemoryPlan) -> list[list[str]]:
    """One row per arena tensor, in the order written."""
    rows = []
    for k, (name, (first, last)) in enumerate(plan.lifetimes.items()):
        sid = plan.storage_of[name]
        offset = plan.storage[sid]["offset"]
        nbytes = graph.values[name].nbytes
        rows.append([str(k), name, f"{nbytes:,}", f"{offset:,}", str(first), str(last), str(sid)])
    return rows


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """Aligned columns; those in ``right`` (numbers) flush right."""
    widths = [max(len(r[c]) for r in [headers, *rows]) for c in range(len(headers))]

    def line(cells):
        out = [
            c.rjust(w) if k in right else c.ljust(w)
            for k, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def totals(stats: dict) -> list[str]:
    arena, bound, flat = (
        stats["arena_bytes"],
        stats["live_lower_bound_bytes"],
        stats["no_reuse_bytes"],
    )
    return [
        f"kernel calls: {stats['nodes']} ({stats['kernels']} distinct kernels)",
        f"arena: {arena:,} bytes",
        f"live lower bound: {bound:,} bytes (arena / bound {_ratio(arena, bound)})",
        f"no reuse: {flat:,} bytes (arena / no reuse {_ratio(arena, flat)})",
        f"in place: {stats['inplace_nodes']} kernel calls write over a dying input",
        f"params: {stats['params_bytes']:,} bytes",
    ]


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.3f}" if b else "-"


def render(
    graph: Graph,
    plan: MemoryPlan,
    funcs: list[str],
    num_kernels: int,
    placement=None,
    gpu_lines: bool = True,
) -> str:
    """The text ``packager inspect --plan`` prints. ``placement``: function -> (device,
    why it is not on the GPU) for a board with a GPU or an accelerator: a device column,
    and (``gpu_lines``) the reasons kernels are not on the GPU."""
    rows = kernel_rows(graph, funcs)
    headers = ["step", "kernel", "ops", "inputs", "outputs"]
    if placement:
        headers.insert(2, "device")
        for row, func in zip(rows, funcs, strict=True):
            row.insert(2, placement[func][0])
    kernels = table(headers, rows, {0})
    memory = table(
        ["#", "tensor", "bytes", "offset", "first", "last", "storage"],
        memory_rows(graph, plan),
        {0, 2, 3, 4, 5, 6},
    )
    stats = plan_stats(graph, plan, num_kernels)
    parts = ["kernels:", kernels, "", "memory plan (arena tensors; steps are kernel calls):"]
    parts += [memory, "", *totals(stats)]
    if placement and gpu_lines:
        parts += ["", *placement_lines(funcs, placement)]
    return "\n".join(parts)


def placement_lines(funcs: list[str], placement: dict) -> list[str]:
    """How many kernel calls run on the GPU, and why each CPU kernel is not there."""
    on_gpu = sum(placement[f][0] != "cpu" for f in funcs)
    out = [f"on the GPU: {on_gpu} of {len(funcs)} kernel calls"]
    for func in dict.fromkeys(funcs):
        device, why = placement[func]
        if device == "cpu":
            out.append(
                f"  {func or 'a control-flow node'} runs on the CPU: {why or 'no GPU schedule'}"
            )
    return out


def plan_png(graph: Graph, plan: MemoryPlan) -> bytes:
    """The picture of ``inspect --plan-png``: rectangles coloured by the kind of op that
    writes them (legend), labelled with the tensor's name, else the table's #."""
    writer = {name: node for node in graph.nodes for name in node.outputs}
    kinds: dict[str, int] = {}  # op kind -> colour key, in order of first appearance
    rects = []
    for k, (name, (first, last)) in enumerate(plan.lifetimes.items()):
        sid = plan.storage_of[name]
        size = align(graph.values[name].nbytes)
        key = kinds.setdefault(group_ops(writer[name])[0], len(kinds))
        rects.append(Rect(name, first, last, plan.storage[sid]["offset"], size, key, str(k)))
    stats = plan_stats(graph, plan, 0)
    title = (
        f"{graph.name}: arena {_mib(plan.arena_bytes)}, live bound "
        f"{_mib(stats['live_lower_bound_bytes'])}, no reuse {_mib(stats['no_reuse_bytes'])}"
    )
    return draw_plan(rects, len(graph.nodes), plan.arena_bytes, title, list(kinds))


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"
