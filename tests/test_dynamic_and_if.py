"""Dynamic input dims fixed by --input-shape, and If nodes folded at package time: each
model built and run through the real path, checked against ONNX Runtime."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.errors import PackagerError
from packager.frontend.control_flow import DEFAULT_MAX_TRIPS
from packager.frontend.importer import import_onnx
from packager.frontend.inspect import inspect_model

from .helpers import ort_outputs, run_model

RNG = np.random.default_rng(7)


def _input(name, dims):
    """A float input whose dims may be ints, -1, symbols, or None (no value, no name)."""
    vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    shape = vi.type.tensor_type.shape
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif d is not None:
            dim.dim_param = d
    return vi


def _out(name, rank):
    """An output of known rank, its dims left open (the checker asks for a shape)."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * rank)


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def classifier():
    """A text-direction classifier's shape: x [-1, 3, ?, <empty>] and a symbolic 'N'."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
    fc = RNG.standard_normal((4, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["logits"]),
        helper.make_node("Add", ["logits", "bias"], ["y"]),
    ]
    inputs = [_input("x", [-1, 3, "?", None]), _input("bias", ["N", 2])]
    return _model(nodes, inputs, [_out("y", 2)], [_init("w", w), _init("fc", fc)])


def test_every_kind_of_dynamic_dim_takes_input_shape_and_matches_ort():
    model = classifier()
    feeds = {
        "x": RNG.standard_normal((1, 3, 48, 192)).astype(np.float32),
        "bias": RNG.standard_normal((1, 2)).astype(np.float32),
    }
    shapes = {"x": [1, 3, 48, 192], "bias": [1, 2]}
    (got,) = run_model(model, feeds, shapes=shapes)
    (want,) = ort_outputs(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_missing_input_shape_names_every_dynamic_input():
    with pytest.raises(PackagerError) as e:
        import_onnx("clf.onnx", None, model=classifier())
    msg = str(e.value)
    assert "clf.onnx: 2 input(s) have dynamic dims" in msg
    assert "input 'x' has dynamic dims [-1, 3, ?, ?]" in msg
    assert "input 'bias' has dynamic dims [N, 2]" in msg
    assert "--input-shape x=D0,3,D2,D3 --input-shape bias=D0,2" in msg


def test_input_shape_must_keep_the_fixed_dims():
    with pytest.raises(PackagerError, match=r"x=1,4,48,192 does not match .* \[-1, 3, \?, \?\]"):
        import_onnx("clf.onnx", {"x": [1, 4, 48, 192], "bias": [1, 2]}, model=classifier())


def test_inspect_shows_dynamic_dims_as_declared(tmp_path):
    path = tmp_path / "clf.onnx"
    onnx.save(classifier(), path)
    inputs = {i["name"]: i["shape"] for i in inspect_model(str(path))["inputs"]}
    assert inputs == {"x": ["-1", 3, "?", "?"], "bias": ["N", 2]}


# --- If ---------------------------------------------------------------------


def _branch(name, nodes, out, rank):
    return helper.make_graph(nodes, name, [], [_out(out, rank)])


def if_on_sample_rate(rate):
    """y = x * 2 if rate == 16000 else x + k: the rate is a constant initializer."""
    then = _branch("then", [helper.make_node("Mul", ["x", "two"], ["t"])], "t", 2)
    other = _branch("else", [helper.make_node("Add", ["x", "k"], ["e"])], "e", 2)
    nodes = [
        helper.make_node("Equal", ["rate", "r16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = [
        _init("rate", np.array(rate, np.int64)),
        _init("r16k", np.array(16000, np.int64)),
        _init("two", np.array(2.0, np.float32)),
        _init("k", np.full((4,), 0.5, np.float32)),
    ]
    return _model(nodes, [_input("x", [2, 4])], [_out("y", 2)], inits)


@pytest.mark.parametrize("rate", [16000, 8000])
def test_if_on_a_constant_folds_to_the_taken_branch(rate):
    model = if_on_sample_rate(rate)
    g = import_onnx("m", None, model=model)
    assert [n.op for n in g.nodes] == ["mul" if rate == 16000 else "add", "identity"]
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    (got,) = run_model(model, {"x": x})
    (want,) = ort_outputs(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6)


def if_on_shape():
    """An If on Shape(x)[2] == 48 whose then-branch holds a nested If; both branches read
    outer-scope names: the runtime input x, an outer intermediate s, initializers."""
    inner_then = _branch("inner_then", [helper.make_node("Mul", ["s", "w"], ["it"])], "it", 1)
    inner_else = _branch("inner_else", [helper.make_node("Sub", ["s", "w"], ["ie"])], "ie", 1)
    then = _branch(
        "then",
        [
            helper.make_node("Greater", ["w_sum", "zero"], ["pos"]),
            helper.make_node(
                "If", ["pos"], ["nested"], then_branch=inner_then, else_branch=inner_else
            ),
            helper.make_node("Add", ["nested", "x"], ["t"]),
        ],
        "t",
        4,
    )
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], "e", 4)
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("ReduceSum", ["w"], ["w_sum"], keepdims=0),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["h"], axis=0),
        helper.make_node("Equal", ["h", "h48"], ["tall"]),
        helper.make_node("If", ["tall"], ["y"], then_branch=then, else_branch=other),
    ]
    inits = [
        _init("w", RNG.standard_normal((8,)).astype(np.float32)),
        _init("zero", np.array(0.0, np.float32)),
        _init("two", np.array(2, np.int64)),
        _init("h48", np.array(48, np.int64)),
    ]
    return _model(nodes, [_input("x", ["N", 3, "H", 8])], [_out("y", 4)], inits)


@pytest.mark.parametrize("height", [48, 32])
def test_if_on_a_static_shape_folds_with_nested_outer_scope_references(height):
    model = if_on_shape()
    x = RNG.standard_normal((1, 3, height, 8)).astype(np.float32)
    (got,) = run_model(model, {"x": x}, shapes={"x": list(x.shape)})
    (want,) = ort_outputs(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_if_on_runtime_data_and_a_loop_become_control_flow_nodes():
    then = _branch("then", [helper.make_node("Neg", ["x"], ["t"])], "t", 1)
    other = _branch("else", [helper.make_node("Abs", ["x"], ["e"])], "e", 1)
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["pos"]),
        helper.make_node("If", ["pos"], ["y"], name="sign_if", then_branch=then, else_branch=other),
        helper.make_node("Loop", ["", "pos"], [], name="a_loop", body=_loop_body()),
    ]
    model = _model(
        nodes, [_input("x", [4])], [_out("y", 1)], [_init("zero", np.array(0.0, np.float32))]
    )
    graph = import_onnx("m.onnx", None, model=model)
    ops = {n.op: n for n in graph.nodes}
    assert [len(g.nodes) for g in ops["if"].attrs["subgraphs"]] == [1, 1]  # both branches
    # no trip count, a runtime condition: bounded all the same (the runtime stops it there)
    assert ops["loop"].attrs["max_trips"] == DEFAULT_MAX_TRIPS


def _loop_body():
    return helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("iter", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])],
    )


def test_inspect_tells_a_folded_if_from_a_runtime_one(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(if_on_shape(), path)
    assert inspect_model(str(path))["ops"]["If"]["status"] == "branch inlined at package time"


# --- a detector's head on odd shapes -----------------------------------------


def detector_head():
    """Conv, grouped strided ConvTranspose with output padding, nearest and linear Resize,
    HardSwish/HardSigmoid and global pooling, on a 16-channel 7x9 map."""
    f32 = np.float32
    inits = [
        _init("w", RNG.standard_normal((16, 3, 3, 3)).astype(f32) * 0.2),
        _init("wt", RNG.standard_normal((16, 4, 3, 3)).astype(f32) * 0.2),
        _init("up", np.array([1, 1, 2, 2], f32)),
        _init("roi", np.array([], f32)),
        _init("size", np.array([1, 16, 20, 23], np.int64)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c"], ["a"]),
        helper.make_node(
            "ConvTranspose",
            ["a", "wt"],
            ["t"],
            group=4,
            strides=[2, 2],
            output_padding=[1, 0],
            auto_pad="SAME_UPPER",
        ),
        helper.make_node(
            "Resize",
            ["t", "roi", "up"],
            ["n"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node(
            "Resize",
            ["t", "roi", "", "size"],
            ["l"],
            mode="linear",
            coordinate_transformation_mode="half_pixel",
        ),
        helper.make_node("HardSigmoid", ["l"], ["hs"], alpha=0.3, beta=0.4),
        helper.make_node("GlobalAveragePool", ["n"], ["gn"]),
        helper.make_node("GlobalMaxPool", ["hs"], ["gl"]),
        helper.make_node("Add", ["gn", "gl"], ["y"]),
    ]
    outs = [_out("y", 4), _out("hs", 4)]
    return _model(nodes, [_input("x", [1, 3, 7, 9])], outs, inits)


def test_detector_head_on_odd_shapes_matches_ort():
    model = detector_head()
    x = RNG.standard_normal((1, 3, 7, 9)).astype(np.float32)
    got = run_model(model, {"x": x})
    want = ort_outputs(model, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_an_initializer_input_declared_with_a_dynamic_dim_is_its_constant():
    # a default value for an input declared [-1, 4]: the -1 is no mismatch
    model = _model(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        [_input("x", [2, 4]), _input("b", [-1, 4])],
        [_out("y", 2)],
        [_init("b", np.ones((2, 4), np.float32))],
    )
    g = import_onnx("m", None, model=model)
    assert g.inputs == ["x"] and g.values["b"].is_const
