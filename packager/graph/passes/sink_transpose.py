"""Transposes move down through slices and elementwise ops until they cancel.

A spectrogram exported from PyTorch transposes (frames, bins) to (bins, frames), slices
the real and imaginary halves, squares and adds them, then transposes back for the mel
product: two transposes around work that does not care about the order of its axes.
Each Transpose whose every reader is a slice, an elementwise op (the other operand a
scalar or a Transpose by the same perm) or another Transpose moves below those
readers: the slice's axes map through the perm, the elementwise op runs on the
untransposed tensor. Transposes that meet compose; an identity perm leaves an identity
node (removed at the end). Runs before fold_transpose, which takes what remains
into the matmuls.
"""

from __future__ import annotations

from dataclasses import replace

from ...ops.registry import get_op
from ..ir import Graph, Node, Value
from ..uses import consumers, producers
from .remove_identity import remove_identity

# Elementwise binary ops (same-shape operands, or a scalar) a transpose commutes with.
_BINARY = {"add", "sub", "mul", "div", "pow", "max", "min"}


def _perm(node: Node) -> list[int]:
    return [int(p) for p in node.attrs["perm"]]


class _Sinker:
    def __init__(self, graph: Graph):
        self.g = graph
        self.nodes = list(graph.nodes)
        self.values = dict(graph.values)
        self.prod, self.cons = producers(graph), consumers(graph)

    def value(self, name: str, shape, like: str) -> str:
        self.values[name] = Value(name, tuple(shape), self.values[like].dtype)
        return name

    def partner(self, reader: Node, name: str, perm: list[int]) -> str | None:
        """The untransposed other operand of binary ``reader``: a scalar as is, a
        transpose by ``perm`` read by ``reader`` alone through its input; else None."""
        (other,) = [i for i in reader.inputs if i != name] or [name]
        v = self.values[other]
        if other == name:
            return name
        if v.is_const and v.data.size == 1:
            return other
        k = self.prod.get(other)
        tr = self.nodes[k] if k is not None else None
        alone = len(self.cons.get(other, [])) == 1 and other not in self.g.outputs
        if tr is not None and tr.op == "transpose" and _perm(tr) == perm and alone:
            return tr.inputs[0]
        return None

    def below(self, reader: Node, t: Node) -> list[Node] | None:
        """``reader`` of transpose ``t``'s output rewritten to read t's input, followed
        by the transpose (or identity) that gives its old output; None: it cannot."""
        x, out, perm = t.inputs[0], t.outputs[0], _perm(t)
        shape = self.values[x].shape
        rname = reader.outputs[0]
        if reader.op == "transpose":
            composed = [perm[q] for q in _perm(reader)]
            if composed == list(range(len(perm))):
                return [Node("identity", reader.name, [x], [rname], {}, reader.source)]
            return [replace(reader, inputs=[x], attrs={"perm": composed})]
        if reader.op == "slice":
            axes = reader.attrs.get("axes")
            axes = list(range(len(reader.attrs["starts"]))) if axes is None else axes
            new_axes = [perm[int(a) % len(perm)] for a in axes]
            attrs = {**reader.attrs, "axes": new_axes}
            rshape = self.values[rname].shape
            inner = [0] * len(perm)
            for i, p in enumerate(perm):
                inner[p] = rshape[i]
            mid = self.value(f"{rname}__pre", inner, rname)
            sl = replace(reader, inputs=[x], outputs=[mid], attrs=attrs)
            return [sl, Node("transpose", f"{reader.name}_t", [mid], [rname], {"perm": perm})]
        pattern = get_op(reader.op).pattern
        if pattern == "elementwise" and len(reader.inputs) == 1:
            ins = [x]
        elif reader.op in _BINARY and len(reader.inputs) == 2:
            other = self.partner(reader, out, perm)
            if other is None:
                return None
            ins = [x if i == out else other for i in reader.inputs]
        else:
            return None
        if len(reader.outputs) != 1 or self.values[rname].shape != self.values[out].shape:
            return None
        mid = self.value(f"{rname}__pre", shape, rname)
        moved = replace(reader, inputs=ins, outputs=[mid])
        return [moved, Node("transpose", f"{reader.name}_t", [mid], [rname], {"perm": perm})]

    def step(self) -> bool:
        """Sink one transpose below all its readers; False when none can move."""
        for k, t in enumerate(self.nodes):
            if t.op != "transpose" or t.outputs[0] in self.g.outputs:
                continue
            readers = self.cons.get(t.outputs[0], [])
            if not readers:
                continue
            rewritten = {r: self.below(self.nodes[r], t) for r in readers}
            if any(v is None for v in rewritten.values()):
                continue
            nodes = []
            for j, n in enumerate(self.nodes):
                if j != k:
                    nodes += rewritten.get(j, [n])
            self.nodes = nodes
            g = replace(self.g, nodes=nodes, values=self.values)
            self.prod, self.cons = producers(g), consumers(g)
            return True
        return False


def sink_transpose(graph: Graph, ctx=None) -> Graph:
    s = _Sinker(graph)
    moved = False
    for _ in range(4 * len(graph.nodes)):  # each step removes or lowers one transpose
        if not s.step():
            break
        moved = True
    if not moved:
        return graph
    nodes = [n for n in s.nodes if n is not None]
    return remove_identity(replace(graph, nodes=nodes, values=s.values))
