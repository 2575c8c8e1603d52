"""The transformer encoder's ops and passes: batched MatMul with folded transposes and
packed weights, LayerNorm chains fused, a vectorizable Erf/Gelu with a bounded error,
and the whole encoder against ONNX Runtime."""

import math
import re

import networks
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.ops import approx
from packager.package import compile_model, prepare_graph
from packager.target import Target

from .helpers import ort_outputs, run_model


def _model(nodes, inputs, output, inits=(), opset=20):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info(output[0], TensorProto.FLOAT, output[1])
    graph = helper.make_graph(nodes, "g", ins, [out], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _feeds(model, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return {
        vi.name: (
            scale * rng.standard_normal([d.dim_value for d in vi.type.tensor_type.shape.dim])
        ).astype(np.float32)
        for vi in model.graph.input
    }


def _ops(model):
    graph, _ = prepare_graph(model, load_board("host"), disabled_passes={"fuse"})
    return [n.op for n in graph.nodes], graph


def _kernel_sources(model) -> str:
    return "\n".join(k.source for k in compile_model(model, load_board("host")).kernels)


def test_encoder_matches_onnxruntime():
    model = networks.transformer_encoder()
    feeds = networks.transformer_feeds(model)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    rel = np.abs(got - want).max() / np.abs(want).max()
    assert rel <= 1e-3, rel
    ops, _ = _ops(model)
    # every LayerNorm (3 decomposed, 2 fused in the model) is one op; no pow, no sqrt
    assert ops.count("layer_norm") == 5
    assert "pow" not in ops and "sqrt" not in ops
    # Q and V transposes fold into the products; K^T stays a copy (its lanes would stride)
    assert ops.count("transpose") == 2 * 2  # K^T and the merge of heads, per layer (of 4)


def test_batched_matmul_broadcast_and_folded_transposes_match_onnxruntime():
    # (2, 1, 8, 16) transposed to (2, 1, 16, 8)... A read through perm (0, 1, 3, 2); B (3, 8, 32)
    # broadcast over the leading 2; result (2, 3, 16, 32)
    nodes = [
        helper.make_node("Transpose", ["a"], ["at"], perm=[0, 1, 3, 2]),
        helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0, 2]),
        helper.make_node("MatMul", ["at", "bt"], ["y"]),
    ]
    model = _model(nodes, [("a", [2, 1, 8, 16]), ("b", [8, 3, 32])], ("y", [2, 3, 16, 32]))
    ops, graph = _ops(model)
    assert ops == ["matmul"]
    assert graph.nodes[0].attrs["perm_a"] == [0, 1, 3, 2]
    assert graph.nodes[0].attrs["perm_b"] == [1, 0, 2]
    feeds = _feeds(model)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_transpose_keeping_b_lanes_strided_is_not_folded():
    nodes = [
        helper.make_node("Transpose", ["b"], ["bt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["a", "bt"], ["y"]),
    ]
    model = _model(nodes, [("a", [2, 4, 8]), ("b", [2, 16, 8])], ("y", [2, 4, 16]))
    ops, graph = _ops(model)
    assert ops == ["transpose", "matmul"]
    assert "perm_b" not in graph.nodes[1].attrs


def test_matmul_by_constant_weights_is_packed_vectorized_and_matches():
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "bias")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["y"]),
    ]
    model = _model(nodes, [("x", [1, 12, 64])], ("y", [1, 12, 48]), [w, bias])
    ops, graph = _ops(model)
    node = graph.nodes[0]
    lanes = Target.cpu(load_board("host")).vector_bits // 32
    if 48 % lanes == 0:
        assert node.attrs["b_block"] == lanes
        assert graph.values[node.inputs[1]].shape == (48 // lanes, 64, lanes)
    feeds = _feeds(model)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _layer_norm_chain(with_affine: bool, eps=1e-5, axes=(-1,)):
    d = 16
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(np.array(axes, np.int64), "axes"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(eps, np.float32), "eps"),
        numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(d).astype(np.float32), "beta"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"]),
        helper.make_node("Sub", ["x", "mean"], ["xc"]),
        helper.make_node("Pow", ["xc", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["var"]),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["xc", "std"], ["n" if with_affine else "y"]),
    ]
    if with_affine:
        nodes += [
            helper.make_node("Mul", ["gamma", "n"], ["s"]),  # either operand order
            helper.make_node("Add", ["s", "beta"], ["y"]),
        ]
    return _model(nodes, [("x", [2, 5, d])], ("y", [2, 5, d]), inits)


