"""Constant gemm weights stored the way the kernel reads them.

A classifier exported with ``transB=1`` keeps B as (N, K): each output column then reads
B with a stride of K, and the vectorized column loop of the gemm template falls back to
scalar code. Even as (K, N) a block of columns reads one short piece of every row of B
per k step (64 bytes of a 4 KB row for 16 columns of a 1000-class classifier): for a
product with one row of A (a GEMV, memory-bound) that is a strided walk over every page
of the weights per column block.

So a constant B is packed once at package time as (N / nb, K, nb), nb the board's float
lanes per vector (or half of them and so on, down to 2, to divide N): B[k, j] at
[j // nb, k, j % nb], and the gemm gets ``b_block=nb`` (trans_b cleared). One vector
of output columns then reads its weights as one contiguous stream over k, and the
template's register tile (a knob: how many such vectors) reads as many streams
(measured in the MobileNetV2-style network, EPYC, one thread, 1280 -> 1000: 0.22 ms as
(K, N) with 1 vector per tile, 0.24 as (K, N) with 5, 0.12 packed with 5).
When N is odd (or the board has no vectors), B is only transposed to
(K, N). The old constant is dropped by dead-value pruning when unused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...boards import load_board
from ...target import Target
from ...te.schedule import fitting_lanes
from ..ir import Graph, Node, Value
from ..uses import consumers


def pack_gemm_weights(graph: Graph, ctx=None) -> Graph:
    """``ctx``: a PassContext (its board sets the block; no board: the host's, as in the
    layout pass), or None for the transpose alone."""
    values = dict(graph.values)
    nb = _block(ctx)
    readers = consumers(graph)
    nodes, taken = [], set()
    for n in graph.nodes:
        if id(n) in taken:
            continue
        tail = _softmax_tail(n, graph, readers) if n.op == "matmul" else []
        packed = _packed(n, values, nb)
        if tail and len(packed) == 2:  # padded: the slice moves after the softmax
            packed = _pad_through(packed, tail, values)
            taken.update(id(t) for t in tail)
        nodes += packed
    return replace(graph, nodes=nodes, values=values)


def _softmax_tail(mm: Node, graph: Graph, readers) -> list[Node]:
    """[bias add, softmax] when the matmul's result alone feeds ``+ bias`` (a constant
    over the last axis) and that alone a softmax over the last axis; else []."""

    def sole(name):
        r = readers.get(name, [])
        return graph.nodes[r[0]] if len(r) == 1 and name not in graph.outputs else None

    add = sole(mm.outputs[0])
    if add is None or add.op != "add" or len(add.inputs) != 2:
        return []
    bias = graph.values[next((i for i in add.inputs if i != mm.outputs[0]), mm.outputs[0])]
    n = graph.values[mm.outputs[0]].shape[-1]
    if not bias.is_const or bias.data.size != n or bias.shape[-1:] != (n,):
        return []
    sm = sole(add.outputs[0])
    ndim = len(graph.values[add.outputs[0]].shape)
    if sm is None or sm.op != "softmax" or [a % ndim for a in sm.attrs["axes"]] != [ndim - 1]:
        return []
    return [add, sm]


def _pad_through(packed: list[Node], tail: list[Node], values: dict) -> list[Node]:
    """matmul (wide) -> + bias padded with -inf -> softmax (wide) -> the slice: the
    padding columns get probability exp(-inf) = 0, so the softmax runs on whole
    vectors and the first N columns are the model's."""
    mm, cut = packed
    add, sm = tail
    wide = values[mm.outputs[0]].shape[-1]
    bias = values[next(i for i in add.inputs if i != cut.outputs[0])]
    n = bias.data.size
    padded = np.full(wide, -np.inf, bias.data.dtype)
    padded[:n] = bias.data.reshape(-1)
    bname = f"{bias.name}__w{wide}"
    values[bname] = Value(bname, (wide,), bias.dtype, padded)
    shape = values[mm.outputs[0]].shape
    names = [f"{add.outputs[0]}__wide", f"{sm.outputs[0]}__wide"]
    for name, like in zip(names, (add.outputs[0], sm.outputs[0]), strict=True):
        values[name] = Value(name, shape, values[like].dtype)
    add2 = replace(add, inputs=[mm.outputs[0], bname], outputs=[names[0]])
    sm2 = replace(sm, inputs=[names[0]], outputs=[names[1]])
    return [mm, add2, sm2, replace(cut, inputs=[names[1]], outputs=list(sm.outputs))]


