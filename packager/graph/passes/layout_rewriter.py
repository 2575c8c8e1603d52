"""The layout pass's rewriter: walks a graph's nodes in order and emits each either in its
blocked form, by the rule the pass gives it for the op (layout_rules.py), or as it was, with
``layout_transform`` nodes where a value's form does not fit its consumer. The rules call
back into it for values, packed constants and transforms; it knows no rule itself, so the
rules depend on it and not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...ops.layout import blocked
from ..ir import Graph, Node, Value
from .layout_pack import blocked_shape, pack_operand

# op name -> its rule (rewriter, node) -> the blocked node, or None to keep the node as it is
# The smallest channel block: 4 float lanes, a 128-bit vector (a target with fewer lanes
# blocks by its own). Smaller blocks would leave most of a vector idle.
MIN_BLOCK = 4
# floats, and the integers a per-tensor QuantizeLinear makes of blocked floats
BLOCKABLE = ("float32", "int8", "uint8")


def fitting_block(channels: int, lanes: int) -> int | None:
    """The largest block that splits ``channels`` into whole blocks: a full vector of
    ``lanes``, else half of one and so on down to MIN_BLOCK lanes; None if none does."""
    b = lanes
    while b >= min(MIN_BLOCK, lanes):
        if channels % b == 0:
            return b
        b //= 2
    return None


RuleLookup = Callable[[str], "Callable[[Rewriter, Node], Node | None] | None"]


class Rewriter:
    """Walks the nodes in order, emitting each either blocked (by its rule) or as it
    was, with layout_transform nodes where a value's form does not fit its consumer."""

    def __init__(
        self,
        graph: Graph,
        lanes: int,
        keep_nchw: set[str],
        rule_for: RuleLookup,
        caps: dict[str, int] | None = None,
    ):
        # Values are copied: new ones are added and dead ones dropped.
        self.g = replace(graph, values=dict(graph.values))
        self.lanes = lanes  # the largest block: one full vector
        self.keep_nchw = keep_nchw  # outputs of convs to leave in NCHW
        self.rule_for = rule_for
        self.caps = caps or {}  # value -> the largest block its consumers can share
        self.nodes: list[Node] = []
        self.blocked: dict[str, str] = {}  # NCHW name -> name of its blocked form
        self.origin: dict[str, str] = {}  # and back
        self.plain: set[str] = set(graph.inputs) | {
            n for n, v in graph.values.items() if v.is_const
        }
        self.packed: dict[tuple, str] = {}  # (const name, how) -> packed const name

    def run(self) -> Graph:
        for node in self.g.nodes:
            new = self._blocked_node(node)
            if new is None:
                new = replace(node, inputs=[self.as_nchw(i) if i else i for i in node.inputs])
                self.plain.update(node.outputs)
            else:  # an output that is no value's blocked form is a value of its own
                self.plain.update(o for o in new.outputs if o not in self.origin)
            self.nodes.append(new)
        outputs = [self.as_nchw(o) for o in self.g.outputs]
        out = Graph(self.g.name, self.g.inputs, outputs, self.nodes, self.g.values)
        _drop_unused_values(out)
        return out

    def _blocked_node(self, node: Node) -> Node | None:
        rule = self.rule_for(node.op)
        if rule is None or len(node.outputs) != 1:
            return None
        if not (self.blockable(node.outputs[0]) or getattr(rule, "writes_own_layout", False)):
            return None
        return rule(self, node)

    # --- values ---

    def value(self, name: str) -> Value:
        return self.g.values[name]

    def block_for(self, channels: int) -> int | None:
        return fitting_block(channels, self.lanes)

    def blockable(self, name: str, block: int | None = None) -> bool:
        """Whether ``name`` has a blocked form (with ``block``, or with any block)."""
        v = self.value(name)
        if len(v.shape) != 4 or v.dtype not in BLOCKABLE:
            return False
        return self.block_for(v.shape[1]) is not None if block is None else v.shape[1] % block == 0

    def is_blocked(self, name: str) -> bool:
        return name in self.blocked

    def block_of(self, name: str) -> int:
        """The block of the blocked form of ``name`` (which has one)."""
        return self.value(self.blocked[name]).shape[-1]

    def out(self, name: str, block: int) -> str:
        """The blocked form of node output ``name``, registered as a new value."""
        v = self.value(name)
        new = self._fresh(f"{name}__{blocked(block).lower()}")
        self.g.values[new] = Value(new, blocked_shape(v.shape, block), v.dtype)
        self.blocked[name] = new
        self.origin[new] = name
        return new

    def const(self, source: str, how: str, data) -> str:
        """A new constant from ``source`` re-laid out (``how`` names the re-layout)."""
        key = (source, how)
        if key not in self.packed:
            name = self._fresh(f"{source}__{how}")
            self.g.values[name] = Value(name, tuple(data.shape), self.value(source).dtype, data)
            self.packed[key] = name
        return self.packed[key]

    def _fresh(self, name: str) -> str:
        base, k = name, 1
        while name in self.g.values:
            name, k = f"{base}_{k}", k + 1
        return name

    # --- boundaries ---

    def as_blocked(self, name: str, block: int | None = None) -> str | None:
        """``name`` in blocked form: as is, packed (constants) or through a transform;
        with ``block`` (default: its own, else the largest that fits) or None."""
        if name in self.blocked:
            return self.blocked[name] if block in (None, self.block_of(name)) else None
        v = self.value(name)
        if not self.blockable(name, block):
            return None
        block = block or self.block_for(v.shape[1])
        if v.is_const:
            layout = blocked(block).lower()
            return self.const(name, layout, pack_operand(v.data, v.shape[1], block))
        self._transform(name, self.out(name, block), "NCHW", blocked(block), v.shape[1])
        return self.blocked[name]

    def as_nchw(self, name: str) -> str:
        """``name`` in NCHW form, transformed back from its blocked form on first need."""
        if name not in self.plain:
            channels = self.value(name).shape[1]
            layout = blocked(self.block_of(name))
            self._transform(self.blocked[name], name, layout, "NCHW", channels)
            self.plain.add(name)
        return name

    def _transform(self, src: str, dst: str, src_layout: str, dst_layout: str, channels: int):
        attrs = {"src": src_layout, "dst": dst_layout, "channels": channels}
        name = f"layout_{dst}"
        self.nodes.append(Node("layout_transform", name, [src], [dst], attrs, source=name))

    def operand_fits(self, name: str, channels: int, block: int) -> bool:
        """Whether ``name`` has a blocked form, with no transform, as an input of a
        broadcasting op whose output has ``channels`` channels. Only convs pull a
        tensor into the blocked layout: an add of a blocked and a plain tensor runs in
        NCHW, so that its output needs no transform for NCHW consumers either."""
        v = self.value(name)
        if name in self.blocked:
            return self.block_of(name) == block
        if all(d == 1 for d in v.shape):
            return True
        return v.is_const and pack_operand(v.data, channels, block) is not None

    def operand(self, name: str, channels: int, block: int) -> str:
        """An input of a broadcasting op whose output is (N, channels, H, W), in the
        form that broadcasts against the blocked output (see operand_fits)."""
        v = self.value(name)
        if name in self.blocked:
            return self.blocked[name]
        if all(d == 1 for d in v.shape):
            return name  # scalars broadcast against any layout
        data = pack_operand(v.data, channels, block)
        return self.const(name, f"{blocked(block).lower()}_operand", data)


def _drop_unused_values(g: Graph) -> None:
    """Forget values nothing refers to any more (the unpacked weights, above all)."""
    used = set(g.inputs) | set(g.outputs)
    for n in g.nodes:
        used.update(n.inputs)
        used.update(n.outputs)
    for name in [n for n in g.values if n not in used]:
        del g.values[name]
