"""Broken models get a clear error (exit 2) naming what is at fault, never an internal
error or a hang: one handcrafted model per kind of damage the mutation harness found."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import check_board_file, load_board
from packager.errors import PackagerError
from packager.frontend.importer import import_onnx
from packager.graph.ir import Value
from packager.package import make_selftest, memory_bytes
from packager.runner import selftest_local

ROOT = Path(__file__).resolve().parent.parent


def matmul_model(x_shape=(4, 16), w=None, elem_type=TensorProto.FLOAT, outputs=("y",)):
    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w") if w is None else w
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", elem_type, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["m", "n"]) for o in outputs],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture
def build(cli, tmp_path):
    """Save a model (or raw bytes) and build it: returns (exit code, stderr)."""

    def run(model, board="host"):
        path = tmp_path / "m.onnx"
        data = model if isinstance(model, bytes) else model.SerializeToString()
        path.write_bytes(data)
        code, _, err = cli("build", path, "--board", board, "-o", tmp_path / "out")
        assert "internal error" not in err and "Traceback" not in err
        return code, err

    return run


def small_board(tmp_path, ram_mb: int) -> Path:
    text = (ROOT / "board_profiles" / "host.yaml").read_text().replace("name: host", "name: small")
    path = tmp_path / "small.yaml"
    path.write_text(text + f"ram_mb: {ram_mb}\n")
    return path


def test_raw_data_of_the_wrong_size_names_the_initializer(build):
    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    w.raw_data = w.raw_data + b"\0\0"
    code, err = build(matmul_model(w=w))
    assert code == 2
    assert "initializer 'w': its data does not fit dims [16, 8] of type FLOAT" in err


def test_float_data_of_the_wrong_length_names_the_initializer(build):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[16, 8], float_data=[0.5] * 129)
    code, err = build(matmul_model(w=w))
    assert code == 2
    assert "initializer 'w': its data does not fit dims [16, 8] of type FLOAT" in err


def test_an_initializer_of_the_wrong_declared_type(build):
    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    w.data_type = TensorProto.INT16  # 512 bytes read as int16: 256 values for 128
    code, err = build(matmul_model(w=w))
    assert code == 2
    assert "initializer 'w': its data does not fit dims [16, 8] of type INT16" in err


def test_unknown_element_types(build):
    code, err = build(matmul_model(elem_type=99))
    assert code == 2
    assert "input 'x': element type 99 (not an ONNX element type) is not supported" in err
    w = helper.make_tensor("w", TensorProto.UINT4, [16, 8], [1] * 128)
    code, err = build(matmul_model(w=w))
    assert code == 2
    assert "initializer 'w': element type UINT4 is not supported" in err


def test_a_name_that_is_not_utf8(build):
    data = matmul_model().SerializeToString()
    code, err = build(data.replace(b"\x01x", b"\x01\xff", 1))  # the node's input
    assert code == 2
    assert "invalid ONNX model: a name or string is not valid UTF-8" in err
    code, err = build(data.replace(b"mm", b"\xff\xfe"))
    assert code == 2
    assert "node 1 (MatMul): the name b'\\xff\\xfe' is not valid UTF-8" in err


def test_negative_input_dim_is_dynamic(build):
    # -1 is how several exporters write a dynamic dim: it asks for --input-shape
    code, err = build(matmul_model(x_shape=(-1, 16)))
    assert code == 2
    assert "input 'x' has dynamic dims [-1, 16]" in err
    assert "--input-shape x=D0,16" in err


def test_duplicate_and_missing_graph_outputs(build):
    code, err = build(matmul_model(outputs=("y", "y")))
    assert code == 2
    assert "graph output 'y' is listed more than once" in err
    code, err = build(matmul_model(outputs=()))
    assert code == 2
    assert "the graph has no outputs" in err


def test_an_input_larger_than_the_boards_memory(build, tmp_path):
    code, err = build(matmul_model(x_shape=(2**31, 16)), small_board(tmp_path, 1024))
    assert code == 2
    assert (
        "input 'x': float32[2147483648, 16] takes 137,438,953,472 bytes, more than the "
        "board's memory (1,073,741,824 bytes)"
    ) in err


def test_an_initializer_larger_than_the_boards_memory_is_not_read():
    # Dims of 2**40 x 8 floats with 128 values of data: refused by size, before decoding
    # (onnx's checker, which the build runs first, says the data is too short).
    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    w.dims[0] = 2**40
    with pytest.raises(PackagerError, match=r"initializer 'w': float32\[1099511627776, 8\] takes"):
        import_onnx("m.onnx", None, model=matmul_model(w=w), max_bytes=64 << 20)


def test_a_node_output_larger_than_the_boards_memory(build, tmp_path):
    # [65536, 16] x [16, 4096]: both inputs fit 64 MiB, their product does not.
    w = numpy_helper.from_array(np.zeros((16, 4096), np.float32), "w")
    code, err = build(matmul_model(x_shape=(65536, 16), w=w), small_board(tmp_path, 64))
    assert code == 2
    assert "node 'mm': output 'y': float32[65536, 4096] takes 1,073,741,824 bytes" in err


def test_a_constant_of_huge_shape_is_refused_before_it_is_made(build, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill")],
        "g",
        [],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["a", "b", "c"])],
        [numpy_helper.from_array(np.array([2**20, 2**20, 16], np.int64), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    code, err = build(model, small_board(tmp_path, 1024))
    assert code == 2
    assert "node 'fill' (ConstantOfShape): input 's' = [1048576, 1048576, 16] asks for" in err


def test_an_initializer_input_declared_with_another_type(build):
    model = matmul_model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.INT32, [16, 8]))
    code, err = build(model)
    assert code == 2
    assert "input 'w' is declared INT32[16, 8], but its initializer is FLOAT[16, 8]" in err


def test_a_reference_failure_names_the_model():
    graph = import_onnx("m.onnx", None, model=matmul_model())
    broken = matmul_model()
    broken.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(PackagerError, match=r"^bad\.onnx: the reference .* cannot run the model"):
        make_selftest(broken, graph, path="bad.onnx")


def test_the_size_of_a_huge_shape_does_not_wrap_around():
    assert Value("v", (2**40, 2**40), "float32").nbytes == 2**82


def test_a_huge_tensor_is_refused_even_without_a_memory_size():
    # A remote board without ram_mb: sizes past what int64 plans hold are still refused.
    with pytest.raises(PackagerError, match=r"input 'x': float32\[1099511627776, 1099511627776\]"):
        import_onnx("m.onnx", None, model=matmul_model(x_shape=(2**40, 2**40)))


def test_a_split_knob_over_a_huge_extent_is_quick():
    # Listing every divisor of 2**62 one by one would never end.
    code = (
        "from packager.ops.knobs import Config\n"
        "c = Config()\n"
        "print(c.define_split('a', 2**62, 4, most=8), c.define_split('b', 2**62, 64))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert p.stdout.split() == ["4", "64"], p.stderr


def test_board_memory_field(tmp_path):
    assert load_board(small_board(tmp_path, 512)).ram_mb == 512
    assert memory_bytes(load_board(small_board(tmp_path, 512))) == 512 << 20
    host = memory_bytes(load_board("host"))
    assert host is not None and host > 1 << 26  # the machine's own, from sysconf
    with pytest.raises(PackagerError, match="ram_mb: 0 is less than the minimum 1"):
        check_board_file(small_board(tmp_path, 0))


def transpose_model(name_twice: bool, out_type=TensorProto.FLOAT) -> onnx.ModelProto:
    names = ("n", "n") if name_twice else ("a", "b")
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name=names[0]),
            helper.make_node("Transpose", ["r"], ["y"], name=names[1], perm=[1, 0]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", out_type, [5, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_selftest_reference_outputs_are_exact_and_in_c_order():
    # ONNX allows repeated node names, ONNX Runtime refuses them; onnx's evaluator (the
    # fallback) returns a transpose in Fortran order, which the selftest files cannot hold.
    model = transpose_model(name_twice=True)
    # onnx's evaluator (the fallback when ORT refuses a model) returns a transpose in
    # Fortran order, which the selftest files cannot hold.
    graph = import_onnx("m.onnx", None, model=model)
    (x,), (y,) = make_selftest(model, graph)
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(y, np.maximum(x, 0).T)


def test_gemm_inner_dims_that_differ(build):
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(np.ones((6, 12), np.float32), "w")],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 2
    assert (
        "node 'fc' (gemm): gemm: inner dims differ: A (2, 5) (trans_a=0) against "
        "B (6, 12) (trans_b=1)"
    ) in err


def test_a_depthwise_conv_over_an_empty_width_builds_and_runs(build, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=8, pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 10, 0])],
        [numpy_helper.from_array(np.ones((8, 1, 3, 3), np.float32), "w")],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 0, err
    p = selftest_local(tmp_path / "out", load_board("host"))
    assert p.returncode == 0 and "selftest: PASS" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize(
    "w_shape, attrs, message",
    [
        ((8, 1, 3), {"group": 8}, "weight [8, 1, 3] and input [1, 8, 10, 10] differ in rank"),
        ((8, 1, 3, 3), {"group": 0}, "group=0 must be positive"),
    ],
)
def test_conv_weight_rank_and_group(build, w_shape, attrs, message):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
        [numpy_helper.from_array(np.ones(w_shape, np.float32), "w")],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 2
    assert f"node 'dw' (Conv): {message}" in err


def test_a_graph_output_declared_with_another_type(build):
    code, err = build(transpose_model(name_twice=False, out_type=TensorProto.DOUBLE))
    assert code == 2
    assert "graph output 'y' is declared DOUBLE, but the model computes float32" in err


def test_batch_norm_statistics_of_the_wrong_shape(build):
    stats = [np.ones(n, np.float32) for n in (4, 4, 3, 4)]  # mean has 3 values for 4 channels
    names = ["scale", "bias", "mean", "var"]
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", *names], ["y"], name="bn")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])],
        [numpy_helper.from_array(a, n) for a, n in zip(stats, names, strict=True)],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 2
    assert "node 'bn' (BatchNormalization): mean 'mean' has shape [3], expected [4]" in err


def test_clip_with_a_bound_of_many_values(build):
    graph = helper.make_graph(
        [helper.make_node("Clip", ["x", "lo"], ["y"], name="clip")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("lo", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 2
    assert "node 'clip' (Clip): input 1 (min) must have one element, not shape [2, 3]" in err


def test_cast_to_an_unknown_type(build):
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], name="cast", to=99)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    code, err = build(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert code == 2
    assert "node 'cast' (Cast): type 99 (not an ONNX element type) is not supported" in err
