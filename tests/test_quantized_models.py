"""QDQ models from onnxruntime's quantize_static become integer kernels whose outputs
stay within one quantization step of ONNX Runtime computing the QDQ graph in float."""

from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from packager.backend import PackagerBackend
from packager.boards import load_board
from packager.ops.quantized import dense_tile
from packager.package import package, prepare_graph
from packager.quantize.exact import float64_runner, step_agreement
from packager.target import Target
from tests.helpers import unoptimized_ort_session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import networks  # noqa: E402
import torchvision_nets  # noqa: E402

SHAPE = (1, 3, 32, 32)


class _Calib(CalibrationDataReader):
    def __init__(self, shape=SHAPE):
        rng = np.random.default_rng(1)
        self.data = iter(
            [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]
        )

    def get_next(self):
        return next(self.data, None)


def _qdq(tmp_path, kind: str, act, reduce_range: bool = False, classes: int = 10) -> Path:
    if kind == "resnet":
        model = networks.resnet(blocks=(1, 1), width=16, size=32, classes=classes)
    elif kind == "resnext":  # torchvision's ResNeXt, one block a stage, 8 groups of 4
        model = torchvision_nets.tv_resnext50_32x4d(
            size=32, classes=10, layers=(1, 1, 1, 1), groups=8, width_per_group=4
        )
    else:
        model = networks.mobilenet_v2(width=0.25, size=32, classes=10)
    if model.graph.node[-1].op_type == "Softmax":  # compare the logits
        model.graph.node.remove(model.graph.node[-1])
        model.graph.output[0].name = model.graph.node[-1].output[0]
    return _quantized(tmp_path, model, act, reduce_range)


def _quantized(tmp_path, model, act, reduce_range: bool = False, shape=SHAPE) -> Path:
    """onnxruntime's quantize_static of ``model``: QDQ, per-channel int8 weights."""
    raw, pre, out = tmp_path / "raw.onnx", tmp_path / "pre.onnx", tmp_path / "qdq.onnx"
    onnx.save(model, raw)
    quant_pre_process(str(raw), str(pre), skip_symbolic_shape=True)  # folds batch norms
    quantize_static(
        str(pre),
        str(out),
        _Calib(shape),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=act,
        weight_type=QuantType.QInt8,
        reduce_range=reduce_range,  # 7-bit weights, [-64, 64]
    )
    return out


@pytest.mark.parametrize("kind", ["resnet", "mobilenet"])
@pytest.mark.parametrize("act", [QuantType.QUInt8, QuantType.QInt8])
def test_qdq_network_runs_integer_kernels_within_one_step(tmp_path, kind, act):
    path = _qdq(tmp_path, kind, act)
    model = onnx.load(path)
    graph, _ = prepare_graph(model, disabled_passes={"fuse"})
    ops = collections.Counter(n.op for n in graph.nodes)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    assert ops["qconv2d"] == convs and "conv" not in ops and "conv2d_nchwc" not in ops
    assert ops["qdense"] == 1 and "gemm" not in ops
    # the residual adds are integer, folded into the epilogue of the conv making a side
    adds = sum(n.op_type == "Add" for n in model.graph.node)
    assert adds and "add" not in ops and "qadd" not in ops
    assert sum("add_shift" in n.attrs for n in graph.nodes) == adds

    _within_one_step(path, model)


def _within_one_step(path: Path, model: onnx.ModelProto, board=None) -> None:
    """The bundle's logits within one quantization step of ONNX Runtime computing the
    QDQ graph in float (graph optimizations off), on 99.9% of them; the same top-1."""
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    want = unoptimized_ort_session(path).run(None, {"input": x})[0]
    got = PackagerBackend.prepare(model, board=board).run([x])[0]
    step = _logits_step(model)
    assert (np.abs(got - want) <= step * 1.001).mean() >= 0.999
    assert np.argmax(got) == np.argmax(want)


def _logits_step(model: onnx.ModelProto) -> float:
    last = model.graph.node[-1]  # the logits' DequantizeLinear: its scale is one step
    assert last.op_type == "DequantizeLinear"
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    return float(inits[last.input[1]])


@pytest.mark.parametrize("arch", ["tv_mobilenet_v2", "tv_resnet18"])
def test_torchvision_architectures_equal_the_qdq_arithmetic_in_float64(tmp_path, arch):
    """torchvision's MobileNetV2 (66 quantized tensors deep) and ResNet-18 at 64x64, 1000
    classes: the int8 bundle's logits are within one step of the QDQ graph computed in
    float64 on 99.9% of them and equal on 90%. (A float32 evaluation of the same graph
    flips roundings that lie within float32's error of a half step; MobileNetV2 spreads
    those flips, so ONNX Runtime's float32 path misses one step on a quarter of the
    224x224 logits: bench/qdq_exactness.py.)"""
    shape = (1, 3, 64, 64)
    model = getattr(torchvision_nets, arch)(size=64)
    qdq = onnx.load(_quantized(tmp_path, model, QuantType.QUInt8, shape=shape))
    name, step = qdq.graph.input[0].name, _logits_step(qdq)
    ours, exact = PackagerBackend.prepare(qdq), float64_runner(qdq)
    rng = np.random.default_rng(3)
    for _ in range(2):
        x = rng.uniform(0, 1, shape).astype(np.float32)
        got = ours.run([x])[0]
        within, equal = step_agreement(got, exact({name: x})[0], step)
        assert within >= 0.999 and equal >= 0.9, (within, equal)


