"""The loop IR's one visitor and mutator: traversal order, sharing, rebuilds, drops."""

import dataclasses

import pytest

from packager.te.expr import INDEX, Binary, Const, Var, binary
from packager.te.ir import Allocate, Barrier, Buffer, For, IfThenElse, Seq, Stmt, Store
from packager.te.visitor import (
    LoopVisitor,
    StmtMutator,
    StmtVisitor,
    dispatch,
    expr_roots,
    map_stmts,
    register,
    stmt_children,
    stmt_exprs,
    stmts_of,
    walk_exprs,
    walk_stmts,
)


def _nest():
    a = Buffer("a", "float32", (4, 8))
    tmp = Buffer("t", "float32", (8,), scope="local")
    i, j = Var("i", INDEX), Var("j", INDEX)
    zero, four, eight = Const(0, INDEX), Const(4, INDEX), Const(8, INDEX)
    flat = binary("+", binary("*", i, eight), j)
    store_t = Store(tmp, j, Const(1.0, "float32"))
    store_a = Store(a, flat, Const(2.0, "float32"))
    guard = IfThenElse(binary("<", j, four), store_a, None)
    inner = For(j, zero, eight, "vectorized", Seq([store_t, guard]))
    outer = For(i, zero, four, "parallel", Allocate(tmp, inner))
    return outer, dict(a=a, i=i, j=j, store_t=store_t, store_a=store_a, guard=guard, inner=inner)


def test_children_and_exprs_come_from_the_field_table():
    outer, n = _nest()
    assert stmt_children(outer) == [outer.body]
    assert stmt_children(n["guard"]) == [n["store_a"]]  # else_ is None: no child
    assert stmt_exprs(n["store_a"]) == [n["store_a"].index, n["store_a"].value]
    assert stmt_exprs(n["inner"]) == [n["inner"].min, n["inner"].extent]
    assert [type(s).__name__ for s in walk_stmts(outer)] == [
        "For",
        "Allocate",
        "For",
        "Seq",
        "Store",
        "IfThenElse",
        "Store",
    ]
    assert n["i"] in list(walk_exprs(outer))


def test_visitor_dispatches_by_class_and_walks_the_rest():
    outer, n = _nest()
    seen = []

    class Loops(StmtVisitor):
        def visit_For(self, s):
            seen.append(s.var.name)
            self.generic_visit(s)

        def visit_expr(self, e):
            seen.append("e")

    Loops().visit(outer)
    # the outer loop's two bounds, then the inner loop, its bounds, then two stores' and a
    # condition's expressions
    assert seen == ["i", "e", "e", "j", "e", "e", "e", "e", "e", "e", "e"]


def test_mutator_shares_untouched_subtrees_and_rebuilds_the_path_to_a_change():
    outer, n = _nest()

    class NoChange(StmtMutator):
        pass

    assert NoChange().visit(outer) is outer

    class Serial(StmtMutator):
        def visit_For(self, s):
            body = self.visit(s.body)
            return dataclasses.replace(s, kind="serial", body=body)

    new = Serial().visit(outer)
    assert [s.kind for s in walk_stmts(new) if isinstance(s, For)] == ["serial", "serial"]
    assert outer.kind == "parallel"  # the input is not changed
    stores = [s for s in walk_stmts(new) if isinstance(s, Store)]
    assert stores == [n["store_t"], n["store_a"]]  # leaves shared, not copied


def test_mutator_drops_statements_and_keeps_bodies_valid():
    outer, n = _nest()

    class NoStores(StmtMutator):
        def visit_Store(self, s):
            return None

    new = NoStores().visit(outer)
    assert not any(isinstance(s, Store) for s in walk_stmts(new))
    guard = next(s for s in walk_stmts(new) if isinstance(s, IfThenElse))
    assert isinstance(guard.then, Seq) and guard.then.stmts == []  # a required body stays
    assert guard.else_ is None


def test_mutate_expr_rewrites_every_expression():
    outer, n = _nest()

    class Shift(StmtMutator):
        def mutate_expr(self, e):
            return binary("+", e, Const(1, INDEX)) if e is n["store_a"].index else e

    new = Shift().visit(outer)
    store = [s for s in walk_stmts(new) if isinstance(s, Store)][1]
    assert isinstance(store.index, Binary) and store.index.b.value == 1
    assert store is not n["store_a"] and store.value is n["store_a"].value


def test_map_stmts_is_bottom_up():
    outer, _ = _nest()
    order = []

    def record(s):
        order.append(type(s).__name__)
        return s

    assert map_stmts(outer, record) is outer
    assert order == ["Store", "Store", "IfThenElse", "Seq", "For", "Allocate", "For"]


def test_new_statement_kinds_register_and_unknown_ones_are_named():
    @dataclasses.dataclass(eq=False)
    class Fence(Stmt):
        after: Stmt
        count: object

    outer, _ = _nest()
    with pytest.raises(TypeError, match="unknown statement Fence"):
        list(walk_stmts(Fence(outer, Const(1, INDEX))))
    register(Fence, exprs=("count",), stmts=("after",))
    fenced = Fence(outer, Const(3, INDEX))
    assert stmt_children(fenced) == [outer]
    assert len(list(walk_stmts(fenced))) == 8
    barrier = Barrier()
    assert list(walk_stmts(Seq([barrier])))[1:] == [barrier]


def test_loop_visitor_knows_the_loops_around_each_statement():
    outer, n = _nest()
    seen = []

    class Where(LoopVisitor):
        def visit_Store(self, s):
            seen.append((s.buffer.name, [f.var.name for f in self.loops]))

        def visit_expr(self, e):
            seen.append(("expr", [f.var.name for f in self.loops]))

    Where().visit(outer)
    # a loop's bounds are outside it: i's bounds see no loop, j's see only i
    assert seen == [
        ("expr", []),
        ("expr", []),
        ("expr", ["i"]),
        ("expr", ["i"]),
        ("t", ["i", "j"]),
        ("expr", ["i", "j"]),  # the guard's condition
        ("a", ["i", "j"]),
    ]


def test_stmts_of_and_expr_roots():
    outer, n = _nest()
    assert stmts_of(outer, Store) == [n["store_t"], n["store_a"]]
    assert stmts_of(outer, (For, IfThenElse)) == [outer, n["inner"], n["guard"]]
    roots = list(expr_roots(outer))
    assert roots[:2] == [outer.min, outer.extent]
    assert roots[-3:] == [n["guard"].cond, n["store_a"].index, n["store_a"].value]


def test_dispatch_names_expression_kinds_too():
    class Kinds:
        def visit_Binary(self, e):
            return "binary " + e.op

    i = Var("i", INDEX)
    assert dispatch(Kinds(), binary("+", i, i), repr) == "binary +"
    assert dispatch(Kinds(), i, lambda e: "other " + e.name) == "other i"


def test_walk_exprs_visits_a_shared_subtree_once():
    i = Var("i", INDEX)
    e = i
    for _ in range(40):  # a DAG of 2**40 paths: walking per path would never end
        e = binary("+", e, e)
    nodes = list(walk_exprs(Store(Buffer("o", "int64", (1,)), Const(0, INDEX), e)))
    assert len(nodes) == 1 + 41  # the index, then the 40 sums and i, each once
    assert nodes[1] is e and nodes[-1] is i
