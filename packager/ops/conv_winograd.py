"""3x3 stride-1 convolution by Winograd's minimal filtering, F(m x m, 3 x 3), in the
blocked layout NCHW{x}c.

Each m x m output tile comes from an (m+2) x (m+2) input tile d through three steps:

    V = B^T d B            (input transform, per tile and input channel)
    M = sum over c of U[c] * V[c]   (one matrix product per point of the alpha x alpha
                                     transformed tile, alpha = m + 2)
    Y = A^T M A            (output transform, per tile and output channel)

where U = G g G^T is the filter g transformed once, at package time
(``transform_weight``). The products take alpha^2 = 36 (m = 4) multiply-adds per tile
and channel pair where the direct conv takes 144; the transforms are the price.

Inputs:
  data    (N, C/x, H, W, x)
  weight  (alpha, alpha, OC/y, C, y): U[e1, e2, ob, c, oi] = (G g G^T)[e1, e2] of the
          filter of output channel ob*y + oi and input channel c
  bias    optional, (OC/y, y)
Output (N, OC/y, OH, OW, y). attrs: pads (begins, then ends), tile (m: 2 or 4),
tile_multiple (optional, default 1): the transformed input and the products hold a count
of tiles rounded up to a multiple of it, the extra ones copies of the last tile (so a
register tile of that many tiles divides them; the output transform reads only the real
ones).

The transform matrices are the standard ones of F(2, 3) and F(4, 3) (interpolation
points 0, -1, 1 and 0, -1, 1, -2, 2, 1/2 ... as tabulated by Lavin and Gray, 2015).
"""

from __future__ import annotations

from fractions import Fraction as Fr

import numpy as np

from .. import te
from ._window import split_pads
from .pad import pad_tensor
from .registry import register_op

