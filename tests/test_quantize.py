"""packager quantize: the range methods, the QDQ graph, the calibration data and the CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import networks
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.quantize import quantize_model
from packager.quantize.calibrate import collect
from packager.quantize.methods import BINS, Stats, entropy_range, minmax_range, percentile_range
from packager.quantize.samples import random_samples
from tests.helpers import unoptimized_ort_session

ROOT = Path(__file__).resolve().parent.parent


def stats_of(x: np.ndarray) -> Stats:
    """What calibrate.collect records for one observed tensor."""
    model = _identity_model(x.shape)
    return collect(model, ["x"], [{"x": x.astype(np.float32)}], histogram=True)["x"]


def _identity_model(shape) -> onnx.ModelProto:
    g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "ident",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_minmax_is_the_observed_min_and_max():
    x = np.array([[-3.5, 0.0, 2.25], [1.0, 7.75, -0.5]])
    assert minmax_range(stats_of(x)) == (-3.5, 7.75)


def test_percentile_clips_the_top_of_the_magnitudes():
    x = np.arange(1, 10001, dtype=np.float64)  # |x| uniform over 1..10000
    lo, hi = percentile_range(stats_of(x), percentile=99.0)
    assert lo == 1.0
    assert abs(hi - 9900) <= 10000 / BINS + 1  # within one histogram bin
    assert percentile_range(stats_of(x), percentile=100.0)[1] == 10000


def test_percentile_counts_the_zeros():
    x = np.concatenate([np.zeros(9000), np.linspace(0.01, 1, 1000)])
    _, hi = percentile_range(stats_of(x), percentile=95.0)
    assert abs(hi - 0.5) < 0.01  # the 95th percentile of all 10000 values, zeros included


def test_entropy_on_a_gaussian_with_outliers_stays_well_inside_the_max():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(200_000), [60.0, -45.0, 52.0]])
    lo, hi = entropy_range(stats_of(x), levels=128)
    assert lo == -hi
    assert 2.5 < hi < 10  # keeps the bulk (several sigma), drops the outliers (max 60)
    assert minmax_range(stats_of(x))[1] == 60.0


def test_entropy_keeps_min_max_for_a_tensor_of_few_values():
    x = np.repeat(np.arange(17) / 16, 100)  # 16 grey levels: no distribution to fit
    assert entropy_range(stats_of(x), levels=128) == (0.0, 1.0)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def _consumers(model, tensor):
    return [n for n in model.graph.node if tensor in n.input]


def _producer(model, tensor):
    return next(n for n in model.graph.node if tensor in n.output)


def _init(model, name):
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


@pytest.fixture(scope="module")
def tiny():
    return networks.tiny_cnn()


@pytest.fixture(scope="module")
def tiny_int8(tiny):
    q, _ = quantize_model(tiny, random_samples(8, tiny), "minmax")
    return q


def test_qdq_model_checks_and_runs_in_onnx_runtime(tiny_int8):
    onnx.checker.check_model(tiny_int8, full_check=True)
    assert next(o.version for o in tiny_int8.opset_import if o.domain == "") >= 13
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (y,) = ort.InferenceSession(tiny_int8.SerializeToString()).run(None, {"input": x})
    assert y.shape == (1, 10) and np.isfinite(y).all()
    assert "BatchNormalization" not in _ops(tiny_int8)  # folded into the convs


def test_weights_are_int8_per_channel_and_biases_int32(tiny_int8):
    convs = [n for n in tiny_int8.graph.node if n.op_type == "Conv"]
    assert len(convs) == 3
    for conv in convs:
        w_dq = _producer(tiny_int8, conv.input[1])
        assert w_dq.op_type == "DequantizeLinear"
        assert helper.get_attribute_value(w_dq.attribute[0]) == 0  # axis 0
        w = _init(tiny_int8, w_dq.input[0])
        w_scale = _init(tiny_int8, w_dq.input[1])
        assert w.dtype == np.int8 and w_scale.shape == (w.shape[0],)
        assert np.abs(w).max(axis=(1, 2, 3)).max() == 127  # symmetric, full range per channel
        b_dq = _producer(tiny_int8, conv.input[2])
        assert _init(tiny_int8, b_dq.input[0]).dtype == np.int32
        x_scale = _init(tiny_int8, _producer(tiny_int8, conv.input[0]).input[1])
        np.testing.assert_allclose(_init(tiny_int8, b_dq.input[1]), x_scale * w_scale, rtol=1e-6)


def test_conv_relu_shares_one_q_and_residual_add_inputs_are_quantized(tiny_int8):
    for relu in (n for n in tiny_int8.graph.node if n.op_type == "Relu"):
        # Relu's input comes straight from its producer; its output is the quantized one
        assert _producer(tiny_int8, relu.input[0]).op_type in ("Conv", "Add")
        assert [n.op_type for n in _consumers(tiny_int8, relu.output[0])] == ["QuantizeLinear"]
    (add,) = (n for n in tiny_int8.graph.node if n.op_type == "Add")
    assert [_producer(tiny_int8, t).op_type for t in add.input] == ["DequantizeLinear"] * 2


def _cosine(a, b):
    a, b = a.ravel(), b.ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
@pytest.mark.parametrize("acts", ["uint8", "int8"])
def test_int8_outputs_agree_with_the_float_model(tiny, method, acts):
    q, _ = quantize_model(tiny, random_samples(16, tiny), method, activations=acts)
    ref = ort.InferenceSession(tiny.SerializeToString())
    # the QDQ model's own semantics: ORT's optimized kernels gave cosine 0.987 on a Zen 3
    got = unoptimized_ort_session(q)
    for s in random_samples(8, tiny, seed=5):
        assert _cosine(ref.run(None, s)[0], got.run(None, s)[0]) > 0.99


def _matmul_gemm_model():
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "mm_w"),
        numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "gemm_w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "gemm_b"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "mm_w"], ["h"]),
        helper.make_node("Gemm", ["h", "gemm_w", "gemm_b"], ["y"], transB=1),
    ]
    g = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_matmul_and_gemm_weights_are_quantized_along_their_output_axis():
    m = _matmul_gemm_model()
    q, summary = quantize_model(m, random_samples(4, m))
    assert summary.ops == {"MatMul": 1, "Gemm": 1}
    axes = {}
    for n in q.graph.node:
        if n.op_type in ("MatMul", "Gemm"):
            dq = _producer(q, n.input[1])
            axes[n.op_type] = (
                helper.get_attribute_value(dq.attribute[0]),
                _init(q, dq.input[1]).shape,
            )
    assert axes == {"MatMul": (1, (5,)), "Gemm": (0, (4,))}
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    got = ort.InferenceSession(q.SerializeToString()).run(None, {"x": x})[0]
    assert _cosine(ref, got) > 0.99


def test_an_older_opset_is_lifted_to_13():
    m = networks.NetBuilder(opset=11)
    x = m.conv("x", 3, 4, 3)
    m.opset = 11
    model = m.model("x", (1, 3, 8, 8), m.op("Flatten", [m.op("GlobalAveragePool", [x])]), "o", 4)
    q, _ = quantize_model(model, random_samples(2, model))
    assert next(o.version for o in q.opset_import if o.domain == "") == 13


def test_an_ir3_model_whose_weights_are_inputs_too_quantizes_and_runs():
    """IR version 3 (the onnx package's light zoo): every initializer is also a graph
    input, and a model may not add one that is not. The quantized model takes opset 13's
    IR version, its weights stop being inputs, and ONNX Runtime runs it."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "ir3",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    q, _ = quantize_model(model, random_samples(2, model))
    onnx.checker.check_model(q)
    assert q.ir_version >= 7 and [i.name for i in q.graph.input] == ["x"]
    assert any(n.op_type == "DequantizeLinear" and n.input[0].startswith("w") for n in q.graph.node)
    x = _sample(0, (1, 3, 8, 8))
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = ort.InferenceSession(q.SerializeToString()).run(None, {"x": x})[0]
    assert _cosine(ref, got) > 0.99


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_light_zoo_cnns_quantize_with_every_conv_integer(name):
    """The onnx package's light zoo builds its weights with ConstantOfShape (IR 3): they
    fold into initializers, so every conv is quantized, and every one becomes an
    integer conv, ShuffleNet's grouped ones included."""
    import collections

    from packager.package import prepare_graph

    path = Path(onnx.__file__).parent / "backend/test/data/light" / f"light_{name}.onnx"
    model = onnx.load(path)
    q, _ = quantize_model(model, random_samples(1, model))
    onnx.checker.check_model(q)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    weights = {n.input[1] for n in q.graph.node if n.op_type == "Conv"}
    dq = {n.output[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
    assert weights <= dq  # every conv's weight is a dequantized int8 tensor
    graph, _ = prepare_graph(q, disabled_passes={"fuse"})
    ops = collections.Counter(n.op for n in graph.nodes)
    assert ops["qconv2d"] == convs and "conv" not in ops and "conv2d_nchwc" not in ops
    x = _sample(0, (1, 3, 224, 224))
    (data,) = [i.name for i in q.graph.input]  # the weights are no longer inputs
    ort.InferenceSession(q.SerializeToString()).run(None, {data: x})


# --- the CLI: calibration directories, warnings, outputs ---------------------------------


@pytest.fixture
def tiny_file(tmp_path, tiny):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny, path)
    return path


def _calib_dir(tmp_path, arrays: dict[str, np.ndarray]) -> Path:
    d = tmp_path / "calib"
    d.mkdir(exist_ok=True)
    for name, a in arrays.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        np.save(d / name, a)
    return d


def _sample(seed=0, shape=(1, 3, 32, 32), dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_cli_quantizes_from_a_calibration_directory(cli, tmp_path, tiny_file):
    calib = _calib_dir(tmp_path, {"a.npy": _sample(0), "b.npy": _sample(1)})
    out = tmp_path / "tiny.int8.onnx"
    code, stdout, err = cli(
        "quantize", tiny_file, "-o", out, "--calib", calib, "--method", "percentile"
    )
    assert code == 0, err
    assert "quantized 3 Conv, 1 Gemm" in stdout and str(out) in stdout
    assert err == ""
    q = onnx.load(out)
    onnx.checker.check_model(q)
    props = {p.key: p.value for p in q.metadata_props}
    assert '"method": "percentile"' in props["packager.quantize"]


def test_cli_weight_bits_7_keeps_every_weight_within_63(cli, tmp_path, tiny_file):
    calib = _calib_dir(tmp_path, {"a.npy": _sample(0)})
    out = tmp_path / "tiny.int8.onnx"
    code, stdout, err = cli(
        "quantize", tiny_file, "-o", out, "--calib", calib, "--weight-bits", "7"
    )
    assert code == 0, err
    assert "(int8 weights per channel, 7-bit," in stdout
    q = onnx.load(out)
    props = {p.key: p.value for p in q.metadata_props}
    assert '"weights": "int8 per channel, 7-bit"' in props["packager.quantize"]
    convs = [n for n in q.graph.node if n.op_type in ("Conv", "Gemm")]
    for node in convs:
        w = _init(q, _producer(q, node.input[1]).input[0])
        assert w.dtype == np.int8 and np.abs(w).max() == 63  # full 7-bit range per tensor


@pytest.mark.parametrize(
    "files, message",
    [
        ({}, "no .npy files for input 'input'"),
        ({"a.npy": _sample(shape=(1, 3, 16, 16))}, "input 'input' takes float32[1, 3, 32, 32]"),
        ({"a.npy": _sample(dtype=np.float64)}, "the file holds float64[1, 3, 32, 32]"),
    ],
)
def test_cli_names_the_bad_calibration_file(cli, tmp_path, tiny_file, files, message):
    calib = _calib_dir(tmp_path, files)
    out = tmp_path / "q.onnx"
    code, _, err = cli("quantize", tiny_file, "-o", out, "--calib", calib)
    assert code == 2 and message in err
    if files:
        assert str(calib / next(iter(files))) in err
    assert not out.exists() and list(tmp_path.glob(".q.onnx*")) == []


def test_cli_calibration_dir_that_is_missing(cli, tmp_path, tiny_file):
    code, _, err = cli("quantize", tiny_file, "-o", tmp_path / "q.onnx", "--calib", "nowhere")
    assert code == 2 and "--calib nowhere: no such directory" in err


def _two_input_model(tmp_path) -> Path:
    g = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        "two",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_cli_several_inputs_take_one_subdirectory_each(cli, tmp_path):
    model = _two_input_model(tmp_path)
    a, b = _sample(shape=(2, 3)), _sample(shape=(3, 4))
    calib = _calib_dir(tmp_path, {"a/s1.npy": a})
    code, _, err = cli("quantize", model, "-o", tmp_path / "q.onnx", "--calib", calib)
    assert code == 2 and "no subdirectory for input(s) b" in err
    _calib_dir(tmp_path, {"b/s2.npy": b})
    code, _, err = cli("quantize", model, "-o", tmp_path / "q.onnx", "--calib", calib)
    assert code == 2 and "inputs 'a' and 'b' have different file names (e.g. s1.npy)" in err
    _calib_dir(tmp_path, {"b/s1.npy": b, "a/s2.npy": a})
    code, _, err = cli("quantize", model, "-o", tmp_path / "q.onnx", "--calib", calib)
    assert code == 0, err


def test_cli_random_calibration_warns(cli, tmp_path, tiny_file):
    code, _, err = cli("quantize", tiny_file, "-o", tmp_path / "q.onnx", "--calib", "random:3")
    assert code == 0
    assert "warning: --calib random:3 calibrates on random inputs" in err
    assert "only for testing" in err
    code, _, err = cli("quantize", tiny_file, "-o", tmp_path / "q.onnx", "--calib", "random:x")
    assert code == 2 and "expected random:N" in err


def test_cli_refuses_to_overwrite_the_model_or_a_foreign_file(cli, tmp_path, tiny_file):
    before = tiny_file.read_bytes()
    code, _, err = cli("quantize", tiny_file, "-o", tiny_file, "--calib", "random:1")
    assert code == 2 and "is the input model itself; refusing to overwrite it" in err
    assert tiny_file.read_bytes() == before
    other = tmp_path / "notes.onnx"
    other.write_text("mine")
    code, _, err = cli("quantize", tiny_file, "-o", other, "--calib", "random:1")
    assert code == 2 and "is not a model written by `packager quantize`" in err
    assert other.read_text() == "mine"
    float_copy = tmp_path / "copy.onnx"  # a model, but not one quantize wrote
    float_copy.write_bytes(before)
    code, _, err = cli("quantize", tiny_file, "-o", float_copy, "--calib", "random:1")
    assert code == 2 and float_copy.read_bytes() == before
    ours = tmp_path / "q.onnx"
    assert cli("quantize", tiny_file, "-o", ours, "--calib", "random:1")[0] == 0
    code, _, err = cli(
        "quantize", tiny_file, "-o", ours, "--calib", "random:1", "--method", "entropy"
    )
    assert code == 0, err  # its own output is replaced


def test_cli_refuses_a_quantized_model_as_input(cli, tmp_path, tiny_file):
    q = tmp_path / "q.onnx"
    assert cli("quantize", tiny_file, "-o", q, "--calib", "random:1")[0] == 0
    code, _, err = cli("quantize", q, "-o", tmp_path / "qq.onnx", "--calib", "random:1")
    assert code == 2 and "is quantized already" in err


@pytest.mark.slow
def test_digits_int8_top1_within_one_point_of_fp32():
    # scikit-learn ships the digits (the bench extra; scripts/setup.sh installs it)
    sys.path.insert(0, str(ROOT / "bench"))
    import quantize_accuracy as bench

    x_tr, x_te, y_tr, y_te = bench.digits_split()
    model = bench.export(bench.train(x_tr, y_tr, epochs=30))
    fp32 = bench.top1(bench.ort_run(model, {"image": x_te}), y_te)
    assert fp32 > 95
    for method in ("minmax", "percentile", "entropy"):
        for acts in ("uint8", "int8"):
            q, _ = quantize_model(model, [{"image": x_tr}], method, activations=acts)
            int8 = bench.top1(bench.ort_run(q, {"image": x_te}), y_te)
            assert abs(int8 - fp32) <= 1.0, (method, acts, fp32, int8)


def test_calibration_without_onnxruntime_uses_the_reference_evaluator(monkeypatch, tiny):
    from packager.quantize.prepare import prepare
    from packager.quantize.qdq import activation_tensors

    model, samples = prepare(tiny, "tiny"), random_samples(2, tiny)
    tensors = activation_tensors(model)  # intermediate activations, not only the input
    with_ort = collect(model, tensors, samples, histogram=False)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if not installed
    without = collect(model, tensors, samples, histogram=False)
    assert len(tensors) == 8
    for t in tensors:
        np.testing.assert_allclose(
            [without[t].lo, without[t].hi], [with_ort[t].lo, with_ort[t].hi], rtol=1e-4, atol=1e-5
        )
