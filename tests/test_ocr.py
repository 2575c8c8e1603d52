"""OCR networks (a DBNet-style detector, an SVTR-style recognizer) and the passes and
schedules they exercise, against ONNX Runtime."""

import networks  # noqa: F401  (puts examples/ on the path for ocr_nets)
import numpy as np
import ocr_nets
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.package import prepare_graph

from .helpers import ort_outputs, run_model


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    return {
        vi.name: rng.uniform(0, 1, [d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for vi in model.graph.input
    }


def _ops(model):
    graph, _ = prepare_graph(model, load_board("host"), disabled_passes={"fuse"})
    return [n.op for n in graph.nodes]


def _close(model, rtol=1e-4):
    feeds = _feeds(model)
    want = ort_outputs(model, feeds)
    got = run_model(model, feeds)
    for g, w in zip(got, want, strict=True):
        err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)
        assert err <= rtol, err


def _conv_transpose_model(k, s, pads=(0, 0, 0, 0), act="Relu", bias=True, cin=8, cout=5):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((cin, cout, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    ins = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [
        helper.make_node(
            "ConvTranspose", ins, ["t"], kernel_shape=[k, k], strides=[s, s], pads=list(pads)
        )
    ]
    out = "t"
    if act:
        nodes.append(helper.make_node(act, ["t"], ["y"]))
        out = "y"
    h = 6
    o = (h - 1) * s + k - pads[0] - pads[2]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, h, 7])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, cout, o, None])],
        [w, b] if bias else [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    "k, act, bias", [(2, "Relu", True), (2, "Sigmoid", False), (3, None, True), (4, "Relu", True)]
)
def test_conv_transpose_kernel_equal_stride_is_a_1x1_conv_and_a_shuffle(k, act, bias):
    model = _conv_transpose_model(k, k, act=act, bias=bias)
    ops = _ops(model)
    assert "conv_transpose" not in ops
    assert ops[-1] == "depth_to_space"  # the activation moved before the shuffle
    _close(model)


def test_conv_transpose_with_overlapping_windows_stays_direct():
    model = _conv_transpose_model(3, 2, pads=(1, 1, 1, 1))
    assert "conv_transpose" in _ops(model)
    _close(model)


def test_dbnet_matches_onnxruntime_at_a_reduced_size():
    model = ocr_nets.dbnet(size=128)
    ops = _ops(model)
    assert "conv_transpose" not in ops
    _close(model, rtol=1e-3)


def test_svtr_matches_onnxruntime_at_a_reduced_size():
    model = ocr_nets.svtr(height=32, width=64, dims=(32, 64, 96), heads=(2, 2, 3), classes=300)
    ops = _ops(model)
    assert ops.count("attention") == 6 and ops.count("layer_norm") == 13
    _close(model, rtol=1e-3)


def _linear_model(n, k=24, rows=5):
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, rows, n])],
        [w, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _graph(model):
    graph, _ = prepare_graph(model, load_board("host"), disabled_passes={"fuse"})
    return graph


@pytest.mark.parametrize("n", [6625, 97 * 7])
def test_linear_to_an_odd_class_count_is_padded_to_whole_vectors(n):
    model = _linear_model(n)
    graph = _graph(model)
    (mm,) = [x for x in graph.nodes if x.op == "matmul"]
    nb = mm.attrs["b_block"]
    assert nb >= 4 and graph.values[mm.outputs[0]].shape[-1] == -(-n // nb) * nb
    assert "slice" in [x.op for x in graph.nodes]
    _close(model)


def test_linear_to_few_odd_columns_is_not_padded():
    model = _linear_model(7)
    assert "slice" not in [x.op for x in _graph(model).nodes]
    _close(model)


def test_linear_whose_columns_take_half_vectors_is_packed():
    model = _linear_model(40)
    (mm,) = [x for x in _graph(model).nodes if x.op == "matmul"]
    assert mm.attrs.get("b_block") == 8
    _close(model)
