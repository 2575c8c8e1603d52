"""NN ops (conv, matmul, pools, reductions, softmax, normalizations, resize, pad, ...):
one-node ONNX models through the frontend and the generated kernels, against onnx's
reference evaluator (or ONNX Runtime where the two disagree and Runtime is the
de-facto semantics)."""

from __future__ import annotations

import numpy as np
import pytest

from packager.errors import PackagerError
from packager.frontend.importer import import_onnx

from .onnx_check import check_onnx, one_node_model, run_graph

R = np.random.default_rng(1)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


X4 = f32(1, 4, 7, 7)
W_CONV = f32(6, 4, 3, 3)
B6 = f32(6)


def case(op, inputs, attrs=None, opset=17, consts=(), n_out=1, tol=1e-4):
    return pytest.param(op, inputs, attrs or {}, opset, consts, n_out, tol,
                        id=f"{op}-{len(CASES)}")


CASES: list = []


def add(*a, **k):
    CASES.append(case(*a, **k))


# --- Conv -------------------------------------------------------------------
W = (1,)  # weight input index: a constant, as in real models
add("Conv", [X4, W_CONV], {}, consts=W)
add("Conv", [X4, W_CONV, B6], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, consts=(1, 2))
add("Conv", [X4, W_CONV], {"dilations": [2, 2], "pads": [0, 1, 2, 1]}, consts=W)
add("Conv", [X4, f32(6, 2, 3, 3), B6], {"group": 2, "strides": [1, 2]}, consts=(1, 2))
add("Conv", [X4, f32(4, 1, 3, 3)], {"group": 4, "pads": [1, 1, 1, 1]}, consts=W)  # depthwise
add("Conv", [X4, f32(8, 1, 3, 3)], {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    consts=W)
add("Conv", [X4, f32(3, 4, 2, 2)], {"auto_pad": "SAME_LOWER"}, consts=W)
add("Conv", [X4, f32(3, 4, 2, 4)], {"auto_pad": "VALID", "strides": [2, 1]}, consts=W)
add("Conv", [f32(2, 3, 9), f32(4, 3, 3), f32(4)], {"pads": [2, 1], "dilations": [2]},
    consts=(1, 2))
add("Conv", [f32(1, 2, 4, 5, 5), f32(3, 2, 2, 3, 3)], {"pads": [0, 1, 1, 1, 1, 1]}, consts=W)
add("Conv", [X4, W_CONV], {})  # weight as a runtime input

# --- ConvTranspose ------------------------------------------------------------
XT = f32(1, 4, 4, 5)
WT = f32(4, 3, 3, 3)
add("ConvTranspose", [XT, WT], {}, consts=W)
add("ConvTranspose", [XT, WT, f32(3)], {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                        "output_padding": [1, 1]}, consts=(1, 2))
add("ConvTranspose", [XT, f32(4, 2, 3, 3)], {"group": 2, "strides": [2, 1]}, consts=W)
add("ConvTranspose", [XT, WT], {"dilations": [2, 2], "pads": [0, 2, 1, 0]}, consts=W)
add("ConvTranspose", [XT, WT], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, consts=W)
add("ConvTranspose", [XT, WT], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, consts=W)
add("ConvTranspose", [XT, WT], {"strides": [3, 2], "output_shape": [13, 12]}, consts=W)
add("ConvTranspose", [f32(1, 2, 5), f32(2, 3, 4)], {"strides": [3]}, consts=W)
add("ConvTranspose", [XT, f32(4, 1, 2, 2)], {"group": 4, "strides": [2, 2]}, consts=W)

# --- Gemm / MatMul ------------------------------------------------------------
A, B = f32(3, 5), f32(5, 4)
add("Gemm", [A, B], {})
add("Gemm", [A.T.copy(), B.T.copy(), f32(3, 4)], {"transA": 1, "transB": 1, "alpha": 0.5,
                                                   "beta": 2.0}, consts=(1, 2))
add("Gemm", [A, B, f32(4)], {"beta": 0.5}, consts=(1, 2))
add("Gemm", [A, B, f32(1)], {"alpha": 2.0}, consts=(2,))
add("Gemm", [A, B, f32(3, 1)], {})
for a, b in [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 1, 3, 5), (4, 5, 2)), ((5,), (5, 4)),
             ((3, 5), (5,)), ((5,), (5,)), ((2, 3, 5), (5,)), ((5,), (2, 5, 3))]:
    add("MatMul", [f32(*a), f32(*b)], {})
