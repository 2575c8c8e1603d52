"""ONNX If (with a runtime condition), Loop and Scan as control-flow nodes of the graph.

Each subgraph becomes a Graph of its own, imported like the main one: its inputs are its
formal inputs (a Loop body's iteration number, condition and carried values) followed by
the outer runtime values it reads (captures); outer constants are copied in as its own.
The node's inputs are the same list on the outer side, so the runtime binds them by
position. Scan is rewritten as a Loop over its sequence axis (docs/bundle-format.md,
"Control flow")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..errors import PackagerError
from ..graph.ir import Graph, Node, Value
from .context import ConvertContext

# A Loop whose trip count is known only at run time (or absent) runs at most this many
# iterations; past it the runtime stops with an error instead of hanging.
DEFAULT_MAX_TRIPS = 1 << 20


def free_names(body: onnx.GraphProto) -> list[str]:
    """Names ``body`` (and the subgraphs inside it) reads from the scope around it."""
    defined = {i.name for i in body.input} | {t.name for t in body.initializer}
    used: list[str] = []
    for node in body.node:
        inner = [n for a in node.attribute for g in _graphs(a) for n in free_names(g)]
        for name in [*node.input, *inner]:
            if name and name not in defined and name not in used:
                used.append(name)
        defined.update(o for o in node.output if o)
    used += [o.name for o in body.output if o.name not in defined and o.name not in used]
    return used


def _graphs(attr: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)


@dataclass(frozen=True)
class Importer:
    """What importing a subgraph needs of the importer (which imports this module)."""

    import_nodes: Callable  # (onnx nodes, ctx, out list, max_bytes) -> None
    load_initializer: Callable  # (TensorProto, path, max_bytes) -> Value
    kernel_dtypes: frozenset  # dtypes a tensor crossing a node may have
    max_bytes: int | None


def import_subgraph(ctx: ConvertContext, onode, body, formal, imp: Importer):
    """The Graph of ``body`` with ``formal`` [(name, shape, dtype)] inputs, and the outer
    runtime names it captures (its inputs after the formal ones)."""
    values = {n: Value(n, tuple(s), d) for n, s, d in formal}
    for t in body.initializer:
        values[t.name] = imp.load_initializer(t, ctx.model_path, imp.max_bytes)
    captures = []
    for name in free_names(body):
        if name in values:
            continue
        v = ctx.values.get(name)
        if v is None:
            ctx.fail(onode, f"its subgraph '{body.name}' reads '{name}', which no node computes")
        values[name] = v if v.is_const else Value(name, v.shape, v.dtype)
        if not v.is_const:
            captures.append(name)
    sub = ConvertContext(values, ctx.opset, ctx.model_path)
    nodes: list[Node] = []
    imp.import_nodes(body.node, sub, nodes, imp.max_bytes)
    outs = [o.name for o in body.output]
    for name in outs:
        if name not in values:
            ctx.fail(onode, f"subgraph output '{name}' is produced by no node")
        if values[name].dtype not in imp.kernel_dtypes:  # a sequence or an optional
            ctx.fail(
                onode,
                f"subgraph output '{name}' is a {values[name].dtype} value, not a "
                "tensor: only tensors cross a control-flow node",
            )
    inputs = [n for n, _, _ in formal] + captures
    return Graph(body.name or "body", inputs, outs, nodes, values), captures


def _types(graph: Graph, names) -> list[tuple[tuple[int, ...], str]]:
    return [(graph.values[n].shape, graph.values[n].dtype) for n in names]


def runtime_if(ctx, onode, nodes, imp: Importer) -> None:
    """An If whose condition is computed at run time: both branches are compiled."""
    cond = ctx.values[onode.input[0]]
    if cond.dtype != "bool" or int(np.prod(cond.shape)) != 1:
        ctx.fail(onode, f"the condition is {cond.dtype}{list(cond.shape)}, not one bool")
    branches, captures = [], []
    for attr in ("then_branch", "else_branch"):
        try:
            g, caps = import_subgraph(ctx, onode, ctx.attr(onode, attr), [], imp)
        except PackagerError as e:
            ctx.fail(onode, _branch_refused(attr, onode.input[0], nodes, ctx, e))
        branches.append(g)
        captures += [c for c in caps if c not in captures]
    types = None
    for which, g in zip(("then", "else"), branches, strict=True):
        # both branches take every capture, in one order: the node's inputs after cond
        g.inputs = list(captures)
        for name in captures:
            g.values.setdefault(name, Value(name, ctx.values[name].shape, ctx.values[name].dtype))
        t = _types(g, g.outputs)
        if len(t) != len(onode.output):
            ctx.fail(
                onode,
                f"the {which} branch gives {len(t)} outputs, the node has {len(onode.output)}",
            )
        if types is not None and t != types:
            ctx.fail(
                onode,
                "its branches give outputs of different shapes or dtypes "
                f"(then {_text(types)}, else {_text(t)}): a bundle's shapes are static",
            )
        types = t
    outs = [o or ctx.fresh("unused") for o in onode.output]
    node = ctx.node(
        "if", onode, [onode.input[0], *captures], outputs=outs, out_types=types, subgraphs=branches
    )
    _add(ctx, node, types, nodes)


def _branch_refused(attr: str, cond: str, nodes, ctx, e: PackagerError) -> str:
    """Why a run-time If cannot be packaged: one branch does not take the packaged
    shapes; and, as it usually depends on one, which graph inputs decide the condition
    (a value given for them keeps only the branch taken)."""
    inputs = _inputs_behind(cond, nodes, ctx)
    hint = (
        f"; the condition depends on {', '.join(repr(n) for n in inputs)}: give "
        f"{' '.join(f'--input-value {n}=V' for n in inputs)} to package only the branch it takes"
        if inputs
        else ""
    )
    return (
        f"its condition is known only at run time, so both branches are packaged, and the "
        f"{attr.split('_')[0]} branch does not take these shapes ({e}){hint}"
    )


def _inputs_behind(name: str, nodes, ctx) -> list[str]:
    """The graph inputs ``name`` is computed from, through the nodes converted so far."""
    made = {o: n for n in nodes for o in n.outputs}
    seen, todo, found = set(), [name], []
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in made:
            todo += [i for i in made[v].inputs if i]
        elif v in ctx.values and not ctx.values[v].is_const:
            found.append(v)
    return sorted(found)


def _text(types) -> str:
    return ", ".join(f"{d}{list(s)}" for s, d in types)


def _add(ctx, node: Node, types, nodes) -> None:
    for name, (shape, dtype) in zip(node.outputs, types, strict=True):
        ctx.values[name] = Value(name, tuple(shape), dtype)
    nodes.append(node)


def loop(ctx, onode, nodes, imp: Importer) -> None:
    """A Loop: inputs [trip count, condition, carried...] (absent ones made constants),
    body inputs [iteration, condition, carried...], outputs [carried..., scans...]."""
    ins = list(onode.input) + [""] * (2 - len(onode.input))
    carried = ins[2:]
    trips = ctx.values[ins[0]].data if ins[0] else None
    trip_name = ins[0] or ctx.add_const(np.array(np.iinfo(np.int64).max, np.int64), "trips")
    cond_name = ins[1] or ctx.add_const(np.array(True), "cond")
    for name, want in ((trip_name, "int64"), (cond_name, "bool")):
        v = ctx.values[name]
        if v.dtype != want or int(np.prod(v.shape)) != 1:
            ctx.fail(onode, f"input '{name}' is {v.dtype}{list(v.shape)}, not one {want}")
    body = ctx.attr(onode, "body")
    if len(body.input) != 2 + len(carried):
        ctx.fail(onode, f"the body takes {len(body.input)} inputs, not 2 + {len(carried)}")
    formal = [(body.input[0].name, (), "int64"), (body.input[1].name, (), "bool")]
    formal += [
        (b.name, ctx.values[c].shape, ctx.values[c].dtype)
        for b, c in zip(body.input[2:], carried, strict=True)
    ]
    g, captures = import_subgraph(ctx, onode, body, formal, imp)
    heads = _types(g, g.outputs)
    nscan = len(heads) - 1 - len(carried)
    if nscan < 0 or heads[0][1] != "bool" or int(np.prod(heads[0][0])) != 1:
        ctx.fail(onode, "the body must give the condition, then each carried value")
    for (shape, dtype), c in zip(heads[1 : 1 + len(carried)], carried, strict=True):
        v = ctx.values[c]
        if (tuple(shape), dtype) != (v.shape, v.dtype):
            ctx.fail(
                onode,
                f"carried value '{c}' is {v.dtype}{list(v.shape)} going in and "
                f"{dtype}{list(shape)} coming out of the body: shapes must be static",
            )
    max_trips = DEFAULT_MAX_TRIPS
    if trips is not None:
        max_trips = max(0, int(np.asarray(trips).reshape(-1)[0]))
    elif nscan:
        ctx.fail(
            onode,
            "a Loop with scan outputs needs a trip count known at package time "
            "(the scan outputs' shapes are static)",
        )
    types = [(ctx.values[c].shape, ctx.values[c].dtype) for c in carried]
    types += [((max_trips, *s), d) for s, d in heads[1 + len(carried) :]]
    outs = [o or ctx.fresh("unused") for o in onode.output]
    if len(outs) != len(types):
        ctx.fail(onode, f"the node has {len(outs)} outputs, its body gives {len(types)}")
    node = ctx.node(
        "loop",
        onode,
        [trip_name, cond_name, *carried, *captures],
        outputs=outs,
        out_types=types,
        subgraphs=[g],
        num_carried=len(carried),
        max_trips=max_trips,
    )
    _add(ctx, node, types, nodes)


def scan_as_loop(ctx, onode, run) -> None:
    """ONNX nodes computing a Scan (opset >= 9) with a Loop over its sequence axis: the body
    gathers element i (or L-1-i, reversed) of each scan input; stacked scan outputs are
    reversed and moved to their axis after the loop."""
    if ctx.opset < 9:
        ctx.fail(onode, "Scan before opset 9 (with sequence lengths) is not supported")
    body = ctx.attr(onode, "body")
    nscan_in = ctx.attr(onode, "num_scan_inputs")
    nstate = len(onode.input) - nscan_in
    scan_ins = list(onode.input[nstate:])
    in_axes = ctx.attr(onode, "scan_input_axes") or [0] * nscan_in
    in_dirs = ctx.attr(onode, "scan_input_directions") or [0] * nscan_in
    nscan_out = len(body.output) - nstate
    out_axes = ctx.attr(onode, "scan_output_axes") or [0] * nscan_out
    out_dirs = ctx.attr(onode, "scan_output_directions") or [0] * nscan_out
    ranks = [len(ctx.values[s].shape) for s in scan_ins]
    axes = [a % r for a, r in zip(in_axes, ranks, strict=True)]
    lengths = {ctx.values[s].shape[a] for s, a in zip(scan_ins, axes, strict=True)}
    if len(lengths) != 1:
        ctx.fail(onode, f"its scan inputs have different sequence lengths {sorted(lengths)}")
    (length,) = lengths
    p = ctx.fresh(onode.name or "scan")
    it, cond = f"{p}/i", f"{p}/cond"
    inner = [helper.make_node("Identity", [cond], [f"{p}/cond_out"])]
    rev = f"{p}/rev"
    inner.append(helper.make_node("Sub", [f"{p}/last", it], [rev]))
    for k, (s, a, d) in enumerate(zip(scan_ins, axes, in_dirs, strict=True)):
        idx = rev if d else it
        inner.append(helper.make_node("Gather", [s, idx], [body.input[nstate + k].name], axis=a))
    inner += list(body.node)
    last = helper.make_tensor(f"{p}/last", onnx.TensorProto.INT64, [], [length - 1])
    vi = helper.make_tensor_value_info
    loop_body = helper.make_graph(
        inner,
        f"{p}/body",
        [vi(it, onnx.TensorProto.INT64, []), vi(cond, onnx.TensorProto.BOOL, [])]
        + list(body.input[:nstate]),
        [vi(f"{p}/cond_out", onnx.TensorProto.BOOL, [])] + list(body.output),
        [last, *body.initializer],
    )
    trips = ctx.add_const(np.array(length, np.int64), f"{p}/trips")
    stacked = [f"{p}/stacked{k}" for k in range(nscan_out)]
    run(
        [
            helper.make_node(
                "Loop",
                [trips, "", *onode.input[:nstate]],
                list(onode.output[:nstate]) + stacked,
                body=loop_body,
            )
        ]
    )
    out = []
    for k, (name, a, d) in enumerate(zip(stacked, out_axes, out_dirs, strict=True)):
        final = onode.output[nstate + k]
        rank = len(ctx.values[name].shape)
        if d:
            rname = f"{name}/reversed"
            order = ctx.add_const(np.arange(length - 1, -1, -1, dtype=np.int64), f"{p}/order")
            out.append(helper.make_node("Gather", [name, order], [rname], axis=0))
            name = rname
        a = a % rank
        if a:
            perm = list(range(1, a + 1)) + [0] + list(range(a + 1, rank))
            out.append(helper.make_node("Transpose", [name], [final], perm=perm))
        else:
            out.append(helper.make_node("Identity", [name], [final]))
    run(out)
