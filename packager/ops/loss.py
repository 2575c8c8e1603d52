"""Negative log-likelihood loss (ONNX NegativeLogLikelihoodLoss; SoftmaxCrossEntropyLoss
is a log-softmax followed by it).

Each target element picks its class's score and weight (a data-dependent read, clamped in
bounds; an ignored target reads nothing and weighs 0); the reductions are plain sums.
"""

from __future__ import annotations

from .. import te
from .indexing import safe_index
from .reduce import reduce_tensor
from .registry import register_op


def _picked(x: te.Tensor, target: te.Tensor, weight: te.Tensor | None, ignore):
    """(loss, weight) per target element: -x[n, t, d...] * w[t], and w[t] itself; both 0
    where t is the ignored index."""
    classes = x.shape[1]
    zero = te.const(0, x.dtype)

    def cls(i):
        return safe_index(target[i], classes)

    def valid(i):
        return None if ignore is None else te.ne(target[i], te.const(ignore, target.dtype))

    def w_of(*i):
        w = te.const(1, x.dtype) if weight is None else weight[(cls(i),)]
        ok = valid(i)
        return w if ok is None else te.select(ok, w, zero)

    w = te.compute(target.shape, w_of, name="nll_weight", tag="injective")

    def loss_of(*i):
        return -(x[(i[0], cls(i), *i[1:])] * w[i])

    return te.compute(target.shape, loss_of, name="nll_loss_each", tag="injective"), w


@register_op("nll_loss", "opaque")
def nll_loss(inputs, attrs):
    """inputs: scores (N, C, d...), target (N, d...), optional weight (C); attrs:
    reduction (none, sum, mean), ignore_index (absent: none)."""
    x, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    loss, w = _picked(x, target, weight, attrs.get("ignore_index"))
    reduction = attrs.get("reduction", "mean")
    if reduction == "none":
        return [loss]
    axes = list(range(target.ndim))
    total = reduce_tensor(loss, "reduce_sum", axes, False, name="nll_loss_sum")
    if reduction == "sum":
        return [total]
    weights = reduce_tensor(w, "reduce_sum", axes, False, name="nll_loss_weights")
    return [te.compute((), lambda: total[()] / weights[()], name="nll_loss", tag="elemwise")]
