"""Float chains between an integer conv and a quantize, blocked with the conv
(packager/graph/passes/int8_islands.py): the conv, the chain and the quantize become one
kernel writing the next conv's byte blocks, with the same bytes as the NCHW path and
ONNX Runtime's QDQ semantics within one step."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.package import prepare_graph
from tests.test_int8_layout import _run

SIZE = 6


def _chain_model(channels: int, tap: bool = False) -> onnx.ModelProto:
    """x -> QDQ -> conv 1x1 (``channels`` out) -> QDQ -> Mul(scale[c]) -> QDQ ->
    Add(shift[c]) -> Clip(0, 6) -> QDQ -> conv 3x3 (8 out) -> QDQ -> y; with ``tap`` the
    Mul's output is a graph output too (the chain then stays NCHW)."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def qdq(x, scale, zp=128):
        s, z = const(f"{x}_s", np.float32(scale)), const(f"{x}_z", np.uint8(zp))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{x}_q"]))
        nodes.append(helper.make_node("DequantizeLinear", [f"{x}_q", s, z], [f"{x}_dq"]))
        return f"{x}_dq"

    def conv(x, name, cin, cout, k):
        w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
        ws = (rng.uniform(0.5, 1.5, cout) / 200).astype(np.float32)
        const(f"{name}_wq", w)
        const(f"{name}_ws", ws)
        const(f"{name}_wz", np.zeros(cout, np.int8))
        dq = helper.make_node(
            "DequantizeLinear", [f"{name}_wq", f"{name}_ws", f"{name}_wz"], [f"{name}_w"], axis=0
        )
        nodes.append(dq)
        pads = [k // 2] * 4
        nodes.append(helper.make_node("Conv", [x, f"{name}_w"], [name], pads=pads))
        return name

    x = qdq("x", 0.02)
    a = qdq(conv(x, "c1", 8, channels, 1), 0.01)
    scale = const("scale", rng.uniform(0.5, 2.0, (channels, 1, 1)).astype(np.float32))
    nodes.append(helper.make_node("Mul", [a, scale], ["m"]))
    m = qdq("m", 0.015)
    shift = const("shift", rng.uniform(-0.3, 0.3, (1, channels, 1, 1)).astype(np.float32))
    nodes.append(helper.make_node("Add", [m, shift], ["s"]))
    lo, hi = const("lo", np.float32(0)), const("hi", np.float32(6))
    nodes.append(helper.make_node("Clip", ["s", lo, hi], ["r"]))
    r = qdq("r", 0.01, 0)
    y = qdq(conv(r, "c2", channels, 8, 3), 0.02)
    outs = [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 8, SIZE, SIZE])]
    if tap:
        shape = [1, channels, SIZE, SIZE]
        outs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, shape))
    g = helper.make_graph(
        nodes,
        "island",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, SIZE, SIZE])],
        outs,
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts)
    return sess.run(None, {"x": x})


@pytest.mark.parametrize("tap", [False, True])
def test_a_float_chain_after_an_integer_conv_runs_in_its_block(tap):
    model = _chain_model(32, tap)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    first = next(n for n in graph.nodes if n.op == "qconv2d")
    block = graph.values[first.inputs[1]].shape[4]
    out = graph.values[first.outputs[0]]
    mul = next(n for n in graph.nodes if n.op == "mul")
    if tap:  # the chain's value is read outside it: NCHW, and quantized into blocks
        assert len(out.shape) == 4 and "quantize_blocked" in {n.op for n in graph.nodes}
    else:
        assert out.shape == (1, 32 // block, SIZE, SIZE, block)
        scale = graph.values[mul.inputs[1]]
        assert scale.shape == (1, 32 // block, 1, 1, block)
        want = model_const(model, "scale").reshape(32 // block, block)  # channel cb*B + l
        assert np.array_equal(scale.data.reshape(32 // block, block), want)
        assert "quantize_blocked" not in {n.op for n in graph.nodes[1:]}  # only the image's
        second = [n for n in graph.nodes if n.op == "qconv2d"][1]
        made = {o: n for n in graph.nodes for o in n.outputs}
        assert made[second.inputs[0]].op == "quantize_linear"
        assert graph.values[second.inputs[0]].shape == out.shape

        fused, _ = prepare_graph(model)
        (kernel,) = [n for n in fused.nodes if n.op == "fused" and "qconv2d" in str(n.attrs)][:1]
        inner = [d["op"] for d in kernel.attrs["nodes"]]
        assert inner == ["qconv2d", "dequantize_linear", "mul", "quantize_linear"] + [
            "dequantize_linear", "add", "clip", "quantize_linear"
        ]  # fmt: skip
        assert fused.values[kernel.outputs[0]].dtype == "uint8"
    x = np.random.default_rng(1).uniform(-2, 2, (1, 8, SIZE, SIZE)).astype(np.float32)
    got = _run(model, x, set())
    nchw = _run(model, x, {"int8_layout"})
    want = _ort(model, x)
    for g, n, w in zip(got, nchw, want, strict=True):
        assert np.array_equal(g, n)  # the same bytes as the NCHW path
        assert len(np.unique(g)) > 10
        step = 0.02 if g.shape[1] == 8 else 0.015
        assert np.abs(g - w).max() <= step * 1.001


def model_const(model: onnx.ModelProto, name: str) -> np.ndarray:
    init = next(i for i in model.graph.initializer if i.name == name)
    return numpy_helper.to_array(init)


def test_channels_not_in_whole_blocks_stay_nchw():
    model = _chain_model(20)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    first = next(n for n in graph.nodes if n.op == "qconv2d")
    block = graph.values[first.inputs[1]].shape[4]
    blocked = len(graph.values[first.outputs[0]].shape) == 5
    assert blocked == (20 % block == 0)
    x = np.random.default_rng(2).uniform(-2, 2, (1, 8, SIZE, SIZE)).astype(np.float32)
    (got,), (want,) = _run(model, x, set()), _ort(model, x)
    assert np.abs(got - want).max() <= 0.02 * 1.001
