"""The pattern kind of a graph node, for fusion and in-place decisions.

Kinds are ordered from the most to the least fusable (registry.PATTERNS); a fused
group has the kind of its least fusable member.
"""

from __future__ import annotations

from ..ops.registry import PATTERNS, get_op
from .ir import Node

RANK = {kind: k for k, kind in enumerate(PATTERNS)}


# Each runs as one program on the accelerator: nothing fuses into or around it.
ALONE = ("accel_conv2d", "accel_dense")


def pattern_of(node: Node) -> str:
    if node.op == "fused":
        return node.attrs["pattern"]
    if node.op in ALONE:
        return "opaque"
    return get_op(node.op).pattern


def combine(*kinds: str) -> str:
    """The kind of a group made of members of ``kinds``."""
    return max(kinds, key=RANK.__getitem__)
