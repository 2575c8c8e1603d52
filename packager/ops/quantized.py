"""Quantization: QuantizeLinear / DequantizeLinear, the dynamic quantization parameters,
and the integer kernels (conv and dense) that the quantize pass makes of QDQ chains.

quantize_linear(x, scale, zero_point), attrs axis, dtype: saturate(rint(x / scale) + zp),
rint rounding half to even; ``scale`` and ``zero_point`` are scalars or 1-D along
``axis`` (per-axis). dequantize_linear(x, scale, zero_point), attr axis:
(float(x) - float(zp)) * scale, in the scale's dtype.

The integer kernels (qconv2d, qdense) take the activation as int8/uint8 and weights
packed int8 at package time, accumulate in int32 (each product widened, never a
saturating pair sum) and end in a requantize epilogue read from one int64 table
``rq`` of shape (7, channels) (see packager/graph/passes/quantize.py for how it is made):

  rq[0] multiplier  rq[1] right shift  rq[2] rounding term (1 << (shift - 1))
  rq[3] / rq[4]     activation bounds on the scaled product
  rq[5] residual multiplier  rq[6] bias (already minus x_zp * sum(w))
  rq[7] / rq[8]     with ``rq32``: the output's bounds after the shift (zero point added)

With ``rq32 == "mulhi"`` the table is int32 (6, channels) instead: bias, mult,
round = 2^(shift - 33), shift - 32, lo, hi, and the epilogue (requantize_mulhi) runs in
int32 lanes but for one widening multiply.

  p = clamp((acc + bias) * mult, lo, hi) [+ (r - r_zp) * res_mult]
  y = saturate(((p + round) >> shift) + y_zp)

attrs of both: x_zp, y_zp, out_dtype (int8/uint8), r_zp (with a residual input), rq32
(the epilogue in int32 lanes: y = clamp(((acc + bias) * mult + round) >> shift) + y_zp,
rq[7], rq[8]), the same bytes where the quantize pass sets it).
With ``add_shift`` (a folded integer add) the residual input is instead side b of a
``qadd`` whose side a is y, and the ``add_*`` attrs are qadd's.
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ._cpu import fallback, find_tagged, padded_copy_at_root, run_parallel
from ._window import out_len, reduce_axes, split_pads, window_index
from .int8_intrin import (
    QRANGE,
    dot4_intrin,
    dwdot_intrin,
    dwpair_intrin,
    mac_intrin,
    pair_intrin,
    requant_intrin,
)
from .matmul import PARALLEL_MIN_MACS
from .pad import pad_tensor
from .registry import ScheduleContext, register_op, register_schedule
from .weight_prefetch import conv_weight, prefetch_next_weights

I32, I64 = "int32", "int64"


def _param(t: te.Tensor, idx, axis: int) -> te.Expr:
    """A quantization parameter: one element, or the element of ``idx[axis]``."""
    if t.ndim == 0:
        return t[()]
    if t.size == 1:
        return t[(0,) * t.ndim]
    return t[idx[axis]]


def _axis(x: te.Tensor, attrs: dict) -> int:
    return int(attrs.get("axis", 1)) % max(x.ndim, 1)


@register_op("quantize_linear", "broadcast")
def quantize_linear(inputs, attrs):
    x, scale, zp = inputs
    out = attrs.get("dtype") or zp.dtype
    lo, hi = QRANGE[out]
    axis = _axis(x, attrs)
    ft = x.dtype

    def f(*i):
        q = te.call("round", x[i] / te.cast(ft, _param(scale, i, axis)))
        q = q + te.cast(ft, _param(zp, i, axis))
        q = te.min_(te.max_(q, te.const(lo, ft)), te.const(hi, ft))
        return te.cast(out, q)

    return [te.compute(x.shape, f, name="quantize", tag="broadcast")]


@register_op("quantize_blocked", "injective")
def quantize_blocked(inputs, attrs):
    """quantize_linear of a 4-d tensor (per-tensor parameters) written blocked,
    (N, ceil(C/B), H, W, B), B = attrs ``block``: the int8 layout the integer ops read
    (packager/graph/passes/int8_layout.py). Channels past C repeat the last one (their
    readers' weights are zero, their outputs discarded)."""
    x, scale, zp = inputs
    n, c, h, w = x.shape
    b = int(attrs["block"])
    q = quantize_linear(inputs, attrs)[0]

    def f(i, cb, y, z, ci):
        ch = cb * b + ci
        return q[(i, te.min_(ch, c - 1) if c % b else ch, y, z)]

    return [te.compute((n, -(-c // b), h, w, b), f, name="quantize_blocked", tag="injective")]


def _at(x: te.Tensor, n, c, h, w):
    """Channel ``c`` at (n, h, w) of an NCHW or a blocked (N, C/B, H, W, B) tensor."""
    if x.ndim == 4:
        return x[(n, c, h, w)]
    b = x.shape[4]
    return x[(n, c // b, h, w, c % b)]


@register_op("dequantize_linear", "broadcast")
def dequantize_linear(inputs, attrs):
    x, scale, zp = inputs
    axis = _axis(x, attrs)
    ft = scale.dtype

    def f(*i):
        return (te.cast(ft, x[i]) - te.cast(ft, _param(zp, i, axis))) * _param(scale, i, axis)

    return [te.compute(x.shape, f, name="dequantize", tag="broadcast")]


@register_op("dynamic_qparams", "reduction")
def dynamic_qparams(inputs, attrs):
    """DynamicQuantizeLinear's scale and uint8 zero point of ``x``: its range widened
    to hold 0, over 255 steps."""
    (x,) = inputs
    ft = x.dtype
    zero = te.const(0, ft)

    def over_all(combiner, name):
        axes = [te.reduce_axis(d, f"r{k}") for k, d in enumerate(x.shape)]
        return te.compute((), lambda: combiner(x[tuple(axes)], axes), name=name)

    lo = over_all(te.min_reduce, "x_min")
    hi = over_all(te.max_reduce, "x_max")
    scale = te.compute(
        (),
        lambda: (te.max_(hi[()], zero) - te.min_(lo[()], zero)) / te.const(255, ft),
        name="dq_scale",
    )

    def zero_point():
        z = te.call("round", zero - te.min_(lo[()], zero) / scale[()])
        return te.cast("uint8", te.min_(te.max_(z, zero), te.const(255, ft)))

    return [scale, te.compute((), zero_point, name="dq_zero_point")]


# --- integer kernels --------------------------------------------------------------


def _requantize(acc, rq, m, attrs, residual=None, wide=False):
    """The epilogue: int32 accumulator of output channel ``m`` -> out_dtype (``wide``:
    an int32 holding the value where the int32 epilogue applies, so a blocked stage's
    lanes are all 32-bit and vectorize at full width; the copy out narrows)."""
    if "add_shift" in attrs:  # a folded integer add: the conv's output is its operand a
        y = _requantize(acc, rq, m, {k: v for k, v in attrs.items() if k != "add_shift"})
        return _qadd(y, residual, attrs, "add_")
    out = attrs["out_dtype"]
    if attrs.get("rq32") == "mulhi" and residual is None:
        y = requantize_mulhi(te.cast(I32, acc), lambda row: rq[(row, m)], int(attrs["y_zp"]))
        return y if wide else te.cast(out, y)
    if attrs.get("rq32") and residual is None:
        y = _requantize32(acc, rq, m, int(attrs["y_zp"]))
        return y if wide else te.cast(out, y)
    lo, hi = QRANGE[out]
    p = (te.cast(I64, acc) + rq[(6, m)]) * rq[(0, m)]
    p = te.min_(te.max_(p, rq[(3, m)]), rq[(4, m)])
    if residual is not None:
        r = te.cast(I64, residual) - te.const(int(attrs.get("r_zp", 0)), I64)
        p = p + r * rq[(5, m)]
    y = te.binary(">>", p + rq[(2, m)], rq[(1, m)]) + te.const(int(attrs["y_zp"]), I64)
    y = te.min_(te.max_(y, te.const(lo, I64)), te.const(hi, I64))
    return te.cast(out, y)


def _requantize32(acc, rq, m, y_zp: int):
    """The epilogue in int32 lanes where the quantize pass proved it exact (``rq32``):
    acc + bias and the rounded shifted product fit int32 (only the multiply is wide,
    int32 x int32), and the activation's bounds, applied after the shift, are rows 7
    and 8 of ``rq`` (the zero point added, within the output type)."""

    def i32(k):
        return te.cast(I32, rq[(k, m)])

    v = te.cast(I64, te.cast(I32, acc) + i32(6)) * te.cast(I64, i32(0))
    y = te.cast(I32, te.binary(">>", v + rq[(2, m)], rq[(1, m)])) + te.const(y_zp, I32)
    return te.min_(te.max_(y, i32(7)), i32(8))


def requantize_mulhi(acc, prm, y_zp: int):
    """The int32 epilogue of an ``rq32 == "mulhi"`` table, rows of ``prm(row)`` (bias,
    mult, round, shift, lo, hi: graph/passes/quantize.py's mulhi_table, and the
    accelerator's layout): min(max(((mulhi(acc + bias, mult) + round) >> shift) + y_zp,
    lo), hi), mulhi(a, b) = (int64(a) * int64(b)) >> 32. Only the multiply is wide."""
    a = acc + prm(0)
    hi = te.cast(I32, te.binary(">>", te.cast(I64, a) * te.cast(I64, prm(1)), te.const(32, I64)))
    q = te.binary(">>", hi + prm(2), prm(3)) + te.const(int(y_zp), I32)
    return te.min_(te.max_(q, prm(4)), prm(5))


ADD_KEYS = ("a_zp", "b_zp", "a_mult", "b_mult", "shift", "lo", "hi", "y_zp", "out_dtype")


def add_params(attrs: dict, prefix: str = "") -> dict:
    """A qadd's parameters (ADD_KEYS and ``i32``) from attrs, ``prefix`` (``add_``: an
    add folded into a conv) dropped."""
    return {**{k: attrs[prefix + k] for k in ADD_KEYS}, "i32": bool(attrs.get(prefix + "i32"))}


def _qadd(a, b, attrs: dict, prefix: str = ""):
    """The integer add of two quantized tensors (expressions of their values):
    p = (a - a_zp) * a_mult + (b - b_zp) * b_mult, clamped at the activation's bounds
    [lo, hi], then y = saturate(((p + 2^(shift-1)) >> shift) + y_zp); the multipliers
    are a_scale / y_scale and b_scale / y_scale times 2^shift. In int32 lanes where the
    quantize pass chose the shift so that every p and its rounding fit (attr ``i32``),
    else in int64."""
    g = add_params(attrs, prefix)
    lo, hi = QRANGE[g["out_dtype"]]
    wide = I32 if g["i32"] else I64

    def c(v):
        return te.const(int(v), wide)

    a, b = te.cast(wide, a), te.cast(wide, b)
    p = (a - c(g["a_zp"])) * c(g["a_mult"]) + (b - c(g["b_zp"])) * c(g["b_mult"])
    p = te.min_(te.max_(p, c(g["lo"])), c(g["hi"]))
    y = te.binary(">>", p + c(1 << (int(g["shift"]) - 1)), c(g["shift"])) + c(g["y_zp"])
    return te.cast(g["out_dtype"], te.min_(te.max_(y, c(lo)), c(hi)))


@register_op("qadd", "broadcast")
def qadd(inputs, attrs):
    """Integer add of two quantized tensors of one shape (a DQ + DQ -> Add -> Q):
    attrs as ``_qadd``."""
    a, b = inputs

    def f(*i):
        return _qadd(a[i], b[i], attrs)

    return [te.compute(a.shape, f, name="qadd", tag="broadcast")]


def _widen(e):
    return te.cast(I32, e)


def _pad_in_quads(
    x: te.Tensor, c: int, before, after, blocks: int, k4: int, zp: int, dtype: str = ""
):
    """The padded input (``c`` channels, NCHW or blocked) with its channels in groups
    of 4 innermost,
    (N, C'/4, H', W', 4): the 4 activations a dot-product step multiplies lie together.
    Padding and the channels past C read the zero point (their weights are zero).
    ``dtype``: the copy's type where it widens (int16 pairs)."""
    dtype = dtype or x.dtype
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    shape = (n, blocks, h + before[0] + after[0], w + before[1] + after[1], k4)
    # an input blocked alike is copied block by block: its channels past C are read
    # as they are (against zero weights), so no guard differs between lanes
    same = x.ndim == 5 and (x.shape[1], x.shape[4]) == (blocks, k4)

    def f(b, cb, i, j, ci):
        ch = cb * k4 + ci
        inside = [ch < c] if blocks * k4 != c and not same else []
        inside += [i >= before[0], i < before[0] + h] if before[0] or after[0] else []
        inside += [j >= before[1], j < before[1] + w] if before[1] or after[1] else []
        if same:
            src = x[(b, cb, i - before[0], j - before[1], ci)]
        else:
            src = _at(x, b, te.min_(ch, c - 1), i - before[0], j - before[1])
        src = te.cast(dtype, src)
        return te.select(te.all_of(*inside), src, te.const(zp, dtype)) if inside else src

    return te.compute(shape, f, name="qconv_pad", tag="pad")


@register_op("qconv2d", "out_elemwise_fusable")
def qconv2d(inputs, attrs):
    """Integer 2-D conv, NCHW or blocked activations.

    Inputs: x (N, C, H, W) int8/uint8, or blocked (N, C/B, H, W, B) with attr ``c`` (the
    real channels; B a multiple of 4 for a full conv); w (OC'/L, Cg'/4, KH, KW, L, 4)
    int8, packed from (OC, Cg, KH, KW) with OC padded to whole blocks of L lanes and Cg
    to whole groups of 4 (zeros): w[ob, cb, kh, kw, oi, ci] = W[ob*L + oi, cb*4 + ci,
    kh, kw] (on x86 without a dot product for the activations, int16 pairs instead:
    (OC'/L, Cg'/2, KH, KW, L, 2)); rq (7, OC'); optional residual (N, OC, OH, OW) or
    blocked. attrs: strides,
    dilations, pads, groups, oc (real output channels), x_zp, y_zp, out_dtype;
    ``out_block``: the output is the requantized block (N, OC'/L, OH, OW, L)
    (packager/graph/passes/int8_layout.py); ``dw_taps`` (depthwise, a row's taps in
    quads: _dw_quads_acc), ``dw_pairs`` (depthwise, a row's taps in int16 pairs per
    output phase: _dw_pairs_acc) or ``row_taps`` (a stem, a row's taps and channels side
    by side: _row_packed_acc), each the kernel's real width; ``group_blocks`` (grouped,
    each block of L outputs a full conv over its groups' inputs, block-diagonal weights:
    quantize.pack_grouped_int8). Padding reads x_zp, so a padded tap adds exactly what
    the bias correction -x_zp * sum(w) took away.
    """
    x, w, rq = inputs[:3]
    residual = inputs[3] if len(inputs) > 3 else None
    if attrs.get("dw_taps") or attrs.get("row_taps"):
        acc = (_dw_quads_acc if attrs.get("dw_taps") else _row_packed_acc)(x, w, attrs)
        return _requantized(acc, rq, residual, attrs, x.shape[0], int(attrs["oc"]))
    if attrs.get("dw_pairs"):
        acc = _dw_pairs_acc(x, w, attrs)
        cols = acc.op.attrs["out_cols"]
        return _requantized(
            _dw_pairs_view(acc), rq, residual, attrs, x.shape[0], int(attrs["oc"]), cols
        )
    groups = int(attrs.get("groups", 1))
    oc = int(attrs["oc"])
    nb, ncb, kh, kw, lanes, k4 = w.shape
    strides, dilations, before, after, spatial, c_in = _geometry(x, attrs, kh, kw)
    cg = c_in // groups
    mg = oc // groups
    extra = ncb * k4 - cg  # channels read past a group's end (zero weights): keep in bounds
    # depthwise (one input and one output channel per group): the padded input is
    # blocked like the accumulator, (N, C'/L, H', W', L), so a block of L channels is
    # one contiguous vector at every tap
    depthwise = groups > 1 and cg == 1 and mg == 1 and ncb * k4 == 1
    # a blocked input is read in its blocks (a quad never crosses one): in place without
    # padding, else from a padded copy blocked alike (one vector per block)
    # int16 weight pairs (x86 without a dot product): the activations are widened
    # once, in the padded copy (made without padding too), so a step's pair is one
    # 32-bit broadcast from memory
    wide = "int16" if w.dtype == "int16" else ""
    zp = int(attrs["x_zp"])
    # grouped, each block of L output channels reading whole steps of one run of input
    # channels (``group_blocks``, quantize.pack_grouped_int8): the groups its lanes
    # belong to (as many as the most any block spans), block-diagonal weights; the full
    # conv's quads from that run's first
    full = groups == 1 or bool(attrs.get("group_blocks"))
    quads = -(-c_in // k4)  # the steps of input channels the blocks read
    if groups > 1 and full:  # the last block's run may reach past C (zero weights)
        quads = max(quads, ((nb - 1) * lanes // mg) * (cg // k4) + ncb)
    direct = x.ndim == 5 and full and x.shape[4] % k4 == 0
    direct = direct and x.shape[1] * x.shape[4] >= quads * k4
    if direct and not any(before + after) and not wide:
        xp = x
    elif direct:
        xp = _pad_in_quads(x, c_in, before, after, x.shape[1], x.shape[4], zp, wide)
    elif full:
        xp = _pad_in_quads(x, c_in, before, after, quads, k4, zp, wide)
    elif depthwise:
        xp = _pad_in_quads(x, c_in, before, after, nb, lanes, zp)
    else:
        xp = pad_tensor(x, [0, 0, *before], [0, extra, *after], value=zp, name="qconv_pad")
    rcb = te.reduce_axis(ncb, "rcb")
    rk = reduce_axes((kh, kw), "rk")
    rci = te.reduce_axis(k4, "rci")

    def f(n, ob, oh, ow, oi):
        c = rcb * k4 + rci
        q0 = rcb  # the step's quad (or pair) of input channels
        if groups > 1 and full:
            q0 = (ob * lanes // mg) * (cg // k4) + rcb
        elif groups > 1:
            g = te.min_((ob * lanes + oi) // mg, groups - 1)  # padded channels: last group
            c = g * cg + c
        ih = window_index(oh, rk[0], strides[0], dilations[0])
        iw = window_index(ow, rk[1], strides[1], dilations[1])
        if direct:
            q = xp.shape[4] // k4
            a = xp[(n, q0 // q, ih, iw, (q0 % q) * k4 + rci)] if q > 1 else xp[(n, q0, ih, iw, rci)]
        elif full:
            a = xp[(n, q0, ih, iw, rci)]
        elif depthwise:
            a = xp[(n, ob, ih, iw, oi)]
        else:
            a = xp[(n, c, ih, iw)]
        prod = _widen(a) * _widen(w[(ob, rcb, rk[0], rk[1], oi, rci)])
        return te.sum(prod, [rcb, *rk, rci])

    acc = te.compute(
        [x.shape[0], nb, *spatial, lanes],
        f,
        name="qconv_acc",
        tag="qconv",
        attrs={
            "groups": groups,
            "strides": strides,
            "dilations": dilations,
            "depthwise": depthwise,
            "group_blocks": groups > 1 and full,
            "byte_pairs": bool(attrs.get("byte_pairs")),
        },
    )

    return _requantized(acc, rq, residual, attrs, x.shape[0], oc)


def _requantized(
    acc: te.Tensor, rq, residual, attrs: dict, n: int, oc: int, cols: int | None = None
) -> list:
    """The requantize epilogue of an accumulator (N, OC'/L, OH, OW, L): its output
    blocked alike (``out_block``) or NCHW with the real ``oc`` channels. ``cols``: the
    real output columns where the accumulator holds more (whole tiles; the columns
    past them read the residual's last one and are not stored)."""
    nb, lanes, spatial = acc.shape[1], acc.shape[4], list(acc.shape[2:4])
    cols = cols or spatial[1]
    spatial[1] = cols
    shape = [n, nb, *spatial, lanes]

    def requant(n, ob, oh, ow, oi):
        m = ob * lanes + oi
        r, rw = None, te.min_(ow, cols - 1) if cols != acc.shape[3] else ow
        if residual is not None and tuple(residual.shape) == tuple(shape):
            r = residual[(n, ob, oh, rw, oi)]  # blocked like the accumulator
        elif residual is not None:  # padded channels read the last real one (discarded)
            r = _at(residual, n, te.min_(m, oc - 1) if nb * lanes != oc else m, oh, rw)
        return _requantize(acc[(n, ob, oh, ow, oi)], rq, m, attrs, r, wide=True)

    blocked = te.compute(acc.shape, requant, name="qconv_rq", tag="requantize_blocked")
    if attrs.get("out_block"):  # the output is the block itself (int8_layout.py), narrowed
        return [
            te.compute(shape, _narrow(blocked, attrs["out_dtype"]), name="qconv", tag="requantize")
        ]
    return [
        te.compute(
            [n, oc, *spatial],
            _unblock(blocked, lanes, attrs["out_dtype"]),
            name="qconv",
            tag="requantize",
        )
    ]


def _geometry(x: te.Tensor, attrs: dict, kh: int, kw: int):
    """(strides, dilations, pads before, pads after, output H and W, input channels)
    of a qconv2d with a kh x kw kernel over ``x`` (NCHW, or blocked with attr ``c``)."""
    strides = list(attrs.get("strides") or [1, 1])
    dilations = list(attrs.get("dilations") or [1, 1])
    before, after = split_pads(attrs.get("pads"), 2)
    spatial = [
        out_len(x.shape[2 + i], (kh, kw)[i], strides[i], dilations[i], before[i], after[i])
        for i in range(2)
    ]
    c_in = int(attrs["c"]) if x.ndim == 5 else x.shape[1]
    return strides, dilations, before, after, spatial, c_in


def _dw_quads_acc(x: te.Tensor, w: te.Tensor, attrs: dict) -> te.Tensor:
    """The accumulator of a depthwise conv whose weights hold each row's taps in quads
    (attr ``dw_taps``: the kernel's real width KW; w (C'/L, 1, KH, ceil(KW/4), L, 4),
    quantize.pack_dw_int8): acc[n, ob, oh, ow, l] = sum over kh, quad j, k < 4 of
    x[ih, ow * stride + 4j + k, channel ob*L + l] * w[ob, 0, kh, j, l, k]. The input is
    padded and blocked like the accumulator (one vector of L channels a pixel), with
    columns enough on the right for the last quad's taps past KW (zero weights), so 4
    taps are 4 consecutive vectors: one dot-product step (int8_intrin.dwdot_intrin)."""
    nb, _, kh, nq, lanes, k4 = w.shape
    strides, dilations, before, after, spatial, c_in = _geometry(
        x, attrs, kh, int(attrs["dw_taps"])
    )
    width = x.shape[3] + before[1] + after[1]
    after = [after[0], after[1] + max(0, (spatial[1] - 1) * strides[1] + nq * k4 - width)]
    xp = _pad_in_quads(x, c_in, before, after, nb, lanes, int(attrs["x_zp"]))
    rkh, rj, rk = te.reduce_axis(kh, "rkh"), te.reduce_axis(nq, "rj"), te.reduce_axis(k4, "rk")

    def f(n, ob, oh, ow, oi):
        ih = window_index(oh, rkh, strides[0], dilations[0])
        a = xp[(n, ob, ih, ow * strides[1] + rj * k4 + rk, oi)]
        return te.sum(_widen(a) * _widen(w[(ob, 0, rkh, rj, oi, rk)]), [rkh, rj, rk])

    return _depthwise_acc(
        [x.shape[0], nb, *spatial, lanes], f, attrs, strides, dilations, dw_quads=True
    )


def _depthwise_acc(shape, f, attrs: dict, strides, dilations, **form) -> te.Tensor:
    """The accumulator stage of a depthwise conv in one of its packed ``form``s."""
    attrs = {"groups": int(attrs["groups"]), "strides": strides, "dilations": dilations}
    return te.compute(
        shape, f, name="qconv_acc", tag="qconv", attrs={**attrs, "depthwise": True, **form}
    )


DW_PAIR_ACCS = 8  # depthwise in column pairs: accumulators a tile (8 of AVX2's 16)


def dw_pair_tile(cols: int, phases: int) -> tuple[int, int]:
    """(column pairs a tile, pairs the accumulator holds) for ``cols`` output columns,
    ``phases`` of them a pair: the most pairs within DW_PAIR_ACCS accumulators that
    divide the row's pairs; where only a tile under half that size would, the row's
    pairs round up to whole tiles of the most instead (its last columns computed and
    not stored: 7 pairs at stride 1 take 2 tiles of 4, not 7 of 1)."""
    most, row = DW_PAIR_ACCS // phases, -(-cols // phases)
    fit = max(t for t in range(1, most + 1) if row % t == 0)
    if 2 * fit >= most:
        return fit, row
    return most, -(-row // most) * most


def _dw_pairs_acc(x: te.Tensor, w: te.Tensor, attrs: dict) -> te.Tensor:
    """The accumulator of a depthwise conv whose weights hold each row's taps in int16
    pairs per output phase (attr ``dw_pairs``: the kernel's real width KW; w (C'/L, 1,
    KH, R*S, L, 2), quantize.pack_dw_pairs; R = 2 / the row stride phases, S steps),
    shaped (N, C'/L, OH, P, R, L): output column R*p + r of step j and tap k reads input
    column 2(p + j) + k, the pair's pixels at even offsets, so every pair the tile
    reads is built once for the R columns it serves (int8_intrin.dwpair_intrin). P:
    the row's pairs rounded up to whole tiles (dw_pair_tile)."""
    nb, _, kh, rs, lanes, _ = w.shape
    strides, dilations, before, after, spatial, c_in = _geometry(
        x, attrs, kh, int(attrs["dw_pairs"])
    )
    phases = 2 // strides[1]
    steps = rs // phases
    tile, row = dw_pair_tile(spatial[1], phases)
    width = x.shape[3] + before[1] + after[1]
    after = [after[0], after[1] + max(0, 2 * (row + steps - 1) - width)]
    xp = _pad_in_quads(x, c_in, before, after, nb, lanes, int(attrs["x_zp"]))
    rkh, rj, rk = te.reduce_axis(kh, "rkh"), te.reduce_axis(steps, "rj"), te.reduce_axis(2, "rk")

    def f(n, ob, oh, p, r, oi):
        ih = window_index(oh, rkh, strides[0], dilations[0])
        a = xp[(n, ob, ih, 2 * (p + rj) + rk, oi)]
        return te.sum(_widen(a) * _widen(w[(ob, 0, rkh, r * steps + rj, oi, rk)]), [rkh, rj, rk])

    shape = [x.shape[0], nb, spatial[0], row, phases, lanes]
    return _depthwise_acc(shape, f, attrs, strides, dilations, dw_pairs=tile, out_cols=spatial[1])


def _dw_pairs_view(acc: te.Tensor) -> te.Tensor:
    """The column-pair accumulator as (N, C'/L, OH, P*R, L), for the epilogue (inlined)."""
    n, nb, oh, row, phases, lanes = acc.shape
    return te.compute(
        [n, nb, oh, row * phases, lanes],
        lambda b, ob, i, j, oi: acc[(b, ob, i, j // phases, j % phases, oi)],
        name="qconv_acc_cols",
    )


def _row_packed_acc(x: te.Tensor, w: te.Tensor, attrs: dict) -> te.Tensor:
    """The accumulator of a full conv whose weights hold each kernel row's KW x C taps
    side by side in steps (attr ``row_taps``: the real KW; w (OC'/L, 1, KH, J, L, K),
    quantize.pack_rows_int8): acc[n, ob, oh, ow, l] = sum over kh, step j, k < K of
    xr[ih, ow * stride * C + K*j + k] * w[ob, 0, kh, j, l, k], where xr is the padded
    input with a row's pixels' channels side by side (_pad_rows), so a step's K
    activations are consecutive: the conv's own dot-product intrinsic, on C*KW
    products a row instead of ceil(C/K)*K*KW (a 3-channel stem)."""
    nb, _, kh, nj, lanes, k = w.shape
    strides, dilations, before, after, spatial, c = _geometry(x, attrs, kh, int(attrs["row_taps"]))
    reach = (spatial[1] - 1) * strides[1] * c + nj * k
    wide = "int16" if w.dtype == "int16" else ""
    xr = _pad_rows(x, c, before, after, reach, int(attrs["x_zp"]), wide)
    rcb, rk0 = te.reduce_axis(1, "rcb"), te.reduce_axis(kh, "rk0")
    rk1, rci = te.reduce_axis(nj, "rk1"), te.reduce_axis(k, "rci")

    def f(n, ob, oh, ow, oi):
        ih = window_index(oh, rk0, strides[0], dilations[0])
        a = xr[(n, rcb, ih, ow * (strides[1] * c) + rk1 * k + rci)]
        prod = _widen(a) * _widen(w[(ob, rcb, rk0, rk1, oi, rci)])
        return te.sum(prod, [rcb, rk0, rk1, rci])

    return te.compute(
        [x.shape[0], nb, *spatial, lanes],
        f,
        name="qconv_acc",
        tag="qconv",
        attrs={
            "groups": 1,
            "strides": strides,
            "dilations": dilations,
            "depthwise": False,
            "row_channels": c,
            "byte_pairs": bool(attrs.get("byte_pairs")),
        },
    )


def _pad_rows(x: te.Tensor, c: int, before, after, reach: int, zp: int, dtype: str = ""):
    """The padded input (``c`` channels, NCHW or blocked) with each row's pixels'
    channels side by side, (N, 1, H', W''*C): element j of a row is channel j % C of
    padded column j // C. The padding, and the columns past it up to ``reach`` (read
    only against zero weights), read the zero point. ``dtype``: as _pad_in_quads."""
    dtype = dtype or x.dtype
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    cols = max(w + before[1] + after[1], -(-reach // c))

    def f(b, _, i, j):
        col, ch = j // c, j % c
        inside = [i >= before[0], i < before[0] + h, col >= before[1], col < before[1] + w]
        src = te.cast(dtype, _at(x, b, ch, i - before[0], col - before[1]))
        return te.select(te.all_of(*inside), src, te.const(zp, dtype))

    shape = (n, 1, h + before[0] + after[0], cols * c)
    return te.compute(shape, f, name="qconv_pad", tag="pad")


def _narrow(blocked: te.Tensor, out: str):
    def f(*i):
        return blocked[i] if blocked.dtype == out else te.cast(out, blocked[i])

    return f


def _unblock(blocked: te.Tensor, lanes: int, out: str):
    """NCHW from the requantized block (N, C'/L, H, W, L): a copy (narrowing an int32
    block to the output type)."""

    def f(n, m, oh, ow):
        v = blocked[(n, m // lanes, oh, ow, m % lanes)]
        return v if blocked.dtype == out else te.cast(out, v)

    return f


@register_op("qdense", "out_elemwise_fusable")
def qdense(inputs, attrs):
    """Integer x (..., K) @ W (K, N): w packed (N'/L, K'/4, L, 4) int8,
    w[nb, kb, j, kk] = W[kb*4 + kk, nb*L + j] (zeros past K and N); rq (7, N');
    optional residual (..., N). attrs: n (real columns), x_zp, y_zp, out_dtype. The
    activation is read past K only against zero weights, at a clamped index. With
    out_dtype float32 (a dequantize epilogue, quantize.try_float_dense) the inputs
    after w are corr (N') int32 and (scale, bias) rows (2, N') float32: y =
    float(acc + corr) * scale + bias."""
    x, w, rq = inputs[:3]
    dequant = attrs.get("out_dtype") == "float32"
    residual = inputs[3] if len(inputs) > 3 and not dequant else None
    nblocks, kblocks, lanes, k4 = w.shape
    n = int(attrs["n"])
    k = x.shape[-1]
    lead = list(x.shape[:-1])
    rkb = te.reduce_axis(kblocks, "rkb")
    rki = te.reduce_axis(k4, "rki")

    def f(*idx):
        *rows, jb, ji = idx
        kk = rkb * k4 + rki
        if kblocks * k4 != k:
            kk = te.min_(kk, k - 1)
        prod = _widen(x[(*rows, kk)]) * _widen(w[(jb, rkb, ji, rki)])
        return te.sum(prod, [rkb, rki])

    acc = te.compute([*lead, nblocks, lanes], f, name="qdense_acc", tag="qdense")

    if dequant:  # the float epilogue: inputs[2] corr (N') int32, inputs[3] (2, N') float

        def out(*idx):
            *rows, j = idx
            a = te.cast("float32", acc[(*rows, j // lanes, j % lanes)] + rq[(j,)])
            return a * inputs[3][(0, j)] + inputs[3][(1, j)]

        return [te.compute([*lead, n], out, name="qdense", tag="dequantize")]

    def out(*idx):
        *rows, j = idx
        a = acc[(*rows, j // lanes, j % lanes)]
        r = residual[(*rows, j)] if residual is not None else None
        return _requantize(a, rq, j, attrs, r)

    return [te.compute([*lead, n], out, name="qdense", tag="requantize")]


# --- cpu schedules -----------------------------------------------------------------


def _accumulator(ctx: ScheduleContext, sch: te.Schedule, tag: str):
    for st in sch.stages:
        if st.op.tag == tag:
            return st
    return None


def _integer_schedule(tag: str):
    """The accumulator at root, blocked over output channels: the reduction loops run
    outside the block of L output channels, which is one vector of int32 lanes (the
    innermost reduction, 4 consecutive input channels, sits right outside it: the shape
    of a 4-way dot-product instruction). The requantize epilogue then reads the block
    per output element, its rows on the thread pool."""

    def schedule(ctx: ScheduleContext) -> te.Schedule:
        sch = te.create_schedule(ctx.outs)
        acc = _accumulator(ctx, sch, tag)
        if acc is None:
            return fallback(ctx)
        for st in sch.stages:
            if not st.is_output and st is not acc:
                st.compute_inline()
        lanes_iv = acc.op.axis[-1]
        reduce = [x for x in acc.leaf_iter_vars if x.kind == "reduce"]
        acc.reorder(*reduce, lanes_iv)
        if lanes_iv.extent >= 2:
            acc.vectorize(lanes_iv)
        run_parallel(ctx, acc, {id(lanes_iv)})
        for st in sch.stages:
            if st.is_output:
                run_parallel(ctx, st)
        return sch

    return schedule


_simple_qconv = _integer_schedule("qconv")
_simple_qdense = _integer_schedule("qdense")

# int32 accumulators one register tile may hold (vector registers: x86 AVX-512 and
# AArch64 have 32, AVX2 16; a few stay for the weights and the broadcast activation)
ACC_BUDGET = {512: 24, 256: 12, 128: 20}
# A short reduction (at most 8 dot-product steps per accumulator: a 1x1 conv over 32
# channels or fewer, MobileNetV2's expansions) spends more on the epilogue than on the
# steps; 16 accumulators leave registers for the requantize rows of the tile's blocks
# (MobileNetV2-style int8 at 512 bits: 2.61 2.70 2.71 -> 2.56 2.65 2.58 ms).
SHORT_STEPS, SHORT_BUDGET = 8, 16
# int16 pairs at 256 bits: each step's vpmaddwd needs a register for its products
# before the add, beside the weights and the broadcast (MobileNetV2-style int8 on AVX2,
# bench/ab_bundles.py, 6 rounds: 12 -> 9 accumulators, kernels 5.906 -> 5.784 ms;
# ResNet-18-style 29.53 -> 29.43)
PAIR_BUDGET_256 = 9
# ... except a 1x1 conv whose row has no tile of 8 or 9 (a row of 7 columns, a prime
# width): there 2 x 7 (14 accumulators; GCC takes the weights and the ones as memory
# operands) beats 1 x 7. Measured on a Zen 3 (AVX2, 7-bit weights, the two kernels
# called alternately in one process, lowest of 300 calls each): tv_mobilenet_v2's 7x7
# 1x1 convs 0.80-0.97x the time (its 320 -> 1280 conv with the dequantize 0.80x, the
# 960 -> 320 one 0.80x), where 14 accumulators for every row ran its 112-wide
# convs 1.05-1.10x.
WIDE_PAIR_BUDGET_256 = 14
MAX_OC_TILE = 4
# Byte quads (vpmaddubsw, 7-bit weights) at 256 bits: tiles from this many accumulators
# keep their tap loops rolled as the int16 pairs' do; a k x k stride-1 conv takes one
# block x BYTE_QUAD_COLS columns (_seven_wide_byte_quads)
BYTE_QUADS_ROLLED = 8
BYTE_QUAD_COLS = 7
# 512-bit dot products: a tile of 7 columns or more where the row has them (each
# weight vector serves that many broadcasts). ResNet-18-style int8 on VNNI
# (bench/ab_bundles.py, 8 rounds, twice): the 4 x 4 tiles of its rows of 112, 56 and 28
# columns became 2 x 8 and 2 x 7, those convs 0.82-0.90 of before, all kernels 0.93;
# 4 x 7 (28 accumulators) gave 0.87-0.95 there but 1.04-1.20 on the 14- and 7-column
# rows, whose 2 x 7 stays.
WIDE_COLS = 7


def _default_tile(
    blocks: int, cols: int, budget: int, more_blocks: bool = False, min_cols: int = 0
) -> tuple[int, int]:
    """(output-channel blocks, output columns) of the largest tile within ``budget``
    (of those with ``min_cols`` columns or more, where there are such); among equals the
    one loading least per step (blocks of weights + broadcasts), then the one with more
    columns (``more_blocks``: more blocks)."""
    tiles = [
        (b, c)
        for b in range(1, min(blocks, MAX_OC_TILE) + 1)
        if blocks % b == 0
        for c in range(1, min(cols, budget) + 1)
        if cols % c == 0 and b * c <= budget
    ]
    return max(
        tiles,
        key=lambda t: (
            t[1] >= min_cols,
            t[0] * t[1],
            -(t[0] + t[1]),
            t[0] if more_blocks else t[1],
        ),
    )


def _tensorizable(ctx: ScheduleContext, acc: te.Tensor, x: te.Tensor) -> bool:
    out = ctx.outs[0]
    return (
        len(ctx.outs) == 1
        and x.dtype in ("uint8", "int8", "int16")  # int16: pairs, widened in the copy
        and acc.shape[-1] in (4, 8, 16)
        and acc.op.reduce_axis[-1].extent in (2, 4)  # quads, or int16 pairs (x86)
        and out.ndim in (acc.ndim - 1, acc.ndim)  # NCHW or blocked like the accumulator
    )


def _inline_rest(sch: te.Schedule, keep: list) -> None:
    for st in sch.stages:
        if not st.is_output and all(st.op is not k.op for k in keep):
            st.compute_inline()


@register_schedule("qconv2d", "cpu")
def schedule_qconv2d_cpu(ctx: ScheduleContext) -> te.Schedule:
    """A register tile of ``tile_oc`` blocks of L output channels x ``tile_ow`` output
    columns, computed per tile at the output's column loop: the reduction loops
    (``reduce_order``) outside, the tile's accumulators unrolled inside, each one vector
    updated by the target's 4-way dot-product intrinsic (tensorized: int8_intrin.py);
    the requantize epilogue then stores the tile. The padded input is made once at root
    so the intrinsic reads plain memory. Grouped convs keep the simple schedule."""
    acc = find_tagged(ctx.anchor, "qconv")
    if acc is not None and acc.op.attrs.get("depthwise") and len(ctx.outs) == 1:
        return _depthwise_qconv(ctx, acc)
    if acc is None or acc.op.attrs.get("groups", 1) != 1 and not acc.op.attrs.get("group_blocks"):
        return _simple_qconv(ctx)
    pad = next((t for t in acc.op.input_tensors if t.op.name.startswith("qconv_pad")), None)
    x = pad if pad is not None else acc.op.input_tensors[0]
    if not _tensorizable(ctx, acc, x):
        return _simple_qconv(ctx)
    cfg, out = ctx.cfg, ctx.outs[0]
    _, blocks, _, cols, lanes = acc.shape
    taps = acc.op.reduce_axis[1].extent * acc.op.reduce_axis[2].extent > 1
    int16_pairs = acc.op.reduce_axis[-1].extent == 2  # int16 weight pairs (quantize.py)
    if int16_pairs:
        intrin = pair_intrin(lanes, ctx.target, taps)
    else:
        intrin = dot4_intrin(x.dtype, lanes, ctx.target, acc.op.attrs.get("byte_pairs", False))
    # int16 pair sums (vpmaddwd of int16 pairs, or vpmaddubsw of byte pairs and
    # vpmaddwd): each step's products take a register before the add
    pairs = int16_pairs or intrin.isa == "vpmaddubsw"
    budget = ACC_BUDGET.get(ctx.target.vector_bits, 12)
    if math.prod(int(r.extent) for r in acc.op.reduce_axis[:3]) <= SHORT_STEPS:
        budget = min(budget, SHORT_BUDGET)
    pairs256 = pairs and ctx.target.vector_bits == 256
    if pairs256:
        budget = min(budget, PAIR_BUDGET_256)
    # Of two pair tiles as large at 256 bits, a k x k conv's takes more output-channel
    # blocks and fewer columns: 4 x 2 over 2 x 4 (ResNet-18-style int8 on AVX2,
    # bench/ab_bundles.py, 4 rounds: its 3x3 convs at 56x56 and 28x28 0.83-0.89 of
    # before, the stem 0.90, all kernels 27.5 -> 25.4 ms); a short 1x1 reduction keeps
    # the columns (MobileNetV2's 16-channel expansion ran 1.10 of before with more blocks)
    zmm_quads = ctx.target.vector_bits == 512 and not pairs  # vpdpbusd zmm
    oc_def, ow_def = _default_tile(
        blocks, cols, budget, pairs256 and taps, WIDE_COLS if zmm_quads else 0
    )
    if pairs256 and not taps and oc_def * ow_def < PAIR_BUDGET_256 - 1:
        oc_def, ow_def = _default_tile(blocks, cols, WIDE_PAIR_BUDGET_256)
    if _seven_wide_byte_quads(acc, intrin, taps, cols):
        oc_def, ow_def = 1, BYTE_QUAD_COLS
    t_oc = cfg.define_split("qtile_oc", blocks, oc_def, most=MAX_OC_TILE)
    t_ow = cfg.define_split("qtile_ow", cols, ow_def, most=32)
    order = cfg.define("qreduce_order", ("rcb_k", "k_rcb"), "rcb_k")

    sch = te.create_schedule(ctx.outs)
    rqb = find_tagged(out, "requantize_blocked")
    _inline_rest(sch, [t for t in (acc, rqb, pad) if t is not None])
    if pad is not None:  # a copy of whole blocks is vectorized, quads are too short
        padded_copy_at_root(sch[pad], ctx.target.cores > 1, pad.shape[-1] > 4)
    if acc.op.attrs.get("row_channels"):  # a row's pixels: a column's channels unrolled
        _, ji = sch[pad].split(sch[pad].op.axis[-1], acc.op.attrs["row_channels"])
        sch[pad].unroll(ji)
    st_out = sch[out]
    owo = _tile_output(ctx, st_out, t_oc, t_ow, lanes)
    st = sch[acc]
    st.compute_at(st_out, owo)
    an, ob, aoh, aow, oi = st.op.axis
    rcb, rk0, rk1, rci = st.op.reduce_axis
    red = (rcb, rk0, rk1) if order == "rcb_k" else (rk0, rk1, rcb)
    st.reorder(an, aoh, *red, ob, aow, oi, rci)
    st.unroll(ob)
    st.unroll(aow)
    _unroll_block_quads(st, rcb, x, taps)
    # 16 vector registers: GCC unrolls the taps, interleaves them and spills the tile.
    # A tile of byte quads under BYTE_QUADS_ROLLED accumulators leaves it room: unrolled,
    # tv_resnet18's 7x7 convs (1 x 7 tiles, 7-bit weights) ran 0.67-0.70x the time on a
    # Zen 3 (bench/ab_bundles.py, 6 rounds: those 4 kernels 7.94 -> 5.68 ms, the other
    # 20 1.01x; all 27.7 -> 25.6 ms).
    rolled = int16_pairs or t_oc * t_ow >= BYTE_QUADS_ROLLED
    if pairs and rolled and ctx.target.vector_bits < 512:
        for iv in (rk0, rk1):
            st.keep_rolled(iv)
    st.tensorize(oi, intrin)
    prefetch_next_weights(cfg, st, conv_weight(acc), acc.shape[2] * cols, ctx.target, t_oc)
    _epilogue_at(ctx, sch, rqb, st_out, owo)
    return sch


def _unroll_block_quads(st, rcb, x: te.Tensor, taps: bool) -> None:
    """The reduction's steps over one block of a blocked input unrolled, where a block
    holds q > 1 of them (8 lanes: 2 byte quads or 4 int16 pairs; 16 lanes: 4 quads).
    Rolled, each step computes the reads' address (rcb / q) * block + (rcb % q) * step
    anew (an imul, shifts and adds for every read of the tile); split by q with the
    inner loop unrolled, the offsets are constants and the outer loop a stride. A 1x1
    conv's reduction of at most SHORT_STEPS steps is unrolled whole (GCC folds it).

    Measured on a Xeon, ``--board host-avx2``, the kernels that changed (bench/
    ab_kernels.py): tv_mobilenet_v2 0.82x the time with 7-bit weights (its 1x1 convs of
    24 and 32 input channels 0.79x whole, 0.85x split), 0.80x with 8-bit (int16 pairs);
    tv_resnet18 0.88x and 0.91x (its 3x3 convs; the quad step below the taps: 0.91x).
    VNNI's 16-lane blocks (``host``): 0.99x."""
    q = int(x.shape[-1]) // int(st.op.reduce_axis[-1].extent) if x.ndim == 5 else 1
    if q <= 1 or int(rcb.extent) % q:
        return
    if not taps and int(rcb.extent) <= SHORT_STEPS:
        st.unroll(rcb)
        return
    _, qi = st.split(rcb, q)
    st.unroll(qi)


def _seven_wide_byte_quads(acc: te.Tensor, intrin, taps: bool, cols: int) -> bool:
    """Whether a conv on byte quads (vpmaddubsw) takes one block x BYTE_QUAD_COLS
    columns: a k x k conv at stride 1 (not a stem's packed rows) whose row is a multiple
    of it. Its 7 accumulators leave GCC room to unroll the taps (BYTE_QUADS_ROLLED).
    Measured on a Zen 3 (tv_resnet18 with 7-bit weights, bench/ab_bundles.py, 8 rounds):
    its 3x3 stride-1 convs at 56, 28 and 14 columns 0.89-0.92x the time of the 4 x 2
    and 2 x 4 pair tiles, the kernels left alone 1.015x; its stride-2 convs ran 1.04-1.05x
    with it, so they keep theirs."""
    return (
        intrin.isa == "vpmaddubsw"
        and taps
        and cols % BYTE_QUAD_COLS == 0
        and list(acc.op.attrs.get("strides", [1, 1])) == [1, 1]
        and not acc.op.attrs.get("row_channels")
    )


def _tile_output(ctx: ScheduleContext, st_out, t_oc: int, t_ow: int, lanes: int, plane_pad=None):
    """The output's loops in tiles of ``t_oc`` channel blocks x ``t_ow`` columns, the
    tiles' rows on the thread pool; returns the tile's column loop (where the tile is
    computed). A blocked output (N, C/L, H, W, L) is the epilogue itself, each block of
    L lanes one vector; an NCHW one copies the blocked epilogue out, a row of the tile's
    columns one vector. ``plane_pad`` (a depthwise conv's padded-input stage, blocked
    output): the pool takes whole planes of a block instead of rows, and the stage pads
    each plane just before its rows read it (_plane_pad)."""
    if len(st_out.op.axis) == 5:
        n, ob, oh, ow, oi = st_out.op.axis
        mo, mi = st_out.split(ob, t_oc)
        owo, owi = st_out.split(ow, t_ow)
        st_out.reorder(n, mo, oh, owo, mi, owi, oi)
        st_out.vectorize(oi)
        if plane_pad is not None:
            plane = st_out.fuse(n, mo)
            if ctx.target.cores > 1:
                st_out.parallel(plane)
            plane_pad.compute_at(st_out, plane)
            plane_pad.vectorize(plane_pad.op.axis[-1])
            return owo
    else:
        n, m, oh, ow = st_out.op.axis
        mo, mi = st_out.split(m, t_oc * lanes)
        owo, owi = st_out.split(ow, t_ow)
        st_out.reorder(n, mo, oh, owo, mi, owi)
        st_out.vectorize(owi)  # a row of the plane: the tile's blocks read a lane apart
    if ctx.target.cores > 1:
        st_out.parallel(st_out.fuse(n, mo, oh))
    return owo


def _epilogue_at(ctx: ScheduleContext, sch: te.Schedule, rqb: te.Tensor | None, st_out, at):
    """The requantize epilogue over the tile's accumulator blocks, each block of L
    lanes one contiguous run (vectorizable; NCHW's channels are a plane apart), then
    the output's own loops copy it out (none with a blocked output). A blocked output
    of an int32 ``mulhi`` epilogue is instead one intrinsic call per block and column
    (int8_intrin.requant_intrin), where the target has one, or per block for all the
    tile's columns (requant_columns)."""
    if rqb is None:
        return
    if _requant_tensorized(ctx, sch, rqb, st_out):
        return
    st = sch[rqb]
    st.compute_at(st_out, at)
    st.unroll(st.op.axis[3])  # the tile's columns share a block's requantize rows
    st.vectorize(st.op.axis[-1])


def _requant_tensorized(ctx: ScheduleContext, sch: te.Schedule, rqb: te.Tensor, st_out) -> bool:
    out, attrs = st_out.tensor, ctx.attrs
    plain = out.op.tag == "requantize" and out.op.input_tensors == [rqb]  # nothing fused
    if not plain or out.ndim != 5 or attrs.get("rq32") != "mulhi":
        return False  # NCHW out, another epilogue, or more ops after it
    add, res = None, ""
    if len(rqb.op.input_tensors) != 2:  # a residual add folded in (quantize.fold_add)
        residual = rqb.op.input_tensors[-1]
        if "add_shift" not in attrs or tuple(residual.shape) != tuple(rqb.shape):
            return False  # a residual read NCHW
        add = add_params(attrs, "add_")
        res = residual.dtype
        if add["out_dtype"] != out.dtype:
            return False
    *_, mi, owi, oi = st_out.leaf_iter_vars
    cols = requant_columns(out.shape[-1], owi.extent, out.shape[3])
    bounds = attrs.get("y_bounds") if add is None else None  # an add clamps on its own
    intrin = requant_intrin(
        out.shape[-1], attrs["out_dtype"], int(attrs["y_zp"]), ctx.target, requantize_mulhi,
        add, res, _qadd, cols, bounds,
    )  # fmt: skip
    if intrin is None:
        return False
    sch[rqb].compute_inline()
    st_out.unroll(mi)
    if cols > 1:
        st_out.tensorize(owi, intrin)
        return True
    st_out.unroll(owi)
    st_out.tensorize(oi, intrin)
    return True


def requant_columns(lanes: int, tile_cols: int, row: int) -> int:
    """Columns of a block one requantize call takes: the tile's ``tile_cols`` where a
    vector is 8 lanes (AVX2), the tile has 4 columns or more and the row is whole tiles
    (no guard inside the call), else 1. Four columns at a time share the packing and
    the clamp (int8_intrin._requant_cols_avx2): on a Zen 3 (1 thread,
    bench/ab_kernels.py) tv_mobilenet_v2's 16 -> 96 conv at 112x112 took 0.82x its time
    and its depthwise convs 0.80-0.94x; with a folded residual add (its columns packed
    after the add) the 144 -> 24 conv at 56x56 0.89x, the others 0.95-1.0x."""
    if lanes != 8 or tile_cols < 4 or row % tile_cols:
        return 1
    return tile_cols


@register_schedule("qdense", "cpu")
def schedule_qdense_cpu(ctx: ScheduleContext) -> te.Schedule:
    """Blocks of ``tile_n`` x L output columns per tile, the dot-product intrinsic over
    each block of L, the requantize epilogue storing the tile; the tiles (and rows) in
    parallel where the board has cores to share them, as the float dense layer's are."""
    acc = find_tagged(ctx.anchor, "qdense")
    if acc is None:
        return _simple_qdense(ctx)
    x = acc.op.input_tensors[0]
    k = x.shape[-1]
    nblocks, kblocks, lanes = acc.op.input_tensors[1].shape[:3]
    if kblocks * 4 != k or not _tensorizable(ctx, acc, x):
        return _simple_qdense(ctx)  # a clamped read past K does not match the intrinsic
    t_n = ctx.cfg.define_split("qtile_n", nblocks, dense_tile(nblocks), most=8)
    sch = te.create_schedule(ctx.outs)
    _inline_rest(sch, [acc])
    st_out = sch[ctx.outs[0]]
    *rows, j = st_out.op.axis
    jo, ji = st_out.split(j, t_n * lanes)
    if ctx.target.cores > 1 and math.prod(acc.shape[:-1]) * lanes * k >= PARALLEL_MIN_MACS:
        jo = st_out.fuse(*rows, jo)
        st_out.parallel(jo)
    st = sch[acc]
    st.compute_at(st_out, jo)
    *arows, jb, jl = st.op.axis
    rkb, rki = st.op.reduce_axis
    st.reorder(*arows, rkb, jb, jl, rki)
    st.unroll(jb)
    st.tensorize(jl, dot4_intrin(x.dtype, lanes, ctx.target))
    return sch


def dense_tile(blocks: int) -> int:
    """The default ``qtile_n`` of a dense layer with ``blocks`` blocks of L outputs: the
    most blocks up to MAX_OC_TILE that divide them, or where that is one block (a
    1000-class layer at 8 lanes has 125), the fewest up to 8 that do."""
    fit = max(d for d in range(1, MAX_OC_TILE + 1) if blocks % d == 0)
    if fit > 1:
        return fit
    return next((d for d in range(MAX_OC_TILE + 1, 9) if blocks % d == 0), 1)


DW_TILE = 8  # depthwise: output columns per tile (one int32 vector each)
# A depthwise conv's padded input made one plane (one channel block) at a time, just
# before that plane's rows read it, instead of the whole copy at root (_plane_pad).
# Measured on an AMD EPYC Zen 4 (tv_mobilenet_v2 int8, bench/ab_kernels.py, 1 thread):
# with AVX2 (8-channel blocks, planes up to 104 KB) the depthwise kernels took 0.95x
# their time (0.75-0.97x each); with VNNI (16 channels) the 112x112 layers' 206 KB
# planes ran 1.07-1.11x (the stride-2 one) and 0.98x, so planes over PLANE_PAD_BYTES
# keep the copy at root, and the rest took 0.96x. On 2 threads, where the pool takes
# whole planes (each core reads the copy it made), bench/ab_bundles.py --threads 2
# --rounds 7: the changed kernels 0.85x (AVX2) and 0.80x (VNNI), whole runs 3.41 ->
# 3.20 ms and 1.75 -> 1.72 ms.
PLANE_PAD_BYTES = 128 * 1024
# planes that do not share out evenly over the cores still go per plane from this many
# a core (the last share's idle core is then a small part of the layer)
PLANE_PAD_SHARES = 4


def _depthwise_qconv(ctx: ScheduleContext, acc: te.Tensor) -> te.Schedule:
    """Depthwise: per tile of ``qtile_ow`` output columns of one block of L channels,
    the window taps outside and the columns inside, each column's L accumulators one
    vector (multiply-add of the blocked input's contiguous L activations and the L
    weights of the tap), then the epilogue stores the tile. The blocked padded input is
    made once at root."""
    pad = next(t for t in acc.op.input_tensors if t.op.name.startswith("qconv_pad"))
    if acc.op.attrs.get("dw_pairs"):  # a tile's pairs of columns, one call a kernel row
        return _dw_pairs_qconv(ctx, acc, pad)
    cfg, out = ctx.cfg, ctx.outs[0]
    cols, lanes = acc.shape[3], acc.shape[4]
    t_ow = cfg.define_split("qtile_ow", cols, _default_tile(1, cols, DW_TILE)[1], most=32)
    sch = te.create_schedule(ctx.outs)
    rqb = find_tagged(out, "requantize_blocked")
    _inline_rest(sch, [t for t in (acc, pad, rqb) if t is not None])
    st_out = sch[out]
    owo = _tile_output(ctx, st_out, 1, t_ow, lanes, _plane_pad(ctx, sch, pad, out))
    st = sch[acc]
    st.compute_at(st_out, owo)
    an, ob, aoh, aow, oi = st.op.axis
    if acc.op.attrs.get("dw_quads"):  # one dot-product step per column and 4 taps
        rkh, rj, rk = st.op.reduce_axis
        st.reorder(an, ob, aoh, rkh, rj, aow, oi, rk)
        st.tensorize(oi, dwdot_intrin(pad.dtype, lanes, ctx.target))
        st.unroll(aow)
        _epilogue_at(ctx, sch, rqb, st_out, owo)
        return sch
    rcb, rk0, rk1, rci = st.op.reduce_axis
    intrin = mac_intrin(pad.dtype, lanes, ctx.target)
    if intrin is None:
        st.reorder(an, ob, aoh, rcb, rci, rk0, rk1, aow, oi)
        st.vectorize(oi)
    else:  # one vpmaddwd per column and tap (rci: the group's one channel)
        st.reorder(an, ob, aoh, rcb, rk0, rk1, aow, oi, rci)
        st.tensorize(oi, intrin)
    st.unroll(aow)
    _epilogue_at(ctx, sch, rqb, st_out, owo)
    return sch


def _plane_pad(ctx: ScheduleContext, sch: te.Schedule, pad: te.Tensor, out: te.Tensor):
    """A depthwise conv's padded input: made one block's plane at a time, just before
    the plane's rows read it (from the cache it was written to), where the output is
    blocked, a plane is at most PLANE_PAD_BYTES and the planes share out evenly over
    the cores; returns that stage for _tile_output. Else None: the whole copy made
    once at root, its rows on the thread pool."""
    planes = out.shape[0] * out.shape[1]
    cores = ctx.target.cores
    even = cores == 1 or planes % cores == 0 or planes >= PLANE_PAD_SHARES * cores
    plane = math.prod(pad.shape[2:]) * np.dtype(pad.dtype).itemsize
    if out.ndim == 5 and plane <= PLANE_PAD_BYTES and even:
        return sch[pad]
    padded_copy_at_root(sch[pad], cores > 1, True)
    return None


def _dw_pairs_qconv(ctx: ScheduleContext, acc: te.Tensor, pad: te.Tensor) -> te.Schedule:
    """Depthwise in column pairs (_dw_pairs_acc): per tile of one block of L channels
    and the accumulator's tile of pairs, the kernel rows outside and one intrinsic call
    a row for the whole tile (each pair of pixels built once), then the epilogue."""
    out = ctx.outs[0]
    _, _, _, _, phases, lanes = acc.shape
    tile = acc.op.attrs["dw_pairs"]
    steps = acc.op.reduce_axis[1].extent
    sch = te.create_schedule(ctx.outs)
    rqb = find_tagged(out, "requantize_blocked")
    _inline_rest(sch, [t for t in (acc, pad, rqb) if t is not None])
    st_out = sch[out]
    owo = _tile_output(ctx, st_out, 1, tile * phases, lanes, _plane_pad(ctx, sch, pad, out))
    st = sch[acc]
    st.compute_at(st_out, owo)
    an, ob, aoh, ap, ar, oi = st.op.axis
    rkh, rj, rk = st.op.reduce_axis
    st.reorder(an, ob, aoh, rkh, ap, ar, oi, rj, rk)
    # unrolled, GCC sums each accumulator's products of all rows at once and spills them
    st.keep_rolled(rkh)
    st.tensorize(ap, dwpair_intrin(pad.dtype, lanes, tile, phases, steps, ctx.target))
    _epilogue_at(ctx, sch, rqb, st_out, owo)
    return sch
