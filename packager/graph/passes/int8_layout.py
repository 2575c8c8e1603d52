"""Blocked int8 activations between the integer ops.

The integer conv computes its output in blocks of L channels, (N, C'/L, H, W, L); a
tensorized consumer reads 4 consecutive channels per dot-product step and a depthwise
one a block of L channels per vector. Between integer ops the activation therefore
stays blocked, NCHW[x]c: a value becomes (N, ceil(C/B), H, W, B) int8/uint8 when its
producer can write it so and every reader can read it so, and then no op repacks it:

- producers: qconv2d (B = its L; its output is the requantized block itself, the
  channels past C holding the zero point), qadd (the block of its operands), and a
  per-tensor quantize_linear of a 4-d float tensor at the float -> int8 boundary, which
  becomes quantize_blocked (B = L, or the channels rounded up to a quad when fewer: a
  3-channel image is one quad per pixel).
- readers: a full or depthwise qconv2d's activation (a quad of channels never crosses a
  block, as B is a multiple of 4), any qconv2d's residual, qadd's operands.
- a per-tensor DequantizeLinear whose every reader the float layout pass runs blocked
  when its input is (layout_rules.keeps_blocks: concats, pools, ops per element or per
  channel, quantizes): its floats are then blocked alike, and the float ops between
  integer ops (DenseNet's batch norms and concats, a Scale after a conv) read and write
  blocks, quantize_blocked becoming a plain quantize of blocked floats. Only where the
  float layout pass runs, and the channels are whole blocks.
- both: an integer max_pool (the block of its input; it pools each lane alike, and the
  channels past C hold values no reader keeps), an integer channel shuffle and an
  integer channel concat (int_moves.py; the block of their inputs where those hold no
  channels past C).

Blocks never differ between a producer and its readers except at quantize_blocked,
and every reader indexes its input by the input's own block, so there are no
transform ops: a value read by anything else (a DQ, a float op, a graph output) stays
NCHW and is written so by its producer. qadd computes elementwise over one shape, so
its operands and output are blocked together or not at all.

A blocked reader gets attr ``c`` (its activation's real channel count): the shape
holds only the blocks.
"""

from __future__ import annotations

from dataclasses import replace

from ..ir import Graph, Node
from ..uses import consumers, producers, scalar_qparams
from .layout import block_size
from .layout_rules import keeps_blocks
from .pack_gemm_weights import _block

_INT = ("int8", "uint8")
# blocked with their inputs, or not at all
_WHOLE = ("qadd", "max_pool", "channel_shuffle", "concat")


def int8_layout(graph: Graph, ctx=None) -> Graph:
    lanes = max(_block(ctx), 4) if ctx is not None else 4
    floats = ctx is not None and "layout" not in ctx.disabled and block_size(ctx) is not None
    return _Layout(graph, lanes, floats).run()


