"""Conv algorithm choice: which convs may run as Winograd, the rewrite it makes, and whole
networks built with each algorithm against ONNX Runtime."""

from __future__ import annotations

import dataclasses

import networks
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.graph import conv_algorithms as ca
from packager.ops.conv_winograd import matrices
from packager.package import compile_model, prepare_graph
from packager.target import CpuTarget

from ..helpers import ort_outputs, run_model


def _conv_model(c=16, oc=16, hw=12, k=3, stride=1, group=1, dilation=1):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((oc, c // group, k, k)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, hw // stride, hw // stride])
    pad = dilation * (k // 2)
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w"],
            ["c"],
            pads=[pad] * 4,
            strides=[stride] * 2,
            group=group,
            dilations=[dilation] * 2,
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    g = helper.make_graph(nodes, "conv", [x], [y], [numpy_helper.from_array(w, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


# The rule and the filter layout are those of 8-lane blocks, whatever this machine's width.
HOST256 = dataclasses.replace(load_board("host"), vector_bits=256)


def _convs(model):
    graph, _ = prepare_graph(model, HOST256)
    return graph, [n for n in graph.nodes if n.op in ("fused", "conv2d_nchwc")]


@pytest.mark.parametrize(
    "kwargs,ok",
    [
        ({}, True),
        ({"stride": 2}, False),
        ({"k": 1}, False),
        ({"k": 5}, False),
        ({"group": 16}, False),  # depthwise
        ({"group": 2}, False),
        ({"dilation": 2}, False),
        ({"c": 3}, False),  # a network's first conv reads plain NCHW
    ],
)
def test_which_convs_are_eligible(kwargs, ok):
    graph, (node,) = _convs(_conv_model(**kwargs))
    assert ca.eligible(node, graph) is ok
    assert len(ca.variants(node, graph)) == (2 if ok else 0)


def test_forced_rewrite_swaps_the_filters_for_their_transform():
    model = _conv_model()
    graph, (node,) = _convs(model)
    w_name = next(i for i in node.inputs if graph.values[i].is_const)
    out = ca.choose(graph, ca.forced("winograd_4"))
    (new,) = [n for n in out.nodes if n.op == "fused"]
    assert [n["op"] for n in new.attrs["nodes"]] == ["conv2d_winograd_nchwc", "relu"]
    assert new.attrs["nodes"][0]["attrs"] == {"pads": [1, 1, 1, 1], "tile": 4}
    consts = [v.name for v in out.consts()]
    assert w_name not in consts and f"{w_name}__winograd4" in consts
    u = out.values[f"{w_name}__winograd4"].data
    assert u.shape == (6, 6, 2, 16, 8)
    # Filters of output channel 9 (block 1, lane 1) and input channel 5, transformed.
    w = numpy_helper.to_array(model.graph.initializer[0]).astype(np.float64)
    _, g, _ = matrices(4)
    np.testing.assert_allclose(u[:, :, 1, 5, 1], g @ w[9, 5] @ g.T, rtol=1e-6, atol=1e-6)
    # The graph given is unchanged; direct keeps it as it is.
    assert [n["op"] for n in node.attrs["nodes"]] == ["conv2d_nchwc", "relu"]
    assert w_name in [v.name for v in graph.consts()]
    assert ca.choose(graph, ca.forced("direct")).nodes == graph.nodes
    # For a target with 16 vector registers: the tile count's multiple, same filters
    six = ca.choose(graph, ca.forced("winograd_4"), tile_multiple=6)
    (fused,) = [n for n in six.nodes if n.op == "fused"]
    assert fused.attrs["nodes"][0]["attrs"] == {"pads": [1, 1, 1, 1], "tile": 4, "tile_multiple": 6}
    np.testing.assert_array_equal(six.values[f"{w_name}__winograd4"].data, u)


@pytest.mark.parametrize("bits,multiple", [(256, 6), (512, None)])
def test_a_build_gives_its_winograd_convs_the_targets_tile_multiple(bits, multiple):
    """At 256 bits (16 vector registers) every Winograd conv holds its tiles in a
    multiple of 6; at 512 bits it has no such attribute (its kernels and their keys as
    before), and the network's outputs match ONNX Runtime's either way."""
    model = networks.resnet(seed=2, blocks=(1, 1, 1, 1), width=16, size=64)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    board = dataclasses.replace(HOST256, vector_bits=bits)
    compiled = compile_model(model, board=board, conv_algorithm="winograd_4")
    inner = [n for node in compiled.graph.nodes for n in node.attrs.get("nodes", [])]
    wino = [n["attrs"] for n in inner if n["op"] == "conv2d_winograd_nchwc"]
    assert len(wino) >= 3
    assert {a.get("tile_multiple") for a in wino} == {multiple}
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x}, conv_algorithm="winograd_4", board=board)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="unknown conv algorithm 'fft'.*direct, winograd_2"):
        ca.forced("fft")


@pytest.mark.parametrize("algorithm", ["winograd_2", "winograd_4"])
def test_resnet_with_winograd_matches_onnxruntime(algorithm):
    model = networks.resnet(seed=2, blocks=(1, 1, 1, 1), width=16, size=64)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    compiled = compile_model(model, conv_algorithm=algorithm)
    ops = [n["op"] for node in compiled.graph.nodes for n in node.attrs.get("nodes", [])]
    assert ops.count("conv2d_winograd_nchwc") >= 3
    (got,) = run_model(model, {"input": x}, conv_algorithm=algorithm)
    # Winograd rounds differently from a direct sum: compare at the output's scale.
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_cli_build_with_a_forced_algorithm(tmp_path, cli):
    path = tmp_path / "conv.onnx"
    onnx.save(_conv_model(), path)
    code, _, err = cli(
        "build", path, "--board", "host", "-o", tmp_path / "b", "--conv-algorithm", "winograd_2"
    )
    assert code == 0, err
    assert any("winograd" in p.name for p in (tmp_path / "b" / "kernels").glob("*.c"))
    with pytest.raises(SystemExit) as stop:  # argparse refuses it, naming the choices
        cli("build", path, "--board", "host", "-o", tmp_path / "c", "--conv-algorithm", "fast")
    assert stop.value.code == 2 and not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "c,oc,hw,want",
    [
        (64, 64, 56, "winograd_4"),
        (16, 64, 28, "winograd_4"),
        (64, 64, 24, "winograd_4"),
        (64, 64, 23, "winograd_2"),
        (128, 64, 14, "winograd_2"),
        (48, 192, 10, "winograd_2"),
        (64, 64, 9, "direct"),
        (256, 256, 7, "direct"),
        (8, 64, 56, "direct"),  # too few channels for the transforms to pay
        (128, 32, 56, "winograd_4"),  # DenseNet-121's growth convs
        (128, 32, 14, "winograd_2"),
        (16, 32, 56, "direct"),  # 512 products a tile: too few
        (64, 16, 56, "direct"),
    ],
)
def test_untuned_rule_by_shape(c, oc, hw, want):
    graph, (node,) = _convs(_conv_model(c=c, oc=oc, hw=hw))
    assert ca.default_algorithm(node, graph) == want
    out = ca.choose(graph, ca.by_default())
    ops = [n["op"] for node in out.nodes for n in node.attrs.get("nodes", [])]
    assert ("conv2d_winograd_nchwc" in ops) is (want != "direct")
    if want != "direct":
        tile = want[-1]
        assert any(v.name.endswith(f"__winograd{tile}") for v in out.consts())


def test_untuned_build_follows_the_rule_and_direct_can_be_forced():
    model = networks.resnet(seed=3, blocks=(1, 1, 1, 1), width=64, size=112)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 112, 112)).astype(np.float32)

    def tiles(compiled):
        inner = [n for node in compiled.graph.nodes for n in node.attrs.get("nodes", [])]
        return sorted(n["attrs"]["tile"] for n in inner if n["op"] == "conv2d_winograd_nchwc")

    # stride-1 3x3 convs: two at 28x28 (64 ch), one each at 14x14 (128), 7x7 (256), 4x4;
    # at 512 bits the 7x7 one takes F(2x2) too
    avx2 = load_board("host-avx2")
    avx512 = dataclasses.replace(avx2, vector_bits=512, features=(*avx2.features, "avx512f"))
    assert tiles(compile_model(model, avx2)) == [2, 4, 4]
    assert tiles(compile_model(model, avx512)) == [2, 2, 4, 4]
    assert tiles(compile_model(model, conv_algorithm="direct")) == []
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())