# (B^T, G, A^T) for each output tile size m.
_MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [Fr(1, 4), 0, 0],
            [Fr(-1, 6), Fr(-1, 6), Fr(-1, 6)],
            [Fr(-1, 6), Fr(1, 6), Fr(-1, 6)],
            [Fr(1, 24), Fr(1, 12), Fr(1, 6)],
            [Fr(1, 24), Fr(-1, 12), Fr(1, 6)],
            [0, 0, 1],
        ],
        [
            [1, 1, 1, 1, 1, 0],
            [0, 1, -1, 2, -2, 0],
            [0, 1, 1, 4, 4, 0],
            [0, 1, -1, 8, -8, 1],
        ],
    ),
}
TILES = tuple(_MATRICES)
KERNEL = 3


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m, 3) as float64 arrays."""
    bt, g, at = _MATRICES[m]
    return tuple(np.array([[float(v) for v in row] for row in x]) for x in (bt, g, at))


def transform_weight(w: np.ndarray, m: int, block: int) -> np.ndarray:
    """Filters (OC, C, 3, 3) -> U in the op's layout (alpha, alpha, OC/y, C, y), y =
    ``block``; computed in float64, stored as w's dtype."""
    _, g, _ = matrices(m)
    oc, c = w.shape[:2]
    u = np.einsum("ak,ockl,bl->aboc", g, w.astype(np.float64), g)  # (alpha, alpha, OC, C)
    alpha = u.shape[0]
    u = u.reshape(alpha, alpha, oc // block, block, c).transpose(0, 1, 2, 4, 3)
    return np.ascontiguousarray(u.astype(w.dtype))


def _table(rows, name: str) -> te.Tensor:
    """A small constant matrix as a compute (filled once per call, at root)."""
    shape = [len(rows), len(rows[0])]

    def f(i, j):
        value = te.const(0.0, "float32")
        for r, row in enumerate(rows):
            for c, v in enumerate(row):
                if v:
                    hit = te.all_of(te.eq(i, r), te.eq(j, c))
                    value = te.select(hit, te.const(float(v), "float32"), value)
        return value

    return te.compute(shape, f, name=name, tag="winograd_table")


def tiles_of(out_len: int, m: int) -> int:
    return -(-out_len // m)


@register_op("conv2d_winograd_nchwc", "out_elemwise_fusable")
def conv2d_winograd_nchwc(inputs, attrs):
    x, u = inputs[0], inputs[1]
    m = int(attrs.get("tile", 4))
    if m not in _MATRICES:
        raise ValueError(f"conv2d_winograd_nchwc: tile {m} is not one of {TILES}")
    alpha = m + KERNEL - 1
    if x.ndim != 5 or u.ndim != 5 or tuple(u.shape[:2]) != (alpha, alpha):
        raise ValueError(
            f"conv2d_winograd_nchwc: data {list(x.shape)}, weight {list(u.shape)} (tile {m})"
        )
    n, cb, h, w, xb = x.shape
    ob, c, y = u.shape[2:]
    if c != cb * xb:
        raise ValueError(f"conv2d_winograd_nchwc: weight has {c} input channels, data {cb * xb}")
    before, after = split_pads(attrs.get("pads"), 2)
    oh = h + before[0] + after[0] - KERNEL + 1
    ow = w + before[1] + after[1] - KERNEL + 1
    th, tw = tiles_of(oh, m), tiles_of(ow, m)
    ntiles = n * th * tw
    multiple = int(attrs.get("tile_multiple", 1))
    if multiple < 1:
        raise ValueError(f"conv2d_winograd_nchwc: tile_multiple {multiple} is not positive")
    held = -(-ntiles // multiple) * multiple  # tiles the transformed input holds
    # Pad far enough that every tile reads inside: the last tile may run past OH/OW.
    ends = [th * m + KERNEL - 1 - h - before[0], tw * m + KERNEL - 1 - w - before[1]]
    xp = pad_tensor(x, [0, 0, *before, 0], [0, 0, *ends, 0], name="winograd_pad")
    bt, _, at = _MATRICES[m]
    b_mat = _table([list(r) for r in zip(*bt, strict=True)], "winograd_b")  # B: alpha x alpha
    a_mat = _table([list(r) for r in zip(*at, strict=True)], "winograd_a")  # A: alpha x m

    def tile_origin(t):
        if held > ntiles:
            t = te.min_(t, ntiles - 1)  # the extra tiles: copies of the last
        return t // (th * tw), (t // tw) % th * m, t % tw * m

    rb = te.reduce_axis(alpha, "rb")

    def row_pass(icb, t, a, e2, ci):
        bn, y0, x0 = tile_origin(t)
        return te.sum(xp[bn, icb, y0 + a, x0 + rb, ci] * b_mat[rb, e2], rb)

    dt = te.compute([cb, held, alpha, alpha, xb], row_pass, name="winograd_dt", tag="winograd")
    ra = te.reduce_axis(alpha, "ra")
    v = te.compute(
        [alpha, alpha, cb, held, xb],
        lambda e1, e2, icb, t, ci: te.sum(b_mat[ra, e1] * dt[icb, t, ra, e2, ci], ra),
        name="winograd_v",
        tag="winograd_input",
    )
    rcb = te.reduce_axis(cb, "rcb")
    rci = te.reduce_axis(xb, "rci")
    prod = te.compute(
        [alpha, alpha, ob, held, y],
        lambda e1, e2, o, t, oi: te.sum(
            v[e1, e2, rcb, t, rci] * u[e1, e2, o, rcb * xb + rci, oi], [rcb, rci]
        ),
        name="winograd_m",
        tag="winograd_product",
    )
    # The products' store: a schedule computes the sums at a tile of it, in registers.
    prod = te.compute(prod.shape, lambda *i: prod[i], name="winograd_m_store", tag="winograd")
    rb2 = te.reduce_axis(alpha, "rb2")
    z = te.compute(
        [ob, ntiles, alpha, m, y],
        lambda o, t, a, wi, oi: te.sum(prod[a, rb2, o, t, oi] * a_mat[rb2, wi], rb2),
        name="winograd_z",
        tag="winograd",
    )
    ra2 = te.reduce_axis(alpha, "ra2")

    def output(bn, o, hh, ww, oi):
        t = (bn * th + hh // m) * tw + ww // m
        return te.sum(a_mat[ra2, hh % m] * z[o, t, ra2, ww % m, oi], ra2)

    # Whole tiles: a tile of the output is then a fixed-size region of this stage (a
    # schedule computes it per tile); the crop to OH x OW is inlined into the epilogue.
    out = te.compute(
        [n, ob, th * m, tw * m, y],
        output,
        name="conv_winograd",
        tag="conv_winograd",
        attrs={"tile": m},
    )
    if (th * m, tw * m) != (oh, ow):
        full = out
        out = te.compute(
            [n, ob, oh, ow, y], lambda *i: full[i], name="winograd_crop", tag="injective"
        )
    if len(inputs) < 3 or inputs[2] is None:
        return [out]
    bias = inputs[2]
    return [
        te.compute(
            out.shape,
            lambda bn, o, hh, ww, oi: out[bn, o, hh, ww, oi] + bias[o, oi],
            name="conv_winograd_bias",
            tag="bias_add",
        )
    ]