@pytest.mark.parametrize("with_affine", [True, False])
def test_decomposed_layer_norm_becomes_one_op(with_affine):
    model = _layer_norm_chain(with_affine)
    ops, graph = _ops(model)
    assert ops == ["layer_norm"]
    assert graph.nodes[0].attrs == {"axis": 2, "epsilon": pytest.approx(1e-5)}
    feeds = _feeds(model, scale=3.0)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layer_norm_chain_over_a_middle_axis_stays_as_written():
    ops, _ = _ops(_layer_norm_chain(True, axes=(1,)))
    # unfused: its reductions stay (the Pow 2 is a multiply by then)
    assert "layer_norm" not in ops and ops.count("reduce_mean") == 2 and "sqrt" in ops


def _erf_model(n):
    return _model([helper.make_node("Erf", ["x"], ["y"])], [("x", [n])], ("y", [n]))


def test_erf_error_bound_on_the_compiled_kernel():
    x = np.concatenate([np.linspace(-6, 6, 24001), [0.0, 1e-6, -1e-6, 3.92, 3.93]])
    x = x.astype(np.float32)
    model = _erf_model(x.size)
    (got,) = run_model(model, {"x": x})
    want = np.array([math.erf(float(v)) for v in x])
    err = np.abs(got - want)
    assert err.max() <= 1e-6, err.max()
    small = np.abs(want) > 1e-30
    assert (err[small] / np.abs(want[small])).max() <= 1e-6
    (nan,) = run_model(_erf_model(2), {"x": np.array([np.nan, 1.0], np.float32)})
    assert np.isnan(nan[0]) and nan[1] == pytest.approx(math.erf(1.0), abs=1e-6)


def test_erf_and_gelu_kernels_are_vector_code_without_libm_calls():
    src = _kernel_sources(_erf_model(64))
    gelu = _model([helper.make_node("Gelu", ["x"], ["y"])], [("x", [64])], ("y", [64]))
    src += _kernel_sources(gelu)
    assert not re.search(r"\berff?\(", src)  # no call of the C library's erf
    assert "lanes */" in src  # the printer's mark of a vectorized loop


def test_erf_coefficients_hold_their_documented_bound_in_float32():
    x = np.linspace(-6, 6, 200001).astype(np.float32)
    xc = np.clip(x, -approx.ERF_CLAMP, approx.ERF_CLAMP).astype(np.float32)
    t = xc * xc

    def horner(coeffs):
        acc = np.full_like(t, coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = (acc * t + np.float32(k)).astype(np.float32)
        return acc

    got = xc * horner(approx.ERF_P) / horner(approx.ERF_Q)
    want = np.array([math.erf(float(v)) for v in x[::50]])
    assert np.abs(got[::50] - want).max() <= 4e-7


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("bhqd,bhkd->bhqk", [[1, 2, 5, 8], [1, 2, 7, 8]]),  # attention scores, K untransposed
        ("bik,bkj->bji", [[3, 4, 6], [3, 6, 5]]),  # output transposed
        ("ij,j->i", [[4, 6], [6]]),  # a matrix by a vector
        ("ij->ji", [[3, 5]]),
    ],
)
def test_einsum_matmul_and_transpose_equations_match_onnxruntime(eq, shapes):
    ins = [(f"x{k}", s) for k, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [n for n, _ in ins], ["y"], equation=eq)
    feeds = {n: np.random.default_rng(3).standard_normal(s).astype(np.float32) for n, s in ins}
    want = np.einsum(eq, *feeds.values())
    model = _model([node], ins, ("y", list(want.shape)), opset=12)
    np.testing.assert_allclose(ort_outputs(model, feeds)[0], want, rtol=1e-5, atol=1e-5)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "eq, shapes, message",
    [
        ("ij->i", [[3, 4]], "'ij->i' sums over an axis: one operand can only be transposed"),
        ("ii->i", [[3, 3]], "term 'ii' repeats a letter (a diagonal)"),
        ("...ij->...ji", [[2, 3, 4]], "an ellipsis is not supported"),
        ("ijk,jk->i", [[2, 3, 4], [3, 4]], "is not a matrix product"),
    ],
)
def test_einsum_other_equations_are_refused_by_name(eq, shapes, message):
    from packager.errors import PackagerError

    ins = [(f"x{k}", s) for k, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [n for n, _ in ins], ["y"], equation=eq, name="e")
    model = _model([node], ins, ("y", [3]), opset=12)
    with pytest.raises(PackagerError, match=re.escape(message)) as err:
        compile_model(model, load_board("host"))
    assert "node 'e' (Einsum)" in str(err.value)


