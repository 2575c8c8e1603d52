"""CausalConvWithState (opset 27)."""

from __future__ import annotations

import numpy as np

from ._common import check_attrs
from .registry import converter

_ACTIVATIONS = {"none": 0, "silu": 1, "swish": 1}


@converter("CausalConvWithState")
def causal_conv_with_state(ctx, node):
    check_attrs(ctx, node, {"activation"})
    x, w = (ctx.value(n).shape for n in node.input[:2])
    if len(x) != 3 or len(w) != 3 or w[0] != x[1] or w[1] != 1:
        ctx.fail(node, f"input {list(x)} and weight {list(w)} must be (B, C, L) and (C, 1, k)")
    if w[2] < 2:
        ctx.fail(node, "a kernel of size 1 has an empty state, which no kernel output can hold")
    activation = ctx.attr(node, "activation", "none")
    if activation not in _ACTIVATIONS:
        ctx.fail(node, f"attribute 'activation' value {activation!r} is not supported")
    if ctx.has_input(node, 3) and tuple(ctx.value(node.input[3]).shape) != (x[0], x[1], w[2] - 1):
        ctx.fail(node, f"past_state must be [{x[0]}, {x[1]}, {w[2] - 1}]")
    if ctx.has_input(node, 2):
        bias = node.input[2]
    else:
        bias = ctx.add_const(np.zeros((x[1],), dtype=ctx.value(node.input[0]).dtype), "bias")
    inputs = [node.input[0], node.input[1], bias]
    if ctx.has_input(node, 3):
        inputs.append(node.input[3])
    outs = list(node.output) + [""] * (2 - len(node.output))
    outs = [o or ctx.fresh(f"{node.output[0]}_unused") for o in outs]
    silu = _ACTIVATIONS[activation]
    return [ctx.node("causal_conv_with_state", node, inputs, outputs=outs, silu=silu)]
