"""Choosing each conv's algorithm: direct, or Winograd F(2x2, 3x3) / F(4x4, 3x3).

A blocked 3x3 stride-1 conv (``conv2d_nchwc``, alone or anchoring a fused group) can
instead run as ``conv2d_winograd_nchwc`` on filters transformed at package time. Each
variant is a kernel of its own (its own kernel key, hence its own tuning task). A build
uses, per conv: the algorithm the caller forces; else the variant the tuning records
measured fastest; else ``default_algorithm``, a rule by shape from measurements.

Winograd rounds differently from the direct sum. Measured against a float64 direct conv
(random data, 64 channels at 56x56 and 256 at 14x14): the direct kernel's largest error
is 0.9-1.5e-6 of the output's largest magnitude, F(2x2)'s 0.5-0.6e-6 (fewer products
per output), F(4x4)'s 0.7-0.9e-5; on ResNet-18's logits the mean difference from ONNX
Runtime is 2.5e-5 (direct), 2.4e-5 (F(2x2)), 3.0e-5 (F(4x4)) for logits up to 244.
``packager build --conv-algorithm direct`` keeps every conv direct.

Transformed filters are larger than the filters: 16/9 of them for F(2x2), 36/9 for
F(4x4), and params.bin is read whole into memory. On a board with less than
``SMALL_MEMORY_BYTES`` of RAM, the transformed filters may add at most
``WINOGRAD_EXTRA_SHARE`` of the weights' bytes (``filter_budget``): of the Winograd forms
the policy picked, ``within_budget`` keeps those with the most time saved per extra byte
that fit, and the others run direct (figures: README, "Conv algorithms").

``variants(node, graph)`` gives the rewritten nodes (and the transformed filters) the
tuner extracts as tasks; ``choose(graph, pick, budget, gain)`` rewrites a planned graph by
a ``pick`` policy. Only constants change: activations, their shapes and the memory plan
stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..ops.conv_winograd import KERNEL, TILES, transform_weight
from .ir import Graph, Node, Value

DIRECT = "direct"
ALGORITHMS = (DIRECT, *(f"winograd_{m}" for m in TILES))


@dataclass
class Variant:
    node: Node
    weight: Value  # the transformed filters the node reads
    tile: int
    filters: Value  # the conv's own filters, which ``weight`` transforms

    @property
    def algorithm(self) -> str:
        return f"winograd_{self.tile}"

    @property
    def extra_bytes(self) -> int:
        """What the transformed filters add to params.bin over the filters they replace."""
        return self.weight.nbytes - self.filters.nbytes


def _inner_conv(node: Node) -> dict | None:
    """The conv2d_nchwc a node is or anchors (its inner node dict for a fused node)."""
    if node.op == "conv2d_nchwc":
        return {"op": node.op, "attrs": node.attrs, "inputs": node.inputs}
    if node.op == "fused":
        for inner in node.attrs["nodes"]:
            if inner["op"] == "conv2d_nchwc":
                return inner
    return None


def eligible(node: Node, graph: Graph) -> bool:
    """A blocked, ungrouped 3x3 stride-1 undilated conv with constant filters."""
    conv = _inner_conv(node)
    if conv is None or len(conv["inputs"]) < 2:
        return False
    a = conv["attrs"]
    x, w = (graph.values.get(i) for i in conv["inputs"][:2])
    if x is None or w is None or not w.is_const or len(x.shape) != 5 or len(w.shape) != 6:
        return False
    return (
        int(a.get("groups", 1)) == 1
        and list(a.get("strides") or [1, 1]) == [1, 1]
        and list(a.get("dilations") or [1, 1]) == [1, 1]
        and tuple(w.shape[2:4]) == (3, 3)
        and w.shape[4] == x.shape[4] == w.shape[5]
        and x.dtype == w.dtype == "float32"
    )


def _unpack(w: np.ndarray) -> np.ndarray:
    """Packed filters (OC/y, C/x, 3, 3, x, y) -> (OC, C, 3, 3)."""
    ob, cb, kh, kw, x, y = w.shape
    return w.transpose(0, 5, 1, 4, 2, 3).reshape(ob * y, cb * x, kh, kw)


def variants(
    node: Node, graph: Graph, transform: bool = True, tile_multiple: int = 1
) -> list[Variant]:
    """The Winograd forms of an eligible conv node (none for any other node).
    ``transform=False`` leaves the transformed filters' data out (``transformed`` fills
    it in): their shape is all a choice between the forms needs. ``tile_multiple``: the
    forms' attribute of that name, for the target's schedule
    (ops/winograd_schedule.tile_multiple); 1 leaves it out."""
    if not eligible(node, graph):
        return []
    conv = _inner_conv(node)
    w = graph.values[conv["inputs"][1]]
    ob, cb, _, _, x, y = w.shape
    out = []
    for m in TILES:
        alpha = m + KERNEL - 1
        u = Value(f"{w.name}__winograd{m}", (alpha, alpha, ob, cb * x, y), w.dtype)
        attrs = {"pads": list(conv["attrs"].get("pads") or [0, 0, 0, 0]), "tile": m}
        if tile_multiple > 1:
            attrs["tile_multiple"] = tile_multiple
        inputs = [conv["inputs"][0], u.name, *conv["inputs"][2:]]
        new_inner = {**conv, "op": "conv2d_winograd_nchwc", "attrs": attrs, "inputs": inputs}
        if node.op == "fused":
            inner = [new_inner if n is conv else n for n in node.attrs["nodes"]]
            outer = [u.name if i == w.name else i for i in node.inputs]
            new = replace(node, inputs=outer, attrs={**node.attrs, "nodes": inner})
        else:
            new = replace(node, op="conv2d_winograd_nchwc", inputs=inputs, attrs=attrs)
        v = Variant(new, u, m, w)
        out.append(transformed(v) if transform else v)
    return out


def transformed(v: Variant) -> Variant:
    """``v`` with its transformed filters computed."""
    w = v.filters
    data = transform_weight(_unpack(w.data), v.tile, w.shape[5])
    assert data.shape == v.weight.shape, (data.shape, v.weight.shape)
    return replace(v, weight=replace(v.weight, data=data))


# The untuned rule, from the host (EPYC, 1 thread, `run_bundle --profile`), ms, direct /
# F(2x2) / F(4x4). ResNet-18: 56x56 64->64 2.13 / 2.2 / 1.07-1.41; 28x28 128->128 2.13 /
# 1.25-1.34 / 0.97-1.07; 14x14 256->256 2.18 / 1.28-1.34 / 1.63-1.70; 7x7 512->512 2.29 /
# 2.40 / 2.46-2.56. SqueezeNet: 55x55 16->64 0.59 / 0.59-0.69 / 0.32-0.41; 27x27 32->128
# 0.63-0.67 / 0.35 / 0.22; 13x13 48->192 0.29 / 0.18 / 0.29; 13x13 64->256 0.53 / 0.33-0.36
# / 0.38. A tile needs enough channels for its products to outweigh its transforms; the
# fewest measured (and winning) were 16 in, 64 out. DenseNet-121's 128->32 convs (Xeon,
# AVX-512, 1 thread) won too: the whole net 0.95 of ONNX Runtime with F(4x4) forced, 1.38
# all direct, in one run (the direct tile of 2 output blocks ran at ~80 GFLOP/s).
WINOGRAD_MIN_IN_CHANNELS = 16
WINOGRAD_MIN_OUT_CHANNELS = 32
WINOGRAD_MIN_PRODUCTS = 16 * 64  # input x output channels
WINOGRAD_4_MIN_SIZE = 24  # output rows and columns: F(4x4) from here (won at 27, lost at 14)
WINOGRAD_2_MIN_SIZE = 10  # F(2x2) up to F(4x4)'s size (won at 13, lost at 7); direct below
# At 512 bits (AVX-512, 32 registers) F(2x2) from 7x7 outputs where the conv has at least
# this many channel products: on a Zen 4 (1 thread, bench/ab_bundles.py, 4 rounds, the
# changed kernels against the others) tv_resnet18's layer4 512 -> 512 convs 6.37 -> 5.20
# ms (0.82x; the rest 1.005x) and ResNet-50's 512 -> 512 at 7x7 0.80x (0.98x), where
# Inception v2's 7x7 convs (up to 192 x 320 products) ran alike (0.99x, 0.99x) and
# DenseNet-121's 128 -> 32 ones 1.75x slower.
WINOGRAD_2_WIDE_MIN_SIZE = 7
WINOGRAD_2_WIDE_MIN_PRODUCTS = 256 * 256


def default_algorithm(node: Node, graph: Graph, target=None) -> str:
    """The algorithm of an eligible conv no tuning record decides (see above) on
    ``target`` (a CpuTarget; None: the rule of narrower vectors)."""
    conv = _inner_conv(node)
    x, w = (graph.values[i] for i in conv["inputs"][:2])
    channels_in = x.shape[1] * x.shape[4]
    channels_out = w.shape[0] * w.shape[5]
    pads = list(conv["attrs"].get("pads") or [0, 0, 0, 0])
    size = min(x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2)
    few = (
        channels_in < WINOGRAD_MIN_IN_CHANNELS
        or channels_out < WINOGRAD_MIN_OUT_CHANNELS
        or channels_in * channels_out < WINOGRAD_MIN_PRODUCTS
    )
    wide = (
        target is not None
        and target.vector_bits >= 512
        and channels_in * channels_out >= WINOGRAD_2_WIDE_MIN_PRODUCTS
    )
    least = WINOGRAD_2_WIDE_MIN_SIZE if wide else WINOGRAD_2_MIN_SIZE
    if few or size < least:
        return DIRECT
    return "winograd_4" if size >= WINOGRAD_4_MIN_SIZE else "winograd_2"


# pick(node index, node, [(algorithm, node, graph-with-it)]) -> the algorithm to use
Pick = Callable[[int, Node, list], str]
# gain(node index, Winograd variant, trial) -> seconds it saves over the direct conv
Gain = Callable[[int, Variant, list], float]


def by_default(target=None) -> Pick:
    """The policy of a build for ``target`` without tuning records or a forced
    algorithm: pick(node index, node, trial) -> default_algorithm's choice."""
    return lambda k, node, trial: default_algorithm(node, trial[0][2], target)


