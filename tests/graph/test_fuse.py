"""fuse: groups by pattern kind along post-dominators, one kernel per group."""

import numpy as np
import pytest

from packager.graph.ir import Node
from packager.graph.passes.dce import dce
from packager.graph.passes.fuse import _Fuser, fuse
from packager.graph.patterns import pattern_of
from packager.lowering import lower_graph

from .helpers import Builder, feeds_for, ops, run_graph

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def check_same(before, after, compiled=False):
    feeds = feeds_for(before)
    want = run_graph(before, feeds)
    for got, w in zip(run_graph(after, feeds, compiled), want, strict=True):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def conv(b, x, name, cin=4, cout=4):
    w, bias = b.const(f"{name}_w", rand(cout, cin, 3, 3)), b.const(f"{name}_b", rand(cout))
    return b.op("conv", [x, w, bias], name, pads=[1, 1, 1, 1])


def residual_block():
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    y = b.op("relu", [conv(b, x, "c1")], "r1")
    y = b.op("scale_shift", [conv(b, y, "c2"), b.const("s", rand(4)), b.const("t", rand(4))], "bn")
    y = b.op("relu", [b.op("add", [y, x], "add")], "r2")
    return b.graph([y])


def test_conv_absorbs_bias_activation_and_residual_add():
    g = residual_block()
    f = fuse(g)
    assert ops(f) == ["conv+relu", "conv+scale_shift+add+relu"]
    assert [pattern_of(n) for n in f.nodes] == ["out_elemwise_fusable"] * 2
    second = f.nodes[1]
    assert second.inputs == ["r1", "c2_w", "c2_b", "s", "t", "x"]
    assert second.outputs == ["r2"]
    assert second.attrs["nodes"][0] == {
        "op": "conv",
        "inputs": ["r1", "c2_w", "c2_b"],
        "outputs": ["c2"],
        "attrs": {"pads": [1, 1, 1, 1]},
        "source": "c2",
    }
    assert "c2" in f.values  # inner values keep their shapes
    check_same(g, f)
    check_same(g, f, compiled=True)


def test_one_anchor_per_group():
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    y = b.op("relu", [b.op("add", [conv(b, x, "c1"), conv(b, x, "c2")], "add")], "relu")
    f = fuse(b.graph([y]))
    assert sorted(ops(f)) == ["conv", "conv+add+relu"]


def test_elementwise_diamond_is_one_group():
    b = Builder()
    x = b.input("x", (2, 8))
    a = b.op("relu", [x], "a")
    y = b.op("add", [b.op("exp", [a], "e"), b.op("neg", [a], "n")], "y")
    g = b.graph([y])
    assert ops(fuse(g)) == ["relu+exp+neg+add"]
    check_same(g, fuse(g), compiled=True)


def test_reduction_takes_elementwise_producers_and_same_shape_consumers():
    b = Builder()
    x = b.input("x", (2, 3, 8))
    s = b.op("reduce_sum", [b.op("exp", [x], "e")], "s", axes=[2], keepdims=1)
    r = b.op("sqrt", [s], "r")
    y = b.op("div", [x, r], "y")  # reads r broadcast along axis 2: not absorbed
    g = b.graph([y])
    f = fuse(g)
    assert ops(f) == ["exp+reduce_sum+sqrt", "div"]
    assert pattern_of(f.nodes[0]) == "reduction"
    check_same(g, f, compiled=True)


def test_injective_chains_join_after_anchors():
    b = Builder()
    x = b.input("x", (2, 3, 4))
    t = b.op("transpose", [x], "t", perm=[0, 2, 1])
    r = b.op("reshape", [t], "r", shape=[2, 12])
    y = b.op("relu", [b.op("neg", [r], "n")], "y")
    g = b.graph([y])
    assert ops(fuse(g)) == ["transpose+reshape+neg+relu"]
    check_same(g, fuse(g), compiled=True)


def test_opaque_ops_and_graph_outputs_bound_groups():
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    r = b.op("relu", [conv(b, x, "c1")], "r")  # a graph output, also read on
    p = b.op("max_pool", [r], "p", kernel=[2, 2], strides=[2, 2])
    y = b.op("exp", [p], "y")
    g = b.graph([r, y])
    f = fuse(g)
    assert ops(f) == ["conv+relu", "max_pool", "exp"]
    assert f.nodes[0].outputs == ["r"]


def test_a_merge_that_would_close_a_cycle_is_refused():
    b = Builder()
    x = b.input("x", (2, 8))
    a = b.op("relu", [x], "a")
    s = b.op("softmax", [a], "s", axes=[1])
    y = b.op("add", [a, s], "y")
    fuser = _Fuser(b.graph([y]))
    assert fuser._cycle({0, 2})  # relu and add around the softmax
    assert not fuser._cycle({1, 2})
    assert ops(fuse(b.graph([y]))) == ["relu", "softmax", "add"]


def test_a_fused_node_with_two_outputs_lowers_to_one_kernel():
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    c = conv(b, x, "c1")
    r = b.op("relu", [c], "r")
    g = b.graph([c, r])
    inner = [
        {k: getattr(n, k) for k in ("op", "inputs", "outputs", "attrs", "source")} for n in g.nodes
    ]
    node = Node("fused", "f", ["x", "c1_w", "c1_b"], ["c1", "r"], {"pattern": "x", "nodes": inner})
    f = type(g)(g.name, g.inputs, g.outputs, [node], g.values)
    check_same(g, f, compiled=True)


def test_groups_that_compute_alike_share_a_kernel():
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    y = b.op("relu", [conv(b, x, "c1")], "r1")
    y = b.op("relu", [conv(b, y, "c2")], "r2")
    y = b.op("sigmoid", [conv(b, y, "c3")], "r3")
    kernels, funcs = lower_graph(fuse(b.graph([y])))
    assert funcs == ["k_0_conv_relu", "k_0_conv_relu", "k_1_conv_sigmoid"]
    assert len(kernels) == 2


UNARY = ["relu", "exp", "neg", "sigmoid"]


def random_graph(seed: int):
    """A random DAG of elementwise, broadcast, injective, reduction and opaque ops."""
    rng = np.random.default_rng(seed)
    b = Builder()
    live = [b.input("x", (2, 4, 4))]
    for k in range(14):
        a = live[rng.integers(len(live))]
        choice = rng.integers(6)
        name = f"n{k}"
        if choice <= 1:
            out = b.op(UNARY[rng.integers(len(UNARY))], [a], name)
        elif choice == 2:
            out = b.op(["add", "mul"][rng.integers(2)], [a, live[rng.integers(len(live))]], name)
        elif choice == 3:
            out = b.op("transpose", [a], name, perm=[0, 2, 1])
        elif choice == 4:
            out = b.op("reduce_max", [a], name, axes=[2], keepdims=1)
            out = b.op("add", [a, out], f"{name}b")
        else:
            out = b.op("softmax", [a], name, axes=[2])
        live.append(out)
    outs = list(dict.fromkeys([live[-1], live[rng.integers(1, len(live))]]))
    return dce(b.graph(outs))


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_fuse_to_the_same_answer(seed):
    g = random_graph(seed)
    f = fuse(g)
    assert len(f.nodes) <= len(g.nodes)
    for node in f.nodes:
        if node.op == "fused":
            kinds = [pattern_of(Node(n["op"], "", [], [])) for n in node.attrs["nodes"]]
            assert sum(k == "out_elemwise_fusable" for k in kinds) <= 1
    check_same(g, f)
