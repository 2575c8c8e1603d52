"""Remove identity nodes (ONNX Identity, Dropout at inference) by renaming values.

An identity whose output is an intermediate disappears: its readers read its input.
When its output is a model output, the model's name must survive, so the input is
renamed to it instead (its producer writes the output directly) — unless the input is
a model input, a constant or another output, which need their own storage: then the
identity stays as a copy.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph


def remove_identity(graph: Graph, ctx=None) -> Graph:
    outputs = set(graph.outputs)
    fixed = set(graph.inputs) | outputs
    alias: dict[str, str] = {}

    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    kept = []
    for node in graph.nodes:
        if node.op == "identity":
            src, dst = resolve(node.inputs[0]), node.outputs[0]
            if dst not in outputs:
                alias[dst] = src
                continue
            if src not in fixed and not graph.values[src].is_const:
                alias[src] = dst  # a second identity of src then copies dst
                continue
        kept.append(node)
    nodes = [
        replace(n, inputs=[resolve(i) for i in n.inputs], outputs=[resolve(o) for o in n.outputs])
        for n in kept
    ]
    return replace(graph, nodes=nodes)