# A board with less RAM than this gets a budget for transformed filters; one with more
# (or of unknown memory) keeps every Winograd form its policy picks.
SMALL_MEMORY_BYTES = 2048 << 20
# The most transformed filters may add, as a share of the weights' bytes: params.bin
# stays within 1.3x of the weights (with room for its header and alignment). ResNet-18
# (224x224) by the untuned rule adds 27% and keeps every Winograd form (at 25%, one
# 14x14 F(2x2) conv ran direct: 5-6% slower, for 1.8 MB less); F(4x4)
# everywhere would add 242%.
WINOGRAD_EXTRA_SHARE = 0.28

# The model gain of a form no tuning record measured: the share of the direct conv's
# time it saves (host, ResNet-18 and SqueezeNet convs above, where the rule picks it)
# at the direct kernel's measured rate (56x56 64->64: 115.6M multiply-adds in 2.13 ms).
SAVED_SHARE = {2: 0.4, 4: 0.45}
DIRECT_MACS_PER_SECOND = 54e9


def filter_budget(ram_bytes: int | None, weights_bytes: int) -> int | None:
    """The bytes transformed filters may add on a board with ``ram_bytes`` of memory
    (None: no limit, for a board with plenty or of unknown memory)."""
    if ram_bytes is None or ram_bytes >= SMALL_MEMORY_BYTES:
        return None
    return int(WINOGRAD_EXTRA_SHARE * weights_bytes)


