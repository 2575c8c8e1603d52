"""NegativeLogLikelihoodLoss, and SoftmaxCrossEntropyLoss as a log-softmax over the
class axis followed by it."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter

_REDUCTIONS = ("none", "sum", "mean")
_ATTRS = {"reduction", "ignore_index"}


def _loss_attrs(ctx, node) -> dict:
    check_attrs(ctx, node, _ATTRS)
    reduction = ctx.attr(node, "reduction", "mean")
    if reduction not in _REDUCTIONS:
        ctx.fail(node, f"attribute 'reduction' value {reduction!r} is not supported")
    scores, target = (ctx.value(n).shape for n in node.input[:2])
    if len(scores) < 2 or tuple(target) != (scores[0], *scores[2:]):
        ctx.fail(
            node,
            f"scores {list(scores)} and target {list(target)} must be (N, C, d...) and (N, d...)",
        )
    if ctx.value(node.input[1]).dtype not in ("int32", "int64"):
        ctx.fail(node, f"target must be int32 or int64, not {ctx.value(node.input[1]).dtype}")
    ignore = ctx.attr(node, "ignore_index", None)
    out = {"reduction": reduction}
    if ignore is not None:
        out["ignore_index"] = int(ignore)
    return out


def _weight(ctx, node) -> list[str]:
    return [node.input[2]] if ctx.has_input(node, 2) else []


@converter("NegativeLogLikelihoodLoss")
def nll_loss(ctx, node):
    attrs = _loss_attrs(ctx, node)
    inputs = [node.input[0], node.input[1], *_weight(ctx, node)]
    return [ctx.node("nll_loss", node, inputs, **attrs)]


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx, node):
    attrs = _loss_attrs(ctx, node)
    outs = list(node.output)
    log_prob = outs[1] if len(outs) > 1 and outs[1] else ctx.fresh(f"{outs[0]}_log_prob")
    inputs = [log_prob, node.input[1], *_weight(ctx, node)]
    return [
        ctx.node("log_softmax", node, [node.input[0]], outputs=[log_prob], axes=[1]),
        ctx.node("nll_loss", node, inputs, outputs=[outs[0]], **attrs),
    ]
