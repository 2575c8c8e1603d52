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

INTEGER = ("qconv2d", "qadd", "quantize_blocked", "max_pool_nchwc")


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


def _run(model: onnx.ModelProto, x: np.ndarray, disabled: set[str]) -> tuple:
    compiled = compile_model(model, None, disabled_passes=disabled)
    tmp = tempfile.TemporaryDirectory(prefix="int8-layout-")
    bundle = Path(tmp.name) / "bundle"
    bundle.mkdir()
    write_bundle_files(bundle, compiled, {}, None)
    exe = build_run_bundle(bundle)
    return PackagerRep(tmp, exe, compiled.graph.inputs, compiled.graph.outputs).run([x])


@pytest.mark.parametrize(
    "kind, act", [("mobilenet", QuantType.QUInt8), ("resnet", QuantType.QInt8)]
)
def test_int8_chain_is_blocked_and_bit_identical_to_nchw(tmp_path, kind, act):
    model = onnx.load(_qdq(tmp_path, kind, act))
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    edges = _edges(graph)
    convs = sum(n.op == "qconv2d" for n in graph.nodes)
    if kind == "resnet":  # the stem's max pool pools the integers, blocked
        (pool,) = [n for n in graph.nodes if "pool" in n.op and "global" not in n.op]
        assert pool.op == "max_pool_nchwc" and graph.values[pool.inputs[0]].dtype == "int8"
    assert len(edges) >= convs - 2  # the chain: (nearly) every conv reads another's output
    for prod, reader, v in edges:
        shape = graph.values[v].shape
        assert len(shape) == 5, f"{prod.name} -> {reader.name}: {v} is {shape}"
        if prod.op == "max_pool_nchwc":  # the block of its input
            assert shape[4] == graph.values[prod.inputs[0]].shape[4]
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
    blocked = _run(model, x, set())[0]
    nchw = _run(model, x, {"int8_layout"})[0]
    assert blocked.shape == nchw.shape
    assert np.array_equal(blocked, nchw)


def _qadd_model(add_feeds_conv: bool) -> onnx.ModelProto:
    """Two 1x1 convs a, b of one quantized input, each also read by a conv of its own
    (so the add cannot fold into either), a QDQ add of a and b, then either a conv of
    the sum or the sum itself as an output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    c = 24
    inits = [
        numpy_helper.from_array(np.float32(0.05), "s"),
        numpy_helper.from_array(np.uint8(120), "z"),
        numpy_helper.from_array(np.float32(0.08), "s2"),
        numpy_helper.from_array(np.uint8(100), "z2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
    ]

    def conv(name, src, cin, outs):
        w = rng.integers(-127, 128, (c, cin, 1, 1)).astype(np.int8)
        inits.extend(
            [
                numpy_helper.from_array(w, f"{name}_w"),
                numpy_helper.from_array(
                    rng.uniform(0.002, 0.01, c).astype(np.float32), f"{name}_ws"
                ),
                numpy_helper.from_array(np.zeros(c, np.int8), f"{name}_wz"),
            ]
        )
        nodes.extend(
            [
                helper.make_node(
                    "DequantizeLinear",
                    [f"{name}_w", f"{name}_ws", f"{name}_wz"],
                    [f"{name}_wd"],
                    axis=0,
                ),
                helper.make_node("Conv", [src, f"{name}_wd"], [f"{name}_y"]),
                helper.make_node("QuantizeLinear", [f"{name}_y", "s", "z"], [f"{name}_q"]),
            ]
            + [helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [o]) for o in outs]
        )

    conv("a", "xd", 8, ["a_d0", "a_d1"])
    conv("b", "xd", 8, ["b_d0", "b_d1"])
    conv("c", "a_d1", c, ["c_out"])
    conv("d", "b_d1", c, ["d_out"])
    nodes += [
        helper.make_node("Add", ["a_d0", "b_d0"], ["sum"]),
        helper.make_node("QuantizeLinear", ["sum", "s2", "z2"], ["sum_q"]),
        helper.make_node("DequantizeLinear", ["sum_q", "s2", "z2"], ["sum_d"]),
    ]
    outs = ["c_out", "d_out"]
    if add_feeds_conv:
        conv("e", "sum_d", c, ["e_out"])
        outs.append("e_out")
    else:
        outs.append("sum_d")
    g = helper.make_graph(
        nodes,
        "qadd_chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, c, 6, 6]) for o in outs],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("add_feeds_conv", [True, False])
def test_a_standalone_qadd_is_blocked_with_its_operands_or_not_at_all(add_feeds_conv):
    model = _qadd_model(add_feeds_conv)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    qadd = next(n for n in graph.nodes if n.op == "qadd")
    dims = {len(graph.values[v].shape) for v in [*qadd.inputs, *qadd.outputs]}
    assert dims == ({5} if add_feeds_conv else {4})
    x = np.random.default_rng(2).uniform(-3, 3, (1, 8, 6, 6)).astype(np.float32)
    blocked, nchw = _run(model, x, set()), _run(model, x, {"int8_layout"})
    assert len(blocked) == 3
    for got, want in zip(blocked, nchw, strict=True):
        assert got.shape == want.shape == (1, 24, 6, 6)
        assert np.array_equal(got, want)
        assert len(np.unique(got)) > 10  # real values, not a saturated constant
