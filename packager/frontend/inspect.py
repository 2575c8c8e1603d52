"""What `packager inspect` reports: ops with their support status, inputs, outputs."""

from __future__ import annotations

from collections import Counter

import onnx

from ..errors import PackagerError
from .converters.registry import get_converter
from .importer import (
    DEFAULT_DOMAINS,
    SHAPE_ONLY,
    freeze_inputs,
    graph_input_shapes,
    input_dims,
    load_model,
    model_opset,
    type_name,
    warn_new_opset,
)


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    """Declared dims (None: rank not declared); a -1 shows as ``?``, as it means."""
    return input_dims(vi)


def _elem(vi: onnx.ValueInfoProto) -> str:
    return type_name(vi.type.tensor_type.elem_type).lower()


RUNTIME_FLOW = "runtime control flow (its subgraphs run on the CPU)"


def inspect_model(
    path: str, input_shapes: dict | None = None, input_values: dict | None = None
) -> dict:
    model, _ = freeze_inputs(load_model(path), input_values or {}, path)
    warn_new_opset(model, path)
    try:
        fixed = graph_input_shapes(model, input_shapes, path)
    except PackagerError:
        fixed = {}  # dynamic dims left open: still worth a report
    inits = {t.name for t in model.graph.initializer}
    consts = set(inits)
    counts: Counter = Counter()
    status: dict[str, str] = {}
    for node in model.graph.node:
        op = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        counts[op] += 1
        present = [i for i in node.input if i]
        if op == "If":  # its taken branch replaces it when the condition is known now
            known = bool(present) and present[0] in consts
            if status.get(op) != RUNTIME_FLOW:
                status[op] = "branch inlined at package time" if known else RUNTIME_FLOW
        elif op in ("Loop", "Scan"):
            status[op] = RUNTIME_FLOW
        elif node.op_type in SHAPE_ONLY or all(i in consts for i in present):
            consts.update(node.output)
            status.setdefault(op, "folded at package time")
        elif node.domain in DEFAULT_DOMAINS and get_converter(node.op_type):
            status[op] = "supported"
        else:
            status[op] = "UNSUPPORTED"
    inputs = [
        {
            "name": vi.name,
            "dtype": _elem(vi),
            "shape": list(fixed[vi.name][0]) if vi.name in fixed else _dims(vi),
        }
        for vi in model.graph.input
        if vi.name not in inits
    ]
    outputs = [
        {"name": vi.name, "dtype": _elem(vi), "shape": _dims(vi)} for vi in model.graph.output
    ]
    return {
        "opset": model_opset(model),
        "nodes": len(model.graph.node),
        "inputs": inputs,
        "outputs": outputs,
        "ops": {op: {"count": n, "status": status[op]} for op, n in counts.most_common()},
        "unsupported": sorted(op for op, s in status.items() if s == "UNSUPPORTED"),
    }
