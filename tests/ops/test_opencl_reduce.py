"""OpenCL templates of pools, reductions and softmax, run on this machine's OpenCL
device (PoCL) against the TE evaluator, over shapes (dividing and not) and knobs."""

import numpy as np
import pytest

from packager.errors import PackagerError
from packager.ops.registry import get_op

from .opencl_harness import run_opencl

RNG = np.random.default_rng(7)
P3S2 = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
CEIL = {**P3S2, "count_include_pad": 1, "ceil_mode": 1}


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _check(res, rtol=1e-5, atol=1e-6):
    for got, want in zip(res.outputs, res.expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return res


def _relu(o):
    from packager import te

    return te.compute(o.shape, lambda *i: te.max_(o[i], 0.0), name="relu"), {}


@pytest.mark.parametrize(
    "op, attrs, shape, knobs",
    [
        ("max_pool_nchwc", P3S2, (1, 2, 12, 12, 8), None),
        ("max_pool_nchwc", P3S2, (1, 3, 13, 13, 8), {"vector": 8, "tile": 7}),
        ("max_pool_nchwc", {"kernel": [2, 2], "strides": [2, 2]}, (2, 1, 9, 9, 4), {"tile": 2}),
        ("avg_pool_nchwc", P3S2, (1, 2, 13, 13, 8), {"vector": 2, "group": 32}),
        (
            "avg_pool_nchwc",
            {**P3S2, "count_include_pad": 1, "ceil_mode": 1},
            (1, 2, 10, 10, 4),
            None,
        ),
        ("max_pool", P3S2, (1, 3, 13, 13), None),
        ("avg_pool", {"kernel": [3, 3], "strides": [1, 1]}, (2, 5, 9, 9), {"tile": 7}),
    ],
)
def test_pools_match_the_evaluator(op, attrs, shape, knobs):
    res = _check(run_opencl(op, attrs, [_x(*shape)], knobs=knobs))
    if op.endswith("_nchwc") or knobs:  # several outputs per work-item
        assert res.launch.global_size[0] < res.expected[0].size


def test_blocked_pools_load_vectors_and_tile_outputs():
    res = _check(run_opencl("max_pool_nchwc", P3S2, [_x(1, 2, 12, 12, 8)]))
    assert "vload4" in res.source and "#pragma unroll 2" in res.source  # float4, 2 columns
    # 2 x 6 x 6 x 8 outputs: 2 columns x 4 lanes per work-item
    assert res.launch.global_size[0] == 128 and res.launch.local_size[0] == 64
    wide = _check(run_opencl("max_pool_nchwc", P3S2, [_x(1, 2, 12, 12, 8)], knobs={"vector": 8}))
    assert "vload8" in wide.source


@pytest.mark.parametrize(
    "op, attrs, shape, knobs",
    [
        ("reduce_mean", {"axes": [2, 3], "keepdims": 1}, (1, 64, 7, 7), None),  # global pool
        ("reduce_max", {"axes": [2, 3], "keepdims": 1}, (1, 5, 7, 7, 8), {"vector": 8}),
        ("reduce_sum", {"axes": [1], "keepdims": 0}, (3, 37), None),
        ("reduce_sum", {"axes": [0], "keepdims": 1}, (5, 12), {"vector": 4, "tile": 1}),
        ("reduce_l2", {"axes": [1], "keepdims": 1}, (6, 10, 3), None),
        ("reduce_log_sum_exp", {"axes": [1], "keepdims": 0}, (4, 50), None),
    ],
)
def test_reductions_match_the_evaluator(op, attrs, shape, knobs):
    res = _check(run_opencl(op, attrs, [_x(*shape)], knobs=knobs), rtol=1e-5, atol=1e-5)
    if knobs and knobs.get("vector", 1) > 1:
        assert f"vload{knobs['vector']}" in res.source


def test_a_reduction_with_a_fused_epilogue():
    attrs = {"axes": [2, 3], "keepdims": 1}
    res = _check(run_opencl("reduce_mean", attrs, [_x(1, 3, 5, 5, 4)], post=_relu))
    assert "vload4" in res.source


def test_every_pool_and_reduction_has_an_opencl_template():
    ops = [
        "max_pool",
        "avg_pool",
        "max_pool_nchwc",
        "avg_pool_nchwc",
        "reduce_sum",
        "reduce_mean",
        "reduce_max",
        "reduce_log_sum_exp",
        "softmax",
        "log_softmax",
    ]
    assert [op for op in ops if "opencl" not in get_op(op).schedules] == []


def test_softmax_does_not_fit_the_generic_gpu_schedule():
    with pytest.raises(PackagerError, match="a loop nest reads a buffer an earlier nest wrote"):
        run_opencl("softmax", {"axes": [1]}, [_x(2, 10)], generic=True)


@pytest.mark.parametrize(
    "op, axes, shape, knobs",
    [
        ("softmax", [1], (3, 1000), None),
        ("softmax", [1], (3, 1000), {"vector": 1}),
        ("softmax", [2], (2, 3, 10), {"vector": 2, "group": 16}),
        ("softmax", [1, 2], (3, 4, 5), None),
        ("log_softmax", [1], (70, 12), None),
        ("softmax", [1], (3, 1000), {"mode": "group"}),
        ("softmax", [1], (4, 7), {"mode": "group", "threads": 32}),
        ("log_softmax", [2], (2, 3, 100), {"mode": "group", "threads": 32}),
    ],
)
def test_softmax_one_nest_per_row(op, axes, shape, knobs):
    res = _check(run_opencl(op, {"axes": axes}, [_x(*shape)], knobs=knobs), atol=1e-5)
    # one nest (each reads its group's index): max, sum and outputs in the row's nest
    assert res.source.count("get_group_id(0)") == 1


def test_softmax_per_work_group_fetches_the_row_into_shared_memory():
    res = _check(run_opencl("softmax", {"axes": [1]}, [_x(3, 100)], knobs={"mode": "group"}))
    src = res.source
    assert "__local float in0_shared[100];" in src
    fetch = src.index("in0_shared[")  # the declaration
    fetch = src.index("in0_shared[", fetch + 1)  # the cooperative copy
    barrier = src.index("barrier(CLK_LOCAL_MEM_FENCE);")
    assert fetch < barrier < src.index("for (long r1")  # copied, then fenced, then read
    assert src.count("barrier(") == 1
    assert res.launch.global_size[0] == 3 * 64 and res.launch.local_size[0] == 64
