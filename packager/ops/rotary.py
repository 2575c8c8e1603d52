"""RotaryEmbedding: each pair of a head's first rotary_dim channels rotated by the angle of
its position (cos and sin read from the caches, by position id when given).

Pairs are (d, d + R/2) or, interleaved, (2k, 2k + 1); channels past R pass through. One
elementwise compute: every output reads its own channel and its pair's.
"""

from __future__ import annotations

from .. import te
from .indexing import safe_index
from .registry import register_op


def _clamped(i, n: int) -> te.Expr:
    return te.min_(te.max_(i, te.const(0, te.INDEX)), te.const(n - 1, te.INDEX))


@register_op("rotary_embedding", "injective")
def rotary_embedding(inputs, attrs):
    """inputs: x (B, H, S, D) or (B, S, H*D), cos and sin caches, optional position ids
    (B, S). attrs: num_heads (3-D x), rotary_dim (0: D), interleaved."""
    x, cos, sin = inputs[:3]
    pos = inputs[3] if len(inputs) > 3 else None
    four_d = x.ndim == 4
    head = x.shape[3] if four_d else x.shape[2] // int(attrs["num_heads"])
    rot = int(attrs.get("rotary_dim") or head)
    half = rot // 2
    interleaved = bool(attrs.get("interleaved", 0))

    def body(*i):
        b, s = (i[0], i[2]) if four_d else (i[0], i[1])
        d = i[3] if four_d else i[2] % head
        if interleaved:
            first, k = te.eq(d % 2, 0), d // 2
            partner = te.select(first, d + 1, d - 1)
        else:
            first = d < half
            k = te.select(first, d, d - half)
            partner = te.select(first, d + half, d - half)
        k = _clamped(k, half)
        partner = _clamped(partner, head)
        if pos is None:
            c, sn = cos[b, s, k], sin[b, s, k]
        else:
            p = safe_index(pos[b, s], cos.shape[0])
            c, sn = cos[p, k], sin[p, k]
        other = list(i)
        other[-1] = partner if four_d else i[2] - d + partner
        xo = x[tuple(other)]
        own = x[i]
        turned = te.select(first, c * own - sn * xo, sn * xo + c * own)
        return te.select(d < rot, turned, own)

    return [te.compute(x.shape, body, name="rotary_embedding", tag="injective")]
