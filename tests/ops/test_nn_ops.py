"""NN ops (conv, matmul, pools, reductions, softmax, normalizations, resize, pad, ...):
one-node ONNX models through the frontend and the generated kernels, against onnx's
reference evaluator (or ONNX Runtime where the two disagree and Runtime is the
de-facto semantics)."""

from __future__ import annotations

import numpy as np
import pytest

from packager.codegen.build import have_compiler
from packager.errors import PackagerError
from packager.frontend.importer import import_onnx

from .onnx_check import CKernels, build_kernels, one_node_model, prepare_all, run_graph

R = np.random.default_rng(1)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


X4 = f32(1, 4, 7, 7)
W_CONV = f32(6, 4, 3, 3)
B6 = f32(6)


# id -> (op, inputs, attrs, opset, constant inputs, number of outputs)
CASES: dict = {}
# Checked against ONNX Runtime: onnx's reference evaluator lacks these or gets them
# wrong (grouped ConvTranspose, LRN, GlobalLpPool, opset < 13 softmax flattening,
# LpPool with ceil_mode, negative pads, ...).
ORT_CASES: dict = {}


def add(op, inputs, attrs=None, opset=17, consts=(), n_out=1, oracle="reference"):
    table = CASES if oracle == "reference" else ORT_CASES
    table[f"{op}-{len(CASES) + len(ORT_CASES)}"] = (op, inputs, attrs or {}, opset, consts, n_out)


def add_ort(*args, **kwargs):
    add(*args, **kwargs, oracle="ort")


