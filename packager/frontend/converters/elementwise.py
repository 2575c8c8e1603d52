"""Converters of elementwise and broadcasting ONNX ops: tables of ONNX op -> library op
and the attributes passed on (with their ONNX defaults), plus the few ops that need
more than a renaming (Clip, PRelu, Cast, Dropout, ...)."""

from __future__ import annotations

import math

import numpy as np
import onnx

from ...ops.broadcast import broadcast_shape
from ..importer import ONNX_DTYPES, type_name
from ._common import check_attrs, const_output, reshaped, scalar
from .registry import converter

# ONNX op -> (library op, {attribute: default}).
UNARY = {
    "Relu": ("relu", {}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "Sigmoid": ("sigmoid", {}),
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "HardSwish": ("hard_swish", {}),
    "Swish": ("swish", {"alpha": 1.0}),
    "Tanh": ("tanh", {}),
    "Sqrt": ("sqrt", {}),
    "Erf": ("erf", {}),
    "Exp": ("exp", {}),
    "Log": ("log", {}),
    "Neg": ("neg", {}),
    "Abs": ("abs", {}),
    "Floor": ("floor", {}),
    "Ceil": ("ceil", {}),
    "Reciprocal": ("reciprocal", {}),
    "Sign": ("sign", {}),
    "Softplus": ("softplus", {}),
    "Softsign": ("softsign", {}),
    "Elu": ("elu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": ("celu", {"alpha": 1.0}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Shrink": ("shrink", {"bias": 0.0, "lambd": 0.5}),
    "Mish": ("mish", {}),
    "Gelu": ("gelu", {"approximate": "none"}),
    "Round": ("round", {}),
    "IsNaN": ("isnan", {}),
    "IsInf": ("isinf", {"detect_positive": 1, "detect_negative": 1}),
    "Not": ("logical_not", {}),
    "BitwiseNot": ("bitwise_not", {}),
    "Identity": ("identity", {}),
}
for _f in "Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh".split():
    UNARY[_f] = (_f.lower(), {})

BINARY = {
    "Add": ("add", {}),
    "Sub": ("sub", {}),
    "Mul": ("mul", {}),
    "Div": ("div", {}),
    "Pow": ("pow", {}),
    "Mod": ("mod", {"fmod": 0}),
    "BitShift": ("bit_shift", {"direction": None}),
    "Equal": ("equal", {}),
    "Less": ("less", {}),
    "Greater": ("greater", {}),
    "LessOrEqual": ("less_equal", {}),
    "GreaterOrEqual": ("greater_equal", {}),
    "And": ("logical_and", {}),
    "Or": ("logical_or", {}),
    "Xor": ("logical_xor", {}),
    "BitwiseAnd": ("bitwise_and", {}),
    "BitwiseOr": ("bitwise_or", {}),
    "BitwiseXor": ("bitwise_xor", {}),
}

VARIADIC = {"Sum": "add", "Max": "maximum", "Min": "minimum", "Mean": "mean"}

# Attribute values a library op accepts, where it accepts only some.
CHOICES = {
    ("Gelu", "approximate"): ("none", "tanh"),
    ("BitShift", "direction"): ("LEFT", "RIGHT"),
    ("Mod", "fmod"): (0, 1),
}

# Opsets before 7 broadcast only when asked to, aligning B at ``axis`` of A.
LEGACY_BROADCAST = {"broadcast", "axis"}


def _attrs(ctx, node, table: dict) -> dict:
    out = {}
    for name, default in table.items():
        value = ctx.attr(node, name, default)
        allowed = CHOICES.get((node.op_type, name))
        if value is None or (allowed is not None and value not in allowed):
            ctx.fail(node, f"attribute {name}={value!r} is not supported (allowed: {allowed})")
        out[name] = value
    return out


@converter(*UNARY)
def unary(ctx, node):
    op, table = UNARY[node.op_type]
    check_attrs(ctx, node, table)
    return [ctx.node(op, node, [node.input[0]], **_attrs(ctx, node, table))]


@converter("SwiGLU")
def swiglu(ctx, node):
    """Swish(A) * B: the gate's activation, then the product (both fuse into one kernel)."""
    check_attrs(ctx, node, {"alpha"})
    a, b = node.input[:2]
    if ctx.value(a).shape != ctx.value(b).shape:
        ctx.fail(node, f"A {list(ctx.value(a).shape)} and B {list(ctx.value(b).shape)} differ")
    gate = ctx.fresh(f"{node.output[0]}_gate")
    alpha = float(ctx.attr(node, "alpha", 1.0))
    return [
        ctx.node("swish", node, [a], outputs=[gate], alpha=alpha),
        ctx.node("mul", node, [gate, b]),
    ]


@converter(*BINARY)
def binary(ctx, node):
    op, table = BINARY[node.op_type]
    check_attrs(ctx, node, set(table) | LEGACY_BROADCAST)
    nodes = []
    a, b = node.input[0], _legacy_broadcast(ctx, node, nodes)
    nodes.append(ctx.node(op, node, [a, b], **_attrs(ctx, node, table)))
    return nodes


def _legacy_broadcast(ctx, node, nodes) -> str:
    """Input B, reshaped so that numpy broadcasting aligns it at A's ``axis``."""
    b = node.input[1]
    axis = ctx.attr(node, "axis")
    if ctx.opset >= 7 or not ctx.attr(node, "broadcast", 0) or axis is None:
        return b
    a_nd, b_shape = len(ctx.value(node.input[0]).shape), ctx.value(b).shape
    axis = axis + a_nd if axis < 0 else axis
    trailing = a_nd - axis - len(b_shape)
    if trailing < 0:
        ctx.fail(node, f"B of shape {list(b_shape)} does not fit A at axis {axis}")
    return reshaped(ctx, node, b, list(b_shape) + [1] * trailing, nodes)


@converter(*VARIADIC)
def variadic(ctx, node):
    check_attrs(ctx, node, ())
    inputs = [i for i in node.input if i]
    return [ctx.node(VARIADIC[node.op_type], node, inputs)]


@converter("Where")
def where(ctx, node):
    check_attrs(ctx, node, ())
    return [ctx.node("where", node, list(node.input[:3]))]


@converter("PRelu")
def prelu(ctx, node):
    """Slope broadcasts to X; a 1-D slope of X's channel count that numpy would align
    with the last dim instead is taken per channel (dim 1), as older exporters meant."""
    check_attrs(ctx, node, ())
    x, slope = node.input[0], node.input[1]
    x_shape, s_shape = ctx.value(x).shape, ctx.value(slope).shape
    nodes = []
    if not _broadcasts_to(s_shape, x_shape):
        if len(s_shape) == 1 and len(x_shape) >= 2 and s_shape[0] == x_shape[1]:
            slope = reshaped(ctx, node, slope, [s_shape[0]] + [1] * (len(x_shape) - 2), nodes)
        else:
            ctx.fail(node, f"slope of shape {list(s_shape)} does not fit X {list(x_shape)}")
    nodes.append(ctx.node("prelu", node, [x, slope]))
    return nodes


def _broadcasts_to(shape, target) -> bool:
    try:
        return broadcast_shape(shape, target) == tuple(target)
    except ValueError:
        return False


@converter("Clip")
def clip(ctx, node):
    """Constant bounds become attrs of one clip kernel; runtime bounds become
    maximum/minimum nodes (lower bound first, so min > max gives max, as ONNX says)."""
    if ctx.opset < 11:
        check_attrs(ctx, node, {"min", "max"})
        bounds = {"min": ctx.attr(node, "min"), "max": ctx.attr(node, "max")}
        return [ctx.node("clip", node, [node.input[0]], **bounds)]
    check_attrs(ctx, node, ())
    present = [ctx.input_value(node, i) for i in (1, 2)]
    if all(v is None or v.is_const for v in present):
        lo, hi = (scalar(ctx, node, i, w) for i, w in ((1, "min"), (2, "max")))
        return [ctx.node("clip", node, [node.input[0]], min=lo, max=hi)]
    for k, v in enumerate(present, 1):
        if v is not None and math.prod(v.shape) != 1:
            what = ("min", "max")[k - 1]
            ctx.fail(node, f"input {k} ({what}) must have one element, not shape {list(v.shape)}")
    nodes, y = [], node.input[0]
    for k, op in ((1, "maximum"), (2, "minimum")):
        if present[k - 1] is None:
            continue
        last = k == 2 or present[1] is None
        out = node.output[0] if last else ctx.fresh(node.output[0])
        nodes.append(ctx.node(op, node, [y, node.input[k]], outputs=[out]))
        y = out
    return nodes


def dtype_from_onnx(ctx, node, to) -> str:
    if isinstance(to, str):  # opset < 6 names the type
        names = dict(onnx.TensorProto.DataType.items())
        if to.upper() not in names:
            ctx.fail(node, f"type {to!r} is not an ONNX element type")
        to = names[to.upper()]
    if to not in ONNX_DTYPES:
        ctx.fail(node, f"type {type_name(to)} is not supported")
    return ONNX_DTYPES[to]


@converter("Cast")
def cast(ctx, node):
    # saturate only concerns float8 targets, which are unsupported anyway.
    check_attrs(ctx, node, {"to", "saturate", "round_mode"})
    dtype = dtype_from_onnx(ctx, node, ctx.attr(node, "to"))
    return [ctx.node("cast", node, [node.input[0]], dtype=dtype)]


@converter("CastLike")
def cast_like(ctx, node):
    check_attrs(ctx, node, {"saturate", "round_mode"})
    dtype = ctx.value(node.input[1]).dtype
    return [ctx.node("cast", node, [node.input[0]], dtype=dtype)]


@converter("Dropout")
def dropout(ctx, node):
    """Inference: Y = X, and the optional mask is all true (ratio has no effect). In
    training mode only a ratio of 0 drops nothing, so only it means the same."""
    check_attrs(ctx, node, {"ratio", "is_test", "seed"})
    if ctx.has_input(node, 2) and scalar(ctx, node, 2, "training_mode"):
        ratio = scalar(ctx, node, 1, "ratio") if ctx.has_input(node, 1) else 0.5
        if ratio != 0:
            ctx.fail(
                node,
                f"training_mode=true with ratio {ratio} is not supported (packaged models "
                "run inference; it drops at random)",
            )
    nodes = [ctx.node("identity", node, [node.input[0]], outputs=[node.output[0]])]
    if len(node.output) > 1 and node.output[1]:
        x = ctx.value(node.input[0])
        dtype = np.bool_ if ctx.opset >= 10 else x.dtype
        nodes.append(const_output(ctx, node, np.ones(x.shape, dtype=dtype), node.output[1]))
    return nodes
