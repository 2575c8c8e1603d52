"""The integer add (qadd) of ORT's standalone residual adds, DQ(a) + DQ(b) -> Add
[-> Relu] -> Q, alone and folded into the epilogue of the integer conv making a."""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.backend import PackagerBackend
from packager.graph.ir import Node
from packager.graph.passes.quantize import add_attrs
from packager.package import prepare_graph

_T = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
SHAPE = (1, 4, 8, 9)


def _add_model(dt, sa, za, sb, zb, sy, zy, relu: bool):
    p = {"sa": sa, "za": za, "sb": sb, "zb": zb, "sy": sy, "zy": zy}
    inits = [
        numpy_helper.from_array(np.array(v, np.float32 if k[0] == "s" else dt), k)
        for k, v in p.items()
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
        helper.make_node("Add", ["fa", "fb"], ["s"]),
        *([helper.make_node("Relu", ["s"], ["r"])] if relu else []),
        helper.make_node("QuantizeLinear", ["r" if relu else "s", "sy", "zy"], ["y"]),
    ]
    vi = [helper.make_tensor_value_info(n, _T[dt], SHAPE) for n in ("a", "b")]
    g = helper.make_graph(
        nodes, "qadd", vi, [helper.make_tensor_value_info("y", _T[dt], SHAPE)], inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _numpy_qadd(a, b, attrs):
    """The documented rounding: one shift, round half up, clamp, saturate."""
    p = (a.astype(np.int64) - attrs["a_zp"]) * attrs["a_mult"]
    p += (b.astype(np.int64) - attrs["b_zp"]) * attrs["b_mult"]
    p = np.clip(p, attrs["lo"], attrs["hi"])
    y = ((p + (1 << (attrs["shift"] - 1))) >> attrs["shift"]) + attrs["y_zp"]
    info = np.iinfo(attrs["out_dtype"])
    return np.clip(y, info.min, info.max).astype(attrs["out_dtype"])


CASES = [  # dtype, sa, za, sb, zb, sy, zy, relu: saturating both ways, negative sums
    (np.uint8, 0.05, 128, 0.02, 3, 0.04, 100, False),
    (np.uint8, 0.031, 0, 0.07, 10, 0.05, 0, True),
    (np.int8, 0.01, -5, 0.013, 7, 0.009, -3, False),
    (np.int8, 0.2, 0, 0.2, 0, 0.1, -128, True),
]


@pytest.mark.parametrize("case", CASES)
def test_qadd_is_bit_exact_to_the_integer_rounding_and_within_a_step_of_ort(case):
    dt, sa, za, sb, zb, sy, zy, relu = case
    model = _add_model(*case)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    ops = collections.Counter(n.op for n in graph.nodes)
    assert ops["qadd"] == 1 and "add" not in ops and "quantize_linear" not in ops
    info = np.iinfo(dt)
    mid = (int(info.min) + int(info.max)) // 2
    grid = np.array([info.min, info.min + 1, mid, mid + 1, mid + 2, info.max - 1, info.max], dt)
    rng = np.random.default_rng(3)
    a = rng.integers(info.min, info.max + 1, SHAPE).astype(dt)
    b = rng.integers(info.min, info.max + 1, SHAPE).astype(dt)
    a.reshape(-1)[: 7 * 7] = np.repeat(grid, 7)  # every pair of edge values
    b.reshape(-1)[: 7 * 7] = np.tile(grid, 7)
    got = PackagerBackend.prepare(model).run([a, b])[0]
    act = Node("relu", "r", [], []) if relu else None
    sa, sb, sy = (float(np.float32(v)) for v in (sa, sb, sy))  # the model's float32 scales
    attrs = add_attrs(("a", sa, za), ("b", sb, zb), (sy, zy), act, np.dtype(dt).name)
    np.testing.assert_array_equal(got, _numpy_qadd(a, b, attrs))
    assert got.min() == (zy if relu else info.min) and got.max() == info.max
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"a": a, "b": b})[0]
    diff = np.abs(got.astype(np.int32) - want)
    # these scales put many sums on exact half steps (ORT rounds them to even)
    assert diff.max() <= 1 and (diff == 0).mean() >= 0.85


