from packager import te
from packager.te.bound import infer_region
from packager.te.simplify import Simplifier


def test_sliding_window_region():
    P = te.placeholder((12, 12), name="P")
    y, x = te.Var("y"), te.Var("x")
    ry, rx = te.Var("ry"), te.Var("rx")
    ranges = {y: (0, 9), x: (0, 9), ry: (0, 2), rx: (0, 2)}
    e = P[y + ry, x + rx]
    region = infer_region([e], P, {x: (0, 9), ry: (0, 2), rx: (0, 2)}, Simplifier(ranges))
    (b0, e0), (b1, e1) = region
    assert b0 is y and e0 == 3
    assert b1.value == 0 and e1 == 12


def test_strided_and_floordiv():
    P = te.placeholder((8, 64), name="P")
    i, j = te.Var("i"), te.Var("j")
    ranges = {i: (0, 7), j: (0, 15)}
    e = P[i, j * 2 // 2 + j // 4]
    region = infer_region([e], P, {j: (0, 15)}, Simplifier(ranges))
    assert region[0][1] == 1
    assert region[1][0].value == 0 and region[1][1] == 19


def test_out_of_tensor_falls_back_to_whole_dim():
    P = te.placeholder((10,), name="P")
    i, k = te.Var("i"), te.Var("k")
    ranges = {i: (0, 9), k: (0, 2)}
    region = infer_region([P[i + k - 1]], P, {k: (0, 2)}, Simplifier(ranges))
    assert region[0][0].value == 0 and region[0][1] == 10


def test_unknown_expression_falls_back():
    P = te.placeholder((10,), name="P")
    Q = te.placeholder((4,), "int64", name="Q")
    k = te.Var("k")
    region = infer_region([P[Q[k]]], P, {k: (0, 3)}, Simplifier({k: (0, 3)}))
    assert region[0][1] == 10
