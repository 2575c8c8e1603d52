"""Constant gemm weights are packed (or transposed) at package time; answers stay the same."""

from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.frontend.importer import import_onnx
from packager.graph.passes.pack_gemm_weights import pack_gemm_weights
from packager.graph.pipeline import PassContext
from packager.package import prepare_graph

from ..helpers import ort_outputs, run_model


def gemm_model(b_const: bool, trans_b: int = 1, rows: int = 3, n: int = 16):
    rng = np.random.default_rng(0)
    b = rng.standard_normal((n, 32) if trans_b else (32, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, 32])]
    inits = [numpy_helper.from_array(c, "c")]
    if b_const:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b.shape)))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=trans_b, alpha=0.5, beta=2.0)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])
    graph = helper.make_graph([node], "g", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, b


def test_constant_b_is_transposed_once():
    model, b = gemm_model(b_const=True)
    g = pack_gemm_weights(import_onnx("m", None, model=model))
    (node,) = g.nodes
    assert node.attrs["trans_b"] == 0
    np.testing.assert_array_equal(g.values[node.inputs[1]].data, b.T)
    assert "b" not in {v.name for v in g.consts()}


def test_runtime_b_is_left_alone():
    model, _ = gemm_model(b_const=False)
    g = pack_gemm_weights(import_onnx("m", None, model=model))
    assert g.nodes[0].attrs["trans_b"] == 1 and g.nodes[0].inputs[1] == "b"


def test_packed_gemm_matches_onnxruntime():
    model, _ = gemm_model(b_const=True)
    a = np.random.default_rng(1).standard_normal((3, 32)).astype(np.float32)
    (want,) = ort_outputs(model, {"a": a})
    (got,) = run_model(model, {"a": a})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _ctx(vector_bits=256):
    return PassContext(board=replace(load_board("host"), vector_bits=vector_bits))


@pytest.mark.parametrize("trans_b", [0, 1])
def test_constant_b_is_packed_in_lane_blocks(trans_b):
    model, b = gemm_model(b_const=True, trans_b=trans_b)
    g = pack_gemm_weights(import_onnx("m", None, model=model), _ctx())
    (node,) = g.nodes
    assert node.attrs["trans_b"] == 0 and node.attrs["b_block"] == 8
    packed = g.values[node.inputs[1]].data
    kn = b.T if trans_b else b  # (K, N) = (32, 16)
    assert packed.shape == (2, 32, 8)
    for j in range(16):  # column j of B is one contiguous run of K floats
        np.testing.assert_array_equal(packed[j // 8, :, j % 8], kn[:, j])
    assert "b" not in {v.name for v in g.consts()}


def test_columns_not_a_multiple_of_the_block_are_only_transposed():
    model, b = gemm_model(b_const=True)
    g = pack_gemm_weights(import_onnx("m", None, model=model), _ctx(vector_bits=384))  # 12
    (node,) = g.nodes
    assert node.attrs["trans_b"] == 0 and "b_block" not in node.attrs
    np.testing.assert_array_equal(g.values[node.inputs[1]].data, b.T)


def test_columns_of_half_vectors_are_packed_in_half_blocks():
    """24 columns at 16 lanes (AVX-512): blocks of 8, not a plain transpose."""
    model, b = gemm_model(b_const=True, n=24)
    g = pack_gemm_weights(import_onnx("m", None, model=model), _ctx(vector_bits=512))
    (node,) = g.nodes
    assert node.attrs["b_block"] == 8
    packed = g.values[node.inputs[1]].data
    assert packed.shape == (3, 32, 8)
    np.testing.assert_array_equal(packed[2, :, 5], b[21])  # trans_b: B is (N, K)


def test_shared_weights_are_packed_once():
    model, _ = gemm_model(b_const=True)
    second = helper.make_node("Gemm", ["a", "b", "c"], ["z"], transB=1)
    model.graph.node.append(second)
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 16]))
    g = pack_gemm_weights(import_onnx("m", None, model=model), _ctx())
    assert g.nodes[0].inputs[1] == g.nodes[1].inputs[1]
    assert len([v for v in g.consts() if v.data.ndim == 3]) == 1


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("rows", [1, 3])
def test_packed_gemm_in_a_bundle_matches_onnxruntime(trans_b, rows):
    """The whole pipeline (host board: its detected lanes, 8 for AVX2, 16 for AVX-512)
    packs B and gives ORT's answer."""
    lanes = load_board("host").vector_bits // 32
    model, _ = gemm_model(b_const=True, trans_b=trans_b, rows=rows, n=48)
    graph, _ = prepare_graph(model)
    (gemm,) = graph.nodes
    assert gemm.attrs["b_block"] == lanes
    assert graph.values[gemm.inputs[1]].shape == (48 // lanes, 32, lanes)
    a = np.random.default_rng(1).standard_normal((rows, 32)).astype(np.float32)
    (want,) = ort_outputs(model, {"a": a})
    (got,) = run_model(model, {"a": a})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
