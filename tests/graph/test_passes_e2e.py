"""The graph passes end to end: ONNX models through compile, the generated kernels and
the C runtime, against ONNX Runtime; and that the passes did fire."""

import numpy as np
import onnx
import pytest
from networks import NetBuilder
from onnx import TensorProto, helper, numpy_helper

from packager.package import compile_model

from ..helpers import ort_outputs, run_model


def finish(b: NetBuilder, shape, outputs: list[str]) -> onnx.ModelProto:
    graph = helper.make_graph(
        b.nodes,
        "passes",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))],
        [helper.make_empty_tensor_value_info(y) for y in outputs],
        b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    for out in model.graph.output:
        out.CopyFrom(inferred[out.name])
    return model


def residual_with_constants():
    """BN, Dropout, per-channel Mul/Add/Sub/Div constants, a residual add, an output
    through Identity and one read on by another node."""
    b = NetBuilder(seed=4)
    x = b.conv_bn("input", 8, 8, 3)
    x = b.op("Dropout", [x])
    y = b.bn(b.conv(x, 8, 8, 3, bias=False), 8)
    y = b.op("Mul", [y, b.param(1 + 0.1 * b.rng.standard_normal((8, 1, 1)), "m")])
    y = b.op("Add", [b.param(0.3, "a"), y])
    y = b.op("Sub", [y, b.param(0.1 * b.rng.standard_normal((1, 8, 1, 1)), "s")])
    y = b.op("Div", [y, b.param(2 + b.rng.random((8, 1, 1)), "d")])
    z = b.op("Relu", [b.op("Add", [x, y])])
    out = b.op("Identity", [z])
    side = b.op("Sigmoid", [z])
    return finish(b, (1, 8, 12, 12), [out, side]), ["conv+relu", "conv+add+relu", "sigmoid"]


def dense_with_batch_norm():
    b = NetBuilder(seed=5)
    x = b.op("Flatten", ["input"], axis=1)
    y = b.op("Gemm", [x, b.weight((16, 48), "fc")], transB=1)
    y = b.op("Relu", [b.bn(y, 16)])
    y = b.op("MatMul", [y, b.weight((16, 10), "mm")])
    y = b.op("Add", [b.op("Mul", [y, b.param(b.rng.random(10), "s")]), b.param(0.5, "t")])
    return finish(b, (2, 3, 4, 4), [b.op("Tanh", [y])]), ["reshape", "gemm+relu", "gemm+tanh"]


def transposed_conv_and_reductions():
    b = NetBuilder(seed=6)
    w = b.weight((8, 4, 3, 3), "wt")  # groups 2: 8 outputs
    x = b.op("ConvTranspose", ["input", w], group=2, strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.op("Relu", [b.bn(x, 8)])
    # squeeze-excite: a global pool read back broadcast, so it stays its own kernel
    se = b.op("GlobalAveragePool", [x])
    se = b.op("Sigmoid", [b.conv(se, 8, 8, 1)])
    x = b.op("Mul", [x, se])
    b.inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    s = b.op("ReduceSum", [b.op("Exp", [x]), "axes"])
    return finish(b, (1, 8, 5, 5), [b.op("Log", [s])])


CASES = [
    pytest.param(residual_with_constants, id="residual_with_constants"),
    pytest.param(dense_with_batch_norm, id="dense_with_batch_norm"),
    pytest.param(transposed_conv_and_reductions, id="transposed_conv_and_reductions"),
]


@pytest.mark.parametrize("build", CASES)
def test_passes_keep_the_answer(build):
    got = build()
    model = got[0] if isinstance(got, tuple) else got
    x = np.random.default_rng(0).uniform(-1, 1, _shape(model)).astype(np.float32)
    want = ort_outputs(model, {"input": x})
    for g, w in zip(run_model(model, {"input": x}), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("build", [residual_with_constants, dense_with_batch_norm])
def test_passes_fire(build):
    model, expected = build()
    graph = compile_model(model, disabled_passes={"layout"}).graph
    assert [_ops(n) for n in graph.nodes] == expected
    assert graph.outputs == [o.name for o in model.graph.output]


def test_each_pass_can_be_switched_off():
    model, _ = residual_with_constants()
    passes = ["remove_identity", "fold_scale_shift", "fuse", "dce", "fold_constants", "layout"]
    sizes = {p: _sizes(compile_model(model, disabled_passes={p}).graph) for p in passes}
    full = _sizes(compile_model(model).graph)
    assert len(sizes["fuse"]) > len(full)
    assert sum(sizes["fold_scale_shift"]) > sum(full)  # the same groups, with more inside
    x = np.random.default_rng(1).uniform(-1, 1, _shape(model)).astype(np.float32)
    want = ort_outputs(model, {"input": x})
    for g, w in zip(run_model(model, {"input": x}), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _sizes(graph) -> list[int]:
    """Inner nodes per node."""
    return [len(n.attrs["nodes"]) if n.op == "fused" else 1 for n in graph.nodes]


def _shape(model):
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def _ops(node) -> str:
    return "+".join(n["op"] for n in node.attrs["nodes"]) if node.op == "fused" else node.op
