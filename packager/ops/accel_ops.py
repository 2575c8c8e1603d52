"""The integer conv and dense of the accelerator's blocked layouts (docs/accel.md,
"Operators"): what a qconv2d / qdense placed on the accelerator computes. The graph pass
that places them (packager/graph/passes/place_accel.py) packs their weights and epilogue
parameters at package time; their schedules for the accel family are in
packager/ops/accel/; on the CPU they run through the generic schedule, bit for bit the
same.

Layouts (BI, BO: the core's block_in and block_out; batch 1):
  x  (N, C/BI, H, W, BI) int8     activations, NCHW1n16c for the default core
  w  (O/BO, C/BI, KH, KW, BO, BI) int8   weights, OIHW16o16i: w[ob, cb, kh, kw, oi, ci]
                                          = W[ob*BO + oi, cb*BI + ci, kh, kw], zeros past O, C
  p  (O/BO, 6, BO) int32          epilogue parameters per output channel:
        0 bias   (bias - x_zp * sum(w), as the quantize pass makes it)
        1 mult   m, the requantize multiplier in [2^30, 2^31)
        2 round  2^(s - 33), s the requantize shift (s >= 33)
        3 shift  s - 32
        4 lo, 5 hi   the output's bounds: the activation's bounds after the shift, plus
                      the zero point, within int8
  y  (N, O/BO, OH, OW, BO) int8

  acc = sum over cb, kh, kw, ci of x[n, cb, oh*s+kh, ow*s+kw, ci] * w[ob, cb, kh, kw, oi, ci]
        (int32; padding reads x_zp)
  y   = min(max(((mulhi(acc + bias, mult) + round) >> shift) + y_zp, lo), hi)
  mulhi(a, b) = (int64(a) * int64(b)) >> 32, arithmetic shifts throughout.

This is exactly qconv2d's requantize, ((acc + bias) * m + 2^(s-1)) >> s clamped at the
activation's bounds, as integers: adding 2^(s-1), a multiple of 2^32, commutes with the
floor division by 2^32, and a clamp commutes with a monotone shift (bounds moved through
it). The accelerator's ALU computes it as ADD, MULHI, ADD, SHR, ADD, MAX, MIN."""

from __future__ import annotations

from .. import te
from ._window import out_len, reduce_axes, split_pads, window_index
from .pad import pad_tensor
from .quantized import requantize_mulhi
from .registry import register_op

I32 = "int32"
BIAS, MULT, ROUND, SHIFT, LO, HI = range(6)


def epilogue(acc, p, ob, oi, y_zp: int):
    """int8 output of int32 accumulator ``acc`` of channel (ob, oi), parameters ``p``
    (the CPU's int32 epilogue, packager/ops/quantized.py's requantize_mulhi)."""
    return te.cast("int8", requantize_mulhi(acc, lambda row: p[(ob, row, oi)], y_zp))


@register_op("accel_conv2d", "out_elemwise_fusable")
def accel_conv2d(inputs, attrs):
    """attrs: strides, pads, dilations, x_zp, y_zp, c and oc (the real channel counts)."""
    x, w, p = inputs
    strides = list(attrs.get("strides") or [1, 1])
    dilations = list(attrs.get("dilations") or [1, 1])
    before, after = split_pads(attrs.get("pads"), 2)
    ob_n, cb_n, kh, kw, bo, bi = w.shape
    xp = x
    if any(before + after):
        xp = pad_tensor(
            x, [0, 0, *before, 0], [0, 0, *after, 0], value=int(attrs["x_zp"]), name="accel_pad"
        )
    spatial = [
        out_len(x.shape[2 + i], (kh, kw)[i], strides[i], dilations[i], before[i], after[i])
        for i in range(2)
    ]
    rcb = te.reduce_axis(cb_n, "rcb")
    rk = reduce_axes((kh, kw), "rk")
    rci = te.reduce_axis(bi, "rci")

    def f(n, ob, oh, ow, oi):
        ih = window_index(oh, rk[0], strides[0], dilations[0])
        iw = window_index(ow, rk[1], strides[1], dilations[1])
        a = te.cast(I32, xp[(n, rcb, ih, iw, rci)])
        b = te.cast(I32, w[(ob, rcb, rk[0], rk[1], oi, rci)])
        return te.sum(a * b, [rcb, *rk, rci])

    acc = te.compute(
        [x.shape[0], ob_n, *spatial, bo], f, name="accel_acc", tag="accel_gemm",
        attrs={"strides": strides, "dilations": dilations},
    )  # fmt: skip

    def out(n, ob, oh, ow, oi):
        return epilogue(acc[(n, ob, oh, ow, oi)], p, ob, oi, attrs["y_zp"])

    return [te.compute(acc.shape, out, name="accel_conv2d", tag="accel_epilogue")]


@register_op("accel_dense", "out_elemwise_fusable")
def accel_dense(inputs, attrs):
    """x (N, K/BI, BI) int8, w (O/BO, K/BI, BO, BI) int8, p (O/BO, 6, BO) -> y
    (N, O/BO, BO) int8; attrs x_zp, y_zp, k and o (the real sizes)."""
    x, w, p = inputs
    ob_n, kb_n, bo, bi = w.shape
    rkb = te.reduce_axis(kb_n, "rkb")
    rki = te.reduce_axis(bi, "rki")

    def f(n, ob, oi):
        a = te.cast(I32, x[(n, rkb, rki)])
        return te.sum(a * te.cast(I32, w[(ob, rkb, oi, rki)]), [rkb, rki])

    acc = te.compute([x.shape[0], ob_n, bo], f, name="accel_acc", tag="accel_gemm")

    def out(n, ob, oi):
        return epilogue(acc[(n, ob, oi)], p, ob, oi, attrs["y_zp"])

    return [te.compute(acc.shape, out, name="accel_dense", tag="accel_epilogue")]
