"""2-D convolution in the blocked layout NCHW{x}c (see layout.py).

Inputs:
  data    (N, C/x, H, W, x), or (N, C, H, W): plain NCHW, read as block 1 (the first
          conv of a network, whose 3 input channels would not fill a block)
  weight  (OC/y, Cg/xw, KH, KW, xw, y), packed at package time from (OC, Cg, KH, KW):
          packed[ob, cb, kh, kw, ci, oi] = w[ob*y + oi, cb*xw + ci, kh, kw]
  bias    optional, (OC/y, y)
Output (N, OC/y, OH, OW, y). attrs: strides, dilations, pads (begins, then ends),
groups; pixel_multiple (optional, an ungrouped unpadded 1x1 conv on a blocked input
only): the conv is computed over its OH x OW output pixels as one axis (contiguous in
the blocked layout), as many as the pixel count rounded up to that multiple (the extra
ones repeat the last pixel), and the output reads back the real ones; a strided one's
pixels read every stride-th input row and column. A schedule can then tile pixels
regardless of the row width (ops/conv_pixels_schedule.py).

Groups: every group must start on a block boundary (Cg % xw == 0 and OC/groups % y
== 0), so a group's inputs are whole blocks; depthwise convs (one input and one output
channel per group) instead read the input block of their own output block (x == y,
xw == 1). Spanned groups (attr ``spanned``, groups that would split a block): the weight is
(OC/y, S, KH, KW, xw, y), output block ob reading the input blocks from
start(ob) = first group of ob * Cg // xw to end(ob) = ceil((last group of ob + 1) * Cg /
xw), at most S of them, zero weights for channels outside an output channel's group
(layout_pack.pack_spanned_conv_weight). The reduction over S blocks masks out those past
end(ob) (``where``), which lowering turns into the bound of the block loop: an output
block inside a group reads its group's blocks only, not the S of one straddling two. The
output
block is the innermost axis, contiguous in both the output and
the packed weight, so a schedule can vectorize it.
"""

from __future__ import annotations

from .. import te
from ._window import out_len, reduce_axes, split_pads, window_index
from .pad import pad_tensor
from .registry import register_op


class _Shapes:
    """The blocking of one conv, read off its input and packed weight shapes."""

    def __init__(self, x: te.Tensor, w: te.Tensor, groups: int, spanned: bool = False):
        if x.ndim not in (4, 5) or w.ndim != 6:
            raise ValueError(f"conv2d_nchwc: data {list(x.shape)}, weight {list(w.shape)}")
        self.x_block = x.shape[4] if x.ndim == 5 else 1
        self.w_block, self.y = w.shape[4], w.shape[5]
        self.spanned = spanned
        channels = x.shape[1] * self.x_block
        # input channels per group (a spanned weight holds S blocks, not a group's)
        self.cg = channels // groups if spanned else w.shape[1] * self.w_block
        self.mg = w.shape[0] * self.y // groups  # output channels per group
        self.depthwise = groups > 1 and self.cg == 1 and self.mg == 1 and not spanned
        self.groups = groups
        self._check(x, w)

    def _check(self, x, w):
        if self.spanned:
            ok = self.w_block == self.x_block and w.shape[1] <= x.shape[1] and self.x_block > 1
        elif self.depthwise:
            ok = self.x_block == self.y and self.w_block == 1
        else:
            ok = self.w_block == self.x_block and (self.groups == 1 or self.mg % self.y == 0)
        channels = x.shape[1] * self.x_block
        if not ok or channels != self.cg * self.groups:
            raise ValueError(
                f"conv2d_nchwc: weight {list(w.shape)} with groups={self.groups} "
                f"does not fit data {list(x.shape)}"
            )


