"""Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the
integer products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv).

The integer products become int32 arithmetic on the library's matmul and conv (zero
points subtracted after widening, exactly the ONNX definition), and the QLinear ones
scale the int32 result in double and round it with quantize_linear, as the ONNX
reference does. (The quantize pass makes integer kernels of QDQ chains; these
decompositions are not matched by it yet.)
"""

from __future__ import annotations

import numpy as np

from ...ops.quantized import QRANGE
from ._common import check_attrs, reshaped
from ._window import kernel_shape, window_attrs
from .registry import converter

_ONNX_DTYPES = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}
_WINDOW = {"auto_pad", "dilations", "kernel_shape", "pads", "strides", "group"}


def _no_blocks(ctx, node) -> None:
    if int(ctx.attr(node, "block_size", 0) or 0):
        ctx.fail(node, "blocked quantization (block_size) is not supported")


def _check_param(ctx, node, i: int, axis_len: int, what: str) -> None:
    v = ctx.input_value(node, i)
    if v is None:
        return
    size = int(np.prod(v.shape)) if v.shape else 1
    if len(v.shape) > 1 or size not in (1, axis_len):
        ctx.fail(node, f"{what} {list(v.shape)} must be a scalar or 1-D of {axis_len}")


def _zero(ctx, node, i: int, dtype: str, nodes) -> str:
    """Input ``i`` (a zero point), or a zero of ``dtype`` when the node has none."""
    if ctx.has_input(node, i):
        return node.input[i]
    return ctx.add_const(np.zeros((), dtype), f"{node.output[0]}_zero_point")


@converter("QuantizeLinear")
def quantize_linear(ctx, node):
    check_attrs(ctx, node, {"axis", "block_size", "saturate", "output_dtype"})
    _no_blocks(ctx, node)
    x = ctx.value(node.input[0])
    if x.dtype not in ("float32", "float64"):
        ctx.fail(node, f"input dtype {x.dtype} is not supported (float32 or float64)")
    if ctx.has_input(node, 2):
        dtype = ctx.value(node.input[2]).dtype
    else:
        dtype = _ONNX_DTYPES.get(int(ctx.attr(node, "output_dtype", 2) or 2))
    if dtype not in QRANGE or dtype == "int32":
        ctx.fail(node, f"output dtype {dtype} is not supported (int8, uint8, int16, uint16)")
    axis = int(ctx.attr(node, "axis", 1))
    if x.shape:
        axis = axis % len(x.shape)
        for i, what in ((1, "y_scale"), (2, "y_zero_point")):
            _check_param(ctx, node, i, x.shape[axis], what)
    nodes: list = []
    zp = _zero(ctx, node, 2, dtype, nodes)
    return [
        *nodes,
        ctx.node(
            "quantize_linear", node, [node.input[0], node.input[1], zp], axis=axis, dtype=dtype
        ),
    ]


@converter("DequantizeLinear")
def dequantize_linear(ctx, node):
    check_attrs(ctx, node, {"axis", "block_size", "output_dtype"})
    _no_blocks(ctx, node)
    x = ctx.value(node.input[0])
    if x.dtype not in QRANGE:
        ctx.fail(node, f"input dtype {x.dtype} is not supported")
    axis = int(ctx.attr(node, "axis", 1))
    if x.shape:
        axis = axis % len(x.shape)
        for i, what in ((1, "x_scale"), (2, "x_zero_point")):
            _check_param(ctx, node, i, x.shape[axis], what)
    nodes: list = []
    zp = _zero(ctx, node, 2, x.dtype, nodes)
    return [
        *nodes,
        ctx.node("dequantize_linear", node, [node.input[0], node.input[1], zp], axis=axis),
    ]


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx, node):
    check_attrs(ctx, node, set())
    if ctx.value(node.input[0]).dtype != "float32":
        ctx.fail(node, "input must be float32")
    scale, zp = node.output[1] or ctx.fresh("scale"), node.output[2] or ctx.fresh("zp")
    return [
        ctx.node("dynamic_qparams", node, [node.input[0]], outputs=[scale, zp]),
        ctx.node(
            "quantize_linear",
            node,
            [node.input[0], scale, zp],
            outputs=[node.output[0]],
            dtype="uint8",
        ),
    ]


def _widened(ctx, node, i: int, zp_i: int, zp_shape, nodes) -> str:
    """int32(input i) - int32(its zero point input zp_i, reshaped to ``zp_shape`` when it
    is 1-D): the operand of an integer product."""
    x = ctx.fresh(f"{node.input[i]}_i32")
    nodes.append(ctx.node("cast", node, [node.input[i]], outputs=[x], dtype="int32"))
    if not ctx.has_input(node, zp_i):
        return x
    zp_v = ctx.value(node.input[zp_i])
    zp = ctx.fresh(f"{node.input[zp_i]}_i32")
    nodes.append(ctx.node("cast", node, [node.input[zp_i]], outputs=[zp], dtype="int32"))
    if len(zp_v.shape) == 1 and zp_v.shape[0] > 1 and zp_shape:
        shape = [zp_v.shape[0] if d == -1 else d for d in zp_shape]
        zp = _reshape_node(ctx, node, zp, shape, nodes)
    out = ctx.fresh(f"{node.input[i]}_shifted")
    nodes.append(ctx.node("sub", node, [x, zp], outputs=[out]))
    return out


