"""Blocked int8 activations between integer ops (packager/graph/passes/int8_layout.py):
every value an integer op writes for integer readers is NCHW[x]c, nothing repacks it
between them, and the bundle computes the same bytes as the NCHW path."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantType

from packager.backend import PackagerRep
from packager.bundle import write_bundle_files
from packager.native import build_run_bundle
from packager.package import compile_model, prepare_graph
from tests.test_quantized_models import SHAPE, _qdq

INTEGER = ("qconv2d", "qadd", "quantize_blocked")


def _edges(graph):
    """(producer, reader, value) of each value written and read by integer ops."""
    made = {o: n for n in graph.nodes for o in n.outputs}
    return [
        (made[i], n, i)
        for n in graph.nodes
        if n.op in INTEGER
        for i in n.inputs
        if i in made and made[i].op in INTEGER
    ]


def _run(model: onnx.ModelProto, x: np.ndarray, disabled: set[str]) -> np.ndarray:
    compiled = compile_model(model, None, disabled_passes=disabled)
    tmp = tempfile.TemporaryDirectory(prefix="int8-layout-")
    bundle = Path(tmp.name) / "bundle"
    bundle.mkdir()
    write_bundle_files(bundle, compiled, {}, None)
    exe = build_run_bundle(bundle)
    return PackagerRep(tmp, exe, compiled.graph.inputs, compiled.graph.outputs).run([x])[0]


@pytest.mark.parametrize(
    "kind, act", [("mobilenet", QuantType.QUInt8), ("resnet", QuantType.QInt8)]
)
def test_int8_chain_is_blocked_and_bit_identical_to_nchw(tmp_path, kind, act):
    model = onnx.load(_qdq(tmp_path, kind, act))
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    edges = _edges(graph)
    convs = sum(n.op == "qconv2d" for n in graph.nodes)
    assert len(edges) >= convs - 2  # the chain: (nearly) every conv reads another's output
    for prod, reader, v in edges:
        shape = graph.values[v].shape
        assert len(shape) == 5, f"{prod.name} -> {reader.name}: {v} is {shape}"
        if prod.op == "qconv2d":  # written in the conv's own block of L channels
            assert shape[1:2] + shape[4:] == graph.values[prod.inputs[1]].shape[:1] + (
                graph.values[prod.inputs[1]].shape[4],
            )
        if reader.op == "qconv2d" and reader.inputs[0] == v:
            assert reader.attrs["c"] >= (shape[1] - 1) * shape[4] + 1
    # no transform op anywhere in the chain: only integer ops, Q/DQ at its ends
    ops = {n.op for n in graph.nodes}
    assert ops <= {*INTEGER, "qdense", "quantize_linear", "dequantize_linear"} | {
        "max_pool",
        "global_avg_pool2d",
        "reduce_mean",
        "reshape",
        "flatten",
        "softmax",
    }, ops
    # values leaving the chain stay NCHW
    for n in graph.nodes:
        if n.op == "dequantize_linear":
            assert len(graph.values[n.inputs[0]].shape) != 5

    x = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    blocked = _run(model, x, set())
    nchw = _run(model, x, {"int8_layout"})
    assert blocked.shape == nchw.shape
    assert np.array_equal(blocked, nchw)
