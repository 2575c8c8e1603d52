"""fold_scale_shift: per-channel affine maps folded into the op before them."""

import numpy as np
import pytest

from packager.graph.passes.fold_scale_shift import fold_scale_shift

from .helpers import Builder, feeds_for, ops, run_graph

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.uniform(-1, 1, shape).astype(np.float32)


def check_same(before, after, rtol=1e-5):
    feeds = feeds_for(before)
    for got, want in zip(run_graph(after, feeds), run_graph(before, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)


def conv_graph(bias=False, groups=1):
    b = Builder()
    x = b.input("x", (1, 4, 6, 6))
    ins = [x, b.const("w", rand(6, 4 // groups, 3, 3))] + ([b.const("b", rand(6))] if bias else [])
    return b, b.op("conv", ins, "conv", pads=[1, 1, 1, 1], groups=groups)


def test_batch_norm_folds_into_a_conv_without_bias():
    b, y = conv_graph()
    z = b.op("scale_shift", [y, b.const("s", rand(6)), b.const("t", rand(6))], "bn")
    before = b.graph([z])
    after = fold_scale_shift(before)
    assert ops(after) == ["conv"] and after.nodes[0].outputs == ["bn"]
    assert len(after.nodes[0].inputs) == 3
    assert before.values["w"].data is b.values["w"].data  # the original weights are untouched
    check_same(before, after)


def test_a_chain_of_channel_constants_folds_into_one_grouped_conv():
    b, y = conv_graph(bias=True, groups=2)
    y = b.op("scale_shift", [y, b.const("s", rand(6)), b.const("t", rand(6))], "bn")
    y = b.op("mul", [y, b.const("m", rand(1, 6, 1, 1))], "mul")
    y = b.op("add", [b.const("a", np.float32(0.5)), y], "add")
    y = b.op("sub", [b.const("c", rand(6, 1, 1)), y], "sub")
    y = b.op("div", [y, b.const("d", rand(6, 1, 1) + 2)], "div")
    before = b.graph([y])
    after = fold_scale_shift(before)
    assert ops(after) == ["conv"] and after.outputs == ["div"]
    check_same(before, after)


@pytest.mark.parametrize(
    "why",
    ["second reader", "spatial constant", "division by zero", "constant divided", "graph output"],
)
def test_what_does_not_fold(why):
    b, y = conv_graph()
    outputs = []
    if why == "second reader":
        z = b.op("mul", [y, b.const("m", rand(6, 1, 1))], "mul")
        outputs = [b.op("add", [y, z], "add")]
    elif why == "spatial constant":
        outputs = [b.op("mul", [y, b.const("m", rand(6, 6, 1))], "mul")]
    elif why == "division by zero":
        outputs = [b.op("div", [y, b.const("d", np.zeros(6, np.float32).reshape(6, 1, 1))], "d")]
    elif why == "constant divided":
        outputs = [b.op("div", [b.const("d", rand(6, 1, 1)), y], "div")]
    else:
        outputs = [y, b.op("mul", [y, b.const("m", rand(6, 1, 1))], "mul")]
    g = b.graph(outputs)
    assert len(fold_scale_shift(g).nodes) == len(g.nodes)


def test_conv_transpose_with_groups():
    b = Builder()
    x = b.input("x", (1, 4, 5, 5))
    w = b.const("w", rand(4, 3, 3, 3))  # (C_in, M / groups, k, k), groups 2 -> M = 6
    y = b.op("conv_transpose", [x, w], "ct", groups=2, strides=[2, 2], pads=[1, 1, 1, 1])
    z = b.op("scale_shift", [y, b.const("s", rand(6)), b.const("t", rand(6))], "bn")
    before = b.graph([z])
    after = fold_scale_shift(before)
    assert ops(after) == ["conv_transpose"]
    check_same(before, after)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_alpha_beta_and_c(trans_b):
    b = Builder()
    x = b.input("x", (3, 5))
    w = b.const("w", rand(4, 5) if trans_b else rand(5, 4))
    y = b.op("gemm", [x, w, b.const("c", rand(3, 1))], "gemm", alpha=2.0, beta=0.5, trans_b=trans_b)
    z = b.op("scale_shift", [y, b.const("s", rand(4)), b.const("t", rand(4))], "bn")
    before = b.graph([z])
    after = fold_scale_shift(before)
    assert ops(after) == ["gemm"] and after.nodes[0].attrs["beta"] == 1.0
    check_same(before, after)


def test_matmul_with_a_shift_becomes_gemm_and_3d_matmul_is_left():
    b = Builder()
    x = b.input("x", (3, 5))
    y = b.op("matmul", [x, b.const("w", rand(5, 4))], "mm")
    z = b.op("add", [b.op("mul", [y, b.const("s", rand(4))], "mul"), b.const("t", rand(4))], "add")
    before = b.graph([z])
    after = fold_scale_shift(before)
    assert ops(after) == ["gemm"]
    check_same(before, after)

    b = Builder()
    x = b.input("x", (2, 3, 5))
    y = b.op("matmul", [x, b.const("w", rand(5, 3))], "mm")
    z = b.op("mul", [y, b.const("s", rand(3, 1))], "mul")  # axis 1 of a 3-D result: rows
    assert ops(fold_scale_shift(b.graph([z]))) == ["matmul", "mul"]