def _reshape_node(ctx, node, name: str, shape, nodes) -> str:
    out = ctx.fresh(name)
    nodes.append(ctx.node("reshape", node, [name], outputs=[out], shape=[int(d) for d in shape]))
    return out


def _integer_matmul(ctx, node, a: int, a_zp: int, b: int, b_zp: int, out: str, nodes) -> None:
    # A per-row zero point of A is (M,), applied along A's rows; B's per-column one
    # broadcasts along its last dim as it is.
    xa = _widened(ctx, node, a, a_zp, [-1, 1], nodes)
    xb = _widened(ctx, node, b, b_zp, [-1], nodes)
    nodes.append(ctx.node("matmul", node, [xa, xb], outputs=[out]))


def _integer_conv(ctx, node, x: int, x_zp: int, w: int, w_zp: int, bias, out: str, nodes):
    xv, wv = ctx.value(node.input[x]), ctx.value(node.input[w])
    if len(xv.shape) != 4 or len(wv.shape) != 4:
        ctx.fail(node, f"only 2-D convolutions are supported, got input {list(xv.shape)}")
    group = int(ctx.attr(node, "group", 1))
    if group < 1 or xv.shape[1] != wv.shape[1] * group or wv.shape[0] % group:
        ctx.fail(
            node, f"group={group} does not fit input {list(xv.shape)}, weight {list(wv.shape)}"
        )
    attrs = window_attrs(ctx, node, xv.shape[2:], kernel_shape(ctx, node, wv.shape))
    xs = _widened(ctx, node, x, x_zp, [], nodes)
    ws = _widened(ctx, node, w, w_zp, [-1, 1, 1, 1], nodes)
    inputs = [xs, ws] + ([bias] if bias else [])
    nodes.append(ctx.node("conv", node, inputs, outputs=[out], groups=group, **attrs))


def _requantized(
    ctx, node, acc: str, scales: tuple[int, int, int], per_channel_shape, zp: int, nodes
):
    """quantize_linear(double(acc) * (a_scale * b_scale / y_scale), 1, y_zp): the ONNX
    reference's arithmetic (int32 times float32 promotes to double in numpy)."""
    sa, sb, sy = (node.input[i] for i in scales)
    sbv = ctx.value(sb)
    if len(sbv.shape) == 1 and sbv.shape[0] > 1:
        sb = reshaped(ctx, node, sb, [sbv.shape[0], *per_channel_shape], nodes)
    prod, mult, mult64 = ctx.fresh("scale_ab"), ctx.fresh("multiplier"), ctx.fresh("multiplier_f64")
    acc64, scaled = ctx.fresh(f"{acc}_f64"), ctx.fresh(f"{acc}_scaled")
    y_dtype = ctx.value(node.input[zp]).dtype if ctx.has_input(node, zp) else "uint8"
    one = ctx.add_const(np.ones((), np.float64), "unit_scale")
    nodes += [
        ctx.node("mul", node, [sa, sb], outputs=[prod]),
        ctx.node("div", node, [prod, sy], outputs=[mult]),
        ctx.node("cast", node, [mult], outputs=[mult64], dtype="float64"),
        ctx.node("cast", node, [acc], outputs=[acc64], dtype="float64"),
        ctx.node("mul", node, [acc64, mult64], outputs=[scaled]),
    ]
    zp_name = _zero(ctx, node, zp, y_dtype, nodes)
    nodes.append(
        ctx.node(
            "quantize_linear",
            node,
            [scaled, one, zp_name],
            outputs=[node.output[0]],
            axis=1,
            dtype=y_dtype,
        )
    )
    return nodes


@converter("MatMulInteger")
def matmul_integer(ctx, node):
    check_attrs(ctx, node, set())
    nodes: list = []
    _integer_matmul(ctx, node, 0, 2, 1, 3, node.output[0], nodes)
    return nodes


@converter("ConvInteger")
def conv_integer(ctx, node):
    check_attrs(ctx, node, _WINDOW)
    nodes: list = []
    _integer_conv(ctx, node, 0, 2, 1, 3, None, node.output[0], nodes)
    return nodes


@converter("QLinearMatMul")
def qlinear_matmul(ctx, node):
    check_attrs(ctx, node, set())
    nodes: list = []
    acc = ctx.fresh("acc")
    _integer_matmul(ctx, node, 0, 2, 3, 5, acc, nodes)
    return _requantized(ctx, node, acc, (1, 4, 6), [], 7, nodes)


@converter("QLinearConv")
def qlinear_conv(ctx, node):
    check_attrs(ctx, node, _WINDOW)
    nodes: list = []
    acc = ctx.fresh("acc")
    bias = node.input[8] if ctx.has_input(node, 8) else None
    _integer_conv(ctx, node, 0, 2, 3, 5, bias, acc, nodes)
    return _requantized(ctx, node, acc, (1, 4, 6), [1, 1], 7, nodes)
