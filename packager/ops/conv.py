"""N-d convolution and transposed convolution (NC... layout, grouped, dilated, strided).

attrs (both): strides, dilations, pads (all begins, then all ends), groups.
Inputs: data (N, C, *spatial), weight, optional bias (M,). The bias is its own
elementwise stage after the reduction so the reduction stays a pure sum.
"""

from __future__ import annotations

from .. import te
from ._window import out_len, reduce_axes, scaled, span, split_pads, window_index
from .pad import pad_tensor
from .registry import register_op


def _params(x: te.Tensor, attrs: dict):
    nd = x.ndim - 2
    strides = list(attrs.get("strides") or [1] * nd)
    dilations = list(attrs.get("dilations") or [1] * nd)
    before, after = split_pads(attrs.get("pads"), nd)
    return nd, strides, dilations, before, after, int(attrs.get("groups", 1))


def _add_bias(out: te.Tensor, inputs, name: str) -> te.Tensor:
    if len(inputs) < 3 or inputs[2] is None:
        return out
    bias = inputs[2]
    return te.compute(
        out.shape, lambda n, m, *o: out[(n, m, *o)] + bias[m], name=f"{name}_bias", tag="bias_add"
    )


def _channel(m, per_group_out: int, per_group_in: int, rc, groups: int):
    """Input channel of reduction index ``rc`` for output channel ``m`` (grouped)."""
    if groups == 1:
        return rc
    return scaled(m // per_group_out, per_group_in) + rc


@register_op("conv", "out_elemwise_fusable")
def conv(inputs, attrs):
    x, w = inputs[0], inputs[1]
    nd, strides, dilations, before, after, groups = _params(x, attrs)
    m_total, cg = w.shape[0], w.shape[1]
    kernel = w.shape[2:]
    xp = pad_tensor(x, [0, 0, *before], [0, 0, *after], name="conv_pad")
    spatial = [
        out_len(x.shape[2 + i], kernel[i], strides[i], dilations[i], before[i], after[i])
        for i in range(nd)
    ]
    rc = te.reduce_axis(cg, "rc")
    rk = reduce_axes(kernel, "rk")
    mg = m_total // groups

    def f(n, m, *o):
        c = _channel(m, mg, cg, rc, groups)
        xi = [window_index(o[i], rk[i], strides[i], dilations[i]) for i in range(nd)]
        return te.sum(xp[(n, c, *xi)] * w[(m, rc, *rk)], [rc, *rk])

    out = te.compute(
        [x.shape[0], m_total, *spatial],
        f,
        name="conv",
        tag="conv",
        attrs={"groups": groups, "strides": strides, "dilations": dilations},
    )
    return [_add_bias(out, inputs, "conv")]


def _dilate_and_pad(x, nd, strides, lead: list[int], extents: list[int]):
    """x with ``strides - 1`` zeros between elements, shifted by ``lead`` (may be
    negative) and cut to ``extents``: the input of the equivalent direct conv."""

    def f(n, c, *j):
        src, ok = [], []
        for i in range(nd):
            t = j[i] - lead[i] if lead[i] else j[i]
            n_in = x.shape[2 + i]
            if strides[i] == 1:
                src.append(t)
            else:
                src.append(t // strides[i])
                ok.append(te.eq(t % strides[i], 0))
            ok += [t >= 0, t < scaled(n_in - 1, strides[i]) + 1]
        return te.select(te.all_of(*ok), x[(n, c, *src)], te.const(0, x.dtype))

    return te.compute([*x.shape[:2], *extents], f, name="conv_transpose_pad", tag="pad")


@register_op("conv_transpose", "out_elemwise_fusable")
def conv_transpose(inputs, attrs):
    """extra attrs: output_padding, or output_shape (spatial) which overrides it."""
    x, w = inputs[0], inputs[1]
    nd, strides, dilations, before, after, groups = _params(x, attrs)
    cin, mg = w.shape[0], w.shape[1]
    kernel = w.shape[2:]
    cg = cin // groups
    spatial = attrs.get("output_shape")
    if not spatial:
        opad = list(attrs.get("output_padding") or [0] * nd)
        spatial = [
            strides[i] * (x.shape[2 + i] - 1)
            + opad[i]
            + span(kernel[i], dilations[i])
            - before[i]
            - after[i]
            for i in range(nd)
        ]
    # Output o gathers x[(o + before - k*d) / s]; with the kernel flipped this is a
    # direct stride-1 conv over the zero-dilated input shifted by span - 1 - before.
    lead = [span(kernel[i], dilations[i]) - 1 - before[i] for i in range(nd)]
    extents = [spatial[i] + span(kernel[i], dilations[i]) - 1 for i in range(nd)]
    xp = _dilate_and_pad(x, nd, strides, lead, extents)
    rc = te.reduce_axis(cg, "rc")
    rk = reduce_axes(kernel, "rk")

    def f(n, m, *o):
        c = _channel(m, mg, cg, rc, groups)
        xi = [window_index(o[i], rk[i], 1, dilations[i]) for i in range(nd)]
        flipped = [kernel[i] - 1 - rk[i] for i in range(nd)]
        oc = m if groups == 1 else m % mg
        return te.sum(xp[(n, c, *xi)] * w[(c, oc, *flipped)], [rc, *rk])

    out = te.compute(
        [x.shape[0], mg * groups, *spatial],
        f,
        name="conv_transpose",
        tag="conv_transpose",
        attrs={"groups": groups, "strides": strides, "dilations": dilations},
    )
    return [_add_bias(out, inputs, "conv_transpose")]