add("MatMul", [R.integers(-4, 5, (2, 3)).astype(np.int32),
               R.integers(-4, 5, (3, 2)).astype(np.int32)], {})

# --- BatchNormalization -----------------------------------------------------------
BN = [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.5]
add("BatchNormalization", BN, {"epsilon": 1e-3}, consts=(1, 2, 3, 4))  # folded
add("BatchNormalization", BN, {}, opset=9)  # runtime statistics
add("BatchNormalization", [f32(2, 3), *BN[1:]], {}, consts=(1, 2, 3, 4))

# --- pooling ---------------------------------------------------------------------
XP = f32(1, 2, 7, 8)
POOL = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 0, 1, 0], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 3]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 1]},
]
for attrs in POOL:
    add("MaxPool", [XP], attrs, opset=12)
    add("AveragePool", [XP], attrs, opset=19)
    if "auto_pad" not in attrs:
        add("AveragePool", [XP], {**attrs, "count_include_pad": 1}, opset=19)
    add("LpPool", [XP], attrs, opset=18)
add("LpPool", [XP], {"kernel_shape": [2, 2], "p": 3}, opset=18)
add("LpPool", [XP], {"kernel_shape": [3, 3], "p": 1, "strides": [2, 2]}, opset=18)
add("MaxPool", [f32(2, 3, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
add("MaxPool", [f32(1, 2, 4, 5, 5)], {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2]})
add("AveragePool", [f32(2, 3, 9)], {"kernel_shape": [4], "strides": [2], "pads": [2, 1]})
add("MaxPool", [R.integers(-100, 100, (1, 2, 6, 6)).astype(np.int8)],
    {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]})
for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
    add(op, [XP], {})
    add(op, [f32(2, 3, 5)], {})
add("GlobalLpPool", [XP], {"p": 1})

# --- LRN -----------------------------------------------------------------------
add("LRN", [X4], {"size": 3})
add("LRN", [X4], {"size": 4, "alpha": 0.01, "beta": 0.5, "bias": 2.0})

# --- softmax family --------------------------------------------------------------
XS = f32(2, 3, 4)
XTIE = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
for op in ("Softmax", "LogSoftmax", "Hardmax"):
    add(op, [XS], {}, opset=13)
    add(op, [XS], {"axis": 1}, opset=13)
    add(op, [XS], {"axis": 1}, opset=11)  # flattened to (2, 12)
    add(op, [XS], {}, opset=11)
add("Hardmax", [XTIE], {}, opset=13)
add("Hardmax", [XTIE], {"axis": 0}, opset=11)
add("Softmax", [XS * 100], {}, opset=13)

# --- reductions ----------------------------------------------------------------------
REDUCE = ("ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
          "ReduceLogSumExp ReduceSumSquare").split()
XR = f32(2, 3, 4)
POSR = np.abs(XR) + 0.5
AX = np.array([1], np.int64)
for op in REDUCE:
    data = POSR if op == "ReduceLogSum" else XR
    add(op, [data], {"axes": [1], "keepdims": 0}, opset=11)
    add(op, [data, np.array([0, -1], np.int64)], {}, opset=18, consts=(1,))
    add(op, [data], {"keepdims": 0}, opset=18)
    add(op, [data], {"noop_with_empty_axes": 1}, opset=18)
add("ReduceSum", [XR, AX], {"keepdims": 0}, opset=13, consts=(1,))
add("ReduceSum", [R.integers(-5, 5, (3, 4)).astype(np.int64)], {"axes": [0]}, opset=11)
add("ReduceMean", [R.integers(-5, 5, (3, 4)).astype(np.int32)], {"axes": [1]}, opset=11)
add("ReduceMax", [R.integers(-5, 5, (3, 4)).astype(np.int32)], {}, opset=13)
for op in ("ArgMax", "ArgMin"):
    add(op, [XR], {})
    add(op, [XR], {"axis": -1, "keepdims": 0})
    add(op, [XTIE], {"axis": 1}, opset=12)
    add(op, [XTIE], {"axis": 1, "select_last_index": 1}, opset=12)
    add(op, [XTIE.astype(np.int32)], {"axis": 0, "select_last_index": 1, "keepdims": 0},
        opset=13)

# --- normalizations ---------------------------------------------------------------
add("InstanceNormalization", [X4, f32(4), f32(4)], {"epsilon": 1e-3}, consts=(1, 2))
add("InstanceNormalization", [f32(2, 3, 5), f32(3), f32(3)], {}, consts=(1, 2))
add("LayerNormalization", [XS, f32(4), f32(4)], {}, consts=(1, 2))
add("LayerNormalization", [XS, f32(3, 4)], {"axis": 1, "epsilon": 1e-3}, consts=(1,))
add("LayerNormalization", [XS, f32(4), f32(4)], {}, consts=(1, 2), n_out=3)
add("MeanVarianceNormalization", [X4], {}, opset=13)
add("MeanVarianceNormalization", [XS], {"axes": [1, 2]}, opset=13)
for p in (1, 2):
    add("LpNormalization", [XS], {"p": p})
    add("LpNormalization", [XS], {"p": p, "axis": 1})

# --- layout -----------------------------------------------------------------------
XD = f32(2, 8, 3, 2)
add("DepthToSpace", [XD], {"blocksize": 2})
add("DepthToSpace", [XD], {"blocksize": 2, "mode": "CRD"})
add("SpaceToDepth", [f32(2, 3, 4, 6)], {"blocksize": 2})

# --- Pad ----------------------------------------------------------------------------
XPAD = f32(2, 3, 4)
PADS = np.array([0, 2, 1, 1, 3, 2], np.int64)
for mode in ("constant", "edge", "reflect", "wrap"):
    add("Pad", [XPAD, PADS], {"mode": mode}, opset=19, consts=(1,))
add("Pad", [XPAD, PADS, np.array(1.5, np.float32)], {}, opset=13, consts=(1, 2))
add("Pad", [XPAD, np.array([1, -1, 0, 0, 2, -2], np.int64)], {}, opset=13, consts=(1,))
add("Pad", [XPAD, np.array([2, 3], np.int64), None, np.array([-1], np.int64)],
    {"mode": "reflect"}, opset=18, consts=(1, 3))
add("Pad", [XPAD], {"pads": [0, 1, 1, 0, 1, 1], "value": -2.0}, opset=2)
add("Pad", [XPAD], {"pads": [0, 3, 3, 0, 3, 5], "mode": "reflect"}, opset=2)
add("Pad", [R.integers(0, 9, (3, 3)).astype(np.int32), np.array([1, 1, 1, 1], np.int64),
            np.array(7, np.int32)], {}, opset=13, consts=(1, 2))

# --- Resize ------------------------------------------------------------------------
XZ = f32(1, 2, 4, 5)
NONE_ROI = np.array([], np.float32)
UP = np.array([1, 1, 2.0, 1.5], np.float32)
DOWN = np.array([1, 1, 0.6, 0.8], np.float32)
SIZES_UP = np.array([1, 2, 7, 9], np.int64)
SIZES_DOWN = np.array([1, 2, 3, 2], np.int64)
CTMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric")


def resize(attrs, scales=None, sizes=None, roi=None, opset=19, data=XZ):
    ins = [data, NONE_ROI if roi is None else roi, scales, sizes]
    while ins[-1] is None:
        ins.pop()
    add("Resize", ins, attrs, opset=opset, consts=(1, 2, 3))


for ctm in CTMS:
    for mode in ("nearest", "linear", "cubic"):
        resize({"mode": mode, "coordinate_transformation_mode": ctm}, scales=UP)
        resize({"mode": mode, "coordinate_transformation_mode": ctm}, sizes=SIZES_DOWN)
for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    resize({"mode": "nearest", "nearest_mode": nm}, scales=DOWN)
    resize({"mode": "nearest", "nearest_mode": nm, "coordinate_transformation_mode":
            "asymmetric"}, sizes=SIZES_UP)
resize({"mode": "linear"}, scales=DOWN)
resize({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, sizes=SIZES_UP)
resize({"mode": "cubic", "exclude_outside": 1}, scales=DOWN)
resize({"mode": "linear", "axes": [2, 3]}, sizes=np.array([6, 3], np.int64))
resize({"mode": "nearest", "axes": [3], "keep_aspect_ratio_policy": "not_larger"},
       sizes=np.array([7], np.int64))
resize({"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
       sizes=np.array([6, 6], np.int64))
ROI = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
for mode in ("nearest", "linear", "cubic"):
    resize({"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
            "extrapolation_value": 10.0}, sizes=SIZES_UP, roi=ROI)
resize({"mode": "linear"}, scales=np.array([2, 2, 2], np.float32), data=f32(2, 3, 2))  # 3-D
resize({"mode": "nearest"}, scales=UP, data=R.integers(0, 50, (1, 2, 4, 5)).astype(np.int32))
resize({"mode": "linear"}, scales=UP, opset=11)
resize({"mode": "linear"}, scales=UP, opset=13)
add("Upsample", [XZ, np.array([1, 1, 2, 3], np.float32)], {"mode": "nearest"}, opset=9,
    consts=(1,))


@pytest.mark.parametrize("op, inputs, attrs, opset, consts, n_out, tol", CASES)
def test_against_reference(op, inputs, attrs, opset, consts, n_out, tol):
    check_onnx(op, inputs, attrs, consts=consts, opset=opset, n_out=n_out, tol=tol)


def _run_ort(op, inputs, attrs, opset, consts):
    ort = pytest.importorskip("onnxruntime")
    model = one_node_model(op, inputs, attrs, consts, opset)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {f"x{k}": a for k, a in enumerate(inputs) if a is not None and k not in consts}
    want = sess.run(None, feeds)
    got = run_graph(import_onnx("test.onnx", model=model), feeds)
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# Cases where onnx's reference evaluator lacks the feature or drifts from the
# semantics ONNX Runtime (and PyTorch) implement.
ORT_CASES = [
    # ceil_mode with stride 3: the reference shifts windows by half the extra padding
    ("MaxPool", [f32(1, 1, 8, 8)], {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1},
     12, ()),
    ("AveragePool", [f32(1, 1, 8, 8)], {"kernel_shape": [2, 2], "strides": [3, 3],
                                        "ceil_mode": 1}, 12, ()),
    ("Resize", [XZ, NONE_ROI, UP], {"mode": "nearest", "coordinate_transformation_mode":
                                    "tf_half_pixel_for_nearest"}, 11, (1, 2)),
    ("Resize", [XZ, np.array([1, 1, 0.5, 0.5], np.float32)], {"mode": "nearest"}, 10, (1,)),
    ("Resize", [XZ, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"}, 10, (1,)),
    ("LpNormalization", [f32(3, 4)], {"p": 1}, 17, ()),  # the reference forgets |x| for p=1
]


@pytest.mark.parametrize("op, inputs, attrs, opset, consts", ORT_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(ORT_CASES)])
def test_against_onnxruntime(op, inputs, attrs, opset, consts):
    _run_ort(op, inputs, attrs, opset, consts)


UNSUPPORTED = [
    ("BatchNormalization", BN, {"training_mode": 1}, 15, (1, 2, 3, 4), 3, "training_mode"),
    ("MaxPool", [XP], {"kernel_shape": [2, 2]}, 12, (), 2, "Indices"),
    ("Resize", [XZ, NONE_ROI, DOWN], {"mode": "linear", "antialias": 1}, 18, (1, 2), 1,
     "antialias"),
    ("Pad", [XPAD, np.array([0, -1, 0, 0, 1, 0], np.int64)], {"mode": "edge"}, 13, (1,), 1,
     "negative pads"),
    ("LpNormalization", [XS], {"p": 3}, 17, (), 1, "'p'=3"),
    ("Conv", [X4, W_CONV], {"auto_pad": "FOO"}, 17, W, 1, "auto_pad"),
    ("Pad", [XPAD, PADS], {}, 13, (), 1, "must be a constant"),
]


@pytest.mark.parametrize("op, inputs, attrs, opset, consts, n_out, message", UNSUPPORTED,
                         ids=[c[0] for c in UNSUPPORTED])
def test_unsupported_is_a_clear_error(op, inputs, attrs, opset, consts, n_out, message):
    model = one_node_model(op, inputs, attrs, consts, opset, n_out)
    with pytest.raises(PackagerError, match=message) as err:
        import_onnx("test.onnx", model=model)
    assert f"{op.lower()}_node" in str(err.value)
