"""LayerNorm written out by an exporter becomes one layer_norm node.

Exporters without the LayerNormalization op (opset < 17, or by choice) write it as
ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, then Mul gamma and Add beta:
seven kernels (Pow as a libm call per element) where one vectorized kernel per row
does. The chain is replaced when its intermediates are read by nothing else, both means
reduce the same trailing axes with keepdims, eps is a scalar constant and gamma and beta
(each optional) are constants over the normalized dims.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, Value
from ..uses import consumers, producers


class _Chain:
    def __init__(self, graph: Graph):
        self.g = graph
        self.prod = producers(graph)
        self.cons = consumers(graph)

    def node(self, name: str, op: str) -> Node | None:
        k = self.prod.get(name)
        node = self.g.nodes[k] if k is not None else None
        return node if node is not None and node.op == op else None

    def scalar(self, name: str) -> float | None:
        v = self.g.values[name]
        return float(v.data.reshape(-1)[0]) if v.is_const and v.data.size == 1 else None

    def only_read_by(self, name: str, n: int) -> bool:
        return name not in self.g.outputs and len(self.cons.get(name, [])) == n

    def sole_reader(self, name: str, op: str) -> Node | None:
        readers = self.cons.get(name, [])
        if len(readers) != 1 or name in self.g.outputs:
            return None
        node = self.g.nodes[readers[0]]
        return node if node.op == op else None


def _trailing_axes(node: Node, ndim: int) -> int | None:
    """The first axis of a keepdims mean over the trailing axes, else None."""
    axes = sorted(a % ndim for a in node.attrs.get("axes") or ())
    if not axes or not node.attrs.get("keepdims", 1) or axes != list(range(axes[0], ndim)):
        return None
    return axes[0]


def _match(c: _Chain, div: Node):
    """(x, axis, eps, nodes) of the normalization ending in ``div``, or None."""
    sub, sqrt = c.node(div.inputs[0], "sub"), c.node(div.inputs[1], "sqrt")
    add = sqrt and c.node(sqrt.inputs[0], "add")
    var = add and c.node(add.inputs[0], "reduce_mean")
    pw = var and c.node(var.inputs[0], "pow")
    mean = sub and c.node(sub.inputs[1], "reduce_mean")
    if not (sub and pw and mean and pw.inputs[0] == sub.outputs[0]):
        return None
    x = sub.inputs[0]
    ndim = len(c.g.values[x].shape)
    axis = _trailing_axes(mean, ndim)
    eps = c.scalar(add.inputs[1])
    if mean.inputs[0] != x or axis is None or _trailing_axes(var, ndim) != axis:
        return None
    if c.scalar(pw.inputs[1]) != 2.0 or eps is None:
        return None
    chain = [mean, sub, pw, var, add, sqrt]
    reads = (1, 2, 1, 1, 1, 1)  # the centred x feeds both Pow and Div
    if not all(c.only_read_by(n.outputs[0], r) for n, r in zip(chain, reads, strict=True)):
        return None
    return x, axis, eps, chain


def _affine(c: _Chain, y: str, op: str, norm_shape: tuple) -> tuple[Node, str] | None:
    """The ``op`` (mul/add) of ``y`` by a constant over the normalized dims, if any."""
    node = c.sole_reader(y, op)
    if node is None or len(node.inputs) != 2:
        return None
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    v = c.g.values[other]
    if not v.is_const or v.data.ndim > len(norm_shape):
        return None
    if tuple(v.data.shape) != norm_shape[len(norm_shape) - v.data.ndim :]:
        return None
    return node, other


def _const(values: dict, name: str, data: np.ndarray) -> str:
    if name not in values:
        values[name] = Value(name, tuple(data.shape), str(data.dtype), data)
    return name


def fuse_layer_norm(graph: Graph, ctx=None) -> Graph:
    c = _Chain(graph)
    values = dict(graph.values)
    drop: set[int] = set()
    at: dict[int, Node] = {}
    for div in graph.nodes:
        m = _match(c, div) if div.op == "div" else None
        if m is None:
            continue
        x, axis, eps, chain = m
        xv = graph.values[x]
        if xv.dtype not in ("float32", "float64"):
            continue
        norm_shape = tuple(xv.shape[axis:])
        last, params = div, []
        for op, fill in (("mul", 1.0), ("add", 0.0)):
            hit = _affine(c, last.outputs[0], op, norm_shape)
            if hit is None:
                data = np.full(norm_shape, fill, dtype=xv.dtype)
                params.append(_const(values, f"{div.name}__ln_{op}", data))
                continue
            last, other = hit
            chain.append(last)
            data = np.broadcast_to(graph.values[other].data, norm_shape).astype(xv.dtype)
            params.append(_const(values, f"{other}__ln", np.ascontiguousarray(data)))
        chain.append(div)
        ln = Node(
            "layer_norm",
            last.name,
            [x, *params],
            list(last.outputs),
            {"axis": axis, "epsilon": eps},
            source=div.source,
        )
        ids = {id(n) for n in chain}
        ks = [k for k, n in enumerate(graph.nodes) if id(n) in ids]
        drop.update(ks)
        at[max(ks)] = ln
    if not at:
        return graph
    nodes = [at.get(k, n) for k, n in enumerate(graph.nodes) if k not in drop or k in at]
    return replace(graph, nodes=nodes, values=values)
