"""Fold per-output-channel affine maps into the weights and bias of the op before them.

A convolution (or transposed convolution, gemm, 2-D matmul) followed by ``y = x * s + t``
with constant ``s`` and ``t`` per output channel — an inference batch norm (library op
scale_shift), or mul/add/sub/div by a constant that broadcasts along the channel axis
only — computes the same as the convolution with its weights scaled by ``s`` and its
bias ``b * s + t``. Folding removes a pass over the tensor. It applies only when the
convolution's output has no other reader (the unscaled tensor would be needed), and
the folded weights are computed in float64 and then cast back to the weights' dtype, so
each folded weight is the correctly rounded product.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir import Graph, Node, Value
from ..uses import add_const, producers, use_counts

FLOAT = ("float32", "float64")

# op -> (scale, shift) for the constant c, given the position of the tensor operand.
AFFINE = {
    "mul": lambda c, pos: (c, 0.0),
    "add": lambda c, pos: (1.0, c),
    "sub": lambda c, pos: (1.0, -c) if pos == 0 else (-1.0, c),
    "div": lambda c, pos: (1.0 / c, 0.0) if pos == 0 and np.all(c != 0) else None,
}


def fold_scale_shift(graph: Graph, ctx=None) -> Graph:
    values = dict(graph.values)
    nodes: list[Node | None] = list(graph.nodes)
    made_by = producers(graph)
    uses = use_counts(graph)
    for k, node in enumerate(graph.nodes):
        affine = channel_affine(node, values)
        if affine is None:
            continue
        x, scale, shift = affine
        p = made_by.get(x)
        if p is None or uses[x] != 1 or nodes[p].op not in FOLD_INTO:
            continue
        folded = FOLD_INTO[nodes[p].op](nodes[p], values, scale, shift)
        if folded is None:
            continue
        nodes[p] = replace(folded, outputs=list(node.outputs))
        nodes[k] = None
        made_by.update(dict.fromkeys(node.outputs, p))  # chains fold on into the same node
    return replace(graph, nodes=[n for n in nodes if n is not None], values=values)


def channel_affine(node: Node, values: dict[str, Value]):
    """(x, scale, shift) when ``node`` is ``x * scale + shift`` per channel (axis 1)
    with constant float64 vectors, else None."""
    if node.op == "scale_shift":
        x, s, t = (values[i] for i in node.inputs)
        if not (s.is_const and t.is_const) or values[x.name].dtype not in FLOAT:
            return None
        return _checked(x.name, s.data, t.data)
    if node.op not in AFFINE or len(node.inputs) != 2:
        return None
    ins = [values[i] for i in node.inputs]
    if [v.is_const for v in ins].count(True) != 1:
        return None
    pos = 0 if ins[1].is_const else 1
    x, c = ins[pos], ins[1 - pos]
    vec = _channel_vector(c.data, x.shape)
    if vec is None or x.dtype not in FLOAT:
        return None
    got = AFFINE[node.op](vec, pos)
    return None if got is None else _checked(x.name, *got)


def _checked(x: str, scale, shift):
    n = max(np.size(scale), np.size(shift))
    s = np.broadcast_to(np.asarray(scale, np.float64), (n,))
    t = np.broadcast_to(np.asarray(shift, np.float64), (n,))
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(t))):
        return None
    return x, s, t


def _channel_vector(c: np.ndarray, shape: tuple) -> np.ndarray | None:
    """c as a vector over axis 1 of ``shape`` if it broadcasts along that axis only."""
    if len(shape) < 2 or c.ndim > len(shape):
        return None
    full = (1,) * (len(shape) - c.ndim) + c.shape
    if any(d != 1 for a, d in enumerate(full) if a != 1) or full[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(c.astype(np.float64).reshape(-1), (shape[1],))


# --- folding into the producer: each returns the new node, or None ------------------


def _weights(values: dict[str, Value], name: str) -> np.ndarray | None:
    v = values[name]
    return v.data.astype(np.float64) if v.is_const and v.dtype in FLOAT else None


def _with_params(node: Node, values, w, w64, bias64, pos=(1, 2)) -> Node:
    """``node`` reading new constants: weights ``w64`` at ``pos[0]``, bias at ``pos[1]``."""
    dt = values[w].data.dtype
    ins = list(node.inputs[: pos[1]])
    ins[pos[0]] = add_const(values, w64.astype(dt), w.removesuffix("_folded") + "_folded")
    ins.append(add_const(values, bias64.astype(dt), f"{node.name}_bias_folded"))
    return replace(node, inputs=ins)


def _bias(node: Node, values, pos: int) -> np.ndarray | None | float:
    if len(node.inputs) <= pos:
        return 0.0
    return _weights(values, node.inputs[pos])


def _fold_conv(node: Node, values, s, t) -> Node | None:
    w, b = _weights(values, node.inputs[1]), _bias(node, values, 2)
    if w is None or b is None:
        return None
    per_m = s.reshape(-1, *[1] * (w.ndim - 1))  # weight (M, C/groups, *kernel)
    return _with_params(node, values, node.inputs[1], w * per_m, b * s + t)


def _fold_conv_transpose(node: Node, values, s, t) -> Node | None:
    w, b = _weights(values, node.inputs[1]), _bias(node, values, 2)
    if w is None or b is None:
        return None
    # weight (C_in, M/groups, *kernel): input channel c of group c // (C_in/groups)
    # feeds output channel group * M/groups + j through w[c, j].
    groups = int(node.attrs.get("groups", 1))
    cin, mg = w.shape[:2]
    m = (np.arange(cin) // (cin // groups))[:, None] * mg + np.arange(mg)[None, :]
    per = s[m].reshape(cin, mg, *[1] * (w.ndim - 2))
    return _with_params(node, values, node.inputs[1], w * per, b * s + t)


def _fold_gemm(node: Node, values, s, t) -> Node | None:
    b = _weights(values, node.inputs[1])
    beta = float(node.attrs.get("beta", 1.0))
    c = _bias(node, values, 2) if beta != 0.0 else 0.0
    if b is None or c is None:
        return None
    b = b * (s[:, None] if node.attrs.get("trans_b", 0) else s[None, :])
    folded = _with_params(node, values, node.inputs[1], b, beta * c * s + t)
    return replace(folded, attrs={**node.attrs, "beta": 1.0})


def _fold_matmul(node: Node, values, s, t) -> Node | None:
    """2-D matmul only (axis 1 is then the column); with a shift it becomes a gemm."""
    b = _weights(values, node.inputs[1])
    if b is None or b.ndim != 2 or len(values[node.inputs[0]].shape) != 2:
        return None
    gemm = replace(node, op="gemm", attrs={"alpha": 1.0, "beta": 1.0, "trans_a": 0, "trans_b": 0})
    return _with_params(gemm, values, node.inputs[1], b * s[None, :], t)


FOLD_INTO = {
    "conv": _fold_conv,
    "conv_transpose": _fold_conv_transpose,
    "gemm": _fold_gemm,
    "matmul": _fold_matmul,
}
