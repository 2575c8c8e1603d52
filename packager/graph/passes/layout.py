"""Blocked layouts: conv chains run in NCHW{x}c, x the board's float lanes per vector.

A 2-D float32 conv with constant weights becomes ``conv2d_nchwc`` (weights packed here,
with numpy); the ops that follow it run on its blocked output as long as they are
layout-aware (RULES in layout_rules.py: elementwise, broadcast, per-channel affine, pools, global
pools, channel concat, spatial pad). ``layout_transform`` nodes appear only at the
boundaries: into a conv whose input is plain NCHW, and out of the blocked form before
a consumer that is not layout-aware (flatten, reshape, gemm, softmax, ...) or a graph
output. Every original value name keeps meaning its NCHW form; blocked values get
names of their own.

Choices (the knobs are PassContext.layout_block and disabling "layout"):
- A conv whose output channels are not a multiple of the block stays in NCHW rather
  than running on zero-padded channels: padding would have to be undone before every
  per-channel operand, concat and output, for convs that are rare in practice.
- The first conv of a network (3 input channels, or any count that does not fill a
  block) reads its NCHW input directly as block 1 and writes a blocked output, so no
  transform is needed at the graph input.
- Grouped convs are blocked when every group starts on a block boundary, and depthwise
  convs always are; other groupings stay in NCHW.
"""

from __future__ import annotations

from ...boards import load_board
from ...target import Target
from ..ir import Graph
from .layout_cost import poor_regions
from .layout_rewriter import Rewriter
from .layout_rules import rule_for

LANE_BITS = 32  # float32 lanes


def block_size(ctx) -> int | None:
    """The channel block for this compile, or None for no blocking.

    ctx.layout_block overrides the board (0 or 1: off). Without a board the bundle runs
    on the packager's own machine (the backend and the tests), whose profile is host.
    """
    override = ctx.layout_block
    if override is not None:
        return override if override > 1 else None
    board = ctx.board or load_board("host")
    lanes = Target.cpu(board).vector_bits // LANE_BITS
    return lanes if lanes > 1 else None


def layout_pass(graph: Graph, ctx) -> Graph:
    block = block_size(ctx)
    if block is None:
        return graph
    # Regions that do not pay for their transforms go back to NCHW, conv by conv; that
    # can only add transforms to their neighbours, so this ends.
    keep_nchw: set[str] = set()
    while True:
        rw = Rewriter(graph, block, keep_nchw, rule_for)
        out = rw.run()
        poor = {
            rw.origin[c] for convs in poor_regions(out, set(rw.blocked.values())) for c in convs
        }
        if poor <= keep_nchw:
            return out
        keep_nchw |= poor
