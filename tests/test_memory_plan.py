"""The static memory plan: reuse, in place, placement quality, and an independent checker
that any plan must satisfy (bytes shared only between tensors never alive together)."""

from __future__ import annotations

import glob
import random
from pathlib import Path

import numpy as np
import onnx
import pytest

from packager.frontend.importer import import_onnx
from packager.graph.arena import Block, live_lower_bound, place
from packager.graph.ir import Graph, Node, Value
from packager.graph.memory import ALIGN, plan_memory
from packager.graph.patterns import pattern_of
from packager.graph.pipeline import PassContext, optimize

LIGHT = sorted(glob.glob(str(Path(onnx.__file__).parent / "backend/test/data/light/*.onnx")))


# ---- an independent checker ----------------------------------------------------------------


def naive_lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    """Written again, plainly, so the checker does not trust the planner's liveness."""
    live = {}
    for step, node in enumerate(graph.nodes):
        for out in node.outputs:
            if out in graph.outputs:
                continue
            readers = [k for k, n in enumerate(graph.nodes) if out in n.inputs]
            live[out] = (step, max(readers, default=step))
    return live


def check_plan(graph: Graph, plan) -> None:
    live = naive_lifetimes(graph)
    assert set(plan.lifetimes) == set(live)
    declared = {
        (graph.nodes[k].inputs[i], graph.nodes[k].outputs[o])
        for k, pairs in plan.inplace.items()
        for o, i in pairs
    }
    for k, pairs in plan.inplace.items():
        check_inplace(graph, k, pairs, live)
    for name in graph.inputs + [v.name for v in graph.consts()] + graph.outputs:
        assert plan.storage[plan.storage_of[name]]["kind"] != "arena", name
    spans = {}
    for name in live:
        st = plan.storage[plan.storage_of[name]]
        assert st["kind"] == "arena" and st["offset"] % ALIGN == 0
        assert st["offset"] + graph.values[name].nbytes <= plan.arena_bytes
        assert st["bytes"] >= graph.values[name].nbytes
        spans[name] = (st["offset"], st["offset"] + graph.values[name].nbytes)
    names = sorted(live)
    for a in names:
        for b in names:
            if a >= b or not _overlap(spans[a], spans[b]):
                continue
            (fa, la), (fb, lb) = live[a], live[b]
            if la < fb or lb < fa:
                continue  # never alive together
            touch = (a, b) in declared and la == fb or (b, a) in declared and lb == fa
            assert touch and spans[a] == spans[b], f"{a} {live[a]} and {b} {live[b]} share bytes"


def check_inplace(graph: Graph, k: int, pairs, live) -> None:
    node = graph.nodes[k]
    assert pattern_of(node) in ("elementwise", "broadcast")
    for o, i in pairs:
        x, y = graph.values[node.inputs[i]], graph.values[node.outputs[o]]
        assert x.shape == y.shape and x.dtype == y.dtype
        assert live[x.name][1] == k, f"{x.name} is read after node {k}"
        assert node.inputs.count(x.name) == 1


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


# ---- hand-made graphs ------------------------------------------------------------------------


class G:
    """A tiny graph builder: float32 tensors of ``n`` elements."""

    def __init__(self, *inputs: str, n: int = 256):
        self.n, self.nodes, self.values = n, [], {}
        for name in inputs:
            self.values[name] = Value(name, (n,), "float32")
        self.inputs = list(inputs)

    def const(self, name: str, n: int | None = None) -> str:
        n = n or self.n
        self.values[name] = Value(name, (n,), "float32", np.ones(n, np.float32))
        return name

    def op(self, op: str, out: str, *ins: str, n: int | None = None, attrs=None) -> str:
        self.values[out] = Value(out, (n or self.n,), "float32")
        self.nodes.append(Node(op, out, list(ins), [out], attrs or {}))
        return out

    def graph(self, *outputs: str) -> Graph:
        return Graph("g", self.inputs, list(outputs), self.nodes, self.values)


def test_chain_of_elementwise_ops_runs_in_one_buffer():
    g = G("x")
    a = g.op("relu", "a", "x")
    b = g.op("relu", "b", a)
    c = g.op("add", "c", b, g.const("w"))
    d = g.op("relu", "d", c)
    graph = g.graph(g.op("relu", "y", d))
    plan = plan_memory(graph)
    check_plan(graph, plan)
    assert plan.arena_bytes == 1024 and plan.live_lower_bound_bytes == 1024
    assert plan.no_reuse_bytes == 4 * 1024
    assert plan.inplace == {1: [(0, 0)], 2: [(0, 0)], 3: [(0, 0)]}
    assert len({plan.storage_of[t] for t in "abcd"}) == 1


