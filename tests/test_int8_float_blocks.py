"""Float ops between integer ops run on blocked floats (int8_layout.py hands a
DequantizeLinear blocked integers, layout_rules.py keeps its floats blocked): a Scale
after a conv becomes one kernel writing the next conv's byte blocks, a dense block's
concat and batch norm read blocks; the same bytes as the NCHW path, and ONNX Runtime's
QDQ semantics within one step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.package import prepare_graph
from tests.helpers import unoptimized_ort_session
from tests.test_int8_layout import _run

SIZE = 6


def _chain_model(channels: int, tap: bool = False, dense: bool = False) -> onnx.ModelProto:
    """x -> QDQ -> conv 1x1 (``channels`` out) -> QDQ -> Mul(scale[c]) -> QDQ ->
    Add(shift[c]) -> Clip(0, 6) -> QDQ -> conv 3x3 (8 out) -> QDQ -> y; with ``tap`` the
    Mul's output is a graph output too; with ``dense`` (DenseNet's block) y is instead
    the concat of the first conv's dequantized output and the second's (16 out), then
    a batch norm and a relu quantized for a third conv (8 out)."""
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
    y = qdq(conv(r, "c2", channels, 16 if dense else 8, 3), 0.02)
    if dense:
        nodes.append(helper.make_node("Concat", [a, y], ["cat"], axis=1))
        c = channels + 16
        bn = [const(f"bn{k}", rng.uniform(lo, hi, c).astype(np.float32)) for k, (lo, hi) in
              enumerate([(0.5, 1.5), (-0.2, 0.2), (-0.1, 0.1), (0.5, 1.0)])]  # fmt: skip
        nodes.append(helper.make_node("BatchNormalization", ["cat", *bn], ["bn"]))
        nodes.append(helper.make_node("Relu", ["bn"], ["relu"]))
        y = qdq(conv(qdq("relu", 0.01, 0), "c3", c, 8, 1), 0.02)
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
    return unoptimized_ort_session(model).run(None, {"x": x})


def _graph(model, disabled=("fuse",)):
    graph, _ = prepare_graph(model, disabled_passes=set(disabled))
    made = {o: n for n in graph.nodes for o in n.outputs}
    convs = [n for n in graph.nodes if n.op == "qconv2d"]
    return graph, made, convs, graph.values[convs[0].inputs[1]].shape[4]


def _same_as_nchw_and_ort(model, seed=1, steps=(0.02, 0.015)):
    x = np.random.default_rng(seed).uniform(-2, 2, (1, 8, SIZE, SIZE)).astype(np.float32)
    got = _run(model, x, set())
    nchw = _run(model, x, {"int8_layout"})
    want = _ort(model, x)
    for g, n, w, step in zip(got, nchw, want, steps, strict=False):
        assert np.array_equal(g, n)  # the same bytes as the NCHW path
        assert len(np.unique(g)) > 10
        assert np.abs(g - w).max() <= step * 1.001


@pytest.mark.parametrize("tap", [False, True])
def test_a_float_chain_after_an_integer_conv_runs_in_its_block(tap):
    model = _chain_model(32, tap)
    graph, made, (first, second), block = _graph(model)
    out = graph.values[first.outputs[0]]
    assert out.shape == (1, 32 // block, SIZE, SIZE, block)  # the conv writes its block
    mul = next(n for n in graph.nodes if n.op == "mul")
    scale = graph.values[mul.inputs[1]]
    assert scale.shape == (1, 32 // block, 1, 1, block)
    want = model_const(model, "scale").reshape(32 // block, block)  # channel cb*B + l
    assert np.array_equal(scale.data.reshape(32 // block, block), want)
    ops = [n.op for n in graph.nodes]
    assert "quantize_blocked" not in ops[1:]  # only the image's
    assert made[second.inputs[0]].op == "quantize_linear"
    assert graph.values[second.inputs[0]].shape == out.shape
    # the tapped value leaves through one transform to NCHW, nothing else does
    assert ops.count("layout_transform") == int(tap)

    if not tap:
        fused, _ = prepare_graph(model)
        kernel = next(n for n in fused.nodes if n.op == "fused" and "qconv2d" in str(n.attrs))
        inner = [d["op"] for d in kernel.attrs["nodes"]]
        assert inner == ["qconv2d", "dequantize_linear", "mul", "quantize_linear"] + [
            "dequantize_linear", "add", "clip", "quantize_linear"
        ]  # fmt: skip
        assert fused.values[kernel.outputs[0]].dtype == "uint8"
    _same_as_nchw_and_ort(model)


def test_a_dense_block_concats_and_normalizes_blocks():
    model = _chain_model(32, dense=True)
    graph, made, convs, block = _graph(model)
    ops = [n.op for n in graph.nodes]
    assert "layout_transform" not in ops and "quantize_blocked" not in ops[1:]
    (cat,) = [n for n in graph.nodes if n.op == "concat"]
    assert all(made[i].op == "dequantize_linear" for i in cat.inputs)
    blocks = {graph.values[v].shape[4] for v in [*cat.inputs, *cat.outputs]}
    assert blocks == {block}
    assert graph.values[convs[2].inputs[0]].shape[1:2] == (48 // block,)
    _same_as_nchw_and_ort(model, seed=3, steps=(0.02,))


def test_without_the_float_layout_pass_dequantized_values_stay_nchw():
    model = _chain_model(32, dense=True)
    graph, made, convs, _ = _graph(model, ("fuse", "layout"))
    for n in graph.nodes:
        if n.op == "dequantize_linear":
            assert len(graph.values[n.inputs[0]].shape) == 4
    x = np.random.default_rng(4).uniform(-2, 2, (1, 8, SIZE, SIZE)).astype(np.float32)
    compiled = _run(model, x, {"layout"})
    assert np.array_equal(compiled[0], _run(model, x, set())[0])


def model_const(model: onnx.ModelProto, name: str) -> np.ndarray:
    init = next(i for i in model.graph.initializer if i.name == name)
    return numpy_helper.to_array(init)


def test_channels_not_in_whole_blocks_stay_nchw():
    model = _chain_model(20)
    graph, made, (first, _), block = _graph(model)
    blocked = len(graph.values[first.outputs[0]].shape) == 5
    assert blocked == (20 % block == 0)
    _same_as_nchw_and_ort(model, seed=2)


@pytest.mark.parametrize("name", ["rpi4", "rpi5"])
def test_a_dense_block_on_arm_runs_blocked_under_qemu(name, tmp_path):
    """The dense block for a 128-bit NEON board (blocks of 4 channels, the dot product
    or widening multiplies): its float glue blocked too, and the cross-built bundle's
    selftest (the host build's integer bytes) passes under qemu-aarch64."""
    from packager.boards import load_board
    from tests.test_static_link import assert_cross_selftest_passes, needs_tools

    board = load_board(name)
    needs_tools(board)
    model = _chain_model(32, dense=True)
    graph, _ = prepare_graph(model, board, disabled_passes={"fuse"})
    (cat,) = [n for n in graph.nodes if n.op == "concat"]
    assert {graph.values[v].shape[4] for v in [*cat.inputs, *cat.outputs]} == {4}
    assert "layout_transform" not in {n.op for n in graph.nodes}
    assert_cross_selftest_passes(model, board, tmp_path)
