"""The conversions between the model's int8 / uint8 activations and the accelerator's
blocked layout (docs/accel.md, "Placement"): CPU kernels at the boundaries of the
accelerator's regions of the graph (packager/graph/passes/place_accel.py).

A value in the accelerator's layout is (N, ceil(C/B), H, W, B) int8, or (N, ceil(C/B), B)
for a dense's activations, B the core's block. A uint8 value travels shifted, as
x - 128 in int8 (with its zero point moved alike, every integer op computes the same
numbers); ``shift`` says so. Channels past C read 0 when packed (the weights there are
zero) and are dropped when unpacked."""

from __future__ import annotations

from .. import te
from .registry import register_op

I32 = "int32"
SHIFT = 128  # uint8 -> int8: x - 128


@register_op("accel_pack", "injective")
def accel_pack(inputs, attrs):
    """x (N, C, H, W) or (N, C) int8 / uint8 -> the accelerator's int8 layout; attrs
    block, shift (x is uint8: subtract 128); with ``taps``, the tap-packed input of a conv
    with few channels (see accel_tap_pack)."""
    if attrs.get("taps"):
        return accel_tap_pack(inputs, attrs)
    (x,) = inputs
    b, c = int(attrs["block"]), x.shape[1]
    rest = list(x.shape[2:])

    def f(n, cb, *idx):
        *sp, ci = idx
        ch = cb * b + ci
        v = te.cast(I32, x[(n, te.min_(ch, c - 1), *sp)])
        if attrs.get("shift"):
            v = v - te.const(SHIFT, I32)
        v = te.cast("int8", v)
        return v if c % b == 0 else te.select(ch < c, v, te.const(0, "int8"))

    shape = [x.shape[0], -(-c // b), *rest, b]
    return [te.compute(shape, f, name="accel_pack", tag="injective")]


@register_op("accel_unpack", "injective")
def accel_unpack(inputs, attrs):
    """The accelerator's int8 layout -> (N, C, H, W) or (N, C) of ``dtype``; attrs c,
    dtype (uint8: add 128 back)."""
    (x,) = inputs
    b, c, dtype = x.shape[-1], int(attrs["c"]), attrs["dtype"]
    rest = list(x.shape[2:-1])

    def f(n, ch, *sp):
        v = te.cast(I32, x[(n, ch // b, *sp, ch % b)])
        if dtype == "uint8":
            v = v + te.const(SHIFT, I32)
        return te.cast(dtype, v)

    return [te.compute([x.shape[0], c, *rest], f, name="accel_unpack", tag="injective")]


def accel_tap_pack(inputs, attrs):
    """A conv's input with its kernel's columns moved into the channels, packed: x (N, C,
    H, W) -> (N, ceil(C*KW/B), H, OW, B), channel c*KW + kw of output column ow holding
    x[c, :, ow*sw + kw*dw - pad_left] (``pad_value``, the input's zero point, outside the
    row). The conv on it has KW = 1 and C*KW channels: a 3-channel 7x7 stem fills 21 of
    32 lanes of two 16-channel blocks instead of 3 of 16 in each of 7 column taps.
    attrs["taps"]: kw, stride, dilation, pad (left), out_w, pad_value; block, shift as
    accel_pack."""
    (x,) = inputs
    t = attrs["taps"]
    b, w = int(attrs["block"]), x.shape[3]
    kw, sw, dw = int(t["kw"]), int(t["stride"]), int(t["dilation"])
    pad, out_w, total = int(t["pad"]), int(t["out_w"]), x.shape[1] * int(t["kw"])

    def f(n, cb, h, ow, ci):
        ch = te.min_(cb * b + ci, total - 1)
        iw = ow * sw + (ch % kw) * dw - pad
        inside = te.all_of(iw >= 0, iw < w)
        v = te.cast(I32, x[n, ch // kw, h, te.max_(te.min_(iw, w - 1), 0)])
        v = te.select(inside, v, te.const(int(t["pad_value"]), I32))
        if attrs.get("shift"):
            v = v - te.const(SHIFT, I32)
        v = te.cast("int8", v)
        if total % b == 0:
            return v
        return te.select(cb * b + ci < total, v, te.const(0, "int8"))

    shape = [x.shape[0], -(-total // b), x.shape[2], out_w, b]
    return [te.compute(shape, f, name="accel_pack", tag="injective")]