def _attention_model(scale_op="Div", mask=True, scores_output=False, kt_perm=(0, 2, 3, 1)):
    """q, k, v (1, T, H, dh) -> heads, softmax(Q K^T scale + mask) V -> (1, H, T, dh)."""
    t, h, dh = 32, 2, 16
    inits = [numpy_helper.from_array(np.array(dh**0.5, np.float32), "s")]
    nodes = [
        helper.make_node("Transpose", ["q"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=list(kt_perm)),
        helper.make_node("Transpose", ["v"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kt"], ["sc"]),
    ]
    if scale_op == "Div":
        nodes.append(helper.make_node("Div", ["sc", "s"], ["sc2"]))
    else:
        inits[0] = numpy_helper.from_array(np.array(dh**-0.5, np.float32), "s")
        nodes.append(helper.make_node("Mul", ["s", "sc"], ["sc2"]))
    last = "sc2"
    ins = [("q", [1, t, h, dh]), ("k", [1, t, h, dh]), ("v", [1, t, h, dh])]
    if mask:
        nodes.append(helper.make_node("Add", ["sc2", "bias"], ["sc3"]))
        ins.append(("bias", [1, 1, 1, t]))
        last = "sc3"
    nodes += [
        helper.make_node("Softmax", [last], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "vh"], ["o"]),
    ]
    model = _model(nodes, ins, ("o", [1, h, t, dh]), inits)
    if scores_output:
        model.graph.output.append(
            helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, h, t, t])
        )
    return model


@pytest.mark.parametrize(
    "scale_op, mask", [("Div", True), ("Mul", False)], ids=["div-mask", "mul-nomask"]
)
def test_attention_chain_becomes_one_op_and_matches(scale_op, mask):
    model = _attention_model(scale_op, mask)
    ops, graph = _ops(model)
    assert ops == ["transpose", "attention"]  # K^T copy, then the fused attention
    att = graph.nodes[-1]
    assert att.attrs["scale"] == pytest.approx(16**-0.5)
    assert att.attrs["perm_q"] == [0, 2, 1, 3] and att.attrs["perm_v"] == [0, 2, 1, 3]
    assert len(att.inputs) == (4 if mask else 3)
    feeds = _feeds(model)
    if mask:
        feeds["bias"][..., -5:] = -1e4
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_attention_whose_probabilities_are_read_elsewhere_stays_unfused():
    ops, _ = _ops(_attention_model(scores_output=True))
    assert "attention" not in ops and "softmax" in ops


@pytest.mark.parametrize(
    "shape, axis", [([2, 7, 48], -1), ([3, 20], -1), ([2, 4, 6], 1)], ids=["d48", "d20", "axis1"]
)
def test_layer_normalization_matches_onnxruntime(shape, axis):
    d = int(np.prod(shape[axis:]))
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array(rng.standard_normal(shape[axis:]).astype(np.float32), "g"),
        numpy_helper.from_array(rng.standard_normal(shape[axis:]).astype(np.float32), "b"),
    ]
    node = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=axis)
    model = _model([node], [("x", shape)], ("y", shape), inits)
    x = (rng.standard_normal(shape) * 5 + 3).astype(np.float32)
    (want,) = ort_outputs(model, {"x": x})
    (got,) = run_model(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * d**0.5)


def test_layer_norm_row_sums_are_vector_partial_sums():
    shape = [4, 256]
    g = numpy_helper.from_array(np.ones(256, np.float32), "g")
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1)
    src = _kernel_sources(_model([node], [("x", shape)], ("y", shape), [g]))
    # the per-lane partial sums of the mean and of the variance are vector loops
    assert len(re.findall(r"/\* layer_norm_(mean|var)_part_i\d+(_i)?: \d+ lanes \*/", src)) >= 4


def test_chained_transposes_compose_into_one_perm():
    nodes = [
        helper.make_node("Transpose", ["a"], ["t1"], perm=[1, 2, 0]),  # (4, 5, 3)
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),  # (4, 3, 5)
        helper.make_node("MatMul", ["t2", "b"], ["y"]),
    ]
    model = _model(nodes, [("a", [3, 4, 5]), ("b", [4, 5, 6])], ("y", [4, 3, 6]))
    ops, graph = _ops(model)
    assert ops == ["matmul"] and graph.nodes[0].attrs["perm_a"] == [1, 0, 2]
    feeds = _feeds(model)
    (want,) = ort_outputs(model, feeds)
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
