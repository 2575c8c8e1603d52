"""A channel shuffle or concat between QuantizeLinear/DequantizeLinear of one scale runs
on the integers, blocked between the integer convs (graph/passes/int_moves.py); of two
scales it stays float (blocked floats). Both equal ONNX Runtime running the QDQ graph in float."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.backend import PackagerBackend
from packager.package import prepare_graph
from packager.quantize import quantize_model
from packager.quantize.samples import random_samples
from tests.helpers import unoptimized_ort_session

G, HW = 4, 6


def _shuffle_net(second_scale: float, c: int) -> onnx.ModelProto:
    """``c`` channels: Q/DQ -> Conv 1x1 -> Q/DQ (scale 0.05) -> channel shuffle (4 groups) -> Q/DQ
    (``second_scale``) -> Conv 1x1 -> Q/DQ, uint8 activations, per-channel int8 weights."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(np.float32(0.02), "s0"),
        numpy_helper.from_array(np.uint8(128), "z0"),
        numpy_helper.from_array(np.float32(0.05), "s1"),
        numpy_helper.from_array(np.uint8(10), "z1"),
        numpy_helper.from_array(np.float32(second_scale), "s2"),
        numpy_helper.from_array(np.full(c, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(c, np.int8), "wz"),
        numpy_helper.from_array(np.array([1, G, c // G, HW, HW], np.int64), "split"),
        numpy_helper.from_array(np.array([1, c, HW, HW], np.int64), "merge"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"]),
    ]
    for i in (1, 2):
        w = rng.integers(-127, 128, (c, c, 1, 1)).astype(np.int8)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(
            helper.make_node("DequantizeLinear", [f"w{i}", "ws", "wz"], [f"wd{i}"], axis=0)
        )
    nodes += [
        helper.make_node("Conv", ["xd", "wd1"], ["c1"]),
        helper.make_node("QuantizeLinear", ["c1", "s1", "z1"], ["c1q"]),
        helper.make_node("DequantizeLinear", ["c1q", "s1", "z1"], ["c1d"]),
        helper.make_node("Reshape", ["c1d", "split"], ["r1"]),
        helper.make_node("Transpose", ["r1"], ["t1"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t1", "merge"], ["sh"]),
        helper.make_node("QuantizeLinear", ["sh", "s2", "z1"], ["shq"]),
        helper.make_node("DequantizeLinear", ["shq", "s2", "z1"], ["shd"]),
        helper.make_node("Conv", ["shd", "wd2"], ["c2"]),
        helper.make_node("QuantizeLinear", ["c2", "s1", "z1"], ["c2q"]),
        helper.make_node("DequantizeLinear", ["c2q", "s1", "z1"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "shuffle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, HW, HW])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "second_scale,c,integer,blocked",
    [(0.05, 32, True, True), (0.05, 20, True, False), (0.07, 32, False, True)],
)
def test_shuffle_between_one_scale_runs_on_the_integers(second_scale, c, integer, blocked):
    """20 channels fill no whole blocks of 16 nor of 8 (an AVX-512 or an AVX2 host): the
    shuffle then runs on the NCHW integers (a blocked shuffle would index the padded
    channels). Of two scales it shuffles the dequantized floats, blocked like the conv's
    integers."""
    model = _shuffle_net(second_scale, c)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    (shuffle,) = [n for n in graph.nodes if n.op == "channel_shuffle"]
    x = graph.values[shuffle.inputs[0]]
    ops = collections.Counter(n.op for n in graph.nodes)
    assert ops["qconv2d"] == 2
    assert x.dtype == ("uint8" if integer else "float32") and (len(x.shape) == 5) == blocked
    if integer:  # the one DQ left: the output's
        assert ops["dequantize_linear"] == 1
    feed = np.random.default_rng(1).uniform(-2, 2, (1, c, HW, HW)).astype(np.float32)
    sess = unoptimized_ort_session(model)
    want = sess.run(None, {"x": feed})[0]
    got = PackagerBackend.prepare(model).run([feed])[0]
    assert (np.abs(got - want) <= 0.05 * 1.001).mean() >= 0.999
    assert len(np.unique(want)) > 20  # real values, not a saturated output


def _fire(parts: tuple[int, int], axis: int = 1) -> onnx.ModelProto:
    """SqueezeNet's fire module: a 1x1 squeeze conv, then 1x1 and 3x3 expand convs to
    ``parts`` channels, each with a Relu, concatenated, then a 1x1 conv and a pool
    (float)."""
    rng = np.random.default_rng(2)
    inits, nodes = [], []

    def conv(x: str, cin: int, cout: int, k: int, name: str) -> str:
        w = (rng.standard_normal((cout, cin, k, k)) * (2 / (cin * k * k)) ** 0.5).astype(np.float32)
        b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        inits.extend(
            [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
        )
        nodes.append(
            helper.make_node(
                "Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"], pads=[k // 2] * 4
            )
        )
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"]))
        return f"{name}_r"

    s = conv("x", 16, 16, 1, "squeeze")
    a, b = conv(s, 16, parts[0], 1, "e1"), conv(s, 16, parts[1], 3, "e3")
    nodes.append(helper.make_node("Concat", [a, b], ["cat"], axis=axis))
    nodes.append(helper.make_node("Conv", ["cat", "out_w"], ["out"]))
    nodes.append(helper.make_node("AveragePool", ["out"], ["y"], kernel_shape=[2, 2]))
    w = (rng.standard_normal((8, sum(parts), 1, 1)) * 0.2).astype(np.float32)
    inits.append(numpy_helper.from_array(w, "out_w"))
    g = helper.make_graph(
        nodes,
        "fire",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, HW - 1, HW - 1])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "parts,axis,blocked", [((16, 32), 1, True), ((16, 32), -3, True), ((16, 20), 1, False)]
)
def test_quantized_concat_of_one_range_runs_on_the_integers(parts, axis, blocked):
    """`packager quantize` gives a concat's parts and output one range, so the concat
    runs on the integers: blocked where every part is whole blocks, else NCHW (axis -3:
    the channels too)."""
    model = _fire(parts, axis)
    q, _ = quantize_model(model, random_samples(4, model))
    scales = {}
    for n in q.graph.node:  # the scale each tensor is quantized with
        if n.op_type == "QuantizeLinear":
            init = next(t for t in q.graph.initializer if t.name == n.input[1])
            scales[n.input[0]] = float(numpy_helper.to_array(init))
    assert scales["e1_r"] == scales["e3_r"] == scales["cat"]
    graph, _ = prepare_graph(q, disabled_passes={"fuse"})
    (cat,) = [n for n in graph.nodes if n.op == "concat"]
    xs = [graph.values[i] for i in cat.inputs]
    assert all(x.dtype == "uint8" and (len(x.shape) == 5) == blocked for x in xs)
    feed = np.random.default_rng(3).standard_normal((1, 16, HW, HW)).astype(np.float32)
    sess = unoptimized_ort_session(q)
    want = sess.run(None, {"x": feed})[0]
    got = PackagerBackend.prepare(q).run([feed])[0]
    step = scales["out"]  # the pool averages values on the conv's steps
    assert (np.abs(got - want) <= step * 1.001).mean() >= 0.999
    assert len(np.unique(want)) > 20