class _Layout:
    def __init__(self, graph: Graph, lanes: int, float_blocks: bool = False):
        self.graph = graph
        self.lanes = lanes
        self.float_blocks = float_blocks  # the float layout pass runs after this one
        self.prod = producers(graph)
        self.cons = consumers(graph)

    def run(self) -> Graph:
        block = self.decide()
        if not block:
            return self.graph
        values = dict(self.graph.values)
        for name, b in block.items():
            v = values[name]
            n, c, h, w = v.shape
            values[name] = replace(v, shape=(n, -(-c // b), h, w, b))
        nodes = [self.rewrite(node, block) for node in self.graph.nodes]
        return replace(self.graph, nodes=nodes, values=values)

    # --- which values ---------------------------------------------------------

    def decide(self) -> dict[str, int]:
        """Value -> its block B, for the values produced and read blocked."""
        cand = {
            v
            for v, k in self.prod.items()
            if v not in self.graph.outputs
            and self.out_block(self.graph.nodes[k]) is not None
            and self.cons.get(v)
            and all(self.reads_blocked(self.graph.nodes[c], v) for c in self.cons[v])
        }
        while True:  # a qadd is blocked whole or not at all; blocks of its sides agree
            block: dict[str, int] = {}
            dropped = set()
            for node in self.graph.nodes:
                v = node.outputs[0]
                whole = node.op in _WHOLE
                if v not in cand:
                    if whole:  # elementwise or pooling: NCHW out, NCHW operands
                        dropped |= set(node.inputs)
                    continue
                b = self.out_block(node, block)
                if b is None:
                    dropped |= {v, *node.inputs} if whole else {v}
                else:
                    block[v] = b
            for v, b in block.items():  # dequantized blocks: whole ones
                if self.graph.values[v].shape[1] % b and self.dequantized(v):
                    dropped.add(v)
            if not dropped & cand:
                return block
            cand -= dropped

    def out_block(self, node: Node, block: dict[str, int] | None = None) -> int | None:
        """The block ``node`` writes its output in, None where it cannot; ``block``:
        the blocks decided for its inputs (None: whether it could at all)."""
        vals = self.graph.values
        if node.op == "qconv2d" and len(vals[node.outputs[0]].shape) == 4:
            lanes = vals[node.inputs[1]].shape[4]
            return lanes if lanes % 4 == 0 else None  # whole quads per block
        if node.op == "qadd" and len(vals[node.outputs[0]].shape) == 4:
            if block is None:
                return self.lanes
            sides = [block.get(i) for i in node.inputs[:2]]
            return sides[0] if sides[0] is not None and sides[0] == sides[1] else None
        if node.op == "max_pool" and self.int_pool(node):
            return self.lanes if block is None else block.get(node.inputs[0])
        if node.op in ("channel_shuffle", "concat") and self.int_move(node):
            if block is None:
                return self.lanes
            blocks = {block.get(i) for i in node.inputs}
            b = blocks.pop() if len(blocks) == 1 else None
            # the shuffle indexes the blocked form's channels, the concat joins whole
            # blocks: no channels past C in any part
            whole = b is not None and all(vals[i].shape[1] % b == 0 for i in node.inputs)
            return b if whole else None
        if node.op == "quantize_linear" and self.quantize_ok(node):
            c = vals[node.inputs[0]].shape[1]
            return self.lanes if c >= self.lanes else -(-c // 4) * 4
        return None

    def quantize_ok(self, node: Node) -> bool:
        vals = self.graph.values
        x, s, z = (vals[i] for i in node.inputs[:3]) if len(node.inputs) == 3 else (None,) * 3
        return (
            x is not None
            and len(x.shape) == 4
            and x.dtype in ("float32",)
            and s.is_const
            and z.is_const
            and s.data.size == 1
            and z.data.size == 1
            and node.attrs.get("dtype", z.dtype) in _INT
        )

    def int_pool(self, node: Node) -> bool:
        """A 2-d max_pool of int8/uint8 NCHW (the quantize pass's pooled integers)."""
        x = self.graph.values[node.inputs[0]]
        return len(x.shape) == 4 and x.dtype in _INT and len(node.attrs["kernel"]) == 2

    def int_move(self, node: Node) -> bool:
        """A channel shuffle or channel concat of int8/uint8 NCHW (int_moves.py's)."""
        xs = [self.graph.values[i] for i in node.inputs]
        along = node.op != "concat" or node.attrs.get("axis") == 1  # (the importer's axis)
        return along and all(len(x.shape) == 4 and x.dtype in _INT for x in xs)

    def dequantized(self, v: str) -> bool:
        return any(self.graph.nodes[k].op == "dequantize_linear" for k in self.cons[v])

    def dequantizes_into_blocks(self, node: Node, v: str) -> bool:
        """A per-tensor DequantizeLinear of v whose floats the layout pass keeps blocked."""
        out = node.outputs[0]
        vals = self.graph.values
        return (
            self.float_blocks
            and node.inputs[0] == v
            and scalar_qparams(vals, node) is not None
            and len(vals[out].shape) == 4
            and vals[out].dtype == "float32"  # what the layout pass blocks
            and out not in self.graph.outputs
            and bool(self.cons.get(out))
            and all(keeps_blocks(self.graph, self.graph.nodes[k]) for k in self.cons[out])
        )

    def reads_blocked(self, node: Node, v: str) -> bool:
        if node.op == "dequantize_linear":
            return self.dequantizes_into_blocks(node, v)
        if node.op == "qadd":
            return True
        if node.op == "max_pool":
            return self.int_pool(node)
        if node.op in ("channel_shuffle", "concat"):
            return self.int_move(node)
        if node.op != "qconv2d":
            return False
        slots = [k for k, i in enumerate(node.inputs) if i == v]
        if 3 in slots:
            slots.remove(3)  # the residual: read at any block
        if not slots:
            return True
        if slots != [0]:
            return False
        ncb, k4 = self.graph.values[node.inputs[1]].shape[1], node_k4(self.graph, node)
        groups = int(node.attrs.get("groups", 1))
        # a channel, or a row's taps in quads or pairs
        one = ncb * k4 == 1 or node.attrs.get("dw_taps") or node.attrs.get("dw_pairs")
        depthwise = groups > 1 and one and int(node.attrs["oc"]) == groups
        full = groups == 1 or node.attrs.get("group_blocks")  # quads or int16 pairs
        return full and k4 in (2, 4) or depthwise

    # --- rewriting ----------------------------------------------------------------

    def rewrite(self, node: Node, block: dict[str, int]) -> Node:
        attrs = dict(node.attrs)
        op = node.op
        if node.outputs[0] in block and op == "quantize_linear":
            op = "quantize_blocked"
            attrs["block"] = block[node.outputs[0]]
        if op == "max_pool" and node.outputs[0] in block:
            op = "max_pool_nchwc"  # the same compute; its block is the last dim
        if op == "qconv2d" and node.inputs[0] in block:
            attrs["c"] = self.graph.values[node.inputs[0]].shape[1]
        if op == "qconv2d" and node.outputs[0] in block:
            attrs["out_block"] = True
        if (op, attrs) == (node.op, node.attrs):
            return node
        return replace(node, op=op, attrs=attrs)


def node_k4(graph: Graph, node: Node) -> int:
    """The input channels a qconv2d's dot-product step reads (the packed weights' last
    dimension)."""
    return graph.values[node.inputs[1]].shape[5]