# --- Conv -------------------------------------------------------------------
W = (1,)  # weight input index: a constant, as in real models
add("Conv", [X4, W_CONV], {}, consts=W)
add("Conv", [X4, W_CONV, B6], {"pads": [1, 1, 1, 1], "strides": [2, 2]}, consts=(1, 2))
add("Conv", [X4, W_CONV], {"dilations": [2, 2], "pads": [0, 1, 2, 1]}, consts=W)
add("Conv", [X4, f32(6, 2, 3, 3), B6], {"group": 2, "strides": [1, 2]}, consts=(1, 2))
add("Conv", [X4, f32(4, 1, 3, 3)], {"group": 4, "pads": [1, 1, 1, 1]}, consts=W)  # depthwise
add(
    "Conv",
    [X4, f32(8, 1, 3, 3)],
    {"group": 4, "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    consts=W,
)
add("Conv", [X4, f32(3, 4, 2, 2)], {"auto_pad": "SAME_LOWER"}, consts=W)
add("Conv", [X4, f32(3, 4, 2, 4)], {"auto_pad": "VALID", "strides": [2, 1]}, consts=W)
add("Conv", [f32(2, 3, 9), f32(4, 3, 3), f32(4)], {"pads": [2, 1], "dilations": [2]}, consts=(1, 2))
add("Conv", [f32(1, 2, 4, 5, 5), f32(3, 2, 2, 3, 3)], {"pads": [0, 1, 1, 1, 1, 1]}, consts=W)
add("Conv", [X4, W_CONV], {})  # weight as a runtime input

# --- ConvTranspose ------------------------------------------------------------
XT = f32(1, 4, 4, 5)
WT = f32(4, 3, 3, 3)
add("ConvTranspose", [XT, WT], {}, consts=W)
add(
    "ConvTranspose",
    [XT, WT, f32(3)],
    {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    consts=(1, 2),
)
add_ort("ConvTranspose", [XT, f32(4, 2, 3, 3)], {"group": 2, "strides": [2, 1]}, consts=W)
add("ConvTranspose", [XT, WT], {"dilations": [2, 2], "pads": [0, 2, 1, 0]}, consts=W)
add("ConvTranspose", [XT, WT], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, consts=W)
add("ConvTranspose", [XT, WT], {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, consts=W)
add("ConvTranspose", [XT, WT], {"strides": [3, 2], "output_shape": [13, 12]}, consts=W)
add("ConvTranspose", [f32(1, 2, 5), f32(2, 3, 4)], {"strides": [3]}, consts=W)
add("ConvTranspose", [XT, f32(4, 1, 2, 2)], {"group": 4, "strides": [2, 2]}, consts=W)

# --- Gemm / MatMul ------------------------------------------------------------
A, B = f32(3, 5), f32(5, 4)
add("Gemm", [A, B], {})
add(
    "Gemm",
    [A.T.copy(), B.T.copy(), f32(3, 4)],
    {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
    consts=(1, 2),
)
add("Gemm", [A, B, f32(4)], {"beta": 0.5}, consts=(1, 2))
add("Gemm", [A, B, f32(1)], {"alpha": 2.0}, consts=(2,))
add("Gemm", [A, B, f32(3, 1)], {})
for a, b in [
    ((3, 5), (5, 4)),
    ((2, 3, 5), (5, 4)),
    ((2, 1, 3, 5), (4, 5, 2)),
    ((5,), (5, 4)),
    ((3, 5), (5,)),
    ((5,), (5,)),
    ((2, 3, 5), (5,)),
    ((5,), (2, 5, 3)),
]:
    add("MatMul", [f32(*a), f32(*b)], {})
add(
    "MatMul",
    [R.integers(-4, 5, (2, 3)).astype(np.int32), R.integers(-4, 5, (3, 2)).astype(np.int32)],
    {},
)

# --- BatchNormalization -----------------------------------------------------------
BN = [f32(2, 3, 4, 4), f32(3), f32(3), f32(3), np.abs(f32(3)) + 0.5]
add("BatchNormalization", BN, {"epsilon": 1e-3}, consts=(1, 2, 3, 4))  # folded
add("BatchNormalization", BN, {}, opset=15)  # runtime statistics
add_ort("BatchNormalization", BN, {}, opset=9, consts=(1, 2, 3, 4))  # inference, not training
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
    (add_ort if attrs.get("ceil_mode") else add)("LpPool", [XP], attrs, opset=18)
add("LpPool", [XP], {"kernel_shape": [2, 2], "p": 3}, opset=18)
add("LpPool", [XP], {"kernel_shape": [3, 3], "p": 1, "strides": [2, 2]}, opset=18)
add("MaxPool", [f32(2, 3, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
add("MaxPool", [f32(1, 2, 4, 5, 5)], {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2]})
add("AveragePool", [f32(2, 3, 9)], {"kernel_shape": [4], "strides": [2], "pads": [2, 1]})
add(
    "MaxPool",
    [R.integers(-100, 100, (1, 2, 6, 6)).astype(np.int8)],
    {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]},
)
add("GlobalAveragePool", [XP], {})
add("GlobalAveragePool", [f32(2, 3, 5)], {})
add("GlobalMaxPool", [XP], {})
add_ort("GlobalMaxPool", [f32(2, 3, 5)], {})
add_ort("GlobalLpPool", [XP], {})
add_ort("GlobalLpPool", [f32(2, 3, 5)], {"p": 1})

# --- LRN -----------------------------------------------------------------------
add_ort("LRN", [X4], {"size": 3})
add_ort("LRN", [f32(2, 5, 3, 3)], {"size": 5, "alpha": 0.01, "beta": 0.5, "bias": 2.0})
add_ort("LRN", [f32(1, 7, 4, 5)], {"size": 5, "alpha": 0.5, "beta": 1.0, "bias": 1.5})
add_ort("LRN", [f32(1, 7, 4, 5)], {"size": 3, "alpha": 0.3, "beta": 0.6})  # pow

# --- softmax family --------------------------------------------------------------
XS = f32(2, 3, 4)
XTIE = np.array([[1, 3, 3, 0], [2, 2, 1, 2]], np.float32)
for op in ("Softmax", "LogSoftmax", "Hardmax"):
    add(op, [XS], {}, opset=13)
    add(op, [XS], {"axis": 1}, opset=13)
    add_ort(op, [XS], {"axis": 1}, opset=11)  # flattened to (2, 12)
    add_ort(op, [XS], {}, opset=11)
add("Hardmax", [XTIE], {}, opset=13)
add_ort("Hardmax", [XTIE], {"axis": 0}, opset=11)
add("Softmax", [XS * 100], {}, opset=13)

# --- reductions ----------------------------------------------------------------------
REDUCE = (
    "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
    "ReduceLogSumExp ReduceSumSquare"
).split()
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
    add(op, [XTIE.astype(np.int32)], {"axis": 0, "select_last_index": 1, "keepdims": 0}, opset=13)

# --- normalizations ---------------------------------------------------------------
add("InstanceNormalization", [X4, f32(4), f32(4)], {"epsilon": 1e-3}, consts=(1, 2))
add("InstanceNormalization", [f32(2, 3, 5), f32(3), f32(3)], {}, consts=(1, 2))
add("LayerNormalization", [XS, f32(4), f32(4)], {}, consts=(1, 2))
add("LayerNormalization", [XS, f32(3, 4)], {"axis": 1, "epsilon": 1e-3}, consts=(1,))
add("LayerNormalization", [XS, f32(4), f32(4)], {}, consts=(1, 2), n_out=3)
add("MeanVarianceNormalization", [X4], {}, opset=13)
add("MeanVarianceNormalization", [XS], {"axes": [1, 2]}, opset=13)
add("LpNormalization", [XS], {"p": 2})
add("LpNormalization", [XS], {"p": 2, "axis": 1})
add_ort("LpNormalization", [XS], {"p": 1})  # the reference forgets |x| for p=1
add_ort("LpNormalization", [XS], {"p": 1, "axis": 0})

# --- layout -----------------------------------------------------------------------
XD = f32(2, 8, 3, 2)
add("DepthToSpace", [XD], {"blocksize": 2})
add("DepthToSpace", [XD], {"blocksize": 2, "mode": "CRD"})
add("SpaceToDepth", [f32(2, 3, 4, 6)], {"blocksize": 2})
add("SpaceToDepth", [f32(2, 3, 4, 6)], {"blocksize": 2, "mode": "CRD"}, opset=28)

# --- Pad ----------------------------------------------------------------------------
XPAD = f32(2, 3, 4)
PADS = np.array([0, 2, 1, 1, 3, 2], np.int64)
for mode in ("constant", "edge", "reflect", "wrap"):
    add("Pad", [XPAD, PADS], {"mode": mode}, opset=19, consts=(1,))
add("Pad", [XPAD, PADS, np.array(1.5, np.float32)], {}, opset=13, consts=(1, 2))
add_ort("Pad", [XPAD, np.array([1, -1, 0, 0, 2, -2], np.int64)], {}, opset=13, consts=(1,))
add(
    "Pad",
    [XPAD, np.array([2, 3], np.int64), None, np.array([-1], np.int64)],
    {"mode": "reflect"},
    opset=18,
    consts=(1, 3),
)
add("Pad", [XPAD], {"pads": [0, 1, 1, 0, 1, 1], "value": -2.0}, opset=2)
add("Pad", [XPAD], {"pads": [0, 3, 3, 0, 3, 5], "mode": "reflect"}, opset=2)
add(
    "Pad",
    [
        R.integers(0, 9, (3, 3)).astype(np.int32),
        np.array([1, 1, 1, 1], np.int64),
        np.array(7, np.int32),
    ],
    {},
    opset=13,
    consts=(1, 2),
)

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
    resize(
        {"mode": "nearest", "nearest_mode": nm, "coordinate_transformation_mode": "asymmetric"},
        sizes=SIZES_UP,
    )
resize({"mode": "linear"}, scales=DOWN)
resize({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, sizes=SIZES_UP)
resize({"mode": "cubic", "exclude_outside": 1}, scales=DOWN)
resize({"mode": "linear", "axes": [2, 3]}, sizes=np.array([6, 3], np.int64))
resize(
    {"mode": "nearest", "axes": [3], "keep_aspect_ratio_policy": "not_larger"},
    sizes=np.array([7], np.int64),
)
resize(
    {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
    sizes=np.array([6, 6], np.int64),
)
ROI = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
for mode in ("nearest", "linear", "cubic"):
    resize(
        {
            "mode": mode,
            "coordinate_transformation_mode": "tf_crop_and_resize",
            "extrapolation_value": 10.0,
        },
        sizes=SIZES_UP,
        roi=ROI,
    )
resize({"mode": "linear"}, scales=np.array([2, 2, 2], np.float32), data=f32(2, 3, 2))  # 3-D
resize({"mode": "nearest"}, scales=UP, data=R.integers(0, 50, (1, 2, 4, 5)).astype(np.int32))
resize({"mode": "linear"}, scales=UP, opset=11)
resize({"mode": "linear"}, scales=UP, opset=13)
add("Upsample", [XZ, np.array([1, 1, 2, 3], np.float32)], {"mode": "nearest"}, opset=9, consts=(1,))


def run_model(model, feeds) -> list[np.ndarray]:
    """A model through the generated C kernels (the te interpreter without a compiler)."""
    graph = import_onnx("test.onnx", model=model)
    if not have_compiler():
        return run_graph(graph, feeds)
    return CKernels({"m": graph}).run("m", graph, feeds)


def assert_close(got, want):
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-5)


@pytest.fixture(scope="module")
def prepared():
    return prepare_all(CASES)


@pytest.fixture(scope="module")
def kernels(prepared):
    return build_kernels(prepared)  # one compile_shared call for every case


@pytest.mark.parametrize("key", list(CASES))
def test_against_reference(key, prepared, kernels):
    if isinstance(prepared[key], Exception):
        raise prepared[key]
    graph, feeds, want = prepared[key]
    run = kernels.run if kernels is not None else (lambda _k, g, f: run_graph(g, f))
    assert_close(run(key, graph, feeds), want)


# ceil_mode with stride 3: the reference shifts windows by half the extra padding
add_ort(
    "MaxPool",
    [f32(1, 1, 8, 8)],
    {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1},
    opset=12,
)
add_ort(
    "AveragePool",
    [f32(1, 1, 8, 8)],
    {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1},
    opset=12,
)
add_ort(
    "Resize",
    [XZ, np.array([1, 1, 0.5, 0.5], np.float32)],
    {"mode": "nearest"},
    opset=10,
    consts=(1,),
)
add_ort(
    "Resize", [XZ, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"}, opset=10, consts=(1,)
)


@pytest.mark.parametrize("key", list(ORT_CASES))
def test_against_onnxruntime(key):
    ort = pytest.importorskip("onnxruntime")
    op, inputs, attrs, opset, consts, n_out = ORT_CASES[key]
    model = one_node_model(op, inputs, attrs, consts, opset, n_out)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {f"x{k}": a for k, a in enumerate(inputs) if a is not None and k not in consts}
    got = run_model(model, feeds)
    assert_close(got, sess.run(None, feeds))


@pytest.mark.parametrize("beta, calls", [(0.75, "sqrtf"), (0.5, "sqrtf"), (0.6, "powf")])
def test_lrn_powers_in_square_roots(beta, calls):
    """beta 0.75 (AlexNet's, GoogLeNet's) and 0.5 take square roots, not pow per element."""
    from packager.boards import load_board
    from packager.package import compile_model

    x = f32(1, 8, 4, 4)
    model = one_node_model("LRN", [x], {"size": 5, "beta": beta})
    (kernel,) = compile_model(model, load_board("host")).kernels
    assert calls in kernel.source and ("powf" in kernel.source) == (calls == "powf")


def test_lrn_even_size():
    # ONNX Runtime takes odd sizes only; the spec's window is [c - 1, c + 2] for size 4.
    x = f32(2, 6, 3, 3)
    model = one_node_model("LRN", [x], {"size": 4, "alpha": 0.01, "beta": 0.5, "bias": 2.0})
    (got,) = run_model(model, {"x0": x})
    sq = np.pad(x * x, [(0, 0), (1, 2), (0, 0), (0, 0)])
    total = sum(sq[:, k : k + 6] for k in range(4))
    assert_close([got], [x / (2.0 + 0.01 / 4 * total) ** 0.5])


def test_resize_tf_half_pixel_for_nearest():
    # Neither the reference nor ONNX Runtime implement it any more: the spec's formula.
    scales = np.array([1, 1, 2.0, 0.6], np.float32)
    model = one_node_model(
        "Resize",
        [XZ, NONE_ROI, scales],
        {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nearest"},
        consts=(1, 2),
        opset=11,
    )
    (got,) = run_model(model, {"x0": XZ})
    idx = []
    for n_in, s in zip(XZ.shape[2:], scales[2:], strict=True):
        x = (np.arange(int(n_in * s)) + 0.5) / float(s)
        idx.append(np.clip(np.ceil(x - 0.5), 0, n_in - 1).astype(int))  # round half down
    np.testing.assert_array_equal(got, XZ[:, :, idx[0]][:, :, :, idx[1]])


UNSUPPORTED = [
    ("BatchNormalization", BN, {"training_mode": 1}, 15, (1, 2, 3, 4), 3, "training_mode"),
    (
        "Pad",
        [XPAD, np.array([0, -1, 0, 0, 1, 0], np.int64)],
        {"mode": "edge"},
        13,
        (1,),
        1,
        "negative pads",
    ),
    ("LpNormalization", [XS], {"p": 3}, 17, (), 1, "'p'=3"),
    ("Conv", [X4, W_CONV], {"auto_pad": "FOO"}, 17, W, 1, "auto_pad"),
    ("Pad", [XPAD, PADS], {}, 13, (), 1, "must be a constant"),
]


@pytest.mark.parametrize(
    "op, inputs, attrs, opset, consts, n_out, message", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED]
)
def test_unsupported_is_a_clear_error(op, inputs, attrs, opset, consts, n_out, message):
    model = one_node_model(op, inputs, attrs, consts, opset, n_out)
    with pytest.raises(PackagerError, match=message) as err:
        import_onnx("test.onnx", model=model)
    assert f"{op.lower()}_node" in str(err.value)