def test_a_budget_keeps_the_winograd_forms_that_fit_and_pay():
    graph, (node,) = _convs(_conv_model(c=64, oc=64, hw=56))
    w = next(graph.values[i] for i in node.inputs if graph.values[i].is_const)
    extra = 3 * w.nbytes  # F(4x4): 36 transformed values per 9 filter taps

    def winograd(out):
        return [v.name for v in out.consts() if "__winograd" in v.name]

    four = ca.forced("winograd_4")
    assert winograd(ca.choose(graph, four, budget=extra)) == [f"{w.name}__winograd4"]
    assert winograd(ca.choose(graph, four, budget=extra - 1)) == []
    # A form its records show slower than the direct conv is not kept, room or not.
    assert winograd(ca.choose(graph, four, budget=extra, gain=lambda k, v, t: -1e-4)) == []
    assert ca.model_gain(0, ca.variants(node, graph)[1], [("direct", node, graph)]) > 0


def test_within_budget_spends_on_the_most_gain_per_byte():
    graph, (node,) = _convs(_conv_model(c=64, oc=64, hw=56))
    two, four = ca.variants(node, graph, transform=False)
    picked = {0: (four, []), 1: (two, []), 2: (two, [])}
    gains = {0: 3.0, 1: 1.0, 2: 0.9}  # per byte: F(2x2) 1.0 / 0.78, F(4x4) 3.0 / 3
    budget = four.extra_bytes + two.extra_bytes
    kept = ca.within_budget(picked, budget, lambda k, v, t: gains[k])
    assert sorted(kept) == [1, 2]  # both F(2x2) first; the F(4x4) no longer fits


