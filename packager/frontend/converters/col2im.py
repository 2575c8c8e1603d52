"""Col2Im: image and block shapes must be constants."""

from __future__ import annotations

import math

from ._common import check_attrs, ints
from .registry import converter


@converter("Col2Im")
def col2im(ctx, node):
    check_attrs(ctx, node, {"strides", "pads", "dilations"})
    image = ints(ctx, node, 1, "image_shape")
    block = ints(ctx, node, 2, "block_shape")
    r = len(image)
    x = ctx.value(node.input[0]).shape
    kernel = math.prod(block)
    strides = list(ctx.attr(node, "strides", [1] * r))
    dil = list(ctx.attr(node, "dilations", [1] * r))
    pads = list(ctx.attr(node, "pads", [0] * (2 * r)))
    if len(block) != r or len(strides) != r or len(dil) != r or len(pads) != 2 * r:
        ctx.fail(node, "image_shape, block_shape, strides, dilations and pads disagree in rank")
    if min(block + strides + dil, default=1) < 1 or len(x) != 3 or x[1] % kernel:
        ctx.fail(
            node,
            f"input {list(x)} must be (N, C * {kernel}, L) with positive blocks, strides "
            "and dilations",
        )
    blocks = [
        (image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(r)
    ]
    if math.prod(blocks) != x[2]:
        ctx.fail(node, f"the image holds {math.prod(blocks)} blocks, the input has {x[2]}")
    return [
        ctx.node(
            "col2im",
            node,
            [node.input[0]],
            image_shape=image,
            block_shape=block,
            strides=strides,
            dilations=dil,
            pads=pads,
        )
    ]
