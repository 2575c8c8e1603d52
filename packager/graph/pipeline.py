"""The graph optimizer: the passes run between import and lowering, in order.

Each pass is a function ``(graph, ctx) -> graph`` registered here under a name; adding
one is adding a line to PASSES. ``ctx.disabled`` switches passes off by name (for
benchmarks that compare with and without a pass, and for debugging).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..boards import Board
from .ir import Graph
from .passes.conv_transpose_blocks import conv_transpose_blocks
from .passes.dce import dce
from .passes.fold_constants import fold_constants
from .passes.fold_scale_shift import fold_scale_shift
from .passes.fold_transpose import fold_transpose
from .passes.fuse import fuse
from .passes.fuse_attention import fuse_attention
from .passes.fuse_layer_norm import fuse_layer_norm
from .passes.fuse_shuffle import fuse_shuffle
from .passes.int8_layout import int8_layout
from .passes.int_moves import int_moves
from .passes.layout import layout_pass
from .passes.pack_gemm_weights import pack_gemm_weights
from .passes.place_accel import place_accel
from .passes.pow_by_constant import pow_by_constant
from .passes.quantize import quantize
from .passes.remove_identity import remove_identity
from .passes.sink_transpose import sink_transpose


@dataclass
class PassContext:
    board: Board | None = None
    disabled: set[str] = field(default_factory=set)
    # Channel block of the NCHW{x}c layout; None: the board's float lanes per vector,
    # 0 or 1: no blocking (the same as disabling "layout").
    layout_block: int | None = None


# (name, function) in the order they run.
PASSES: list[tuple[str, object]] = [
    ("remove_identity", remove_identity),
    ("quantize", quantize),  # QDQ chains -> integer kernels, before folding DQ(weights)
    ("fold_constants", fold_constants),
    ("fuse_layer_norm", fuse_layer_norm),  # after folding: gamma, beta and eps constants
    ("pow_by_constant", pow_by_constant),  # after fuse_layer_norm took its Pow 2
    ("fold_scale_shift", fold_scale_shift),  # on NCHW weights, before layout packs them
    ("conv_transpose_blocks", conv_transpose_blocks),  # after folding BN into the weights
    ("pack_gemm_weights", pack_gemm_weights),  # after folding: BN may have changed B
    ("fuse_shuffle", fuse_shuffle),  # before fold_transpose takes the shuffle's transpose
    ("int_moves", int_moves),  # shuffles, concats between Q/DQ of one scale: on the integers
    ("sink_transpose", sink_transpose),  # transposes through slices/elementwise ops
    ("fold_transpose", fold_transpose),
    ("fuse_attention", fuse_attention),  # after fold_transpose: Q, K^T, V carry their perms
    ("place_accel", place_accel),  # integer convs to the board's accelerator, if it has one
    ("dce", dce),
    ("int8_layout", int8_layout),  # after dce: a value's readers are final
    ("layout", layout_pass),  # after folding (weights are final), before fusion
    ("fold_constants", fold_constants),  # what layout made of constants (same name: one switch)
    ("dce", dce),
    ("fuse", fuse),  # last: every later step sees fused nodes as single kernels
]


def optimize(graph: Graph, ctx: PassContext) -> Graph:
    for name, run in PASSES:
        if name not in ctx.disabled:
            graph = run(graph, ctx)
    for node in graph.nodes:  # a control-flow node's subgraphs, each like a graph of its own
        if "subgraphs" in node.attrs:
            node.attrs["subgraphs"] = [optimize(g, ctx) for g in node.attrs["subgraphs"]]
    return graph
