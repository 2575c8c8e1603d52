"""Shape and indexing ops: ONNX nodes against onnx's reference evaluator, and library ops
against numpy (out-of-range indices clamp instead of reading outside a tensor)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from packager.errors import PackagerError
from packager.frontend.importer import import_onnx

from .harness import run_op
from .onnx_check import build_kernels, check_case, one_node_model, prepare_all

R = np.random.default_rng(1)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def i64(*values):
    return np.array(values, np.int64)


X = f32(2, 3, 4)
BIG = 9223372036854775807

# (op, inputs, attrs, opset, constant inputs, outputs)
CASES = [
    ("Reshape", [X, i64(4, -1)], {}, 17, (1,), 1),
    ("Reshape", [X, i64(0, 0, 2, 2)], {}, 17, (1,), 1),
    ("Reshape", [X, i64(-1)], {}, 17, (1,), 1),
    ("Reshape", [np.zeros((0, 3), np.float32), i64(0, 3)], {"allowzero": 1}, 17, (1,), 1),
    ("Flatten", [X], {}, 17, (), 1),
    ("Flatten", [X], {"axis": 0}, 17, (), 1),
    ("Flatten", [X], {"axis": -1}, 17, (), 1),
    ("Flatten", [X], {"axis": 3}, 17, (), 1),
    ("Transpose", [X], {}, 17, (), 1),
    ("Transpose", [X], {"perm": [1, 2, 0]}, 17, (), 1),
    ("Transpose", [np.arange(6, dtype=np.int8).reshape(1, 2, 3)], {"perm": [2, 0, 1]}, 17, (), 1),
    ("Squeeze", [f32(1, 3, 1)], {}, 17, (), 1),
    ("Squeeze", [f32(1, 3, 1), i64(-1)], {}, 17, (1,), 1),
    ("Squeeze", [f32(1, 3, 1)], {"axes": [0]}, 11, (), 1),
    ("Unsqueeze", [X, i64(0, -1)], {}, 17, (1,), 1),
    ("Unsqueeze", [X], {"axes": [1]}, 11, (), 1),
    ("Unsqueeze", [np.float32(3.0)], {"axes": [0]}, 11, (), 1),
    ("Concat", [X, f32(2, 1, 4), f32(2, 0, 4)], {"axis": 1}, 17, (), 1),
    ("Concat", [X, f32(2, 3, 1), X], {"axis": -1}, 17, (1,), 1),
    (
        "Concat",
        [np.array([[True], [False]]), np.array([[False, True]] * 2)],
        {"axis": 1},
        17,
        (),
        1,
    ),
    # Slice: negative and clamped starts/ends, negative steps, axes, int64 extremes.
    ("Slice", [X, i64(1), i64(-1), i64(-1)], {}, 17, (1, 2, 3), 1),
    ("Slice", [X, i64(-1, 10), i64(-100, -100), i64(2, 0), i64(-2, -1)], {}, 17, (1, 2, 3, 4), 1),
    ("Slice", [X, i64(0, 1), i64(BIG, 3)], {}, 17, (1, 2), 1),
    ("Slice", [X, i64(3), i64(-BIG - 1), i64(2), i64(-1)], {}, 17, (1, 2, 3, 4), 1),
    ("Slice", [X, i64(5), i64(9), i64(1)], {}, 17, (1, 2, 3), 1),
    ("Slice", [X], {"starts": [1], "ends": [3], "axes": [2]}, 9, (), 1),
    # Split: equal parts, given sizes (input or attr), num_outputs with a short last part.
    ("Split", [X], {"axis": 2}, 17, (), 2),
    ("Split", [X, i64(1, 3)], {"axis": -1}, 17, (1,), 2),
    ("Split", [f32(7)], {"num_outputs": 3}, 18, (), 3),
    ("Split", [X], {"split": [1, 2], "axis": 1}, 11, (), 2),
    ("Expand", [f32(3, 1), i64(2, 1, 4)], {}, 17, (1,), 1),
    ("Expand", [f32(3, 1), i64(3, 4)], {}, 17, (1,), 1),
    ("Expand", [f32(3, 4), i64(1, 1)], {}, 17, (1,), 1),
    ("Tile", [f32(2, 3), i64(2, 3)], {}, 17, (1,), 1),
    ("Tile", [np.array([[1], [2]], np.int32), i64(1, 3)], {}, 17, (1,), 1),
    # Gather: runtime and constant indices, negative indices, int32 indices, scalar indices.
    ("Gather", [X, i64(0, -1, 2)], {"axis": 1}, 17, (), 1),
    ("Gather", [X, i64(0, -1, 2)], {"axis": -2}, 17, (1,), 1),
    ("Gather", [X, np.array([[1, 0]], np.int32)], {}, 17, (), 1),
    ("Gather", [f32(5), np.array(-2, np.int64)], {}, 17, (), 1),
    ("Gather", [X, np.array(3, np.int64)], {"axis": 2}, 17, (1,), 1),
    (
        "GatherElements",
        [f32(3, 3), np.array([[1, -1], [0, 2], [2, 2]], np.int64)],
        {"axis": 1},
        17,
        (),
        1,
    ),
    ("GatherElements", [f32(3, 3), np.array([[1, -1, 0]], np.int64)], {}, 17, (), 1),
    (
        "OneHot",
        [i64(0, 3, -1, 1), np.array(4, np.int64), np.array([0, 5], np.float32)],
        {},
        17,
        (1,),
        1,
    ),
    (
        "OneHot",
        [i64(0, 3, -1, 1).reshape(2, 2), np.array(4, np.int64), np.array([1, 5], np.int32)],
        {"axis": 0},
        17,
        (1, 2),
        1,
    ),
    ("Trilu", [f32(3, 4)], {}, 17, (), 1),
    ("Trilu", [f32(2, 3, 4), i64(1)], {"upper": 0}, 17, (1,), 1),
    ("Trilu", [f32(3, 4), i64(-1)], {}, 17, (1,), 1),
    ("Trilu", [f32(2, 3, 4), np.array(1, np.int64)], {"upper": 0}, 17, (), 1),
    ("EyeLike", [f32(3, 4)], {"k": 1}, 17, (), 1),
    ("EyeLike", [f32(3, 3)], {"dtype": TensorProto.INT32}, 17, (), 1),
    ("Identity", [np.arange(4, dtype=np.uint16)], {}, 17, (), 1),
]
CASES = {f"{c[0]}-{k}": c for k, c in enumerate(CASES)}


@pytest.fixture(scope="module")
def prepared():
    return prepare_all(CASES)


@pytest.fixture(scope="module")
def kernels(prepared):
    return build_kernels(prepared)


@pytest.mark.parametrize("key", list(CASES))
def test_onnx_injective(key, prepared, kernels):
    check_case(key, prepared, kernels)


def test_gather_clamps_out_of_range_indices():
    data = np.arange(5, dtype=np.float32)
    (got,) = run_op("gather", [data, i64(7, -9, 2)], {"axis": 0})
    np.testing.assert_array_equal(got, [4, 0, 2])
    (got,) = run_op("gather_elements", [data, i64(9, -1)], {"axis": 0})
    np.testing.assert_array_equal(got, [4, 4])


def test_one_hot_out_of_range_is_all_off():
    (got,) = run_op("one_hot", [i64(5, -5, 1), np.array([0, 1], np.int64)], {"depth": 3})
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 0], [0, 1, 0]])


@pytest.mark.parametrize("dtype", [np.float64, np.int8, np.uint32, np.bool_])
def test_shape_ops_keep_dtype(dtype):
    x = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    (got,) = run_op("transpose", [x], {"perm": [2, 0, 1]})
    np.testing.assert_array_equal(got, x.transpose(2, 0, 1))
    (got,) = run_op("slice", [x], {"starts": [-1], "ends": [-BIG], "axes": [1], "steps": [-2]})
    np.testing.assert_array_equal(got, x[:, ::-2])
    (got,) = run_op("reshape", [x], {"shape": [4, 1, 6]})
    np.testing.assert_array_equal(got, x.reshape(4, 1, 6))
    (got,) = run_op("tile", [x], {"repeats": [1, 2, 1]})
    np.testing.assert_array_equal(got, np.tile(x, (1, 2, 1)))
    assert got.dtype == dtype


@pytest.mark.parametrize(
    "op,inputs,attrs,consts,message",
    [
        ("Reshape", [X, i64(5, -1)], {}, (1,), "reshape"),
        ("Reshape", [X, i64(4, -1)], {}, (), "must be a constant"),
        ("Squeeze", [X, i64(1)], {}, (1,), "squeeze axis 1"),
        ("Split", [X], {"axis": 1}, (), "equal parts"),
        ("Transpose", [X], {"perm": [0, 0, 1]}, (), "perm"),
        ("Concat", [X, X], {"axis": 3}, (), "axis 3"),
        ("OneHot", [i64(1), i64(3), np.array([0, 1], np.int64)], {}, (), "must be a constant"),
    ],
)
def test_bad_shape_inputs_fail_clearly(op, inputs, attrs, consts, message):
    model = one_node_model(op, inputs, attrs, consts, n_out=2 if op == "Split" else 1)
    with pytest.raises(PackagerError, match=message) as err:
        import_onnx("m.onnx", model=model)
    assert f"{op.lower()}_node" in str(err.value)
