"""The host reference (self-test outputs) without ONNX Runtime: onnx's evaluator with
packager.reference_ops' corrections. Each case is one the plain evaluator gets wrong
(a wrong answer or no answer); ours must match a numpy formula of the ONNX spec and,
where it runs the case, ONNX Runtime."""

from __future__ import annotations

import math
import signal

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from packager.reference import _ort_outputs, evaluator, run_reference

from .helpers import ort_outputs

RNG = np.random.default_rng(7)
X4 = RNG.uniform(-2, 2, (2, 3, 4, 5)).astype(np.float32)
XP = RNG.uniform(-2, 2, (1, 2, 7, 8)).astype(np.float32)
STATS = [RNG.uniform(lo, 2, 3).astype(np.float32) for lo in (-2, -2, -2, 0.1)]


class Const:
    """A constant input (an initializer)."""

    def __init__(self, a):
        self.a = np.asarray(a)


def one_node(op, opset, inputs, n_out=1, **attrs):
    """A model of one ``op`` node at ``opset``; its feeds."""
    names, inits, vis, feeds = [], [], [], {}
    for i, x in enumerate(inputs):
        name = f"in{i}"
        names.append(name)
        if isinstance(x, Const):
            inits.append(numpy_helper.from_array(x.a, name))
        else:
            elem = helper.np_dtype_to_tensor_dtype(x.dtype)
            vis.append(helper.make_tensor_value_info(name, elem, x.shape))
            feeds[name] = x
    outs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs])
    graph.initializer.extend(inits)
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=7), feeds


# numpy formulas of the spec, written independently of packager.reference_ops


def np_softmax_2d(x, axis):
    """Softmax before opset 13: over all dims from ``axis`` on, as one row."""
    rows = x.reshape(math.prod(x.shape[:axis]), -1).astype(np.float64)
    e = np.exp(rows - rows.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).reshape(x.shape)


def np_log_softmax(x, axis):
    x = x.astype(np.float64)
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def np_hardmax_2d(x, axis):
    rows = x.reshape(math.prod(x.shape[:axis]), -1)
    return np.eye(rows.shape[1], dtype=x.dtype)[rows.argmax(1)].reshape(x.shape)


