"""Give each blocked unpadded 1x1 conv the ``pixel_multiple`` its CPU target's schedule
tiles pixels by (ops/conv_pixels_schedule.py): a function from graph to graph that
changes node attributes only, so the memory plan and the params stay as they are.

Builds and tuning runs both apply it, so a tuning task's key is the build's kernel's.
"""

from __future__ import annotations

from dataclasses import replace

from ...ops.conv_pixels_schedule import pixel_multiple
from ..ir import Graph, Node


def _pixel_conv(node: Node, graph: Graph) -> dict | None:
    """The conv node dict (a fused group's inner one) that can take pixel tiles: an
    ungrouped, unpadded 1x1 float conv on blocked data with constant filters (strided
    ones too: each pixel of the tile reads its own input address)."""
    convs = []
    if node.op == "conv2d_nchwc":
        convs = [{"op": node.op, "attrs": node.attrs, "inputs": node.inputs}]
    if node.op == "fused":
        convs = [n for n in node.attrs["nodes"] if n["op"] == "conv2d_nchwc"]
    if len(convs) != 1 or len(convs[0]["inputs"]) < 2:
        return None
    conv = convs[0]
    a = conv["attrs"]
    x, w = (graph.values.get(i) for i in conv["inputs"][:2])
    if x is None or w is None or not w.is_const or len(x.shape) != 5 or len(w.shape) != 6:
        return None
    ok = (
        int(a.get("groups", 1)) == 1
        and not a.get("spanned")
        and not any(a.get("pads") or [])
        and tuple(w.shape[2:4]) == (1, 1)
        and x.shape[4] == w.shape[4] > 1
        and x.dtype == w.dtype == "float32"
    )
    return conv if ok else None


def with_pixel_multiple(node: Node, graph: Graph, target) -> Node:
    """``node`` with its conv's ``pixel_multiple`` for ``target``, or ``node`` itself."""
    conv = _pixel_conv(node, graph)
    if conv is None:
        return node
    x, w = (graph.values[i] for i in conv["inputs"][:2])
    # a strided conv reads every stride-th input row (and whole lines of those rows)
    rows_read = int((conv["attrs"].get("strides") or [1, 1])[0])
    multiple = pixel_multiple(target, w.shape[0], x.nbytes // rows_read)
    if multiple == 1:
        return node
    attrs = {**conv["attrs"], "pixel_multiple": multiple}
    if node.op != "fused":
        return replace(node, attrs=attrs)
    inner = [{**n, "attrs": attrs} if n is conv else n for n in node.attrs["nodes"]]
    return replace(node, attrs={**node.attrs, "nodes": inner})


def tile_pixels(graph: Graph, target) -> Graph:
    """``graph`` with ``with_pixel_multiple`` applied to every node."""
    nodes = [with_pixel_multiple(n, graph, target) for n in graph.nodes]
    if all(a is b for a, b in zip(nodes, graph.nodes, strict=True)):
        return graph
    return replace(graph, nodes=nodes)
