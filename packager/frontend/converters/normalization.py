"""BatchNormalization (inference), InstanceNormalization, GroupNormalization,
LayerNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization and LRN."""

from __future__ import annotations

import numpy as np

from ._common import axis_in, check_attrs
from .registry import converter


def _folded(ctx, node, eps: float):
    """Constant scale and shift equal to the batch norm's, if its statistics are constants."""
    vals = [ctx.value(n) for n in node.input[1:5]]
    if not all(v.is_const for v in vals):
        return None
    scale, bias, mean, var = (np.asarray(v.data, dtype=np.float64) for v in vals)
    a = scale / np.sqrt(var + eps)
    dtype = vals[0].data.dtype
    return (
        ctx.add_const((a).astype(dtype), f"{node.input[1]}_folded"),
        ctx.add_const((bias - mean * a).astype(dtype), f"{node.input[2]}_folded"),
    )


def _check_statistics(ctx, node) -> None:
    """Scale, bias, mean and variance: one value per channel each."""
    shape = ctx.value(node.input[0]).shape
    if len(shape) < 2 or len(node.input) < 5:
        ctx.fail(node, f"expected an input with channels and 4 statistics, got {list(shape)}")
    for name, what in zip(node.input[1:5], ("scale", "B", "mean", "var"), strict=True):
        got = ctx.value(name).shape
        if tuple(got) != (shape[1],):
            ctx.fail(node, f"{what} '{name}' has shape {list(got)}, expected [{shape[1]}]")


@converter("BatchNormalization")
def batch_norm(ctx, node):
    check_attrs(ctx, node, {"epsilon", "momentum", "training_mode", "is_test", "spatial"})
    if ctx.attr(node, "training_mode", 0):
        ctx.fail(node, "training_mode=1 is not supported (inference only)")
    if ctx.attr(node, "spatial", 1) != 1:
        ctx.fail(node, "attribute 'spatial'=0 (per-activation statistics) is not supported")
    if any(node.output[1:]):
        ctx.fail(node, "the training outputs (running/saved mean and variance) are not supported")
    eps = float(ctx.attr(node, "epsilon", 1e-5))
    x = node.input[0]
    _check_statistics(ctx, node)
    folded = _folded(ctx, node, eps)
    if folded is not None:
        return [ctx.node("scale_shift", node, [x, *folded])]
    return [ctx.node("batch_norm", node, list(node.input[:5]), epsilon=eps)]


@converter("InstanceNormalization")
def instance_norm(ctx, node):
    check_attrs(ctx, node, {"epsilon"})
    return [
        ctx.node(
            "instance_norm",
            node,
            list(node.input[:3]),
            epsilon=float(ctx.attr(node, "epsilon", 1e-5)),
        )
    ]


@converter("LayerNormalization")
def layer_norm(ctx, node):
    check_attrs(ctx, node, {"axis", "epsilon", "stash_type"})
    if ctx.attr(node, "stash_type", 1) != 1:
        ctx.fail(node, "attribute 'stash_type' other than 1 (float32) is not supported")
    ndim = len(ctx.value(node.input[0]).shape)
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", -1)), ndim)
    inputs = [n for n in node.input[:3] if n]
    outs = list(node.output)
    stats = len(outs) > 1 and any(outs[1:])
    if stats:  # unused optional outputs still need names
        outs = [o or ctx.fresh(f"{outs[0]}_unused") for o in outs + [""] * (3 - len(outs))]
    return [
        ctx.node(
            "layer_norm",
            node,
            inputs,
            outputs=outs[: 3 if stats else 1],
            axis=axis,
            epsilon=float(ctx.attr(node, "epsilon", 1e-5)),
            with_stats=int(stats),
        )
    ]


@converter("RMSNormalization")
def rms_norm(ctx, node):
    check_attrs(ctx, node, {"axis", "epsilon", "stash_type"})
    if ctx.attr(node, "stash_type", 1) != 1:
        ctx.fail(node, "attribute 'stash_type' other than 1 (float32) is not supported")
    ndim = len(ctx.value(node.input[0]).shape)
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", -1)), ndim)
    eps = float(ctx.attr(node, "epsilon", 1e-5))
    return [ctx.node("rms_norm", node, list(node.input[:2]), axis=axis, epsilon=eps)]


@converter("MeanVarianceNormalization")
def mean_variance_norm(ctx, node):
    check_attrs(ctx, node, {"axes"})
    ndim = len(ctx.value(node.input[0]).shape)
    axes = ctx.attr(node, "axes", [0, 2, 3])
    axes = sorted({axis_in(ctx, node, int(a), ndim) for a in axes})
    return [ctx.node("mean_variance_norm", node, [node.input[0]], axes=axes)]


@converter("LpNormalization")
def lp_norm(ctx, node):
    check_attrs(ctx, node, {"axis", "p"})
    p = int(ctx.attr(node, "p", 2))
    if p not in (1, 2):
        ctx.fail(node, f"attribute 'p'={p} is not supported (only 1 and 2)")
    ndim = len(ctx.value(node.input[0]).shape)
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", -1)), ndim)
    return [ctx.node("lp_norm", node, [node.input[0]], axis=axis, p=p)]


@converter("LRN")
def lrn(ctx, node):
    check_attrs(ctx, node, {"alpha", "beta", "bias", "size"})
    if len(ctx.value(node.input[0]).shape) < 3:
        ctx.fail(node, "input must have batch, channel and spatial dims")
    return [
        ctx.node(
            "lrn",
            node,
            [node.input[0]],
            size=int(ctx.attr(node, "size")),
            alpha=float(ctx.attr(node, "alpha", 1e-4)),
            beta=float(ctx.attr(node, "beta", 0.75)),
            bias=float(ctx.attr(node, "bias", 1.0)),
        )
    ]


@converter("GroupNormalization")
def group_norm(ctx, node):
    check_attrs(ctx, node, {"epsilon", "num_groups", "stash_type"})
    if ctx.attr(node, "stash_type", 1) != 1:
        ctx.fail(node, "attribute 'stash_type' other than 1 (float32) is not supported")
    shape = ctx.value(node.input[0]).shape
    groups = int(ctx.attr(node, "num_groups", 0))
    if len(shape) < 3 or groups < 1 or shape[1] % groups:
        ctx.fail(node, f"num_groups {groups} must divide the channels of input {list(shape)}")
    # opset 18 took one scale and bias per group, 21 one per channel
    per_group = ctx.opset < 21
    want = groups if per_group else shape[1]
    for name in node.input[1:3]:
        if tuple(ctx.value(name).shape) != (want,):
            ctx.fail(node, f"'{name}' has shape {list(ctx.value(name).shape)}, expected [{want}]")
    return [
        ctx.node(
            "group_norm",
            node,
            list(node.input[:3]),
            groups=groups,
            epsilon=float(ctx.attr(node, "epsilon", 1e-5)),
            per_group=int(per_group),
        )
    ]