def model_gain(k: int, v: Variant, trial: list) -> float:
    """Seconds the form ``v`` saves over the direct conv, estimated from its multiply-adds."""
    graph = trial[0][2]
    conv = _inner_conv(trial[0][1])
    x, w = (graph.values[i] for i in conv["inputs"][:2])
    pads = list(conv["attrs"].get("pads") or [0, 0, 0, 0])
    rows, cols = x.shape[2] + pads[0] + pads[2] - 2, x.shape[3] + pads[1] + pads[3] - 2
    macs = rows * cols * x.shape[1] * x.shape[4] * w.shape[0] * w.shape[5] * 9
    return macs * SAVED_SHARE[v.tile] / DIRECT_MACS_PER_SECOND


def within_budget(
    picked: dict[int, tuple[Variant, list]], budget: int, gain: Gain
) -> dict[int, tuple[Variant, list]]:
    """The Winograd convs of ``picked`` (node index -> (variant, trial)) to keep, their
    extra bytes at most ``budget``: by most seconds saved per extra byte, each that still
    fits (a small one after a large one that did not). A form saving nothing is dropped."""
    gains = {k: gain(k, v, trial) for k, (v, trial) in picked.items()}
    order = sorted(picked, key=lambda k: gains[k] / picked[k][0].extra_bytes, reverse=True)
    kept, spent = {}, 0
    for k in order:
        extra = picked[k][0].extra_bytes
        if gains[k] > 0 and spent + extra <= budget:
            kept[k], spent = picked[k], spent + extra
    return kept


def choose(
    graph: Graph,
    pick: Pick,
    budget: int | None = None,
    gain: Gain = model_gain,
    tile_multiple: int = 1,
) -> Graph:
    """``graph`` with every eligible conv in the algorithm ``pick`` names; with a
    ``budget`` (bytes, see ``filter_budget``), only the Winograd forms ``within_budget``
    keeps, the other convs direct. ``tile_multiple``: as for ``variants``."""
    picked = {}  # node index -> (the Winograd variant picked, the trial it was picked from)
    for k, node in enumerate(graph.nodes):
        # only the chosen one's filters are computed
        options = variants(node, graph, transform=False, tile_multiple=tile_multiple)
        if not options:
            continue
        trial = [(DIRECT, node, graph)]
        for v in options:
            g = replace(graph, values={**graph.values, v.weight.name: v.weight})
            trial.append((v.algorithm, v.node, g))
        algorithm = pick(k, node, trial)
        for v in options:
            if v.algorithm == algorithm:
                picked[k] = (v, trial)
    if budget is not None:
        picked = within_budget(picked, budget, gain)
    values = dict(graph.values)
    nodes = list(graph.nodes)
    for k, (v, _) in picked.items():
        nodes[k] = v.node
        values[v.weight.name] = transformed(v).weight
    return replace(graph, nodes=nodes, values=values)


def forced(algorithm: str) -> Pick:
    """A policy using ``algorithm`` wherever it applies (benchmarks, tests, --conv-algorithm)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown conv algorithm {algorithm!r}: one of {', '.join(ALGORITHMS)}")
    return lambda k, node, trial: algorithm
