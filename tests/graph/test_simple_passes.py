"""dce, remove_identity, fold_constants on small graphs."""

import numpy as np

from packager.graph.passes.dce import dce
from packager.graph.passes.fold_constants import fold_constants
from packager.graph.passes.remove_identity import remove_identity

from .helpers import Builder, feeds_for, ops, run_graph


def test_dce_drops_what_reaches_no_output():
    b = Builder()
    x = b.input("x", (2, 3))
    y = b.op("relu", [x], "y")
    dead = b.op("exp", [x], "dead")
    b.op("neg", [dead], "dead2")
    g = dce(b.graph([y]))
    assert ops(g) == ["relu"]


def test_dce_keeps_a_multi_output_node_with_one_output_used():
    b = Builder()
    x = b.input("x", (2, 3))
    b.const("s", np.ones(3, np.float32))
    b.op("layer_norm", [x, "s"], "ln", n_out=3, axis=1, epsilon=1e-5, with_stats=1)
    g = dce(b.graph(["ln:1"]))
    assert ops(g) == ["layer_norm"]


def test_identity_between_nodes_disappears():
    b = Builder()
    x = b.input("x", (2, 3))
    a = b.op("relu", [x], "a")
    i = b.op("identity", [a], "i")
    j = b.op("identity", [i], "j")
    y = b.op("exp", [j], "y")
    g = remove_identity(b.graph([y]))
    assert ops(g) == ["relu", "exp"]
    assert g.nodes[1].inputs == ["a"]


def test_identity_to_a_graph_output_renames_its_producer():
    b = Builder()
    x = b.input("x", (2, 3))
    a = b.op("relu", [x], "a")
    y = b.op("identity", [a], "y")
    z = b.op("exp", [a], "z")
    g = remove_identity(b.graph([y, z]))
    assert ops(g) == ["relu", "exp"]
    assert g.nodes[0].outputs == ["y"] and g.nodes[1].inputs == ["y"]
    assert g.outputs == ["y", "z"]
    feeds = feeds_for(g)
    for got, want in zip(run_graph(g, feeds), run_graph(b.graph([y, z]), feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def test_identity_stays_a_copy_where_storage_must_differ():
    b = Builder()
    x = b.input("x", (2, 3))
    c = b.const("c", np.ones((2, 3), np.float32))
    a = b.op("relu", [x], "a")
    y1 = b.op("identity", [x], "y1")  # of a graph input
    y2 = b.op("identity", [c], "y2")  # of a constant
    y3 = b.op("identity", [a], "y3")  # a takes this name...
    y4 = b.op("identity", [a], "y4")  # ...so this one copies it
    g = remove_identity(b.graph([y1, y2, y3, y4, a]))
    assert ops(g) == ["relu", "identity", "identity", "identity", "identity"]
    g = remove_identity(b.graph([y1, y2, y3, y4]))
    assert ops(g) == ["relu", "identity", "identity", "identity"]
    assert g.nodes[0].outputs == ["y3"] and g.nodes[3].inputs == ["y3"]


def test_fold_constants_evaluates_through_the_op_compute():
    b = Builder()
    x = b.input("x", (2, 3))
    w = b.const("w", np.arange(6, dtype=np.float32).reshape(3, 2))
    wt = b.op("transpose", [w], "wt", perm=[1, 0])
    w2 = b.op("mul", [wt, wt], "w2")
    y = b.op("add", [x, w2], "y")
    g = fold_constants(b.graph([y]))
    assert ops(g) == ["add"]
    np.testing.assert_array_equal(g.values["w2"].data, (np.arange(6).reshape(3, 2).T ** 2))
    assert g.values["w2"].data.dtype == np.float32


def test_fold_constants_leaves_huge_evaluations_to_the_board(monkeypatch):
    from packager.graph.passes import fold_constants as mod

    monkeypatch.setattr(mod, "MAX_GRID", 10)
    b = Builder()
    x = b.input("x", (4, 4))
    c = b.const("c", np.ones((4, 4), np.float32))
    s = b.op("reduce_sum", [c], "s", axes=[1], keepdims=1)
    y = b.op("add", [x, s], "y")
    assert ops(fold_constants(b.graph([y]))) == ["reduce_sum", "add"]
