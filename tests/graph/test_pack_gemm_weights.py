"""Constant gemm weights are transposed at package time; answers stay the same."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from packager.frontend.importer import import_onnx
from packager.graph.passes.pack_gemm_weights import pack_gemm_weights

from ..helpers import ort_outputs, run_model


def gemm_model(b_const: bool):
    rng = np.random.default_rng(0)
    b = rng.standard_normal((16, 32)).astype(np.float32)  # (N, K), read with transB=1
    c = rng.standard_normal((16,)).astype(np.float32)
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3, 32])]
    inits = [numpy_helper.from_array(c, "c")]
    if b_const:
        inits.append(numpy_helper.from_array(b, "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [16, 32]))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 16])], inits
    )
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
