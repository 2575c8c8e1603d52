"""OCR networks (a DBNet-style detector, an SVTR-style recognizer) and the passes and
schedules they exercise, against ONNX Runtime."""

import re

import networks  # noqa: F401  (puts examples/ on the path for ocr_nets)
import numpy as np
import ocr_nets
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.package import compile_model, prepare_graph
from packager.target import Target

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


@pytest.mark.parametrize("backbone, inner", [("mobilenet_v3", None), ("resnet18", 64)])
def test_dbnet_matches_onnxruntime_at_a_reduced_size(backbone, inner):
    model = ocr_nets.dbnet(size=128 if inner is None else 64, backbone=backbone, inner=inner)
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


def _model_of(nodes, inputs, output, inits=(), opset=13):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])
    graph = helper.make_graph(nodes, "g", ins, [out], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _scalar(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def test_pow_by_a_constant_is_arithmetic():
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["a"]),
        helper.make_node("Pow", ["x", "half"], ["b"]),
        helper.make_node("Pow", ["x", "three"], ["c"]),
        helper.make_node("Sum", ["a", "b", "c"], ["y"]),
    ]
    inits = [_scalar("two", 2.0), _scalar("half", 0.5), _scalar("three", 3.0)]
    model = _model_of(nodes, [("x", [3, 20])], ("y", [3, 20]), inits)
    ops = _ops(model)
    assert ops.count("pow") == 1 and "sqrt" in ops and "mul" in ops
    _close(model)


def _power_spectrum(second_perm=(0, 2, 1)):
    """(1, frames, 2 * bins) -> transpose -> real/imag halves squared and added ->
    transpose back -> mel product, as a strided-Conv front end exports it."""
    rng = np.random.default_rng(3)
    mel = numpy_helper.from_array(rng.random((9, 5)).astype(np.float32), "mel")
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["t", "s0", "s1", "ax"], ["re"]),
        helper.make_node("Slice", ["t", "s1", "s2", "ax"], ["im"]),
        helper.make_node("Pow", ["re", "two"], ["re2"]),
        helper.make_node("Pow", ["im", "two"], ["im2"]),
        helper.make_node("Add", ["re2", "im2"], ["p"]),
        helper.make_node("Transpose", ["p"], ["pt"], perm=list(second_perm)),
        helper.make_node("MatMul", ["pt", "mel"], ["y"]),
    ]
    ints = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in [("s0", 0), ("s1", 9), ("s2", 18), ("ax", 1)]
    ]
    return _model_of(
        nodes, [("x", [1, 7, 18])], ("y", [1, 7, 5]), [mel, _scalar("two", 2.0), *ints]
    )


def test_transposes_around_slices_and_elementwise_ops_cancel():
    model = _power_spectrum()
    assert "transpose" not in _ops(model)
    _close(model)


def test_a_transpose_that_meets_no_inverse_stays():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["y"]),
    ]
    shape = numpy_helper.from_array(np.array([-1], np.int64), "shape")
    model = _model_of(nodes, [("x", [3, 4])], ("y", [12]), [shape])
    assert _ops(model).count("transpose") == 1
    _close(model)


def test_matmul_without_epilogue_accumulates_in_a_register_tile():
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model_of(nodes, [("x", [1, 12, 64])], ("y", [1, 12, 48]), [w])
    (kernel,) = [k for k in compile_model(model, load_board("host")).kernels if "matmul" in k.func]
    # the sum runs in a local tile, copied to the output once (not loaded and stored
    # around every multiply-add)
    assert re.search(r"float \w+_local\[\d+\];", kernel.source)
    _close(model)


def test_attention_over_many_tokens_tiles_its_scores_and_vectorizes_row_stats():
    model = ocr_nets.svtr(height=16, width=128, dims=(32,), depths=(1,), heads=(1,), classes=40)
    sources = [k.source for k in compile_model(model, load_board("host")).kernels]
    (att,) = [s for s in sources if "attention_scores" in s]
    # scores summed over D in a register tile per column block (not a 4 x 128 tile in
    # memory), the row max and sum as lane-wise partial results first
    assert re.search(r"float attention_scores_local\[(\d+)\];", att)
    assert "attention_max_part" in att and "attention_sum_part" in att
    _close(model, rtol=1e-3)


