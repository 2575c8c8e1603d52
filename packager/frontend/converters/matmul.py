"""MatMul and Gemm."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter


@converter("MatMul")
def matmul(ctx, node):
    check_attrs(ctx, node, set())
    a, b = ctx.value(node.input[0]), ctx.value(node.input[1])
    if not a.shape or not b.shape:
        ctx.fail(node, "operands must have at least one dim")
    return [ctx.node("matmul", node, list(node.input[:2]))]


@converter("Gemm")
def gemm(ctx, node):
    # 'broadcast' (opset < 7) only allowed what later opsets always allow.
    check_attrs(ctx, node, {"alpha", "beta", "transA", "transB", "broadcast"})
    for name in node.input[:2]:
        if len(ctx.value(name).shape) != 2:
            ctx.fail(node, f"A and B must be 2-D, got {list(ctx.value(name).shape)}")
    inputs = [n for n in node.input[:3] if n]
    return [
        ctx.node(
            "gemm",
            node,
            inputs,
            alpha=float(ctx.attr(node, "alpha", 1.0)),
            beta=float(ctx.attr(node, "beta", 1.0)),
            trans_a=int(ctx.attr(node, "transA", 0)),
            trans_b=int(ctx.attr(node, "transB", 0)),
        )
    ]