def np_batchnorm(x, s, b, m, v, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    s, b, m, v = (t.reshape(shape) for t in (s, b, m, v))
    return s * (x - m) / np.sqrt(v + eps) + b


def np_lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    out = np.empty_like(x, dtype=np.float64)
    c = x.shape[1]
    for i in range(c):
        lo, hi = max(0, i - (size - 1) // 2), min(c - 1, i + math.ceil((size - 1) / 2))
        sq = (x[:, lo : hi + 1].astype(np.float64) ** 2).sum(1)
        out[:, i] = x[:, i] / (bias + alpha / size * sq) ** beta
    return out


def np_pool2d(x, reduce, kernel, strides, pads, dilations=(1, 1), out_hw=None):
    """Pooling by loops over output pixels; only in-input elements count."""
    n, c, h, w = x.shape
    oh, ow = out_hw
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            vals = [
                x[:, :, r, q]
                for a in range(kernel[0])
                for b in range(kernel[1])
                for r in [i * strides[0] - pads[0] + a * dilations[0]]
                for q in [j * strides[1] - pads[1] + b * dilations[1]]
                if 0 <= r < h and 0 <= q < w
            ]
            y[:, :, i, j] = reduce(np.stack(vals, -1), -1)
    return y


def np_conv_transpose(x, w, group, strides):
    """ConvTranspose without padding: each input pixel adds its weighted kernel."""
    n, c, h, wd = x.shape
    cg, mg, kh, kw = w.shape[0] // group, w.shape[1], w.shape[2], w.shape[3]
    y = np.zeros((n, mg * group, (h - 1) * strides[0] + kh, (wd - 1) * strides[1] + kw))
    for g in range(group):
        for ci in range(cg):
            for m in range(mg):
                for i in range(h):
                    for j in range(wd):
                        r, q = i * strides[0], j * strides[1]
                        xin = x[:, g * cg + ci, i, j][:, None, None]
                        y[:, g * mg + m, r : r + kh, q : q + kw] += xin * w[g * cg + ci, m]
    return y


def nearest_up(x, scales):
    """Asymmetric nearest, enlarging: output index o reads floor(o / scale)."""
    for axis, s in enumerate(scales):
        idx = np.floor(np.arange(int(x.shape[axis] * s)) / s).astype(int)
        x = np.take(x, idx, axis=axis)
    return x


def linear_up_last(x, s):
    """Asymmetric linear along the last axis, clamped at the edge."""
    n = x.shape[-1]
    pos = np.minimum(np.arange(int(n * s)) / s, n - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    return x[..., lo] * (1 - (pos - lo)) + x[..., hi] * (pos - lo)


def legacy_broadcast_add(a, b, axis):
    return a + b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))


W_GROUP = RNG.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
X_GROUP = RNG.uniform(-1, 1, (1, 4, 3, 4)).astype(np.float32)
X_UP = RNG.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
BIG = np.array([[0.0, 200.0, -200.0]], np.float32)
ONEHOT_IDX = np.array([0.0, 2.7, -1.0, 7.0], np.float32)

# id: (op, opset, inputs, attrs, n_outputs, want(), runs in ORT)
CASES = {
    "Softmax-11 axis=1 on 4-D": (
        "Softmax", 11, [X4], {"axis": 1}, 1, lambda: np_softmax_2d(X4, 1), True),
    "Softmax-1 default axis": ("Softmax", 1, [X4], {}, 1, lambda: np_softmax_2d(X4, 1), True),
    "Softmax-11 axis=0": ("Softmax", 11, [X4], {"axis": 0}, 1, lambda: np_softmax_2d(X4, 0), True),
    "LogSoftmax-11 axis=2": (
        "LogSoftmax", 11, [X4], {"axis": 2}, 1, lambda: np.log(np_softmax_2d(X4, 2)), True),
    "LogSoftmax-13 large logits": (
        "LogSoftmax", 13, [BIG], {"axis": 1}, 1, lambda: np_log_softmax(BIG, 1), True),
    "Hardmax-11 axis=1 on 4-D": (
        "Hardmax", 11, [X4], {"axis": 1}, 1, lambda: np_hardmax_2d(X4, 1), True),
    "BatchNormalization-7": (
        "BatchNormalization", 7, [X4, *STATS], {"epsilon": 1e-3}, 1,
        lambda: np_batchnorm(X4, *STATS, eps=1e-3), True),
    "BatchNormalization-9": (
        "BatchNormalization", 9, [X4, *STATS], {}, 1, lambda: np_batchnorm(X4, *STATS), True),
    "BatchNormalization-9 momentum": (
        "BatchNormalization", 9, [X4, *STATS], {"momentum": 0.5}, 1,
        lambda: np_batchnorm(X4, *STATS), True),
    "BatchNormalization-7 spatial=0": (
        "BatchNormalization", 7, [X4[:, :, 0, 0], *STATS], {"spatial": 0}, 1,
        lambda: np_batchnorm(X4[:, :, 0, 0], *STATS), False),  # ORT: no per-activation stats
    "LRN-13 size=3": (
        "LRN", 13, [X4], {"size": 3, "alpha": 0.01}, 1, lambda: np_lrn(X4, 3, alpha=0.01), True),
    "LpPool-18 ceil_mode and dilations": (
        "LpPool", 18, [XP],
        {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [1, 2], "ceil_mode": 1}, 1,
        lambda: np.sqrt(np_pool2d(XP**2, np.sum, (3, 3), (2, 2), (0, 0), (1, 2), (3, 3))), True),
    "MaxPool-12 SAME_LOWER stride 2": (
        "MaxPool", 12, [XP], {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_LOWER"},
        1, lambda: np_pool2d(XP, np.max, (3, 3), (2, 2), (1, 1), out_hw=(4, 4)), True),
    "GlobalLpPool-2 p=3": (
        "GlobalLpPool", 2, [XP], {"p": 3}, 1,
        lambda: (np.abs(XP.astype(np.float64)) ** 3).sum((2, 3), keepdims=True) ** (1 / 3), False),
    "LpNormalization-1 p=1": (
        "LpNormalization", 1, [X4], {"axis": 1, "p": 1}, 1,
        lambda: X4 / np.abs(X4).sum(1, keepdims=True), True),
    "Pad-11 negative pads": (
        "Pad", 11, [X4, Const(np.array([0, 0, -1, 1, 0, 0, 1, -2]))], {}, 1,
        lambda: np.pad(X4[:, :, 1:, :3], [(0, 0), (0, 0), (0, 1), (1, 0)]), True),
    "Reshape-1 shape attribute": (
        "Reshape", 1, [X4], {"shape": [6, -1]}, 1, lambda: X4.reshape(6, 20), False),
    "Upsample-7 scales attribute": (
        "Upsample", 7, [X_UP], {"scales": [1.0, 1.0, 2.0, 3.0]}, 1,
        lambda: nearest_up(X_UP, [1, 1, 2, 3]), True),
    "Upsample-9 linear": (
        "Upsample", 9, [X_UP, Const(np.array([1, 1, 1, 2.5], np.float32))], {"mode": "linear"}, 1,
        lambda: linear_up_last(X_UP, 2.5), True),
    "Resize-10 nearest": (
        "Resize", 10, [X_UP, Const(np.array([1, 1, 2, 2], np.float32))], {}, 1,
        lambda: nearest_up(X_UP, [1, 1, 2, 2]), True),
    "ConvTranspose-11 group=2": (
        "ConvTranspose", 11, [X_GROUP, W_GROUP], {"group": 2, "strides": [2, 1]}, 1,
        lambda: np_conv_transpose(X_GROUP, W_GROUP, 2, (2, 1)), True),
    "OneHot-11 float indices": (
        "OneHot", 11,
        [ONEHOT_IDX, Const(np.array([5], np.float32)), Const(np.array([-1, 2], np.float32))], {}, 1,
        lambda: np.array([[2, -1, -1, -1, -1], [-1, -1, 2, -1, -1],
                          [-1, -1, -1, -1, 2], [-1] * 5], np.float32), True),
    "Split-1 split attribute": (
        "Split", 1, [X4], {"axis": 1, "split": [1, 2]}, 2,
        lambda: (X4[:, :1], X4[:, 1:]), False),  # ORT has no Split-1
    "Add-6 broadcast axis=1": (
        "Add", 6, [X4, RNG.uniform(-1, 1, (3, 4)).astype(np.float32)],
        {"broadcast": 1, "axis": 1}, 1, None, False),  # ORT has no Add-6
    "Dropout-7 mask": (
        # the packaged model's mask is all ones, of x's type before opset 10 (ORT's is zeros)
        "Dropout", 7, [X4], {"ratio": 0.3}, 2, lambda: (X4, np.ones(X4.shape, np.float32)), False),
}  # fmt: skip


def _want(model, feeds, want):
    if want is None:  # Add-6: from the inputs themselves
        a, b = feeds.values()
        return legacy_broadcast_add(a, b, 1)
    return want()


def assert_same(got, want, what):
    got = got if isinstance(got, list | tuple) else [got]
    want = want if isinstance(want, list | tuple) else [want]
    assert len(got) == len(want), what
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype or np.asarray(w).dtype == np.float64, what
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5, atol=1e-5, err_msg=what)


def _differs(model, feeds, want) -> bool:
    try:
        plain = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - no answer at all is wrong too
        return True
    try:
        assert_same(plain, want, "plain")
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("case", list(CASES))
def test_fixed_op_matches_spec_and_onnxruntime(case):
    op, opset, inputs, attrs, n_out, want_fn, in_ort = CASES[case]
    model, feeds = one_node(op, opset, inputs, n_out, **attrs)
    want = _want(model, feeds, want_fn)
    ours = evaluator(model).run(None, feeds)
    assert_same(ours, want, f"{case}: ours vs the spec's formula")
    if in_ort:
        assert_same(ours, ort_outputs(model, feeds), f"{case}: ours vs ONNX Runtime")
    # The case matters: onnx's own evaluator gets it wrong.
    assert _differs(model, feeds, want), f"{case}: the plain evaluator is right here"


def test_opset13_softmax_is_per_axis():
    """From opset 13 Softmax normalizes over ``axis`` alone (no flattening)."""
    model, feeds = one_node("Softmax", 13, [X4], axis=1)
    (ours,) = evaluator(model).run(None, feeds)
    e = np.exp(X4 - X4.max(1, keepdims=True))
    np.testing.assert_allclose(ours, e / e.sum(1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(ours, ort_outputs(model, feeds)[0], rtol=1e-5)


@pytest.mark.parametrize(
    "op, opset, inputs, attrs, want",
    [
        # ORT has no BatchNormalization-6: is_test defaults to 0, yet packaged models infer
        ("BatchNormalization", 6, [X4, *STATS], {}, lambda: np_batchnorm(X4, *STATS)),
        ("Add", 6, [X4, STATS[0]], {"broadcast": 1, "axis": 1},
         lambda: legacy_broadcast_add(X4, STATS[0], 1)),
    ],
)  # fmt: skip
def test_run_reference_falls_back_to_fixed_evaluator(op, opset, inputs, attrs, want):
    """ONNX Runtime is installed but cannot run the model: run_reference's evaluator
    path is the corrected one."""
    model, feeds = one_node(op, opset, inputs, **attrs)
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        ort_outputs(model, feeds)
    (got,) = run_reference(model, feeds)
    np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-6)


def _softmax_model():
    return one_node("Softmax", 13, [np.arange(12, dtype=np.float32).reshape(3, 4) / 7])


def test_onnx_runtime_runs_in_a_process_of_its_own():
    """Its answer comes back through files, names and dtypes intact."""
    model, feeds = _softmax_model()
    (got,) = _ort_outputs(model, feeds, say=pytest.fail)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ort_outputs(model, feeds)[0])


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT])
def test_a_crash_of_onnx_runtime_leaves_the_evaluator_to_answer(sig):
    """A model can crash ONNX Runtime (Silero VAD with its sample rate frozen does, in
    1.32): the child dies of the signal, the packager says so in one line and lives on."""
    model, feeds = _softmax_model()
    lines = []
    crash = f"import os, signal; os.kill(os.getpid(), signal.{sig.name})"
    assert _ort_outputs(model, feeds, lines.append, child=crash) is None
    assert lines == [
        f"ONNX Runtime crashed ({sig.name}) running the model for the reference; "
        "using onnx's reference evaluator instead"
    ]


def test_a_model_onnx_runtime_refuses_is_no_crash():
    model, feeds = one_node("BatchNormalization", 6, [X4, *STATS])
    assert _ort_outputs(model, feeds, say=pytest.fail) is None