def _tuned_conv():
    """A 64 -> 64 conv at 56x56: (its node, graph, memory plan, node index, trial of
    forms), a Tuning without records, and ``records(seconds)``, which gives each form
    named its best record."""
    from packager.graph.memory import plan_memory
    from packager.lowering import kernel_key
    from packager.tune.apply import Tuning

    graph, (node,) = _convs(_conv_model(c=64, oc=64, hw=56))
    plan = plan_memory(graph)
    tuning = Tuning(HOST256, [])
    trials = []
    ca.choose(graph, lambda k, n, trial: trials.append((k, trial)) or "direct")
    ((k, trial),) = trials

    def records(seconds):
        for algorithm, n, g in trial:
            if algorithm in seconds:
                key = kernel_key(n, g, plan.inplace.get(k, ()))
                tuning.best[("cpu", key)] = {"result": {"costs": [seconds[algorithm]]}}

    return (node, graph, plan, k, trial), tuning, records


@pytest.mark.parametrize(
    "c,oc,hw,bits,want",
    [
        (512, 512, 7, 512, "winograd_2"),  # ResNet's layer4 at 512 bits
        (256, 256, 7, 512, "winograd_2"),
        (512, 512, 7, 256, "direct"),  # 16 registers: the narrow rule
        (512, 512, 6, 512, "direct"),  # under 7x7
        (192, 320, 7, 512, "direct"),  # Inception's: too few channel products
        (128, 32, 7, 512, "direct"),  # DenseNet-121's growth convs
        (64, 64, 56, 512, "winograd_4"),  # wider outputs: as at 256 bits
    ],
)
def test_untuned_rule_at_512_bits_takes_f2_from_7x7_for_many_channels(c, oc, hw, bits, want):
    graph, (node,) = _convs(_conv_model(c=c, oc=oc, hw=hw))
    target = CpuTarget(vector_bits=bits)
    assert ca.default_algorithm(node, graph, target) == want
    out = ca.choose(graph, ca.by_default(target))
    ops = [n["op"] for node in out.nodes for n in node.attrs.get("nodes", [])]
    assert ("conv2d_winograd_nchwc" in ops) is (want != "direct")


def test_a_tuned_build_weighs_each_form_by_its_records():
    (node, graph, plan, k, trial), tuning, records = _tuned_conv()
    records({"direct": 2e-3, "winograd_4": 0.5e-3})  # F(2x2) has none
    pick, gain = tuning.pick_algorithm(plan)
    two, four = ca.variants(node, graph, transform=False)
    assert pick(k, node, trial) == "winograd_4"
    assert gain(k, four, trial) == pytest.approx(1.5e-3)  # what the records say it saves
    assert gain(k, two, trial) == ca.model_gain(k, two, trial)  # no record: the estimate
    kept = ca.choose(graph, pick, 3 * four.filters.nbytes, gain)
    assert any(v.name.endswith("__winograd4") for v in kept.consts())
    records({"winograd_4": 3e-3})  # measured slower than direct: never kept
    assert pick(k, node, trial) == "direct" and gain(k, four, trial) < 0


def test_records_without_the_untuned_form_do_not_overrule_it():
    """Records of the direct form only (the Winograd forms' keys changed since, or the
    run tuned direct alone): the conv takes the form the untuned rule takes, F(4x4)."""
    (node, graph, plan, k, trial), tuning, records = _tuned_conv()
    records({"direct": 1e-6})
    pick, _ = tuning.pick_algorithm(plan)
    assert ca.default_algorithm(node, graph) == "winograd_4"
    assert pick(k, node, trial) == "winograd_4"
    records({"winograd_4": 2e-6})  # measured: the records decide
    assert pick(k, node, trial) == "direct"
