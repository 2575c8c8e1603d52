"""CausalConvWithState: a depthwise 1-D convolution over the past state (or zeros)
followed by the input, each output looking only at its own and earlier positions, with
an optional SiLU; the new state is the last k - 1 positions of that sequence."""

from __future__ import annotations

from .. import te
from .registry import register_op


@register_op("causal_conv_with_state", "opaque")
def causal_conv_with_state(inputs, attrs):
    """inputs: x (B, C, L), weight (C, 1, k), bias (C), optional past state (B, C, k-1).
    attrs: silu. Outputs: y (B, C, L), present state (B, C, k-1)."""
    x, w, bias = inputs[:3]
    past = inputs[3] if len(inputs) > 3 else None
    b, c, length = x.shape
    k = w.shape[2]
    lead = k - 1
    dt = x.dtype
    zero = te.const(0, dt)

    def seq(n, ch, t):
        """Position t of the past state followed by the input (t is an INDEX expr)."""
        now = x[n, ch, te.max_(t - lead, te.const(0, te.INDEX))]
        before = (
            zero if past is None else past[n, ch, te.min_(t, te.const(max(lead - 1, 0), te.INDEX))]
        )
        return now if lead == 0 else te.select(t < lead, before, now)

    j = te.reduce_axis(k, "j")
    conv = te.compute(
        x.shape,
        lambda n, ch, t: te.sum(w[ch, 0, j.var] * seq(n, ch, t + j.var), j),
        name="causal_conv_sum",
        tag="reduce",
    )

    def out(n, ch, t):
        v = conv[n, ch, t] + bias[ch]
        if attrs.get("silu"):
            v = v / (te.const(1, dt) + te.call("exp", -v))
        return v

    y = te.compute(x.shape, out, name="causal_conv", tag="elemwise")
    state = te.compute(
        (b, c, lead),
        lambda n, ch, s: seq(n, ch, s + length),
        name="causal_conv_state",
        tag="injective",
    )
    return [y, state]