def test_opaque_ops_reuse_slots_but_never_work_in_place():
    g = G("x")
    t = "x"
    for k in range(6):
        t = g.op("softmax", f"s{k}", t, attrs={"axis": 0})
    graph = g.graph(g.op("softmax", "y", t, attrs={"axis": 0}))
    plan = plan_memory(graph)
    check_plan(graph, plan)
    assert plan.inplace == {}
    assert plan.arena_bytes == 2 * 1024  # ping-pong between two slots
    assert plan.no_reuse_bytes == 6 * 1024


def test_no_inplace_over_inputs_still_read_repeated_or_of_another_shape():
    g = G("x")
    a = g.op("softmax", "a", "x", attrs={"axis": 0})
    b = g.op("relu", "b", a)  # a is read again below: b may not overwrite it
    c = g.op("add", "c", b, a)  # b and a die here: c overwrites b (the first dying)
    d = g.op("add", "d", c, c)  # c twice: not in place
    e = g.op("softmax", "e", d, attrs={"axis": 0}, n=1)
    f = g.op("add", "f", d, e)  # e broadcasts: f may overwrite d, never e
    graph = g.graph(g.op("relu", "y", f))
    plan = plan_memory(graph)
    check_plan(graph, plan)
    assert 1 not in plan.inplace and 3 not in plan.inplace
    assert plan.inplace[2] == [(0, 0)] and plan.inplace[5] == [(0, 0)]


def test_model_inputs_outputs_and_weights_stay_out_of_the_arena():
    g = G("x")
    a = g.op("relu", "a", "x")
    y = g.op("add", "y", a, g.const("w"))
    graph = g.graph(y, g.op("relu", "z", y))  # y is an output read by a later node
    plan = plan_memory(graph)
    check_plan(graph, plan)
    kinds = [st["kind"] for st in plan.storage]
    assert kinds == ["input", "param", "arena", "output", "output"]
    assert plan.inplace == {}  # neither x (input) nor y (output) may be overwritten


def random_graph(rng: random.Random) -> Graph:
    g = G("x")
    live = ["x"]
    ops = ["relu", "add", "softmax", "mul"]
    for k in range(rng.randint(3, 40)):
        op = rng.choice(ops)
        n = rng.choice([g.n, g.n, 64, 1000])
        ins = rng.sample(live, min(len(live), 2 if op in ("add", "mul") else 1))
        if op in ("add", "mul") and len(ins) == 1:
            ins = ins * 2
        same = all(g.values[i].shape == (n,) or g.values[i].shape == (1,) for i in ins)
        if op != "softmax" and not same:
            n = g.values[ins[0]].shape[0]
            ins = [i for i in ins if g.values[i].shape in ((n,), (1,))] or [ins[0]]
            if op in ("add", "mul") and len(ins) == 1:
                ins = ins * 2
        attrs = {"axis": 0} if op == "softmax" else {}
        live.append(g.op(op, f"t{k}", *ins, n=n, attrs=attrs))
    outs = [live[-1]] + rng.sample(live[1:-1], min(2, len(live) - 2))
    return g.graph(*dict.fromkeys(outs))


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_give_valid_plans(seed):
    graph = random_graph(random.Random(seed))
    plan = plan_memory(graph)
    check_plan(graph, plan)
    assert plan.live_lower_bound_bytes <= plan.arena_bytes <= plan.no_reuse_bytes


# ---- placement ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_placement_never_overlaps_live_blocks(seed):
    rng = random.Random(seed)
    blocks = []
    for _ in range(rng.randint(1, 60)):
        first = rng.randint(0, 50)
        blocks.append(Block(64 * rng.randint(0, 40), first, first + rng.randint(0, 10)))
    offsets, arena = place(blocks)
    assert live_lower_bound(blocks) <= arena <= sum(b.size for b in blocks)
    for i, a in enumerate(blocks):
        assert offsets[i] % 64 == 0 and offsets[i] + a.size <= arena
        for j in range(i):
            b = blocks[j]
            alive = a.first <= b.last and b.first <= a.last
            bytes_ = offsets[i] < offsets[j] + b.size and offsets[j] < offsets[i] + a.size
            assert not (alive and bytes_ and a.size and b.size)


def test_placement_reuses_space_of_dead_blocks():
    blocks = [Block(1024, 0, 1), Block(512, 1, 2), Block(1024, 2, 3), Block(512, 3, 4)]
    offsets, arena = place(blocks)
    assert arena == live_lower_bound(blocks) == 1536


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: Path(p).stem)
def test_light_zoo_arena_within_10_percent_of_the_lower_bound(path):
    graph = optimize(import_onnx(path, None, onnx.load(path)), PassContext())
    plan = plan_memory(graph)
    check_plan(graph, plan)
    assert plan.arena_bytes <= 1.10 * plan.live_lower_bound_bytes
    assert plan.arena_bytes < plan.no_reuse_bytes
