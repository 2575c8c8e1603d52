"""The blocked-layout ops (layout_transform, conv2d_nchwc, the *_nchwc pools) through
generated C kernels, against numpy and onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from packager.graph.passes.layout_pack import (
    from_blocked,
    pack_channels,
    pack_conv_weight,
    to_blocked,
)

from .harness import run_op
from .onnx_check import one_node_model

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(2, 16, 5, 3), (1, 8, 4, 4)])
@pytest.mark.parametrize("block", [4, 8])
def test_layout_transform_round_trip(shape, block):
    x = rand(*shape)
    (b,) = run_op("layout_transform", [x], {"src": "NCHW", "dst": f"NCHW{block}c"})
    np.testing.assert_array_equal(b, to_blocked(x, block))
    (back,) = run_op("layout_transform", [b], {"src": f"NCHW{block}c", "dst": "NCHW"})
    np.testing.assert_array_equal(back, x)


def test_layout_transform_pads_and_slices_channels():
    x = rand(1, 5, 2, 3)
    (b,) = run_op("layout_transform", [x], {"src": "NCHW", "dst": "NCHW4c"})
    assert b.shape == (1, 2, 2, 3, 4)
    padded = np.concatenate([x, np.zeros((1, 3, 2, 3), np.float32)], axis=1)
    np.testing.assert_array_equal(b, to_blocked(padded, 4))
    attrs = {"src": "NCHW4c", "dst": "NCHW", "channels": 5}
    (back,) = run_op("layout_transform", [b], attrs)
    np.testing.assert_array_equal(back, x)


def conv_ref(x, w, bias, strides, pads, dilations, groups):
    """Direct grouped 2-D convolution in numpy (NCHW, OIHW)."""
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    oh = (xp.shape[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, oc, oh, ow), np.float64)
    mg = oc // groups
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilations[0], j * dilations[1]
            tap = xp[
                :, :, r0 : r0 + strides[0] * oh : strides[0], c0 : c0 + strides[1] * ow : strides[1]
            ]
            for g in range(groups):
                part = tap[:, g * cg : (g + 1) * cg]
                wg = w[g * mg : (g + 1) * mg, :, i, j]
                out[:, g * mg : (g + 1) * mg] += np.einsum("nchw,mc->nmhw", part, wg)
    if bias is not None:
        out += bias[None, :, None, None]
    return out.astype(np.float32)


CONVS = [
    # (N, C, H, W), OC, kernel, strides, pads, dilations, groups, in block, out block
    ((1, 16, 7, 6), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 8, 8),
    ((2, 8, 9, 9), 16, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 1, 4, 8),
    ((1, 3, 10, 10), 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, 1, 8),  # NCHW input
    ((1, 16, 8, 8), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16, 8, 8),  # depthwise
    ((1, 16, 8, 7), 16, (3, 3), (2, 2), (0, 1, 1, 0), (2, 1), 16, 4, 4),  # depthwise
    ((1, 16, 6, 6), 32, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 2, 8, 8),  # grouped
    ((1, 32, 6, 6), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4, 4, 4),  # grouped
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}-oc{c[1]}-g{c[6]}-{c[7]}i{c[8]}o")
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv2d_nchwc(case, with_bias):
    shape, oc, kernel, strides, pads, dilations, groups, xb, yb = case
    x = rand(*shape)
    w = rand(oc, shape[1] // groups, *kernel)
    bias = rand(oc) if with_bias else None
    depthwise = groups == shape[1] == oc
    data = x if xb == 1 else to_blocked(x, xb)
    inputs = [data, pack_conv_weight(w, 1 if depthwise else xb, yb)]
    if with_bias:
        inputs.append(pack_channels(bias, yb))
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "groups": groups}
    (got,) = run_op("conv2d_nchwc", inputs, attrs)
    want = conv_ref(x, w, bias, strides, pads, dilations, groups)
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-4, atol=1e-5)


def test_conv2d_nchwc_rejects_a_group_split_across_blocks():
    x = to_blocked(rand(1, 8, 4, 4), 4)
    w = pack_conv_weight(rand(8, 4, 1, 1), 4, 4)
    with pytest.raises(ValueError, match="does not fit"):
        run_op("conv2d_nchwc", [x, w], {"groups": 4})


POOLS = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1, "dilations": [1, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
]
_OP = {"MaxPool": "max_pool_nchwc", "AveragePool": "avg_pool_nchwc"}


@pytest.mark.parametrize("op_type, onnx_attrs", POOLS)
def test_pool_nchwc(op_type, onnx_attrs):
    x = rand(1, 16, 9, 8)
    model = one_node_model(op_type, [x], onnx_attrs)
    (want,) = ReferenceEvaluator(model).run(None, {"x0": x})
    attrs = {
        "kernel": onnx_attrs["kernel_shape"],
        "strides": onnx_attrs["strides"],
        "pads": onnx_attrs.get("pads", [0, 0, 0, 0]),
        "dilations": onnx_attrs.get("dilations", [1, 1]),
        "ceil_mode": onnx_attrs.get("ceil_mode", 0),
        "count_include_pad": onnx_attrs.get("count_include_pad", 0),
    }
    (got,) = run_op(_OP[op_type], [to_blocked(x, 8)], attrs)
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["reduce_mean", "reduce_max"])
def test_global_pool_on_blocked_input(op):
    """Global pools are spatial reductions: the same op reduces a blocked tensor."""
    x = rand(2, 16, 5, 4)
    (got,) = run_op(op, [to_blocked(x, 8)], {"axes": [2, 3], "keepdims": 1})
    want = getattr(np, op[len("reduce_") :])(x, axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-5, atol=1e-6)


def test_scale_shift_with_blocked_parameters():
    x, scale, shift = rand(1, 16, 3, 3), rand(16), rand(16)
    inputs = [to_blocked(x, 8), pack_channels(scale, 8), pack_channels(shift, 8)]
    (got,) = run_op("scale_shift", inputs, {})
    want = x * scale[None, :, None, None] + shift[None, :, None, None]
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-6, atol=1e-6)
