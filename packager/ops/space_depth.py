"""DepthToSpace and SpaceToDepth on NCHW tensors (pure index shuffles).

attrs: blocksize, mode ("DCR": depth-column-row, the default, or "CRD":
column-row-depth; space_to_depth has it from opset 28).
"""

from __future__ import annotations

from .. import te
from .registry import register_op


@register_op("depth_to_space", "injective")
def depth_to_space(inputs, attrs):
    (x,) = inputs
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    oc = c // (b * b)
    crd = attrs.get("mode", "DCR") == "CRD"

    def f(ni, ci, hi, wi):
        block = (hi % b) * b + wi % b
        src = ci * (b * b) + block if crd else block * oc + ci
        return x[ni, src, hi // b, wi // b]

    return [te.compute([n, oc, h * b, w * b], f, name="depth_to_space", tag="injective")]


@register_op("space_to_depth", "injective")
def space_to_depth(inputs, attrs):
    """The inverse of depth_to_space with the same mode."""
    (x,) = inputs
    b = int(attrs["blocksize"])
    n, c, h, w = x.shape
    crd = attrs.get("mode", "DCR") == "CRD"

    def f(ni, ci, hi, wi):
        block, src = (ci % (b * b), ci // (b * b)) if crd else (ci // c, ci % c)
        return x[ni, src, hi * b + block // b, wi * b + block % b]

    return [te.compute([n, c * b * b, h // b, w // b], f, name="space_to_depth", tag="injective")]
