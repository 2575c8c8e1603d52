"""The vector exp of the C printer (codegen/cstyle.py EXP_F32) and the row-wise softmax
schedule that uses it: error bounds against float64 over the whole float32 range, the
edges (underflow, overflow, NaN), and that the kernels are vector code without expf."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from packager.boards import load_board
from packager.codegen.cstyle import EXP_F32
from packager.package import compile_model

from .helpers import ort_outputs, run_model


def _model(op, shape, **attrs):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _sources(model) -> str:
    return "\n".join(k.source for k in compile_model(model, load_board("host")).kernels)


def test_vector_exp_relative_error_over_the_float32_range():
    x = np.concatenate([np.linspace(-87.3, 88.3, 350_000), np.linspace(-1, 1, 2_000)])
    x = x[: x.size // 16 * 16].astype(np.float32)
    model = _model("Exp", [x.size])
    assert "expf(" not in _sources(model)
    (got,) = run_model(model, {"x": x})
    want = np.exp(x.astype(np.float64))
    assert (np.abs(got - want) / want).max() <= 2e-7


def test_vector_exp_edges():
    lo, hi = EXP_F32["lo"], EXP_F32["hi"]
    x = np.array([0, 1, -1, np.nan, np.inf, -np.inf, -1e4, 1e4, lo - 0.01, hi + 0.01, -87.0, 88.0])
    x = np.tile(x, 4)[:16].astype(np.float32)
    (got,) = run_model(_model("Exp", [16]), {"x": x})
    assert got[0] == 1.0 and got[1] == pytest.approx(np.e, rel=2e-7)
    assert np.isnan(got[3]) and got[4] == np.inf and got[5] == 0.0
    assert got[6] == 0.0 and got[7] == np.inf and got[8] == 0.0 and got[9] == np.inf
    np.testing.assert_allclose(got[10:12], np.exp(x[10:12].astype(np.float64)), rtol=2e-7)


@pytest.mark.parametrize("shape", [[1, 4, 32, 32], [3, 48]])
def test_softmax_is_vector_code_computing_exp_once_and_matches(shape):
    model = _model("Softmax", shape, axis=-1)
    src = _sources(model)
    assert "expf(" not in src and "lanes */" in src
    assert src.count("<< 23") == 1  # one exp per element: the exponent scaling, once
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x[..., -3:] = -1e4  # masked positions as an attention mask writes them
    (want,) = ort_outputs(model, {"x": x})
    (got,) = run_model(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
