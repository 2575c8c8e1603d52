"""The layout pass's rules: for each op, its blocked form (or None: keep it in NCHW).

A rule gets the rewriter (layout_rewriter.py), which knows each value's
forms and makes transforms and packed constants, and the node; it returns the node to
emit instead. Rules run only for nodes with one float32 4-D output of whole blocks.
"""

from __future__ import annotations

from collections.abc import Callable

from ...ops.binary import BINARY, VARIADIC
from ...ops.reduce import REDUCERS
from ...ops.registry import get_op
from ..ir import Node
from .layout_pack import pack_channels, pack_conv_weight
from .layout_rewriter import Rewriter


def _conv(rw: Rewriter, node: Node) -> Node | None:
    x, w = rw.value(node.inputs[0]), rw.value(node.inputs[1])
    bias = rw.value(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(x.shape) != 4 or x.dtype != "float32" or not w.is_const:
        return None
    if node.outputs[0] in rw.keep_nchw:
        return None
    if bias is not None and not bias.is_const:
        return None
    b, groups = rw.block, int(node.attrs.get("groups", 1))
    oc, cg = w.shape[:2]
    depthwise = groups > 1 and cg == 1 and oc == groups
    if groups > 1 and not depthwise and (cg % b or (oc // groups) % b):
        return None  # a group would split a block
    # Input channels that do not fill blocks (the RGB of a first conv): read NCHW.
    direct = groups == 1 and not rw.is_blocked(x.name) and cg % b != 0
    data = x.name if direct else rw.as_blocked(x.name)
    if data is None:
        return None
    in_block = 1 if direct or depthwise else b
    packed = pack_conv_weight(w.data, in_block, b)
    inputs = [data, rw.const(w.name, f"oihw{in_block}i{b}o", packed)]
    if bias is not None:
        inputs.append(rw.const(bias.name, f"{b}o", pack_channels(bias.data, b)))
    return _like(node, "conv2d_nchwc", inputs, rw)


def _elementwise(rw: Rewriter, node: Node) -> Node | None:
    if not rw.is_blocked(node.inputs[0]):
        return None
    return _like(node, node.op, [rw.blocked[node.inputs[0]]], rw)


def _broadcast(rw: Rewriter, node: Node) -> Node | None:
    if not any(rw.is_blocked(i) for i in node.inputs):
        return None
    channels = rw.value(node.outputs[0]).shape[1]
    if not all(rw.operand_fits(i, channels) for i in node.inputs):
        return None
    return _like(node, node.op, [rw.operand(i, channels) for i in node.inputs], rw)


def _per_channel(rw: Rewriter, node: Node) -> Node | None:
    """batch_norm, scale_shift: x then per-channel (C,) constant parameters."""
    x, *params = node.inputs
    values = [rw.value(p) for p in params]
    if not rw.is_blocked(x) or not all(v.is_const and len(v.shape) == 1 for v in values):
        return None
    packed = [
        rw.const(p, f"{rw.block}c", pack_channels(v.data, rw.block))
        for p, v in zip(params, values, strict=True)
    ]
    return _like(node, node.op, [rw.blocked[x], *packed], rw)


def _pool(rw: Rewriter, node: Node) -> Node | None:
    if not rw.is_blocked(node.inputs[0]) or len(node.attrs["kernel"]) != 2:
        return None
    return _like(node, f"{node.op}_nchwc", [rw.blocked[node.inputs[0]]], rw)


def _global_reduce(rw: Rewriter, node: Node) -> Node | None:
    """A reduction over H and W keeping dims (global pooling) reduces the same axes of
    the blocked form and leaves a blocked (N, C/x, 1, 1, x)."""
    spatial = sorted(node.attrs.get("axes") or []) == [2, 3]
    if not rw.is_blocked(node.inputs[0]) or not spatial or not node.attrs.get("keepdims", 1):
        return None
    return _like(node, node.op, [rw.blocked[node.inputs[0]]], rw)


def _concat(rw: Rewriter, node: Node) -> Node | None:
    """Along channels, when every part is blocked already (or a constant of whole
    blocks): a plain part means a transform, and the concat may as well run in NCHW."""
    if node.attrs.get("axis") not in (1, -3) or not any(rw.is_blocked(i) for i in node.inputs):
        return None
    parts = [(i, rw.value(i)) for i in node.inputs]
    if not all(rw.is_blocked(i) or (v.is_const and rw.blockable(i)) for i, v in parts):
        return None
    return _like(node, "concat", [rw.as_blocked(i) for i in node.inputs], rw, axis=1)


def _pad(rw: Rewriter, node: Node) -> Node | None:
    """Spatial padding only: the block axis gets none."""
    pads = list(node.attrs["pads"])
    if (
        not rw.is_blocked(node.inputs[0])
        or len(node.inputs) > 1
        or any(pads[k] for k in (0, 1, 4, 5))
    ):
        return None
    blocked_pads = [0, 0, pads[2], pads[3], 0, 0, 0, pads[6], pads[7], 0]
    return _like(node, "pad", [rw.blocked[node.inputs[0]]], rw, pads=blocked_pads)


def _like(node: Node, op: str, inputs: list[str], rw: Rewriter, **attrs) -> Node:
    """``node`` as ``op`` on ``inputs``, its output the blocked form of its own."""
    return Node(
        op, node.name, inputs, [rw.out(node.outputs[0])], {**node.attrs, **attrs}, node.source
    )


RULES: dict[str, Callable] = {
    "conv": _conv,
    "batch_norm": _per_channel,
    "scale_shift": _per_channel,
    "max_pool": _pool,
    "avg_pool": _pool,
    "lp_pool": _pool,
    "concat": _concat,
    "pad": _pad,
    "where": _broadcast,
    **{op: _broadcast for op in (*BINARY, *VARIADIC)},
    **{op: _global_reduce for op in REDUCERS},
}


def rule_for(op: str) -> Callable | None:
    """Ops of one input computing each element from the same element (relu, clip,
    sigmoid, ...) are layout-blind: every one of them follows its input's layout."""
    if op in RULES:
        return RULES[op]
    try:
        pattern = get_op(op).pattern
    except KeyError:  # not a library op (a fused group of a later pass)
        return None
    return _elementwise if pattern == "elementwise" else None
