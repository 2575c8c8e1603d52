"""DeformConv (2-D inputs)."""

from __future__ import annotations

import math

import numpy as np

from ._common import check_attrs
from .registry import converter

_ATTRS = {"dilations", "group", "kernel_shape", "offset_group", "pads", "strides"}


@converter("DeformConv")
def deform_conv(ctx, node):
    check_attrs(ctx, node, _ATTRS)
    x, w, offset = (ctx.value(n).shape for n in node.input[:3])
    if len(x) != 4 or len(w) != 4:
        ctx.fail(node, f"only 2-D deformable convolution is supported (X {list(x)})")
    group = int(ctx.attr(node, "group", 1))
    ogroups = int(ctx.attr(node, "offset_group", 1))
    kernel = list(ctx.attr(node, "kernel_shape", w[2:]))
    taps = math.prod(kernel)
    if (
        kernel != list(w[2:])
        or x[1] != w[1] * group
        or w[0] % group
        or x[1] % ogroups
        or len(offset) != 4
        or offset[1] != ogroups * taps * 2
    ):
        ctx.fail(
            node,
            f"X {list(x)}, W {list(w)} and offset {list(offset)} do not fit group {group}, "
            f"offset_group {ogroups} and kernel {kernel}",
        )
    strides = list(ctx.attr(node, "strides", [1, 1]))
    dilations = list(ctx.attr(node, "dilations", [1, 1]))
    pads = list(ctx.attr(node, "pads", [0, 0, 0, 0]))
    for d in range(2):
        span = (kernel[d] - 1) * dilations[d] + 1
        want = (x[2 + d] + pads[d] + pads[2 + d] - span) // strides[d] + 1
        if offset[2 + d] != want:
            ctx.fail(node, f"offset {list(offset)} does not match the output size {want}")
    if min(x[2:]) < 2:
        ctx.fail(node, f"input spatial dims {list(x[2:])} must be at least 2")
    inputs = [node.input[0], node.input[1], node.input[2]]
    has_bias, has_mask = ctx.has_input(node, 3), ctx.has_input(node, 4)
    nodes = []
    if has_bias or has_mask:
        # a mask without a bias: the op takes its inputs by position, so a zero bias
        zeros = np.zeros((w[0],), dtype=ctx.value(node.input[0]).dtype)
        bias = node.input[3] if has_bias else ctx.add_const(zeros, f"{node.output[0]}_bias")
        inputs.append(bias)
    if has_mask:
        inputs.append(node.input[4])
    nodes.append(
        ctx.node(
            "deform_conv",
            node,
            inputs,
            strides=strides,
            dilations=dilations,
            pads=pads,
            group=group,
            offset_group=ogroups,
        )
    )
    return nodes
