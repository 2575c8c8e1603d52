"""Which convs a build gives pixel tiles (graph/passes/pixel_tiles.py), the tuner's tasks
carrying the same attribute, and a network built so against ONNX Runtime."""

from __future__ import annotations

import dataclasses

import networks
import numpy as np
import onnx
import pytest

from packager.boards import Cache, load_board
from packager.graph.passes.pixel_tiles import tile_pixels
from packager.package import compile_model, prepare_graph
from packager.target import CpuTarget
from packager.tune.run import model_tasks

from ..helpers import ort_outputs, run_model

HOST256 = dataclasses.replace(load_board("host"), vector_bits=256)


def _convs(graph) -> list[dict]:
    """Every conv2d_nchwc node dict, fused groups' inner ones too."""
    out = []
    for n in graph.nodes:
        if n.op == "conv2d_nchwc":
            out.append({"attrs": n.attrs, "inputs": n.inputs})
        out += [i for i in n.attrs.get("nodes", []) if i["op"] == "conv2d_nchwc"]
    return out


def _kind(conv: dict, graph) -> str:
    w = graph.values[conv["inputs"][1]]
    a = conv["attrs"]
    if tuple(w.shape[2:4]) != (1, 1) or int(a.get("groups", 1)) > 1:
        return "window"
    if list(a.get("strides") or [1, 1]) != [1, 1]:
        return "strided"
    return "odd" if w.shape[0] % 2 else "even"


def test_the_pass_marks_the_even_1x1_convs_only():
    """MobileNetV2-style at 256 bits: each 1x1 conv with an even count of output blocks
    gets pixel_multiple 6; the 3x3 and depthwise convs and those of 3 blocks keep their
    row tiles. Only attributes change."""
    graph, _ = prepare_graph(networks.mobilenet_v2(), HOST256)
    tiled = tile_pixels(graph, CpuTarget(vector_bits=256))
    kinds = [_kind(c, graph) for c in _convs(graph)]
    got = [c["attrs"].get("pixel_multiple") for c in _convs(tiled)]
    assert {"even", "odd", "window"} <= set(kinds)
    assert [m for m, k in zip(got, kinds, strict=True) if k == "even"] == [6] * kinds.count("even")
    assert {m for m, k in zip(got, kinds, strict=True) if k != "even"} == {None}
    assert tiled.values is graph.values
    assert [n.inputs for n in tiled.nodes] == [n.inputs for n in graph.nodes]
    assert tile_pixels(graph, CpuTarget(vector_bits=512)) is graph


@pytest.mark.parametrize("bits,multiple", [(256, 6), (512, None)])
def test_a_build_tiles_pixels_for_its_target_and_matches_onnxruntime(bits, multiple):
    model = networks.mobilenet_v2()
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 96, 96)).astype(np.float32)
    board = dataclasses.replace(HOST256, vector_bits=bits)
    compiled = compile_model(model, board=board)
    marks = {c["attrs"].get("pixel_multiple") for c in _convs(compiled.graph)}
    assert multiple in marks and (multiple is None or len(marks) == 2)
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x}, board=board)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("bits,multiple", [(256, 6), (512, None)])
def test_tuning_tasks_are_the_kernels_the_build_makes(tmp_path, bits, multiple):
    """The tuner's 1x1 conv tasks carry the attribute a build for the board gives them,
    so their records' keys are those of the build's kernels."""
    path = tmp_path / "m.onnx"
    onnx.save(networks.mobilenet_v2(), path)
    board = dataclasses.replace(HOST256, vector_bits=bits)
    tasks = model_tasks(str(path), board)
    marks = [c["attrs"].get("pixel_multiple") for t in tasks for c in _convs_of(t.node)]
    assert multiple in marks
    if multiple is None:
        assert set(marks) == {None}


def _convs_of(node) -> list[dict]:
    if node.op == "conv2d_nchwc":
        return [{"attrs": node.attrs}]
    return [i for i in node.attrs.get("nodes", []) if i["op"] == "conv2d_nchwc"]


def _wide_1x1(cin: int, cout: int, hw: int) -> onnx.ModelProto:
    """One 1x1 conv (bias, ReLU) reducing ``cin`` channels at hw x hw."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw, hw])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_reduction_past_the_l1_takes_pixel_tiles_too():
    """1024 input channels: a pair of blocks' filters (64 KiB) outgrow a 32 KiB L1 and
    stream from L2 past each pixel tile; the conv is still tiled by pixels, and matches
    ONNX Runtime."""
    model = _wide_1x1(1024, 32, 7)
    board = dataclasses.replace(HOST256, cache=Cache(l1d_kib=32, l2_kib=512))
    compiled = compile_model(model, board=board)
    assert [c["attrs"].get("pixel_multiple") for c in _convs(compiled.graph)] == [6]
    x = np.random.default_rng(0).uniform(-1, 1, (1, 1024, 7, 7)).astype(np.float32)
    (want,) = ort_outputs(model, {"x": x})
    (got,) = run_model(model, {"x": x}, board=board)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _projection(cin: int, hw: int, stride: int) -> onnx.ModelProto:
    """A 3x3 conv (blocked layout from there on) then a 1x1 conv to 64 channels at
    ``stride``, each with bias and ReLU: a residual block's projection."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w3 = (rng.standard_normal((cin, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
    w1 = (rng.standard_normal((64, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    b3, b1 = rng.standard_normal(cin).astype(np.float32), np.zeros(64, np.float32)
    out = -(-hw // stride)
    nodes = [
        helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], pads=[1] * 4),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w1", "b1"], ["c1"], strides=[stride] * 2),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    inits = {"w3": w3, "b3": b3, "w1": w1, "b1": b1}
    graph = helper.make_graph(
        nodes,
        "projection",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, out, out])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize(
    "cin,hw,stride,multiple",
    [
        (64, 14, 2, 6),  # a residual block's projection
        (512, 28, 2, 6),  # 1.6 MB in, every other row read: 0.8 MB, within twice the L2
        (512, 28, 1, None),  # the same input read whole outgrows it: the row tile
    ],
)
def test_strided_1x1_convs_take_pixel_tiles_where_the_rows_they_read_fit(cin, hw, stride, multiple):
    """A strided 1x1 conv's pixels read their own input addresses, so it takes pixel
    tiles like an unstrided one, the L2 rule counting the input rows it reads (every
    stride-th); the build matches ONNX Runtime."""
    model = _projection(cin, hw, stride)
    board = dataclasses.replace(HOST256, cache=Cache(l1d_kib=32, l2_kib=512))
    compiled = compile_model(model, board=board)
    marks = {
        tuple(c["attrs"]["strides"]): c["attrs"].get("pixel_multiple")
        for c in _convs(compiled.graph)
    }
    assert marks[(stride, stride)] == multiple
    x = np.random.default_rng(0).uniform(-1, 1, (1, cin, hw, hw)).astype(np.float32)
    (want,) = ort_outputs(model, {"x": x})
    (got,) = run_model(model, {"x": x}, board=board)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
