"""RoiAlign (opset 10 and 16): a fixed sampling grid per bin."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter

_ATTRS = {
    "coordinate_transformation_mode",
    "mode",
    "output_height",
    "output_width",
    "sampling_ratio",
    "spatial_scale",
}


@converter("RoiAlign")
def roi_align(ctx, node):
    check_attrs(ctx, node, _ATTRS)
    x, rois, batch = (ctx.value(n).shape for n in node.input[:3])
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or tuple(batch) != (rois[0],):
        ctx.fail(
            node,
            f"X {list(x)}, rois {list(rois)} and batch_indices {list(batch)} must be "
            "(N, C, H, W), (R, 4) and (R,)",
        )
    # opset 10 knew only output_half_pixel; 16 added half_pixel and made it the default
    ctm = ctx.attr(node, "coordinate_transformation_mode", "half_pixel")
    ctm = "output_half_pixel" if ctx.opset < 16 else ctm
    if ctm not in ("half_pixel", "output_half_pixel"):
        ctx.fail(node, f"attribute 'coordinate_transformation_mode' value {ctm!r} is unknown")
    mode = ctx.attr(node, "mode", "avg")
    if mode not in ("avg", "max"):
        ctx.fail(node, f"attribute 'mode' value {mode!r} is not supported")
    samples = int(ctx.attr(node, "sampling_ratio", 0))
    if samples <= 0:
        ctx.fail(
            node,
            "sampling_ratio 0 (a grid sized by each region at run time) is not supported; "
            "give a positive sampling_ratio",
        )
    return [
        ctx.node(
            "roi_align",
            node,
            list(node.input[:3]),
            output_height=int(ctx.attr(node, "output_height", 1)),
            output_width=int(ctx.attr(node, "output_width", 1)),
            sampling_ratio=samples,
            spatial_scale=float(ctx.attr(node, "spatial_scale", 1.0)),
            mode=mode,
            half_pixel=int(ctm == "half_pixel"),
        )
    ]
