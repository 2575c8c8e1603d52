"""bench/layers_vs_ort.py charges each ORT node to the bundle kernel that computes the same
ONNX node. The benchmark itself is run by hand; this checks the matching, on names as
ORT writes them and on a real run of a small model."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .helpers import bench_module


def _conv_clip_add_model():
    """conv0 -> clip -> conv1 -> add(residual) -> global pool."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.2, "w0"),
        numpy_helper.from_array(rng.standard_normal((16, 16, 1, 1)).astype(np.float32) * 0.2, "w1"),
        numpy_helper.from_array(np.array(0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6, np.float32), "hi"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c0", "lo", "hi"], ["r0"], name="clip0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="conv1"),
        helper.make_node("Add", ["c1", "r0"], ["s1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["s1"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_ort_names_lead_back_through_fused_ops_to_the_kernel_node():
    mod = bench_module("layers_vs_ort")
    model = _conv_clip_add_model()
    producer = {o: n for n in model.graph.node for o in n.output}
    nodes = {n.name: n for n in model.graph.node}
    wanted = {"conv0", "conv1", "pool"}
    assert mod.anchor_of("r0_nchwc_kernel_time", producer, nodes, wanted) == "conv0"
    assert mod.anchor_of("s1_nchwc_kernel_time", producer, nodes, wanted) == "conv1"
    assert mod.anchor_of("pool_kernel_time", producer, nodes, wanted) == "pool"
    assert mod.anchor_of("ReorderOutput_kernel_time", producer, nodes, wanted) is None


def test_a_run_charges_every_conv_to_its_kernel():
    mod = bench_module("layers_vs_ort")
    rows, unmatched, whole = mod.compare(_conv_clip_add_model(), "host", 1, 3)
    charged = {func: ort for _, ort, func, _ in rows}
    convs = [f for f in charged if "conv" in f]
    assert len(convs) == 2, charged
    assert all(charged[f] > 0 for f in convs), charged
    assert all(ours > 0 for ours, _, _, _ in rows)
    assert unmatched >= 0 and whole > 0
