"""Max pool: a NaN-skipping maximum (numpy's fmax / nanmax; a window of NaN only gives
-inf) whose taps outside the input are clamped onto its nearest edge when that cannot
change the answer (dilation 1 and every window overlapping the input: no ``pool_pad``
stage), and a -inf padded copy otherwise (dilation > 1, a window lying in the padding).
Checked through the cpu templates and C against a numpy reference, and through the whole
ONNX path against ONNX Runtime."""

from __future__ import annotations

import itertools
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager import te
from packager.ops.registry import get_op
from packager.package import compile_model

from ..helpers import ort_outputs, run_model
from .harness import run_op_numpy
from .test_cpu_templates import _run


def _out_len(n, k, s, d, before, after, ceil):
    span = (k - 1) * d + 1
    room = n + before + after - span
    out = (-(-room // s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= n + before:  # a last window starting in the end pads
        out -= 1
    return out


def _max_pool_ref(x, kernel, strides, pads, dilations=None, ceil=0):
    """np.nanmax over the in-bounds taps of each window over dims 2 .. 2+nd of ``x``
    (dims after them carried through); -inf where a window has no tap that is in the
    input and not NaN."""
    nd = len(kernel)
    dilations = dilations or [1] * nd
    before, after = pads[:nd], pads[nd:]
    sizes = x.shape[2 : 2 + nd]
    outs = [
        _out_len(sizes[i], kernel[i], strides[i], dilations[i], before[i], after[i], ceil)
        for i in range(nd)
    ]
    y = np.empty((*x.shape[:2], *outs, *x.shape[2 + nd :]), x.dtype)
    for o in itertools.product(*map(range, outs)):
        win = x
        for i in range(nd):
            taps = [o[i] * strides[i] - before[i] + k * dilations[i] for k in range(kernel[i])]
            win = np.take(win, [t for t in taps if 0 <= t < sizes[i]], axis=2 + i)
        flat = np.moveaxis(win, list(range(2, 2 + nd)), list(range(-nd, 0)))
        flat = flat.reshape(*flat.shape[: flat.ndim - nd], -1)
        # one extra -inf tap: a window with nothing valid in it gives -inf
        flat = np.concatenate([flat, np.full((*flat.shape[:-1], 1), -np.inf, x.dtype)], -1)
        y[(slice(None), slice(None), *o)] = np.nanmax(flat, axis=-1)
    return y


def _data(shape, nd, kernel, dilations, seed):
    """Random values with NaN and -inf where clamped taps land: channel 0 has a NaN
    block covering the first window in every spatial dim (all-NaN windows: -inf), channel
    1 NaN at the far corner and -inf at the first, +inf inside; scattered NaN."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[rng.random(shape) < 0.05] = np.nan
    dilations = dilations or [1] * nd
    first = tuple(slice(0, (k - 1) * d + 1) for k, d in zip(kernel, dilations, strict=True))
    x[(0, 0, *first)] = np.nan
    x[(0, 1, *[0] * nd)] = -np.inf
    x[(0, 1, *[-1] * nd)] = np.nan
    x[(0, 1, *[n // 2 for n in shape[2 : 2 + nd]])] = np.inf
    return x


def _stages(op, attrs, shape):
    """The names of the op's compute stages, before any schedule inlines one."""
    outs = get_op(op).compute([te.placeholder(shape, "float32", "in0")], attrs)
    return [st.op.name for st in te.create_schedule(outs).stages]


# (op, input shape, attrs, clamped: no pool_pad stage)
CASES = [
    ("max_pool", (1, 2, 9, 10), {"kernel": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, True),
    ("max_pool", (1, 2, 9, 10), {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ("max_pool", (2, 3, 8, 7), {"kernel": [3, 2], "strides": [1, 2], "pads": [1, 0, 2, 1]}, True),
    (
        "max_pool",
        (1, 2, 9, 10),
        {"kernel": [2, 3], "strides": [2, 2], "pads": [0, 1, 0, 1], "ceil_mode": 1},
        True,
    ),
    (
        "max_pool",
        (1, 2, 10, 9),
        {"kernel": [3, 3], "strides": [2, 3], "pads": [1, 0, 1, 2], "ceil_mode": 1},
        True,
    ),
    ("max_pool", (1, 2, 8, 9), {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    # the output's last dim is 8: the default schedule tries the output row in vectors
    ("max_pool", (1, 2, 8, 8), {"kernel": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, True),
    ("max_pool", (1, 2, 9, 10), {"kernel": [3, 3], "strides": [1, 1]}, True),
    (
        "max_pool",
        (1, 2, 9, 10),
        {"kernel": [3, 3], "strides": [1, 1], "dilations": [2, 2], "pads": [2, 2, 2, 2]},
        False,
    ),
    (
        "max_pool",
        (1, 2, 9, 10),
        {"kernel": [3, 2], "strides": [2, 1], "dilations": [1, 2], "pads": [1, 1, 1, 1]},
        False,
    ),
    # windows lying wholly in the padding (pads >= kernel): -inf, kept padded
    ("max_pool", (1, 2, 6, 7), {"kernel": [2, 2], "strides": [1, 1], "pads": [2, 0, 0, 2]}, False),
    ("max_pool", (2, 3, 11), {"kernel": [3], "strides": [2], "pads": [1, 1]}, True),
    ("max_pool", (1, 2, 11), {"kernel": [4], "strides": [3], "pads": [2, 1], "ceil_mode": 1}, True),
    (
        "max_pool",
        (1, 2, 11),
        {"kernel": [3], "strides": [1], "dilations": [2], "pads": [2, 2]},
        False,
    ),
    (
        "max_pool",
        (1, 2, 5, 6, 7),
        {"kernel": [3, 3, 2], "strides": [1, 2, 1], "pads": [1, 1, 0, 1, 1, 1]},
        True,
    ),
    (
        "max_pool",
        (1, 2, 5, 6, 7),
        {"kernel": [2, 2, 2], "strides": [2, 2, 2], "pads": [1, 1, 1, 0, 0, 0], "ceil_mode": 1},
        True,
    ),
    (
        "max_pool",
        (1, 2, 6, 5, 6),
        {"kernel": [2, 2, 2], "strides": [1, 1, 1], "dilations": [2, 1, 1], "pads": [1] * 6},
        False,
    ),
    # blocked layout through the pool template: the pad (when kept) is a root stage
    (
        "max_pool_nchwc",
        (1, 2, 9, 10, 8),
        {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        True,
    ),
    (
        "max_pool_nchwc",
        (1, 2, 9, 10, 8),
        {"kernel": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
        True,
    ),
    (
        "max_pool_nchwc",
        (1, 2, 9, 11, 8),
        {"kernel": [3, 2], "strides": [2, 2], "pads": [0, 1, 2, 1], "ceil_mode": 1},
        True,
    ),
    (
        "max_pool_nchwc",
        (1, 2, 8, 8, 8),
        {"kernel": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        True,
    ),
    (
        "max_pool_nchwc",
        (1, 2, 9, 10, 8),
        {"kernel": [3, 3], "strides": [1, 1], "dilations": [2, 2], "pads": [2, 1, 2, 1]},
        False,
    ),
    (
        "max_pool_nchwc",
        (1, 2, 6, 7, 8),
        {"kernel": [2, 2], "strides": [1, 2], "pads": [0, 2, 2, 0]},
        False,
    ),
]


def _case_id(case):
    op, shape, attrs, clamped = case
    a = "-".join(
        f"{k[0]}{''.join(map(str, v if isinstance(v, list) else [v]))}" for k, v in attrs.items()
    )
    return f"{op}-{len(shape) - 2}d-{a}-{'clamp' if clamped else 'pad'}"


@pytest.mark.parametrize("op,shape,attrs,clamped", CASES, ids=[_case_id(c) for c in CASES])
def test_max_pool_matches_nanmax(op, shape, attrs, clamped):
    nd = len(attrs["kernel"])
    x = _data(shape, nd, attrs["kernel"], attrs.get("dilations"), seed=sum(shape))
    out, src = _run(op, attrs, [x])
    pads = attrs.get("pads") or [0] * (2 * nd)
    want = _max_pool_ref(
        x,
        attrs["kernel"],
        attrs["strides"],
        pads,
        attrs.get("dilations"),
        attrs.get("ceil_mode", 0),
    )
    assert out.shape == want.shape
    np.testing.assert_array_equal(out, want)
    assert not np.isnan(out).any()  # every NaN tap is skipped
    assert np.isneginf(out[0, 0][(*[0] * nd,)]).all()  # the all-NaN first window
    assert np.isposinf(out[0, 1]).any() and np.isneginf(want).any()
    stages = _stages(op, attrs, shape)
    assert stages[-2:] == ["max_pool_acc", "max_pool"]
    assert ("pool_pad" in stages) != clamped
    if clamped:
        assert "pool_pad" not in src
    elif op.endswith("nchwc"):
        assert "pool_pad" in src  # the template's padded copy at root
    if op.endswith("nchwc"):  # the taps update the channel block as compare + blend
        assert "8 lanes" in src and "pk_max_f32" not in src
        assert re.search(r"const pk_i32x8 pk_t\d+ = \(pk_t\d+ > pk_t\d+\);", src)
    # the te interpreter (nanmax through numpy's fmax) agrees
    (ev,) = run_op_numpy(op, [x], attrs)
    np.testing.assert_array_equal(ev, want)


@pytest.mark.parametrize(
    "knobs", [{"tile_ow": 1}, {"pad": "inline"}, {"tile_ow": 1, "pad": "inline"}]
)
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
        {"kernel": [3, 3], "strides": [1, 1], "dilations": [2, 2], "pads": [1, 2, 1, 2]},
    ],
    ids=["clamped", "dilated"],
)
def test_blocked_max_pool_knobs(attrs, knobs):
    """The template's knobs (output columns per tile, the padded copy inlined as guarded
    loads) keep the NaN-skipping answer, clamped or padded."""
    shape = (1, 2, 10, 11, 8)
    x = _data(shape, 2, attrs["kernel"], attrs.get("dilations"), seed=7)
    out, src = _run("max_pool_nchwc", attrs, [x], knobs=knobs)
    want = _max_pool_ref(
        x,
        attrs["kernel"],
        attrs["strides"],
        attrs["pads"],
        attrs.get("dilations"),
        attrs.get("ceil_mode", 0),
    )
    np.testing.assert_array_equal(out, want)
    assert np.isneginf(want[0, 0, 0, 0]).all() and not np.isnan(out).any()
    root_pad = "dilations" in attrs and knobs.get("pad") != "inline"
    assert ("pool_pad" in src) == root_pad


def _maxpool_model(shape, attrs, conv_channels=0, seed=0):
    """input -> [Conv 3x3 pad 1 ->] MaxPool, opset 13; output shape from shape inference."""
    nodes, inits = [], []
    src = "input"
    if conv_channels:
        w = np.random.default_rng(seed).standard_normal((conv_channels, shape[1], 3, 3))
        inits.append(numpy_helper.from_array(w.astype(np.float32), "w"))
        nodes.append(helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]))
        src = "c"
    nodes.append(helper.make_node("MaxPool", [src], ["y"], **attrs))
    graph = helper.make_graph(
        nodes,
        "maxpool",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))],
        [helper.make_empty_tensor_value_info("y")],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model).graph.output[0]
    model.graph.output[0].CopyFrom(inferred)
    return model


ONNX_POOLS = [
    pytest.param(
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, True, id="k3s2p1"
    ),
    pytest.param(
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, True, id="k3s1p1"
    ),
    pytest.param(
        {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 2], "ceil_mode": 1},
        True,
        id="asym_ceil",
    ),
    pytest.param(
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [2, 2, 2, 2], "dilations": [2, 2]},
        False,
        id="dilated",
    ),
]


@pytest.mark.parametrize("conv_channels", [0, 16], ids=["nchw", "after_conv_nchwc"])
@pytest.mark.parametrize("attrs,clamped", ONNX_POOLS)
def test_onnx_max_pool_matches_onnxruntime(attrs, clamped, conv_channels):
    """A MaxPool model (alone: max_pool; after a conv: the blocked max_pool_nchwc) through
    compile, the generated kernels and the C runtime, against ONNX Runtime."""
    shape = (1, 3, 13, 12)
    model = _maxpool_model(shape, attrs, conv_channels)
    graph = compile_model(model).graph
    (node,) = [n for n in graph.nodes if "pool" in n.op]
    assert node.op == ("max_pool_nchwc" if conv_channels else "max_pool")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x})
    assert got.shape == want.shape
    if conv_channels:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:  # a maximum of the input's own values: exact
        np.testing.assert_array_equal(got, want)
    # the window pads are clamped away, or kept as a -inf padded copy
    stages = _stages(node.op, node.attrs, graph.values[node.inputs[0]].shape)
    assert ("pool_pad" in stages) != clamped