def test_conv_without_epilogue_accumulates_in_a_register_tile():
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((24, 32, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = _model_of(nodes, [("x", [1, 32, 20, 20])], ("y", [1, 24, 20, 20]), [w])
    (kernel,) = [k for k in compile_model(model, load_board("host")).kernels if "conv" in k.func]
    assert re.search(r"float \w+_local\[\d+\];", kernel.source)
    _close(model)


@pytest.mark.parametrize("act", ["Sigmoid", None])
def test_pointwise_conv_to_few_channels_runs_in_vectors(act):
    rng = np.random.default_rng(6)
    w = numpy_helper.from_array(rng.standard_normal((4, 24, 1, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    model = _model_of(nodes, [("x", [1, 24, 6, 64])], ("y", [1, 4, 6, 64]), [w, b])
    (kernel,) = [k for k in compile_model(model, load_board("host")).kernels if "conv" in k.func]
    assert "conv2d_nchwc" not in kernel.func  # left unblocked by the layout pass
    assert re.search(r"/\* \w+: (4|8|16) lanes \*/", kernel.source)
    assert "expf(" not in kernel.source
    _close(model)


@pytest.mark.parametrize("width", [40, 12])
def test_pointwise_conv_rows_in_the_widest_vectors_that_fill_them(width):
    """42 output channels fit no block; rows of 40 (or 12) columns are no whole number of
    16-lane vectors, so they run in vectors of 8 (or 4), not the scalar generic schedule
    (PP-OCRv4 det's 192 -> 42 conv at 40x40: 11.3 -> 0.81 ms)."""
    from packager.te.schedule import fitting_lanes, vector_lanes

    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.standard_normal((42, 64, 1, 1)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    model = _model_of(nodes, [("x", [1, 64, 5, width])], ("y", [1, 42, 5, width]), [w])
    board = load_board("host")
    (kernel,) = [k for k in compile_model(model, board).kernels if "conv" in k.func]
    assert "conv2d_nchwc" not in kernel.func
    lanes = fitting_lanes(width, vector_lanes("float32", Target.cpu(board)))
    assert f"{lanes} lanes */" in kernel.source, kernel.source
    _close(model)


RESIZES = [  # (transform, rounding, factor, whether output i reads pixel i // factor)
    ("asymmetric", "floor", 2, True),
    ("asymmetric", "floor", 3, True),
    ("asymmetric", "round_prefer_floor", 2, True),
    ("asymmetric", "round_prefer_floor", 3, False),
    ("asymmetric", "round_prefer_ceil", 2, False),
    ("half_pixel", "round_prefer_floor", 4, True),
    ("half_pixel", "round_prefer_ceil", 2, True),
    ("pytorch_half_pixel", "round_prefer_floor", 3, True),
    ("half_pixel", "floor", 2, False),
    ("align_corners", "round_prefer_floor", 2, False),
]


@pytest.mark.parametrize("ctm, rounding, s, whole", RESIZES)
def test_nearest_integer_upscale_indexes_by_division(ctm, rounding, s, whole):
    scales = numpy_helper.from_array(np.array([1, 1, s, s], np.float32), "scales")
    node = helper.make_node(
        "Resize",
        ["x", "", "scales"],
        ["y"],
        mode="nearest",
        coordinate_transformation_mode=ctm,
        nearest_mode=rounding,
    )
    model = _model_of([node], [("x", [1, 3, 5, 7])], ("y", [1, 3, 5 * s, 7 * s]), [scales])
    (kernel,) = compile_model(model, load_board("host")).kernels
    assert ("ceil(" not in kernel.source) == whole
    feeds = _feeds(model)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n, panels_outside", [(8000, True), (96, False)])
def test_matmul_by_weights_larger_than_the_cache_walks_column_panels_outermost(n, panels_outside):
    model = _linear_model(n, k=64, rows=8)
    kernels = compile_model(model, load_board("host")).kernels
    (kernel,) = [k for k in kernels if "matmul" in k.func]
    # the outer loops of column blocks (i2_o) and row blocks (i1_o): which comes first
    src = kernel.source
    assert (src.index("_i2_o") < src.index("_i1_o")) == panels_outside
    _close(model)


def test_classifier_softmax_runs_on_the_padded_columns_then_is_sliced():
    model = _linear_model(679, k=32, rows=6)
    sm = helper.make_node("Softmax", ["y"], ["p"], axis=-1)
    model.graph.node.append(sm)
    model.graph.output[0].name = "p"
    graph = _graph(model)
    ops = [x.op for x in graph.nodes]
    assert ops == ["matmul", "add", "softmax", "slice"]
    assert graph.values[graph.nodes[2].outputs[0]].shape[-1] > 679
    _close(model)


def test_attention_over_40_tokens_with_heads_of_8_runs_in_half_vectors():
    # PaddleOCR's SVTR neck: 40 time steps, d 64 in 8 heads
    model = ocr_nets.svtr(height=4, width=160, dims=(64,), depths=(1,), heads=(8,), classes=50)
    sources = [k.source for k in compile_model(model, load_board("host")).kernels]
    (att,) = [s for s in sources if "attention_scores" in s]
    assert "attention_scores_local" in att and re.search(r"/\* \w+: [48] lanes \*/", att)
    _close(model, rtol=1e-3)


@pytest.mark.parametrize("n, parts", [(1024, True), (100, False)])
def test_softmax_over_a_long_row_takes_its_max_and_sum_in_lane_wise_parts(n, parts):
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    model = _model_of([node], [("x", [3, n])], ("y", [3, n]))
    (kernel,) = compile_model(model, load_board("host")).kernels
    assert ("softmax_max_part" in kernel.source) == parts
    assert ("softmax_sum_part" in kernel.source) == parts
    _close(model)
