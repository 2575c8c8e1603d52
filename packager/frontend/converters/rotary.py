"""RotaryEmbedding (opset 23)."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter


@converter("RotaryEmbedding")
def rotary_embedding(ctx, node):
    check_attrs(ctx, node, {"num_heads", "rotary_embedding_dim", "interleaved"})
    x = ctx.value(node.input[0]).shape
    heads = int(ctx.attr(node, "num_heads", 0))
    if len(x) == 3 and (heads <= 0 or x[2] % heads):
        ctx.fail(node, f"a 3-D input {list(x)} needs num_heads dividing its last dim")
    if len(x) not in (3, 4):
        ctx.fail(node, f"input must be (B, H, S, D) or (B, S, H*D), not {list(x)}")
    head = x[3] if len(x) == 4 else x[2] // heads
    rot = int(ctx.attr(node, "rotary_embedding_dim", 0)) or head
    if rot % 2 or rot > head:
        ctx.fail(node, f"rotary_embedding_dim {rot} must be even and at most the head size {head}")
    with_pos = ctx.has_input(node, 3)
    cache = ctx.value(node.input[1]).shape
    if cache[-1] != rot // 2 or len(cache) != (2 if with_pos else 3):
        ctx.fail(node, f"cos_cache {list(cache)} does not fit rotary_embedding_dim {rot}")
    inputs = list(node.input[: 4 if with_pos else 3])
    return [
        ctx.node(
            "rotary_embedding",
            node,
            inputs,
            num_heads=heads,
            rotary_dim=rot,
            interleaved=int(ctx.attr(node, "interleaved", 0)),
        )
    ]
