"""The layout pass's rules: for each op, its blocked form (or None: keep it in NCHW).

A rule gets the rewriter (layout_rewriter.py), which knows each value's
forms and makes transforms and packed constants, and the node; it returns the node to
emit instead. Rules run only for nodes with one 4-D output of whole blocks (float32, or
int8/uint8 where a QuantizeLinear makes it), but for those that write a layout of their
own (``writes_own_layout``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ...ops.binary import BINARY, VARIADIC
from ...ops.reduce import REDUCERS
from ...ops.registry import get_op
from ...ops.resize import resized_dims
from ..ir import Graph, Node
from ..uses import scalar_qparams
from .layout_pack import pack_channels, pack_conv_weight, pack_spanned_conv_weight
from .layout_rewriter import Rewriter, fitting_block


def _conv(rw: Rewriter, node: Node) -> Node | None:
    x, w = rw.value(node.inputs[0]), rw.value(node.inputs[1])
    bias = rw.value(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if len(x.shape) != 4 or x.dtype != "float32" or not w.is_const:
        return None
    if node.outputs[0] in rw.keep_nchw:
        return None
    if bias is not None and not bias.is_const:
        return None
    groups = int(node.attrs.get("groups", 1))
    oc, cg = w.shape[:2]
    depthwise = groups > 1 and cg == 1 and oc == groups
    # Input channels that do not fill blocks (the RGB of a first conv): read NCHW.
    direct = groups == 1 and not rw.is_blocked(x.name) and rw.block_for(cg) is None
    if direct:
        x_block = 1
    elif rw.is_blocked(x.name):
        x_block = rw.block_of(x.name)
    else:
        x_block = rw.block_for(x.shape[1])  # to be transformed in
    if x_block is None:
        return None
    # A depthwise conv's output block is its input's; any other picks its own, so the
    # block changes inside a conv (which reads x_block lanes, writes y) and never
    # needs a transform of its own.
    y = x_block if depthwise else rw.block_for(oc // groups)
    # Groups that would split a block (ShuffleNet's 4 groups of 34 channels): each output
    # block reads the input blocks its groups cover, zero weights elsewhere.
    spanned = groups > 1 and not depthwise and (y is None or cg % x_block)
    if spanned:
        y = rw.block_for(oc)
    if y is not None and not depthwise and node.outputs[0] in rw.caps:
        y = min(y, rw.caps[node.outputs[0]])  # to share a block with a concat's other parts
    if y is None:
        return None
    data = x.name if direct else rw.as_blocked(x.name, x_block)
    in_block = 1 if depthwise else x_block
    if spanned:
        packed = pack_spanned_conv_weight(w.data, groups, in_block, y)
        how = f"oihw{in_block}i{y}o_spanning{groups}g"
    else:
        packed = pack_conv_weight(w.data, in_block, y)
        how = f"oihw{in_block}i{y}o"
    inputs = [data, rw.const(w.name, how, packed)]
    if bias is not None:
        inputs.append(rw.const(bias.name, f"{y}o", pack_channels(bias.data, y)))
    extra = {"spanned": 1} if spanned else {}
    return _like(node, "conv2d_nchwc", inputs, rw, y, **extra)


def _elementwise(rw: Rewriter, node: Node) -> Node | None:
    if not rw.is_blocked(node.inputs[0]):
        return None
    return _like(node, node.op, [rw.blocked[node.inputs[0]]], rw, rw.block_of(node.inputs[0]))


def _broadcast(rw: Rewriter, node: Node) -> Node | None:
    """The blocked inputs must share a block; a mismatch runs in NCHW (convs choose
    their blocks by channel count, so tensors added together rarely differ)."""
    blocks = {rw.block_of(i) for i in node.inputs if rw.is_blocked(i)}
    if len(blocks) != 1:
        return None
    (b,) = blocks
    channels = rw.value(node.outputs[0]).shape[1]
    if not all(rw.operand_fits(i, channels, b) for i in node.inputs):
        return None
    return _like(node, node.op, [rw.operand(i, channels, b) for i in node.inputs], rw, b)


def _per_channel(rw: Rewriter, node: Node) -> Node | None:
    """batch_norm, scale_shift: x then per-channel (C,) constant parameters."""
    x, *params = node.inputs
    values = [rw.value(p) for p in params]
    if not rw.is_blocked(x) or not all(v.is_const and len(v.shape) == 1 for v in values):
        return None
    b = rw.block_of(x)
    packed = [
        rw.const(p, f"{b}c", pack_channels(v.data, b)) for p, v in zip(params, values, strict=True)
    ]
    return _like(node, node.op, [rw.blocked[x], *packed], rw, b)


def _quantization(rw: Rewriter, node: Node) -> Node | None:
    """A per-tensor QuantizeLinear or DequantizeLinear follows its input's block; a
    DequantizeLinear also reads integers int8_layout.py wrote blocked (N, C/B, H, W, B),
    its output then the blocked floats of that block."""
    x = node.inputs[0]
    if len(rw.value(x).shape) == 5:  # int8_layout.dequantizes_into_blocks chose this
        if node.op != "dequantize_linear" or scalar_qparams(rw.g.values, node) is None:
            raise ValueError(f"{node.name}: blocked integers the layout pass cannot read")
        if rw.value(node.outputs[0]).shape[1] % rw.value(x).shape[4]:
            raise ValueError(f"{node.name}: blocked integers of a partial last block")
        return _like(node, node.op, list(node.inputs), rw, rw.value(x).shape[4])
    if not rw.is_blocked(x) or scalar_qparams(rw.g.values, node) is None:
        return None
    b = rw.block_of(x)
    if rw.value(node.outputs[0]).shape[1] % b:
        return None
    return _like(node, node.op, [rw.blocked[x], *node.inputs[1:]], rw, b)


def _quantize_into_blocks(rw: Rewriter, node: Node) -> Node | None:
    """int8_layout.py's quantize of NCHW floats into the blocks integer ops read, when
    the floats are blocked alike already: a plain per-tensor quantize of the blocks."""
    x, b = node.inputs[0], int(node.attrs["block"])
    if not rw.is_blocked(x) or rw.block_of(x) != b or rw.value(x).shape[1] % b:
        return None
    attrs = {k: v for k, v in node.attrs.items() if k != "block"}
    inputs = [rw.blocked[x], *node.inputs[1:]]
    return Node("quantize_linear", node.name, inputs, list(node.outputs), attrs, node.source)


_quantize_into_blocks.writes_own_layout = True


def _pool(rw: Rewriter, node: Node) -> Node | None:
    if not rw.is_blocked(node.inputs[0]) or len(node.attrs["kernel"]) != 2:
        return None
    x = node.inputs[0]
    return _like(node, f"{node.op}_nchwc", [rw.blocked[x]], rw, rw.block_of(x))


def _global_reduce(rw: Rewriter, node: Node) -> Node | None:
    """A reduction over H and W keeping dims (global pooling) reduces the same axes of
    the blocked form and leaves a blocked (N, C/x, 1, 1, x)."""
    spatial = sorted(node.attrs.get("axes") or []) == [2, 3]
    x = node.inputs[0]
    if not rw.is_blocked(x) or not spatial or not node.attrs.get("keepdims", 1):
        return None
    return _like(node, node.op, [rw.blocked[x]], rw, rw.block_of(x))


def _concat(rw: Rewriter, node: Node) -> Node | None:
    """Along channels, when every part is blocked already with one block (or a constant
    of whole blocks): a plain part means a transform, and the concat may as well run in
    NCHW."""
    blocks = {rw.block_of(i) for i in node.inputs if rw.is_blocked(i)}
    if node.attrs.get("axis") not in (1, -3) or len(blocks) != 1:
        return None
    (b,) = blocks
    parts = [(i, rw.value(i)) for i in node.inputs]
    if not all(rw.is_blocked(i) or (v.is_const and rw.blockable(i, b)) for i, v in parts):
        return None
    return _like(node, "concat", [rw.as_blocked(i, b) for i in node.inputs], rw, b, axis=1)


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
    x = node.inputs[0]
    return _like(node, "pad", [rw.blocked[x]], rw, rw.block_of(x), pads=blocked_pads)


def _resize(rw: Rewriter, node: Node) -> Node | None:
    """A resize of H and W only (an FPN's upsampling) resizes the same axes of the blocked
    form, each pixel's block of channels one contiguous vector; the blocked form's padded
    channels stay zeros (no extrapolation value lands there)."""
    x = node.inputs[0]
    if not rw.is_blocked(x) or len(node.inputs) != 1:
        return None
    shape = rw.value(x).shape
    if len(shape) != 4 or not set(resized_dims(shape, node.attrs)) <= {2, 3}:
        return None
    b = rw.block_of(x)
    # a crop's extrapolation value would land in the padded channels of a partial last
    # block, which stay zeros (blocked float convs write whole blocks only: not seen yet)
    crop = node.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    if crop and shape[1] % b and node.attrs.get("extrapolation_value", 0.0) != 0.0:
        return None
    n, c, h, w = node.attrs["sizes"]
    attrs = {
        "sizes": [n, -(-c // b), h, w, b],
        "scales": [*node.attrs["scales"], 1.0],
    }
    if "roi" in node.attrs:
        roi = list(node.attrs["roi"])
        attrs["roi"] = [*roi[:4], 0.0, *roi[4:], 1.0]
    return _like(node, "resize", [rw.blocked[x]], rw, b, **attrs)


def _like(node: Node, op: str, inputs: list[str], rw: Rewriter, block: int, **attrs) -> Node:
    """``node`` as ``op`` on ``inputs``, its output the blocked form of its own with
    ``block`` channels a block."""
    out = rw.out(node.outputs[0], block)
    return Node(op, node.name, inputs, [out], {**node.attrs, **attrs}, node.source)


RULES: dict[str, Callable] = {
    "conv": _conv,
    "batch_norm": _per_channel,
    "scale_shift": _per_channel,
    "max_pool": _pool,
    "avg_pool": _pool,
    "lp_pool": _pool,
    "concat": _concat,
    "channel_shuffle": _elementwise,  # a shuffle of the blocked form's channels
    "pad": _pad,
    "resize": _resize,
    "quantize_linear": _quantization,
    "dequantize_linear": _quantization,
    "quantize_blocked": _quantize_into_blocks,
    "where": _broadcast,
    **{op: _broadcast for op in (*BINARY, *VARIADIC)},
    **{op: _global_reduce for op in REDUCERS},
}


# Rules whose output keeps the block of input 0, which a concat's block cap goes through.
_FOLLOWERS = (_elementwise, _per_channel, _pool, _pad, _resize)


def concat_caps(graph: Graph, lanes: int) -> dict[str, int]:
    """For each value that reaches a channel concat (through ops that keep its block),
    the largest block every part of that concat can have: the convs that make the parts
    pick it, so the concat runs blocked (parts of 16 and 24 channels at 16 lanes: all
    in blocks of 8) rather than in NCHW between transforms."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    caps: dict[str, int] = {}

    def cap(value: str, block: int) -> None:
        while value in producer:
            caps[value] = min(caps.get(value, block), block)
            node = producer[value]
            if node.op == "concat":
                for part in node.inputs:
                    cap(part, block)
                return
            if rule_for(node.op) not in _FOLLOWERS or not node.inputs:
                return
            value = node.inputs[0]

    for node in reversed(graph.nodes):
        shapes = [graph.values[i].shape for i in node.inputs]
        if node.op != "concat" or node.attrs.get("axis") not in (1, -3):
            continue
        if not all(len(s) == 4 for s in shapes):
            continue
        block = fitting_block(math.gcd(*(s[1] for s in shapes)), lanes)
        if block is not None:
            for part in node.inputs:
                cap(part, block)
    return caps


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


# Ops that run blocked whenever their (float or integer) data input is: what int8_layout.py
# may hand blocked dequantized integers to.
_KEEP_BLOCKS = (_elementwise, _per_channel, _pool, _concat, _broadcast, _quantization)


def keeps_blocks(graph: Graph, node: Node) -> bool:
    """Whether the layout pass runs ``node`` blocked when its blocked inputs share a block
    (a concat along channels, a 2-d pool, an op per element or per channel...). Where
    they do not (a concat's other part plain NCHW, an operand that does not re-lay out),
    the node runs in NCHW after a transform of the blocked input: right, and slower."""
    if node.op == "quantize_blocked":
        return True
    rule = rule_for(node.op)
    if rule is _pool:
        return len(node.attrs["kernel"]) == 2
    if rule is _concat:
        return node.attrs.get("axis") in (1, -3)
    return rule in _KEEP_BLOCKS
