"""A dense layer whose float result no QuantizeLinear takes (a classifier's last
layer in a QDQ model written by `packager quantize`) runs as an integer dense with a
dequantize epilogue: int8 weights, exact int32 sums, y = float(acc + corr) * scale +
bias. It equals ONNX Runtime computing the QDQ graph in float to float rounding."""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.backend import PackagerBackend
from packager.boards import load_board
from packager.package import package, prepare_graph
from tests.helpers import unoptimized_ort_session

K, N = 40, 13  # N: not a multiple of a block of lanes


def _model(
    op: str, act: str, bias: str, trans_b: bool = False, lead=(2,), k: int = K, n: int = N
) -> onnx.ModelProto:
    """x -> Q -> DQ -> op(., DQ(W int8, per output channel)) (+ bias) -> y (float)."""
    K, N = k, n  # noqa: N806 (the module's sizes unless given)
    rng = np.random.default_rng(7)
    w = rng.integers(-127, 128, (N, K) if trans_b else (K, N)).astype(np.int8)
    ws = (rng.random(N) * 0.02 + 0.001).astype(np.float32)
    zp = np.uint8(131) if act == "uint8" else np.int8(0)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(zp), "xzp"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(ws, "ws"),
        numpy_helper.from_array(np.zeros(N, np.int8), "wzp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wd"], axis=0 if trans_b else 1),
    ]
    ins = ["xd", "wd"]
    if bias == "float":
        inits.append(numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"))
        ins.append("b")
    elif bias == "int32":  # a DQ of an int32 bias, in units of x scale * w scale
        b = rng.integers(-5000, 5000, N).astype(np.int32)
        inits += [
            numpy_helper.from_array(b, "bq"),
            numpy_helper.from_array((ws * np.float32(0.05)).astype(np.float32), "bs"),
            numpy_helper.from_array(np.zeros(N, np.int32), "bzp"),
        ]
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bzp"], ["b"], axis=0))
        ins.append("b")
    if op == "Gemm":
        nodes.append(helper.make_node("Gemm", ins, ["y"], transB=int(trans_b)))
    else:
        nodes.append(helper.make_node("MatMul", ins[:2], ["y0"]))
        if bias != "none":
            nodes.append(helper.make_node("Add", ["y0", ins[2]], ["y"]))
        else:
            nodes[-1].output[0] = "y"
    g = helper.make_graph(
        nodes,
        "float_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*lead, N])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


CASES = [  # op, activations, bias, transB, leading dims
    ("Gemm", "uint8", "float", True, (2,)),
    ("Gemm", "int8", "int32", False, (3,)),
    ("Gemm", "uint8", "none", False, (1,)),
    ("MatMul", "uint8", "none", False, (2, 3)),
]


@pytest.mark.parametrize("op,act,bias,trans_b,lead", CASES)
@pytest.mark.parametrize("board", ["host", "host-avx2"])
def test_a_float_dense_layer_runs_on_int8_weights_to_float_rounding(
    op, act, bias, trans_b, lead, board
):
    model = _model(op, act, bias, trans_b, lead)
    onnx.checker.check_model(model)
    b = load_board(board)
    graph, _ = prepare_graph(model, board=b, disabled_passes={"fuse"})
    ops = collections.Counter(n.op for n in graph.nodes)
    assert ops["qdense"] == 1 and not {"gemm", "matmul", "dense"} & set(ops), ops
    (dense,) = [n for n in graph.nodes if n.op == "qdense"]
    assert dense.attrs["out_dtype"] == "float32" and dense.outputs == ["y"]
    assert graph.values[dense.inputs[1]].data.dtype == np.int8
    x = np.random.default_rng(3).standard_normal((*lead, K)).astype(np.float32) * 3
    want = unoptimized_ort_session(model).run(None, {"x": x})[0]
    got = PackagerBackend.prepare(model, board=b).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("cores", [1, 2])
def test_a_classifier_sized_dense_layer_shares_its_tiles_over_the_cores(tmp_path, cores):
    """256 -> 1000 over two rows (512,000 multiply-adds): on two cores the rows' tiles of
    output blocks go to the pool as one loop (2 rows x 25 tiles of 5 blocks at 8 lanes);
    on one the kernel has no parallel loop. Either way it equals ONNX Runtime's float
    QDQ graph to float rounding."""
    model = _model("Gemm", "uint8", "float", True, (2,), k=256, n=1000)
    path = tmp_path / "dense.onnx"
    onnx.save(model, path)
    b = dataclasses.replace(load_board("host-avx2"), cores=cores)
    out = package(str(path), b, str(tmp_path / "b"), selftest=False)
    (kernel,) = (out / "kernels").glob("*_qdense*.c")
    src = kernel.read_text()
    calls = re.findall(r"pk_parallel_for\(\w+_par0, &\w+, (\d+)\)", src)
    assert calls == (["50"] if cores == 2 else []), calls
    x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32) * 3
    want = unoptimized_ort_session(model).run(None, {"x": x})[0]
    got = PackagerBackend.prepare(model, board=b).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_sums_that_could_pass_int32_keep_the_float_layer():
    """A reduction long enough that 255 * sum|W| could pass int32 stays float."""
    model = _model("Gemm", "uint8", "float", True)
    w = next(t for t in model.graph.initializer if t.name == "w")
    big = np.full((N, 70000), 127, np.int8)
    w.CopyFrom(numpy_helper.from_array(big, "w"))
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 70000
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    ops = collections.Counter(n.op for n in graph.nodes)
    assert "qdense" not in ops


def test_a_board_with_an_accelerator_keeps_the_float_layer():
    """The accelerator's epilogue requantizes; its boards keep a float dense layer as
    the QDQ graph has it."""
    model = _model("Gemm", "uint8", "float", True)
    graph, _ = prepare_graph(model, board=load_board("accel-sim"), disabled_passes={"fuse"})
    assert not [n for n in graph.nodes if n.op == "qdense"]


@pytest.mark.parametrize("name", ["rpi4", "rpi5"])
def test_a_float_dense_layer_on_arm_passes_its_selftest_under_qemu(name, tmp_path):
    """Cross-built for a NEON board (widening multiplies on rpi4, sdot on rpi5 with
    int8 activations), the bundle's selftest passes under qemu-aarch64: its outputs
    equal the host build's to the float tolerance."""
    from tests.test_static_link import assert_cross_selftest_passes, needs_tools

    board = load_board(name)
    needs_tools(board)
    model = _model("Gemm", "int8" if name == "rpi5" else "uint8", "float", True)
    graph, _ = prepare_graph(model, board, disabled_passes={"fuse"})
    assert [n.attrs["out_dtype"] for n in graph.nodes if n.op == "qdense"] == ["float32"]
    assert_cross_selftest_passes(model, board, tmp_path)
