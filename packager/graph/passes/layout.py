"""Blocked layouts: conv chains run in NCHW{x}c, x up to the board's float lanes per vector.

A 2-D float32 conv with constant weights becomes ``conv2d_nchwc`` (weights packed here,
with numpy); the ops that follow it run on its blocked output as long as they are
layout-aware (RULES in layout_rules.py: elementwise, broadcast, per-channel affine, pools, global
pools, channel concat, spatial pad and resize, per-tensor quantize and dequantize). The integers
int8_layout.py blocked for a DequantizeLinear seed blocked floats the same way: the
float ops between integer convs run blocked. ``layout_transform`` nodes appear only at the
boundaries: into a conv whose input is plain NCHW, and out of the blocked form before
a consumer that is not layout-aware (flatten, reshape, gemm, softmax, ...) or a graph
output. Every original value name keeps meaning its NCHW form; blocked values get
names of their own.

Choices (the knobs are PassContext.layout_block and disabling "layout"):
- Each conv picks its output block: the board's lanes when its output channels are whole
  blocks of them, else half of that, and so on down to 4 (MIN_BLOCK in
  layout_rewriter.py). At 16 lanes, MobileNetV2's 24-channel layers run in
  NCHW8c, at half vectors, next to 16-channel blocks elsewhere. A conv reads one block
  and writes another, so the block changes without a transform; the ops that follow a
  conv keep its block (depthwise convs included). The convs that feed a channel concat
  take a block all its parts can share (concat_caps in layout_rules.py); other ops
  joining tensors of different blocks (rare: convs pick by channel count) run in NCHW.
- A conv whose output channels fit no block stays in NCHW rather
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
from .layout_rules import concat_caps, rule_for

LANE_BITS = 32  # float32 lanes


def block_size(ctx) -> int | None:
    """The largest channel block for this compile, or None for no blocking.

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
    lanes = block_size(ctx)
    if lanes is None:
        return graph
    # Regions that do not pay for their transforms go back to NCHW, conv by conv; that
    # can only add transforms to their neighbours, so this ends.
    keep_nchw: set[str] = set()
    caps = concat_caps(graph, lanes)
    while True:
        rw = Rewriter(graph, lanes, keep_nchw, rule_for, caps)
        out = rw.run()
        poor = {
            rw.origin[c] for convs in poor_regions(out, set(rw.blocked.values())) for c in convs
        }
        if poor <= keep_nchw:
            return out
        keep_nchw |= poor