def _span(ob, sh: _Shapes):
    """The input blocks output block ``ob`` of a spanned conv reads, [start, end): those
    of the groups of its first and last output channels (layout_pack.span_start and
    span_end, which packed its weight)."""
    y, og, cg, xb = sh.y, sh.mg, sh.cg, sh.x_block
    start = (ob * y // og) * cg // xb
    end = (((ob * y + (y - 1)) // og + 1) * cg + (xb - 1)) // xb
    return start, end


def _load(xp: te.Tensor, n, cb, ci, ih, iw):
    return xp[(n, cb, ih, iw, ci)] if xp.ndim == 5 else xp[(n, cb, ih, iw)]


def _bias(out: te.Tensor, inputs) -> te.Tensor:
    if len(inputs) < 3 or inputs[2] is None:
        return out
    b = inputs[2]
    return te.compute(
        out.shape,
        lambda n, ob, oh, ow, oi: out[(n, ob, oh, ow, oi)] + b[(ob, oi)],
        name="conv_nchwc_bias",
        tag="bias_add",
    )


@register_op("conv2d_nchwc", "out_elemwise_fusable")
def conv2d_nchwc(inputs, attrs):
    x, w = inputs[0], inputs[1]
    groups = int(attrs.get("groups", 1))
    sh = _Shapes(x, w, groups, bool(attrs.get("spanned")))
    strides = list(attrs.get("strides") or [1, 1])
    dilations = list(attrs.get("dilations") or [1, 1])
    before, after = split_pads(attrs.get("pads"), 2)
    tail = [0] * (x.ndim - 4)  # the block axis is never padded
    xp = pad_tensor(x, [0, 0, *before, *tail], [0, 0, *after, *tail], name="conv_pad")
    kernel = w.shape[2:4]
    spatial = [
        out_len(x.shape[2 + i], kernel[i], strides[i], dilations[i], before[i], after[i])
        for i in range(2)
    ]
    rk = reduce_axes(kernel, "rk")
    # Depthwise convs reduce over the window only; others over whole input blocks too.
    rcb = None if sh.depthwise else te.reduce_axis(w.shape[1], "rcb")
    rci = te.reduce_axis(sh.w_block, "rci") if sh.w_block > 1 else None
    blocks_per_group = w.shape[1]
    out_blocks_per_group = max(sh.mg // sh.y, 1)

    def f(n, ob, oh, ow, oi):
        ih = window_index(oh, rk[0], strides[0], dilations[0])
        iw = window_index(ow, rk[1], strides[1], dilations[1])
        where = None
        if sh.depthwise:
            cb, ci, wcb, wci = ob, oi, 0, 0
        else:
            if sh.spanned:
                start, end = _span(ob, sh)
                # in range for every rcb (the masked ones too: the evaluator reads them)
                cb = te.min_(start + rcb, x.shape[1] - 1)
                where = rcb < end - start
            elif groups == 1:
                cb = rcb
            else:
                cb = (ob // out_blocks_per_group) * blocks_per_group + rcb
            ci = wci = rci if rci is not None else 0
            wcb = rcb
        axes = [a for a in (rcb, *rk, rci) if a is not None]
        return te.sum(_load(xp, n, cb, ci, ih, iw) * w[(ob, wcb, *rk, wci, oi)], axes, where)

    multiple = int(attrs.get("pixel_multiple", 1))
    if multiple > 1:
        _check_pixels(sh, kernel, strides, before + after, multiple)
        return [_bias(_pixels_conv(x, w, multiple, strides, spatial), inputs)]
    out = te.compute(
        [x.shape[0], w.shape[0], *spatial, sh.y],
        f,
        name="conv_nchwc",
        tag="conv",
        attrs={
            "groups": groups,
            "strides": strides,
            "dilations": dilations,
            "spanned": sh.spanned,
        },
    )
    return [_bias(out, inputs)]


def _check_pixels(sh: _Shapes, kernel, strides, pads, multiple: int) -> None:
    if not (
        tuple(kernel) == (1, 1)
        and not any(pads)
        and sh.groups == 1
        and not sh.spanned
        and sh.x_block > 1
    ):
        raise ValueError(
            f"conv2d_nchwc: pixel_multiple {multiple} needs an ungrouped unpadded 1x1 "
            f"conv on blocked data (kernel {list(kernel)}, strides {strides}, pads {pads})"
        )


def _pixels_conv(x: te.Tensor, w: te.Tensor, multiple: int, strides, out_hw) -> te.Tensor:
    """A 1x1 conv over its output pixels as one axis rounded up to ``multiple`` (the
    conv stage, tagged ``conv``), and the output in rows and columns reading it; a
    strided one reads every ``strides``-th input row and column."""
    n_ = x.shape[0]
    h, wd = out_hw
    sh, sw = strides
    pixels = h * wd
    held = -(-pixels // multiple) * multiple
    rcb = te.reduce_axis(w.shape[1], "rcb")
    rci = te.reduce_axis(w.shape[4], "rci")

    def f(n, ob, p, oi):
        q = te.min_(p, pixels - 1)  # the pixels past the last repeat it
        xq = x[(n, rcb, q // wd * sh, q % wd * sw, rci)]
        return te.sum(xq * w[(ob, rcb, 0, 0, rci, oi)], [rcb, rci])

    flat = te.compute(
        [n_, w.shape[0], held, w.shape[5]],
        f,
        name="conv_nchwc",
        tag="conv",
        attrs={
            "groups": 1,
            "strides": [sh, sw],
            "dilations": [1, 1],
            "spanned": False,
            "pixel_multiple": multiple,
        },
    )
    return te.compute(
        [n_, w.shape[0], h, wd, w.shape[5]],
        lambda n, ob, oh, ow, oi: flat[(n, ob, oh * wd + ow, oi)],
        name="conv_nchwc_rows",
        tag="conv_rows",
    )
