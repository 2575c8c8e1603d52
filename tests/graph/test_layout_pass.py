"""The layout pass on small graphs: which ops go blocked, where the transforms are (only
at boundaries), packed constants, the knobs, and the numbers (through the te
interpreter, against onnx's reference evaluator)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from packager.boards import load_board
from packager.frontend.importer import import_onnx
from packager.graph.passes.layout import layout_pass
from packager.graph.pipeline import PassContext
from packager.target import Target

from ..ops.onnx_check import run_graph


class Net:
    """A tiny ONNX graph builder: every op returns its output name."""

    def __init__(self, shape, seed=0):
        self.rng = np.random.default_rng(seed)
        self.shape, self.nodes, self.inits = list(shape), [], []

    def const(self, data, dtype=np.float32) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(data, dtype), name))
        return name

    def op(self, op_type, inputs, **attrs) -> str:
        out = f"{op_type.lower()}{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k=3, group=1, stride=1) -> str:
        w = self.const(self.rng.standard_normal((cout, cin // group, k, k)) * 0.3)
        b = self.const(self.rng.standard_normal(cout) * 0.1)
        p = k // 2
        return self.op(
            "Conv", [x, w, b], kernel_shape=[k, k], pads=[p] * 4, group=group, strides=[stride] * 2
        )

    def graph(self, *outputs):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, self.shape)
        outs = [helper.make_value_info(o, helper.TypeProto()) for o in outputs]
        g = helper.make_graph(self.nodes, "g", [x], outs, self.inits)
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model


# The structural tests build for 8 float lanes whatever this machine has; the other
# widths are tested by name below.
BOARD_256 = replace(load_board("host"), vector_bits=256)
BOARD_512 = replace(load_board("host"), vector_bits=512)


def run_pass(model, **ctx):
    ctx.setdefault("board", BOARD_256)
    return layout_pass(import_onnx("test.onnx", model=model), PassContext(**ctx))


def ops(graph) -> Counter:
    return Counter(n.op for n in graph.nodes)


def check_numbers(model, graph, seed=1):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = run_graph(graph, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def head_model():
    """conv(3->16) relu conv(16->16) maxpool global-avg-pool flatten gemm softmax."""
    n = Net((1, 3, 12, 12))
    y = n.op("Relu", [n.conv("x", 3, 16)])
    y = n.op("MaxPool", [n.conv(y, 16, 16)], kernel_shape=[2, 2], strides=[2, 2])
    y = n.op("Flatten", [n.op("GlobalAveragePool", [y])], axis=1)
    w = n.const(n.rng.standard_normal((5, 16)))
    return n.graph(n.op("Softmax", [n.op("Gemm", [y, w], transB=1)], axis=1))


def test_conv_chain_has_one_transform_before_flatten():
    model = head_model()
    g = run_pass(model)
    counts = ops(g)
    assert counts["conv2d_nchwc"] == 2 and counts["conv"] == 0
    assert counts["max_pool_nchwc"] == 1 and counts["layout_transform"] == 1
    (t,) = [n for n in g.nodes if n.op == "layout_transform"]
    assert (t.attrs["src"], t.attrs["dst"]) == ("NCHW8c", "NCHW")
    assert [n.op for n in g.nodes if t.outputs[0] in n.inputs] == ["reshape"]
    first = g.nodes[0]
    assert first.op == "conv2d_nchwc" and first.inputs[0] == "x"  # reads the RGB input as is
    assert g.values[first.inputs[1]].shape == (2, 3, 3, 3, 1, 8)
    assert g.values[g.nodes[2].inputs[1]].shape == (2, 2, 3, 3, 8, 8)
    check_numbers(model, g)


def test_unpacked_weights_are_dropped():
    model = head_model()
    g = run_pass(model)
    conv_weights = {t.name for t in model.graph.initializer if len(t.dims) == 4}
    assert not conv_weights & set(g.values)
    assert not conv_weights & {v.name for v in g.consts()}


def residual_model(per_channel_shape=(16, 1, 1)):
    n = Net((1, 3, 10, 10))
    a = n.conv("x", 3, 16)
    b = n.op("Relu", [n.conv(a, 16, 16)])
    b = n.op("Mul", [b, n.const(n.rng.standard_normal(per_channel_shape))])
    b = n.op("Add", [b, n.const(0.5)])
    y = n.op("Add", [a, n.conv(b, 16, 16, k=1)])
    y = n.op("AveragePool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return n.graph(y)


@pytest.mark.parametrize("shape", [(16, 1, 1), (1, 16, 1, 1), (10,), (1, 10, 10)])
def test_residual_block_stays_blocked_with_constants_packed(shape):
    model = residual_model(shape)
    g = run_pass(model)
    counts = ops(g)
    assert counts["conv2d_nchwc"] == 3 and counts["avg_pool_nchwc"] == 1
    assert counts["layout_transform"] == 1  # the graph output only
    assert g.nodes[-1].op == "layout_transform" and g.nodes[-1].outputs == g.outputs
    (mul,) = [n for n in g.nodes if n.op == "mul"]
    assert len(g.values[mul.inputs[1]].shape) == 5  # re-laid out at package time
    check_numbers(model, g)


def test_input_with_whole_blocks_is_transformed_once():
    n = Net((1, 16, 6, 6))
    a, b = n.conv("x", 16, 16), n.conv("x", 16, 8, k=1)
    model = n.graph(n.op("Concat", [a, b], axis=1))
    g = run_pass(model)
    counts = ops(g)
    assert counts["layout_transform"] == 2 and counts["concat"] == 1  # in once, out once
    (cat,) = [n for n in g.nodes if n.op == "concat"]
    assert len(g.values[cat.outputs[0]].shape) == 5
    check_numbers(model, g)


def test_concat_with_a_part_of_odd_channels_runs_in_nchw():
    n = Net((1, 3, 6, 6))
    a = n.conv("x", 3, 16)
    model = n.graph(n.op("Concat", [a, n.op("Relu", ["x"])], axis=1))
    g = run_pass(model)
    assert ops(g)["layout_transform"] == 1
    (cat,) = [n for n in g.nodes if n.op == "concat"]
    assert len(g.values[cat.outputs[0]].shape) == 4
    check_numbers(model, g)


def test_odd_output_channels_stay_nchw():
    n = Net((1, 16, 6, 6))
    y = n.conv("x", 16, 6)  # 6 output channels: not whole blocks of 4 or more
    model = n.graph(y)
    g = run_pass(model)
    assert ops(g) == Counter(conv=1)


@pytest.mark.parametrize(
    "channels, group, span",
    [
        (16, 8, 1),  # groups of 2 channels inside one block of 8
        (136, 4, 9),  # ShuffleNet: 4 groups of 34; a block of 8 outputs in 2 reads 68 + 4
        (24, 4, 2),  # 6 input channels a group into 12 outputs (28 at full size)
    ],
)
def test_groups_splitting_blocks_read_the_blocks_they_span(channels, group, span):
    n = Net((1, channels, 5, 5))
    out = channels * 2 if channels == 24 else channels
    y = n.op("Relu", [n.conv("x", channels, channels, k=1)])
    y = n.op("Relu", [n.conv(y, channels, out, k=1, group=group)])
    model = n.graph(n.conv(y, out, 16, k=1))
    g = run_pass(model)
    (conv,) = [node for node in g.nodes if node.attrs.get("groups", 1) > 1]
    assert conv.op == "conv2d_nchwc"
    assert conv.attrs["spanned"] == 1 and conv.attrs["groups"] == group
    assert g.values[conv.inputs[1]].shape[1] == span  # input blocks per output block
    assert ops(g)["conv"] == 0
    check_numbers(model, g)


def test_lone_depthwise_conv_between_nchw_ops_is_not_worth_blocking():
    n = Net((1, 16, 8, 8))
    y = n.op("Relu", [n.conv(n.op("Sigmoid", ["x"]), 16, 16, group=16)])
    model = n.graph(n.op("Reshape", [y, n.const([1, -1], np.int64)]))
    g = run_pass(model)
    assert ops(g)["conv"] == 1 and ops(g)["layout_transform"] == 0


def test_depthwise_and_grouped_chain_is_blocked():
    n = Net((1, 3, 8, 8))
    y = n.conv("x", 3, 32)
    y = n.op("Clip", [n.conv(y, 32, 32, group=32), n.const(0.0), n.const(6.0)])
    y = n.conv(y, 32, 16, group=2, stride=2)
    model = n.graph(y)
    g = run_pass(model)
    assert ops(g) == Counter(conv2d_nchwc=3, clip=1, layout_transform=1)
    check_numbers(model, g)


def inverted_residual_model():
    """MobileNetV2's block at channel counts that are multiples of 8, not of 16: 24 in
    and out, expanded to 144, then a 1x1 conv to 40."""
    n = Net((1, 3, 8, 8))
    x = n.conv("x", 3, 24)
    y = n.op("Clip", [n.conv(x, 24, 144, k=1), n.const(0.0), n.const(6.0)])
    y = n.op("Clip", [n.conv(y, 144, 144, group=144), n.const(0.0), n.const(6.0)])
    y = n.op("Add", [x, n.conv(y, 144, 24, k=1)])
    return n.graph(n.conv(y, 24, 40, k=1))


def conv_blocks(g) -> list[int]:
    return [g.values[n.outputs[0]].shape[-1] for n in g.nodes if n.op == "conv2d_nchwc"]


@pytest.mark.parametrize(
    "board, blocks", [(BOARD_256, [8, 8, 8, 8, 8]), (BOARD_512, [8, 16, 16, 8, 8])]
)
def test_each_conv_picks_the_largest_block_of_its_channels(board, blocks):
    """At 16 lanes the 24- and 40-channel convs run in blocks of 8 and the 144-channel
    ones in 16: the block changes inside the convs, with no transform and no conv left
    in NCHW (the graph output's transform is the only one)."""
    model = inverted_residual_model()
    g = run_pass(model, board=board)
    assert ops(g) == Counter(conv2d_nchwc=5, clip=2, add=1, layout_transform=1)
    assert conv_blocks(g) == blocks
    (dw,) = [n for n in g.nodes if n.op == "conv2d_nchwc" and n.attrs.get("groups") == 144]
    assert g.values[dw.inputs[1]].shape[-2:] == (1, blocks[1])  # reads its input's block
    check_numbers(model, g)


def test_blocks_down_to_four_lanes():
    """12 and 20 channels (multiples of 4 only) at 16 lanes: blocks of 4."""
    n = Net((1, 12, 6, 6))
    model = n.graph(n.conv(n.op("Relu", [n.conv("x", 12, 20)]), 20, 12))
    g = run_pass(model, board=BOARD_512)
    assert conv_blocks(g) == [4, 4] and ops(g)["layout_transform"] == 2  # in and out
    check_numbers(model, g)


def test_convs_feeding_a_concat_share_its_block():
    """Parts of 16 and 24 channels at 16 lanes: both convs write blocks of 8 (the 16 one
    through a relu), so the concat runs blocked; the third conv, after it, takes 16."""
    n = Net((1, 16, 6, 6))
    a, b = n.op("Relu", [n.conv("x", 16, 16)]), n.conv("x", 16, 24)
    model = n.graph(n.conv(n.op("Concat", [a, b], axis=1), 40, 32, k=1))
    g = run_pass(model, board=BOARD_512)
    assert conv_blocks(g) == [8, 8, 16]
    (cat,) = [n for n in g.nodes if n.op == "concat"]
    assert g.values[cat.outputs[0]].shape[-1] == 8
    assert ops(g)["layout_transform"] == 2  # the input and the output only
    check_numbers(model, g)


def _resize(n, x, out_hw, mode="nearest", ctm="asymmetric", roi=None, **attrs):
    """A Resize of H and W to ``out_hw`` (sizes input; roi for tf_crop_and_resize)."""
    roi_in = n.const(roi) if roi is not None else ""
    sizes = n.const([n.shape[0], attrs.pop("channels"), *out_hw], np.int64)
    return n.op(
        "Resize", [x, roi_in, "", sizes], mode=mode, coordinate_transformation_mode=ctm, **attrs
    )


def test_fpn_upsampling_and_concat_run_blocked():
    """An FPN's head: parts of 24 channels upsampled by 2 and 4 (nearest) and by 2
    (linear), concatenated: every resize and the concat run on blocks of 8, with no
    transform but the input's and the output's (before: each part out of its blocks,
    resized and concatenated in NCHW, and into blocks again)."""
    n = Net((1, 16, 16, 16))
    p0 = n.conv("x", 16, 24)
    p1 = n.conv(n.conv("x", 16, 16, stride=2), 16, 24)
    p2 = n.conv(n.conv(n.conv("x", 16, 16, stride=2), 16, 16, stride=2), 16, 24)
    up1 = _resize(n, p1, (16, 16), channels=24)
    up2 = _resize(n, p2, (16, 16), channels=24)
    lin = _resize(n, p1, (16, 16), "linear", "half_pixel", channels=24)
    model = n.graph(n.op("Concat", [p0, up1, up2, lin], axis=1))
    g = run_pass(model, board=BOARD_512)
    resizes = [v for v in g.nodes if v.op == "resize"]
    assert len(resizes) == 3
    assert all(g.values[r.outputs[0]].shape == (1, 3, 16, 16, 8) for r in resizes), resizes
    assert all(r.attrs["sizes"] == [1, 3, 16, 16, 8] for r in resizes)
    assert all(r.attrs["scales"][-1] == 1.0 for r in resizes)
    (cat,) = [v for v in g.nodes if v.op == "concat"]
    assert g.values[cat.outputs[0]].shape == (1, 12, 16, 16, 8)
    assert ops(g)["layout_transform"] == 2
    check_numbers(model, g)


@pytest.mark.parametrize("extrapolation", [0.0, 2.5])
def test_crop_and_resize_of_blocks(extrapolation):
    """tf_crop_and_resize reads its roi per axis: the blocked form's block axis gets the
    whole range, and the value put outside the crop lands in whole blocks only."""
    channels = 24
    n = Net((1, 16, 8, 8))
    y = n.conv("x", 16, channels)
    roi = [0, 0, 0.1, -0.2, 1, 1, 0.9, 1.3]
    y = _resize(n, y, (6, 10), "linear", "tf_crop_and_resize", roi, channels=channels,
                extrapolation_value=extrapolation)  # fmt: skip
    model = n.graph(n.op("Relu", [y]))
    g = run_pass(model)
    (r,) = [v for v in g.nodes if v.op == "resize"]
    assert g.values[r.outputs[0]].shape == (1, 3, 6, 10, 8)
    assert r.attrs["roi"] == pytest.approx([0, 0, 0.1, -0.2, 0, 1, 1, 0.9, 1.3, 1])
    check_numbers(model, g)


def test_resize_of_channels_stays_nchw():
    n = Net((1, 16, 4, 4))
    y = n.conv("x", 16, 16)
    sizes = n.const([1, 32, 8, 8], np.int64)
    model = n.graph(n.op("Resize", [y, "", "", sizes], mode="nearest"))
    g = run_pass(model)
    (r,) = [v for v in g.nodes if v.op == "resize"]
    assert len(g.values[r.inputs[0]].shape) == 4
    check_numbers(model, g)


def test_add_of_different_blocks_runs_in_nchw():
    """A depthwise conv keeps its input's block (16), its neighbour picks 8 by the
    concat after it; the add joining them runs in NCHW."""
    n = Net((1, 32, 6, 6))
    a = n.conv("x", 32, 32, group=32)
    b = n.conv("x", 32, 32)
    c = n.conv("x", 32, 8)
    cat = n.op("Concat", [b, c], axis=1)
    model = n.graph(n.op("Add", [a, b]), cat)
    g = run_pass(model, board=BOARD_512)
    assert conv_blocks(g) == [16, 8, 8]
    (add,) = [n for n in g.nodes if n.op == "add"]
    assert len(g.values[add.outputs[0]].shape) == 4
    check_numbers(model, g)


@pytest.mark.parametrize(
    "ctx, block",
    [
        ({"board": None}, "host"),  # no board: the host profile (this machine's lanes)
        ({"board": replace(load_board("host"), vector_bits=128)}, 4),
        ({"board": BOARD_512}, 16),
        ({"layout_block": 4}, 4),
        ({"layout_block": 0}, None),
    ],
)
def test_block_size_knobs(ctx, block):
    if block == "host":
        block = Target.cpu(load_board("host")).vector_bits // 32
    g = run_pass(head_model(), **ctx)
    convs = [n for n in g.nodes if n.op == "conv2d_nchwc"]
    if block is None:
        assert not convs
    else:
        assert g.values[convs[0].outputs[0]].shape[-1] == block


def test_disabled_by_name():
    from packager.graph.pipeline import optimize

    g = optimize(import_onnx("t.onnx", model=head_model()), PassContext(disabled={"layout"}))
    assert not any(n.op in ("conv2d_nchwc", "layout_transform") for n in g.nodes)


@pytest.mark.parametrize("vector_bits", [128, 256, 512])
def test_networks_match_onnxruntime_at_other_vector_widths(vector_bits, tmp_path):
    """Blocks of 4 (NEON), 8 (AVX2) and 16 with 8 where channels are not multiples of 16
    (AVX-512) through the real path: C kernels, runtime. Every conv is blocked."""
    import dataclasses
    import subprocess

    import networks

    from packager.boards import load_board
    from packager.bundle import write_bundle_files
    from packager.native import build_run_bundle
    from packager.package import compile_model

    from ..helpers import ort_outputs

    model = networks.mobilenet_v2(seed=4, width=0.35, size=32, classes=10)
    board = dataclasses.replace(load_board("host"), vector_bits=vector_bits)
    compiled = compile_model(model, board)
    packed = [v.shape for v in compiled.graph.consts() if len(v.shape) == 6]
    # output blocks: a full vector where the channels allow, smaller ones elsewhere
    assert packed and max(s[-1] for s in packed) == vector_bits // 32
    assert all(s[-1] <= vector_bits // 32 for s in packed)
    assert len(packed) == sum(n.op_type == "Conv" for n in model.graph.node)
    write_bundle_files(tmp_path, compiled, {}, None)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    exe = build_run_bundle(tmp_path)
    out = tmp_path / "out"
    subprocess.run(
        [str(exe), str(tmp_path), "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", out],
        check=True,
    )
    (want,) = ort_outputs(model, {"input": x})
    got = np.load(next(out.glob("*.npy")))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)
