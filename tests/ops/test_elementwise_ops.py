"""Elementwise and broadcasting ops: ONNX nodes against onnx's reference evaluator, and
library ops against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from packager.errors import PackagerError
from packager.frontend.importer import import_onnx

from .harness import run_op
from .onnx_check import build_kernels, check_case, one_node_model, prepare_all

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def ints(*shape, lo=-5, hi=6, dtype=np.int32):
    return R.integers(lo, hi, shape).astype(dtype)


X = f32(2, 3, 4)
Y = f32(3, 1)
POS = np.abs(X) + 0.1
SPECIAL = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.5], np.float32)
HALVES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], np.float32)
DIVISORS = np.array([-3, 3, -3, 3, 0, 2, -2, 7], np.int32)
NUMERATORS = np.array([7, 7, -7, -7, 5, -1, 1, 0], np.int32)

FLOAT_UNARY = (
    "Relu Sigmoid Tanh Exp Neg Abs Floor Ceil Reciprocal Sign Softplus Softsign Elu Selu "
    "Celu ThresholdedRelu Shrink Mish Sin Cos Tan Atan Sinh Cosh Asinh Erf HardSwish "
    "HardSigmoid LeakyRelu Identity"
).split()

# (op, inputs, attrs, opset, constant inputs)
CASES = [(op, [X], {}, 18, ()) for op in FLOAT_UNARY] + [
    ("Sqrt", [POS], {}, 17, ()),
    ("Log", [POS], {}, 17, ()),
    ("Acosh", [POS + 1], {}, 17, ()),
    ("Asin", [X / 5], {}, 17, ()),
    ("Acos", [X / 5], {}, 17, ()),
    ("Atanh", [X / 5], {}, 17, ()),
    ("Round", [HALVES], {}, 17, ()),
    ("Exp", [X.astype(np.float64)], {}, 17, ()),
    ("Softplus", [np.array([-100.0, -1, 0, 1, 100], np.float32)], {}, 17, ()),
    ("LeakyRelu", [X], {"alpha": 0.3}, 17, ()),
    ("HardSigmoid", [X], {"alpha": 0.3, "beta": 0.4}, 17, ()),
    ("Elu", [X], {"alpha": 0.5}, 17, ()),
    ("Celu", [X], {"alpha": 2.0}, 17, ()),
    ("Selu", [X], {"alpha": 2.0, "gamma": 3.0}, 17, ()),
    ("ThresholdedRelu", [X], {"alpha": 0.5}, 17, ()),
    ("Shrink", [X], {"bias": 0.2, "lambd": 0.3}, 17, ()),
    ("Shrink", [ints(9, dtype=np.int8)], {"bias": 1.0, "lambd": 2.0}, 17, ()),
    ("Gelu", [X], {}, 20, ()),
    ("Gelu", [X], {"approximate": "tanh"}, 20, ()),
    ("IsNaN", [SPECIAL], {}, 17, ()),
    ("IsInf", [SPECIAL], {}, 17, ()),
    ("IsInf", [SPECIAL], {"detect_negative": 0}, 17, ()),
    ("IsInf", [SPECIAL], {"detect_positive": 0}, 17, ()),
    ("Sign", [SPECIAL], {}, 17, ()),
    ("Relu", [SPECIAL], {}, 17, ()),
    ("Abs", [ints(7)], {}, 17, ()),
    ("Neg", [ints(7, dtype=np.int64)], {}, 17, ()),
    ("Sign", [ints(7, dtype=np.int16)], {}, 17, ()),
    ("Relu", [ints(7, dtype=np.int8)], {}, 17, ()),
    ("Not", [X > 0], {}, 17, ()),
    ("BitwiseNot", [ints(6)], {}, 18, ()),
    ("BitwiseNot", [ints(6, lo=0, hi=255, dtype=np.uint8)], {}, 18, ()),
    ("BitwiseNot", [ints(6, lo=0, hi=2**62, dtype=np.uint64)], {}, 18, ()),
    # Binary arithmetic: broadcasting, several dtypes, integer division truncating.
    ("Add", [X, Y], {}, 17, ()),
    ("Sub", [Y, X], {}, 17, ()),
    ("Mul", [X, np.float32(2.0).reshape(())], {}, 17, (1,)),
    ("Div", [X, Y], {}, 17, ()),
    ("Add", [ints(2, 3, dtype=np.int64), ints(3, dtype=np.int64)], {}, 17, ()),
    (
        "Mul",
        [ints(2, 3, dtype=np.uint8, lo=0, hi=40), ints(1, dtype=np.uint8, lo=0, hi=40)],
        {},
        17,
        (),
    ),
    ("Div", [NUMERATORS, np.where(DIVISORS == 0, 1, DIVISORS).astype(np.int32)], {}, 17, ()),
    ("Sub", [X.astype(np.float64), Y.astype(np.float64)], {}, 17, ()),
    # Legacy broadcasting (opset < 7): B aligned at A's axis.
    ("Pow", [POS, Y], {}, 17, ()),
    ("Pow", [ints(4, lo=0), ints(4, lo=0, hi=4)], {}, 17, ()),
    ("Pow", [ints(4, lo=0, dtype=np.int64), ints(4, lo=0, hi=4, dtype=np.int64)], {}, 17, ()),
    ("Pow", [X, ints(4, lo=0, hi=3, dtype=np.int64)], {}, 17, ()),
    ("Pow", [ints(4), np.array([2.0], np.float32)], {}, 17, ()),
    ("Pow", [X.astype(np.float64), np.array([3], np.int32)], {}, 17, ()),
    ("Mod", [NUMERATORS, np.where(DIVISORS == 0, 1, DIVISORS).astype(np.int32)], {}, 17, ()),
    (
        "Mod",
        [NUMERATORS, np.where(DIVISORS == 0, 1, DIVISORS).astype(np.int32)],
        {"fmod": 1},
        17,
        (),
    ),
    ("Mod", [f32(8), np.full(8, -0.7, np.float32)], {"fmod": 1}, 17, ()),
    ("Mod", [f32(8), np.array([-0.7, 0.7], np.float32).repeat(4)], {}, 17, ()),
    (
        "BitShift",
        [np.array([16, 4, 1], np.uint32), np.array([1, 2, 3], np.uint32)],
        {"direction": "RIGHT"},
        17,
        (),
    ),
    (
        "BitShift",
        [np.array([16, 4, 200], np.uint8), np.array([1, 2, 3], np.uint8)],
        {"direction": "LEFT"},
        17,
        (),
    ),
    (
        "BitShift",
        [np.array([1, 3], np.uint64), np.array([63, 2], np.uint64)],
        {"direction": "LEFT"},
        17,
        (),
    ),
    (
        "BitShift",
        [
            np.array([-8, -1, -128, 64, 1, -64, 5], np.int8),
            np.array([1, 1, 7, 1, 7, 8, -1], np.int8),
        ],
        {"direction": "RIGHT"},
        17,
        (),
    ),
    (
        "BitShift",
        [
            np.array([-8, -1, -128, 64, 1, -64, 5], np.int8),
            np.array([1, 1, 7, 1, 7, 8, -1], np.int8),
        ],
        {"direction": "LEFT"},
        17,
        (),
    ),
    (
        "BitShift",
        [np.array([-8, 2**40, 3, -3], np.int64), np.array([1, 23, 63, 62], np.int64)],
        {"direction": "LEFT"},
        17,
        (),
    ),
    (
        "BitShift",
        [np.array([-8, 2**40, 3, -3], np.int64), np.array([1, 23, 63, 62], np.int64)],
        {"direction": "RIGHT"},
        17,
        (),
    ),
    (
        "BitShift",
        [np.array([7, 200], np.uint8), np.array([8, 9], np.uint8)],
        {"direction": "RIGHT"},
        17,
        (),
    ),
    ("PRelu", [X, f32(4)], {}, 17, ()),
    ("PRelu", [X, f32(3, 1)], {}, 17, (1,)),
    # Comparisons and logic.
    ("Equal", [ints(3, 4), ints(4)], {}, 17, ()),
    ("Equal", [X > 0, Y > 0], {}, 17, ()),
    ("Less", [X, Y], {}, 17, ()),
    ("Greater", [ints(3, 4, dtype=np.int64), ints(1, dtype=np.int64)], {}, 17, ()),
    ("LessOrEqual", [ints(3, 4), ints(4)], {}, 17, ()),
    ("GreaterOrEqual", [X, Y], {}, 17, ()),
    ("And", [X > 0, Y > 0], {}, 17, ()),
    ("Or", [X > 0, Y > 0], {}, 17, ()),
    ("Xor", [X > 0, Y > 0], {}, 17, ()),
    ("BitwiseAnd", [ints(3, 4, lo=-99, hi=99), ints(4, lo=-99, hi=99)], {}, 18, ()),
    (
        "BitwiseOr",
        [
            ints(5, lo=-(2**62), hi=2**62, dtype=np.int64),
            ints(5, lo=-(2**62), hi=2**62, dtype=np.int64),
        ],
        {},
        18,
        (),
    ),
    (
        "BitwiseXor",
        [ints(5, lo=-128, hi=127, dtype=np.int8), ints(5, lo=-128, hi=127, dtype=np.int8)],
        {},
        18,
        (),
    ),
    (
        "BitwiseAnd",
        [ints(5, lo=0, hi=2**63, dtype=np.uint64), ints(1, lo=0, hi=2**63, dtype=np.uint64)],
        {},
        18,
        (),
    ),
    (
        "BitwiseXor",
        [ints(5, lo=0, hi=255, dtype=np.uint8), ints(5, lo=0, hi=255, dtype=np.uint8)],
        {},
        18,
        (),
    ),
    # Variadic ops: three-way broadcasting, one input, NaN propagation.
    ("Sum", [X, Y, f32(4)], {}, 17, ()),
    ("Max", [X, Y, f32(4)], {}, 17, ()),
    ("Min", [X, Y, f32(4)], {}, 17, ()),
    ("Mean", [X, Y, f32(4)], {}, 17, ()),
    ("Sum", [X], {}, 17, ()),
    ("Max", [SPECIAL, np.zeros(6, np.float32)], {}, 17, ()),
    ("Min", [np.zeros(6, np.float32), SPECIAL], {}, 17, ()),
    ("Max", [ints(3, 4), ints(4)], {}, 17, ()),
    ("Where", [X > 0, X, Y], {}, 17, ()),
    ("Where", [np.array([True, False]), ints(3, 1), ints(2)], {}, 17, ()),
    # Clip: attrs before opset 11, constant or runtime bound inputs after.
    ("Clip", [X, np.float32(-0.5), np.float32(0.5)], {}, 17, (1, 2)),
    ("Clip", [X, None, np.float32(0.5)], {}, 17, (2,)),
    ("Clip", [X, np.array(-0.5, np.float32), np.array(0.5, np.float32)], {}, 17, ()),
    ("Clip", [X, np.array(0.5, np.float32), None], {}, 17, ()),
    ("Clip", [X, np.float32(0.5), np.float32(-0.5)], {}, 17, (1, 2)),
    ("Clip", [SPECIAL, np.float32(-0.5), np.float32(0.5)], {}, 17, (1, 2)),
    ("Clip", [ints(8), np.int32(-2), np.int32(3)], {}, 17, (1, 2)),
    ("Clip", [X], {}, 17, ()),
    ("Clip", [X], {"min": -0.1, "max": 0.2}, 6, ()),
    # Cast and friends.
    ("Cast", [X * 3], {"to": TensorProto.INT32}, 17, ()),
    ("Cast", [X * 3], {"to": TensorProto.INT64}, 17, ()),
    ("Cast", [np.abs(X) * 50], {"to": TensorProto.UINT8}, 17, ()),
    ("Cast", [SPECIAL], {"to": TensorProto.BOOL}, 17, ()),
    ("Cast", [X], {"to": TensorProto.DOUBLE}, 17, ()),
    ("Cast", [X > 0], {"to": TensorProto.FLOAT}, 17, ()),
    ("Cast", [ints(5, dtype=np.int64)], {"to": TensorProto.INT8}, 17, ()),
    ("Cast", [ints(5)], {"to": TensorProto.BOOL}, 17, ()),
    ("CastLike", [X, np.zeros(1, np.int64)], {}, 17, (1,)),
    ("Dropout", [X], {}, 17, ()),
    ("Dropout", [X], {"ratio": 0.3}, 7, ()),
]
CASES = {f"{c[0]}-{k}": c for k, c in enumerate(CASES)}


@pytest.fixture(scope="module")
def prepared():
    return prepare_all(CASES)


@pytest.fixture(scope="module")
def kernels(prepared):
    return build_kernels(prepared)


@pytest.mark.parametrize("key", list(CASES))
def test_onnx_elementwise(key, prepared, kernels):
    check_case(key, prepared, kernels)


def test_dropout_mask_is_all_true():
    model = one_node_model("Dropout", [X], n_out=2)
    g = import_onnx("m.onnx", model=model)
    assert g.values["y1"].dtype == "bool" and g.values["y1"].shape == X.shape


def test_legacy_broadcast_aligns_at_axis():
    from .onnx_check import run_graph

    b = f32(3)
    model = one_node_model("Add", [X, b], {"broadcast": 1, "axis": 1}, opset=6)
    (got,) = run_graph(import_onnx("m.onnx", model=model), {"x0": X, "x1": b})
    np.testing.assert_allclose(got, X + b[:, None])


def test_prelu_per_channel_slope():
    from .onnx_check import run_graph

    x, slope = f32(2, 3, 2, 2), f32(3)
    model = one_node_model("PRelu", [x, slope], consts=(1,))
    (got,) = run_graph(import_onnx("m.onnx", model=model), {"x0": x})
    np.testing.assert_allclose(got, np.where(x < 0, x * slope[:, None, None], x))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16])
def test_integer_division_by_zero_gives_zero(dtype):
    a = np.array([5, 0, 9], dtype)
    b = np.array([0, 0, 2], dtype)
    (q,) = run_op("div", [a, b], {})
    (r,) = run_op("mod", [a, b], {"fmod": 0})
    np.testing.assert_array_equal(q, np.array([0, 0, 4], dtype))
    np.testing.assert_array_equal(r, np.array([0, 0, 1], dtype))


def test_variadic_ops_broadcast_to_all_shapes():
    a, b, c = f32(2, 1, 1), f32(1, 3, 1), f32(4)
    (got,) = run_op("add", [a, b, c], {})
    np.testing.assert_allclose(got, a + b + c, rtol=1e-6)
    (got,) = run_op("mean", [a, b, c], {})
    np.testing.assert_allclose(got, (a + b + c) / 3, rtol=1e-6)


@pytest.mark.parametrize(
    "op,inputs,attrs,opset,message",
    [
        ("Gelu", [X], {"approximate": "erf"}, 20, "approximate"),
        ("BitShift", [np.array([1], np.uint8)] * 2, {}, 17, "direction"),
        ("Cast", [X], {"to": TensorProto.FLOAT16}, 17, "FLOAT16"),
        ("Relu", [X], {"unknown_attr": 1}, 17, "unknown_attr"),
        ("PRelu", [X, f32(5)], {}, 17, "slope"),
    ],
)
def test_unsupported_attrs_fail_clearly(op, inputs, attrs, opset, message):
    model = one_node_model(op, inputs, attrs, opset=opset)
    with pytest.raises(PackagerError, match=message) as err:
        import_onnx("m.onnx", model=model)
    assert f"{op.lower()}_node" in str(err.value)


def test_dropout_in_training_mode_fails():
    model = one_node_model("Dropout", [X, np.float32(0.5), np.bool_(True)], consts=(1, 2))
    with pytest.raises(PackagerError, match="training_mode"):
        import_onnx("m.onnx", model=model)