def test_dense_tiles_take_a_divisor_of_the_blocks_up_to_8_where_4_has_none():
    assert [dense_tile(b) for b in (125, 128, 6, 14, 127, 49, 1)] == [5, 4, 3, 2, 1, 7, 1]


@pytest.mark.parametrize("board", ["host", "host-avx2"])
def test_thousand_class_dense_layer_runs_in_tiles_of_dense_tile_blocks_within_one_step(
    tmp_path, board
):
    """A 1000-class classifier's dense layer takes dense_tile(blocks) blocks a tile: at 8
    lanes (host-avx2) 125 blocks, 5 a tile (five accumulator chains, not one); at 16
    (a 512-bit host) 63 blocks, 3 a tile. It stays within one step."""
    path = _qdq(tmp_path, "resnet", QuantType.QUInt8, classes=1000)
    model = onnx.load(path)
    board_ = load_board(board)
    lanes = Target.cpu(board_).lanes
    tile = dense_tile(-(-1000 // lanes))
    assert board != "host-avx2" or (lanes, tile) == (8, 5)
    out = package(str(path), board_, str(tmp_path / "b"), selftest=False)
    (dense,) = (out / "kernels").glob("*_qdense*.c")
    src = dense.read_text()
    assert f"qdense_acc[{tile * lanes}]" in src and re.search(
        rf"pk_dot4_\w+\(&qdense_acc\[\(qdense_acc_i1 \* {lanes}\)\]", src
    )
    _within_one_step(path, model, board=board_)


@pytest.mark.parametrize("act", [QuantType.QUInt8, QuantType.QInt8])
def test_avx2_mobilenet_runs_its_depthwise_convs_in_column_pairs_within_one_step(tmp_path, act):
    """On the AVX2 profile (8 lanes, no dot product) every depthwise conv of the
    inverted residuals, stride 1 and 2, runs in int16 pairs of taps (dw_pairs); the
    network stays within one step of ONNX Runtime's QDQ semantics."""
    board = load_board("host-avx2")
    path = _qdq(tmp_path, "mobilenet", act)
    model = onnx.load(path)
    graph, _ = prepare_graph(model, board=board)
    dws = [n for n in model.graph.node if n.op_type == "Conv" and _group(n) > 1]
    pairs = [n for n in graph.nodes if n.op == "qconv2d" and "dw_pairs" in n.attrs]
    strides = {tuple(n.attrs.get("strides") or (1, 1)) for n in pairs}
    assert dws and len(pairs) == len(dws) and strides == {(1, 1), (2, 2)}
    _within_one_step(path, model, board)


@pytest.mark.parametrize("kind", ["resnet", "mobilenet"])
def test_avx2_runs_7_bit_weights_on_vpmaddubsw_within_one_step(tmp_path, kind):
    """7-bit weights (onnxruntime's reduce_range) and uint8 activations on the AVX2
    profile: every full conv, the 3-channel stem among them, keeps its weights in byte
    quads for vpmaddubsw (byte_pairs), none in int16 pairs (ResNet's 7x7 stem in packed
    rows), within one step of ONNX
    Runtime's QDQ semantics; 8-bit weights keep the pairs."""
    board = load_board("host-avx2")
    path = _qdq(tmp_path, kind, QuantType.QUInt8, reduce_range=True)
    model = onnx.load(path)
    graph, _ = prepare_graph(model, board=board, disabled_passes={"fuse"})
    full = [n for n in model.graph.node if n.op_type == "Conv" and _group(n) == 1]
    quads = [n for n in graph.nodes if n.op == "qconv2d" and n.attrs.get("byte_pairs")]
    assert full and len(quads) == len(full)
    assert all(graph.values[n.inputs[1]].data.dtype == np.int8 for n in quads)
    assert any("row_taps" in n.attrs for n in quads) == (kind == "resnet")  # a 7x7 stem
    _within_one_step(path, model, board)
    model8 = onnx.load(_qdq(tmp_path, kind, QuantType.QUInt8))
    graph8, _ = prepare_graph(model8, board=board, disabled_passes={"fuse"})
    assert any(n.op == "qconv2d" for n in graph8.nodes)
    assert not any(n.attrs.get("byte_pairs") for n in graph8.nodes)


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


@pytest.mark.parametrize("board", ["host", "host-avx2"])
def test_resnext_grouped_convs_run_as_integer_tiles_within_one_step(tmp_path, board):
    """torchvision's ResNeXt bottleneck (its 3x3 convs in 8 groups of 4 channels): every
    grouped conv runs block-diagonal on the dot-product tile (group_blocks), VNNI quads
    on the host and int16 pairs on AVX2, within one step of ONNX Runtime."""
    path = _qdq(tmp_path, "resnext", QuantType.QUInt8)
    model = onnx.load(path)
    graph, _ = prepare_graph(model, board=load_board(board))
    grouped = [n for n in model.graph.node if n.op_type == "Conv" and _group(n) > 1]
    blocks = [n for n in graph.nodes if n.op == "qconv2d" and n.attrs.get("group_blocks")]
    assert len(grouped) == 4 and len(blocks) == len(grouped)
    _within_one_step(path, model, load_board(board))
