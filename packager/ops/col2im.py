"""Col2Im: the inverse of im2col, summing every column entry into the image pixel it was
taken from. Output pixel y gathers, for each kernel offset k, the block whose position
p satisfies p * stride - pad_begin + k * dilation = y (per spatial dim): a reduction over
the kernel offsets, with no scattered writes.

attrs: image_shape, block_shape, strides, dilations, pads (begins then ends).
"""

from __future__ import annotations

import math

from .. import te
from .registry import register_op


@register_op("col2im", "opaque")
def col2im(inputs, attrs):
    (x,) = inputs
    image, block = list(attrs["image_shape"]), list(attrs["block_shape"])
    r = len(image)
    strides, dil, pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    blocks = [
        (image[d] + pads[d] + pads[r + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
        for d in range(r)
    ]
    kernel = math.prod(block)
    n, ck, cols = x.shape
    channels = ck // kernel
    ks = [te.reduce_axis(block[d], f"k{d}") for d in range(r)]

    def f(b, c, *y):
        conds, col, kidx = [], te.const(0, te.INDEX), te.const(0, te.INDEX)
        for d in range(r):
            num = y[d] + pads[d] - ks[d].var * dil[d]
            p = num // strides[d]
            conds += [num >= 0, te.eq(num % strides[d], 0), p < blocks[d]]
            p = te.min_(te.max_(p, te.const(0, te.INDEX)), te.const(blocks[d] - 1, te.INDEX))
            col = col * blocks[d] + p
            kidx = kidx * block[d] + ks[d].var
        return te.sum(x[b, c * kernel + kidx, col], ks, where=te.all_of(*conds))

    return [te.compute((n, channels, *image), f, name="col2im", tag="reduce")]