def _conv_add_model(extra_output: bool):
    """DQ(x) -> Conv -> Q -> DQ, + DQ(r) -> Add -> Q (ORT's residual block end)."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (SHAPE[1], SHAPE[1], 3, 3)).astype(np.int8)
    f32 = np.float32
    consts = {
        "w": w,
        "ws": rng.uniform(0.002, 0.01, SHAPE[1]).astype(f32),
        "wz": np.zeros(SHAPE[1], np.int8),
        "xs": np.array(0.02, f32),
        "xz": np.array(120, np.uint8),
        "cs": np.array(0.3, f32),
        "cz": np.array(110, np.uint8),
        "ys": np.array(0.05, f32),
        "yz": np.array(90, np.uint8),
    }
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["fx"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["fw"], axis=0),
        helper.make_node("Conv", ["fx", "fw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["qc"]),
        helper.make_node("DequantizeLinear", ["qc", "cs", "cz"], ["fc"]),
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["fr"]),
        helper.make_node("Add", ["fc", "fr"], ["s"]),
        helper.make_node("QuantizeLinear", ["s", "ys", "yz"], ["y"]),
    ]
    u8 = TensorProto.UINT8
    outs = [helper.make_tensor_value_info("y", u8, SHAPE)]
    if extra_output:
        outs.append(helper.make_tensor_value_info("qc", u8, SHAPE))
    g = helper.make_graph(
        nodes,
        "conv_add",
        [helper.make_tensor_value_info("x", u8, SHAPE)],
        outs,
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_an_add_folds_into_the_conv_epilogue_bit_identical_to_the_separate_qadd():
    folded, separate = _conv_add_model(False), _conv_add_model(True)
    graph, _ = prepare_graph(folded, disabled_passes={"fuse"})
    assert [n.op for n in graph.nodes] == ["qconv2d"]
    assert graph.nodes[0].attrs["add_shift"] > 0
    graph, _ = prepare_graph(separate, disabled_passes={"fuse"})
    assert [n.op for n in graph.nodes] == ["qconv2d", "qadd"]  # its output is read outside
    x = np.random.default_rng(4).integers(0, 256, SHAPE).astype(np.uint8)
    got = PackagerBackend.prepare(folded).run([x])[0]
    want = PackagerBackend.prepare(separate).run([x])[0]
    np.testing.assert_array_equal(got, want)
    assert got.min() == 0 and got.max() == 255  # saturates both ways


@pytest.mark.parametrize(
    "sa,sb,sy,i32",
    [
        (0.05, 0.02, 0.04, True),  # usual residual scales: int32 lanes
        (0.2, 0.2, 0.1, True),
        (0.05, 0.02, 0.05 / 2**12, False),  # 2^12 x the output's scale: int64
    ],
)
def test_add_runs_in_int32_where_every_sum_fits(sa, sb, sy, i32):
    """The shift leaves every (a - a_zp) * a_mult + (b - b_zp) * b_mult and its rounding
    inside int32 (|a - a_zp| <= 255), with 21+ significant bits in the larger multiplier;
    where no shift does, the int64 form with 31."""
    attrs = add_attrs(("a", sa, 128), ("b", sb, 3), (sy, 100), None, "uint8")
    assert attrs["i32"] is i32
    big = max(attrs["a_mult"], attrs["b_mult"])
    if i32:
        worst = 255 * (attrs["a_mult"] + attrs["b_mult"]) + 2 ** (attrs["shift"] - 1)
        assert worst < 2**31 and big >= 2**20
        assert -(2**31) <= attrs["lo"] and attrs["hi"] < 2**31
    else:
        assert 2**30 <= big < 2**31