def _block(ctx) -> int:
    """Columns per packed block: the board's float32 lanes (0: transpose only)."""
    if ctx is None:
        return 0
    board = ctx.board or load_board("host")
    lanes = Target.cpu(board).vector_bits // 32
    return lanes if lanes >= 2 else 0


def pack_b(b: np.ndarray, trans_b: bool, nb: int) -> np.ndarray:
    """B (K, N), or (N, K) when ``trans_b``, as (N / nb, K, nb)."""
    kn = b.T if trans_b else b
    k, n = kn.shape
    return np.ascontiguousarray(kn.reshape(k, n // nb, nb).transpose(1, 0, 2))


def _packed(node: Node, values: dict[str, Value], nb: int) -> list[Node]:
    if node.op == "matmul":
        return _packed_matmul(node, values, nb)
    return [_packed_gemm(node, values, nb)]


def _packed_gemm(node: Node, values: dict[str, Value], nb: int) -> Node:
    if node.op != "gemm" or len(node.inputs) < 2 or node.attrs.get("b_block"):
        return node
    b = values[node.inputs[1]]
    if not b.is_const or b.data.ndim != 2 or b.dtype != "float32":
        return node
    tb = bool(node.attrs.get("trans_b"))
    n = b.data.shape[0] if tb else b.data.shape[1]
    nb = fitting_lanes(n, nb)
    if nb:
        name = f"{b.name}__p{nb}{'t' if tb else ''}"
        attrs = {**node.attrs, "trans_b": 0, "b_block": nb}
        make = lambda: pack_b(b.data, tb, nb)  # noqa: E731
    elif tb:
        name = f"{b.name}__t"
        attrs = {**node.attrs, "trans_b": 0}
        make = lambda: np.ascontiguousarray(b.data.T)  # noqa: E731
    else:
        return node
    if name not in values:  # weights shared by several gemms are packed once
        data = make()
        values[name] = Value(name, tuple(data.shape), b.dtype, data)
    return replace(node, inputs=[node.inputs[0], name, *node.inputs[2:]], attrs=attrs)


def _packed_matmul(node: Node, values: dict[str, Value], nb: int) -> list[Node]:
    """A matmul of activations (at least 2-D, a transformer's (batch, tokens, d)) by
    constant 2-D weights packed as gemm's B is; in half vectors where full ones do not
    divide N (40 mel bins at 16 lanes). Where no vector does and N spans several full
    ones (6625 characters), B gets zero columns up to whole vectors and the product's
    extra columns are sliced off: a copy of the output instead of scalar code."""
    a, b = values[node.inputs[0]], values[node.inputs[1]]
    if not nb or node.attrs.get("b_block") or node.attrs.get("perm_b") or len(a.shape) < 2:
        return [node]
    if not b.is_const or b.data.ndim != 2 or b.dtype != "float32":
        return [node]
    n = b.data.shape[1]
    lanes = fitting_lanes(n, nb)
    if lanes < 4 and n >= PAD_MIN_VECTORS * nb:
        return _padded_matmul(node, values, nb)
    if not lanes:
        return [node]
    name = f"{b.name}__p{lanes}"
    if name not in values:
        data = pack_b(b.data, False, lanes)
        values[name] = Value(name, tuple(data.shape), b.dtype, data)
    return [replace(node, inputs=[node.inputs[0], name], attrs={**node.attrs, "b_block": lanes})]


# Columns (in full vectors) from which an odd N is padded rather than left scalar.
PAD_MIN_VECTORS = 4


def _padded_matmul(node: Node, values: dict[str, Value], nb: int) -> list[Node]:
    b, out = values[node.inputs[1]], values[node.outputs[0]]
    k, n = b.data.shape
    wide = -(-n // nb) * nb
    name = f"{b.name}__p{nb}w{wide}"
    if name not in values:
        padded = np.zeros((k, wide), b.data.dtype)
        padded[:, :n] = b.data
        data = pack_b(padded, False, nb)
        values[name] = Value(name, tuple(data.shape), b.dtype, data)
    full = f"{node.outputs[0]}__wide"
    values[full] = Value(full, (*out.shape[:-1], wide), out.dtype)
    attrs = {**node.attrs, "b_block": nb}
    mm = replace(node, inputs=[node.inputs[0], name], outputs=[full], attrs=attrs)
    cut = {"starts": [0], "ends": [n], "axes": [len(out.shape) - 1]}
    return [mm, Node("slice", f"{node.name}_cut", [full], [node.outputs[0]], cut, node.source)]
