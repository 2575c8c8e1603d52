"""Placement of integer convs and denses on the accelerator (place_accel): which go,
why the others stay, the layout conversions, and that the placed graph computes the
host's bytes (its accelerator nodes run on the CPU here)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.accel.program import Program, read_programs
from packager.backend import PackagerRep
from packager.boards import load_board
from packager.bundle import write_bundle_files
from packager.native import build_run_bundle
from packager.package import compile_model, prepare_graph
from packager.quantize import quantize_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import networks  # noqa: E402

ACCEL = ("accel_conv2d", "accel_dense")


@pytest.fixture(scope="module")
def sim():
    return load_board("accel-sim")


def quantized_resnet(act: str, blocks=(1, 1), width=16, size=32, classes=10):
    """A ResNet-style model quantized by the packager's own quantizer (its softmax
    reads the dense's quantized logits)."""
    model = networks.resnet(blocks=blocks, width=width, size=size, classes=classes)
    rng = np.random.default_rng(0)
    shape = (1, 3, size, size)
    samples = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    return quantize_model(model, samples, activations=act)[0]


def ops_of(graph) -> collections.Counter:
    return collections.Counter(n.op for n in graph.nodes)


def reasons_of(graph) -> list[str]:
    return [n.attrs["accel_reason"] for n in graph.nodes if "accel_reason" in n.attrs]


# --- a QDQ model built by hand: one conv of each kind that stays on the CPU -------------

C, HW = 32, 8


def _conv_qdq(
    nodes, inits, x, name, w_scale, y_scale, act_dtype, bias=None, group=1, residual=None
):
    """DQ(x) * DQ(w) (+ bias) [+ DQ(residual)] -> Q -> DQ; returns the DQ'd output."""
    rng = np.random.default_rng(len(nodes))
    w = rng.integers(-127, 128, (C, C // group, 3, 3)).astype(np.int8)
    inits += [
        numpy_helper.from_array(w, f"{name}_w"),
        numpy_helper.from_array(np.full(C, w_scale, np.float32), f"{name}_ws"),
        numpy_helper.from_array(np.zeros(C, np.int8), f"{name}_wz"),
    ]
    nodes.append(
        helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_ws", f"{name}_wz"],
                         [f"{name}_wf"], axis=0)
    )  # fmt: skip
    ins = [x, f"{name}_wf"]
    if bias is not None:
        inits.append(numpy_helper.from_array(np.full(C, bias, np.float32), f"{name}_b"))
        ins.append(f"{name}_b")
    conv = helper.make_node("Conv", ins, [f"{name}_c"], pads=[1, 1, 1, 1], group=group)
    nodes.append(conv)
    out = f"{name}_c"
    if residual is not None:
        nodes.append(helper.make_node("Add", [out, residual], [f"{name}_add"]))
        out = f"{name}_add"
    return _q_dq(nodes, inits, out, name, y_scale, act_dtype)


def _q_dq(nodes, inits, x, name, scale, act_dtype):
    zp = np.array(3 if act_dtype == np.int8 else 131, act_dtype)
    inits += [
        numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"),
        numpy_helper.from_array(zp, f"{name}_z"),
    ]
    nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]))
    nodes.append(
        helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_f"])
    )
    return f"{name}_f"


def mixed_model(act_dtype) -> onnx.ModelProto:
    """x -> a (placed) -> b grouped -> c shift 32 -> d bias too large -> e with a residual
    add folded (no Q between conv and add) -> f (placed) -> y."""
    nodes, inits = [], []
    x = _q_dq(nodes, inits, "x", "in", 0.05, act_dtype)
    a = _conv_qdq(nodes, inits, x, "a", 0.002, 2.0, act_dtype)
    b = _conv_qdq(nodes, inits, a, "b", 0.002, 2.0, act_dtype, group=2)
    c = _conv_qdq(nodes, inits, b, "c", 0.06, 0.4, act_dtype)  # M = 0.3: shift 32
    d = _conv_qdq(nodes, inits, c, "d", 0.002, 2.0, act_dtype, bias=8.58e6)  # 2^31 - 2^21 acc
    e = _conv_qdq(nodes, inits, d, "e", 0.002, 2.0, act_dtype, residual=a)
    f = _conv_qdq(nodes, inits, e, "f", 0.002, 2.0, act_dtype)
    nodes.append(helper.make_node("Identity", [f], ["y"]))
    graph = helper.make_graph(
        nodes, "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, HW, HW])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, HW, HW])],
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("act", [np.uint8, np.int8])
def test_convs_the_accelerator_cannot_compute_exactly_stay_with_their_reason(sim, act):
    graph, _ = prepare_graph(mixed_model(act), sim, disabled_passes={"fuse"})
    assert ops_of(graph)["accel_conv2d"] == 2
    assert sorted(reasons_of(graph)) == [
        "a residual add is folded into its epilogue",
        "acc + bias may overflow int32 (channel 0)",
        "grouped conv (groups 2)",
        "requantize shift 32 < 33 (channel 0)",
    ]


def test_a_board_without_an_accelerator_places_nothing():
    graph, _ = prepare_graph(mixed_model(np.int8), load_board("host"), disabled_passes={"fuse"})
    assert not set(ops_of(graph)) & {*ACCEL, "accel_pack", "accel_unpack"}
    assert reasons_of(graph) == []


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_resnet_goes_whole_to_the_accelerator_with_residual_adds_on_the_cpu(sim, act):
    """Every conv and the dense are placed; the residual adds are qadds (not folded
    into the convs), computed in the accelerator's layout; conversions only where the
    float parts begin and end (the stem's input, the pooling, the logits)."""
    model = quantized_resnet(act)
    graph, _ = prepare_graph(model, sim, disabled_passes={"fuse"})
    ops = ops_of(graph)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    assert (ops["accel_conv2d"], ops["accel_dense"]) == (convs, 1)
    assert "qconv2d" not in ops and "qdense" not in ops and reasons_of(graph) == []
    adds = [n for n in graph.nodes if n.op == "qadd"]
    assert len(adds) == sum(n.op_type == "Add" for n in model.graph.node) == 2
    assert all(len(graph.values[n.outputs[0]].shape) == 5 for n in adds)  # blocked
    # in: the stem's input, the first block's input (max pool), the dense's input;
    # out: the max pool's input, the pooling's input, the logits
    assert (ops["accel_pack"], ops["accel_unpack"]) == (3, 3)
    for n in graph.nodes:
        if n.op in ACCEL:
            assert all(graph.values[v].dtype == "int8" for v in (n.inputs[0], n.outputs[0]))


def _run(compiled, inputs):
    tmp = tempfile.TemporaryDirectory(prefix="accel-test-")
    bundle = Path(tmp.name) / "bundle"
    bundle.mkdir()
    write_bundle_files(bundle, compiled, {}, None)
    rep = PackagerRep(tmp, build_run_bundle(bundle), compiled.graph.inputs, compiled.graph.outputs)
    return [rep.run([x])[0] for x in inputs]


def _inputs(shape, scale):
    """Random inputs, and ones at the int8 / uint8 extremes once quantized."""
    rng = np.random.default_rng(7)
    out = [rng.standard_normal(shape).astype(np.float32) * s for s in (1.0, 3 * scale)]
    out.append(np.where(rng.random(shape) < 0.5, -1e3, 1e3).astype(np.float32))
    out.append(np.full(shape, 1e3, np.float32))
    out.append(np.full(shape, -1e3, np.float32))
    return out


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: quantized_resnet("uint8"), (1, 3, 32, 32)),
        (lambda: quantized_resnet("int8"), (1, 3, 32, 32)),
        (lambda: mixed_model(np.uint8), (1, C, HW, HW)),
        (lambda: mixed_model(np.int8), (1, C, HW, HW)),
    ],
)
def test_placed_graph_gives_the_host_bytes(sim, make, shape):
    """The accel-sim board's graph (accelerator nodes, conversions, blocked qadds) run
    on the CPU against the plain host int8 bundle of the same model: byte-identical."""
    model = make()
    placed = compile_model(model, sim, accel_on_cpu=True)
    assert placed.placement["accel_nodes"] >= 2
    host = compile_model(model, load_board("host"))
    inputs = _inputs(shape, 40.0)
    for got, want in zip(_run(placed, inputs), _run(host, inputs), strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_build_line_counts_placement_and_reasons(sim):
    lines = []
    compile_model(mixed_model(np.int8), sim, log=lines.append, accel_on_cpu=True)
    line = next(x for x in lines if x.startswith("accel:"))
    assert line.startswith("accel: 2 of 6 convs/dense (")
    assert "4 stay on the CPU: " in line and "grouped conv (groups 2) (1)" in line
    assert line.endswith("layout conversions")


def test_resnet18_puts_nine_tenths_of_its_macs_on_the_accelerator(sim):
    """ResNet-18 (64 wide, 2-2-2-2 basic blocks), quantized with the default uint8
    activations: the share of multiply-accumulates placed on the accelerator."""
    model = quantized_resnet("uint8", blocks=(2, 2, 2, 2), width=64, size=64, classes=100)
    lines = []
    compiled = compile_model(model, sim, log=lines.append, accel_on_cpu=True)
    p = compiled.placement
    print(next(x for x in lines if x.startswith("accel:")))
    assert p["accel_macs"] >= 0.9 * p["macs"]
    assert p["accel_nodes"] == p["nodes"] == 21  # 20 convs and the dense


def test_bundle_holds_the_programs_of_the_accelerator_nodes(sim, tmp_path):
    """bundle.py's part: kernels/program.accel has one program per accelerator kernel
    (named as graph.json's func, with the accelerator's config), graph.json marks those
    nodes "device": "accel", registry.c lists only CPU kernels, bundle.cmake asks for
    the board's driver, the manifest says what ran where. The programs here are bare
    FINISH ones: codegen's are checked in test_lowering_to_programs."""
    compiled = compile_model(mixed_model(np.int8), sim, accel_on_cpu=True)
    finish = {"opcode": 4, "pop_prev": 0, "pop_next": 0, "push_prev": 0, "push_next": 0}
    for k in compiled.kernels:
        if k.op in ACCEL:
            k.device, k.program = "accel", Program(k.func, len(k.signature), [finish])
    write_bundle_files(tmp_path, compiled, {}, None)
    config, programs = read_programs((tmp_path / "kernels" / "program.accel").read_bytes())
    accel_funcs = sorted(k.func for k in compiled.kernels if k.device == "accel")
    assert [p.name for p in programs] == accel_funcs and len(accel_funcs) == 1  # a, f share
    assert config == compiled.accel.config()
    nodes = json.loads((tmp_path / "graph.json").read_text())["nodes"]
    on_accel = [n for n in nodes if n.get("device") == "accel"]
    assert len(on_accel) == 2 and {n["func"] for n in on_accel} == set(accel_funcs)
    assert accel_funcs[0] not in (tmp_path / "kernels" / "registry.c").read_text()
    assert not (tmp_path / "kernels" / f"{accel_funcs[0]}.c").exists()
    assert "set(PK_ACCEL sim)\n" in (tmp_path / "bundle.cmake").read_text()


def test_lowering_to_programs(sim):
    """With the accelerator's code generator: every accelerator node calls a program of
    kernels/program.accel."""
    pytest.importorskip("packager.accel.codegen")
    compiled = compile_model(quantized_resnet("int8"), sim)
    funcs = dict(zip(range(len(compiled.funcs)), compiled.funcs, strict=True))
    by_func = {k.func: k for k in compiled.kernels}
    accel_nodes = [k for k, n in enumerate(compiled.graph.nodes) if n.op in ACCEL]
    assert accel_nodes and all(by_func[funcs[k]].device == "accel" for k in accel_nodes)
    programs = [k for k in compiled.kernels if k.device == "accel"]
    assert all(k.program is not None and k.program.name == k.func for k in programs)
    assert all(k.program.insns[-1]["opcode"] == 4 for k in programs)  # FINISH last


def _cli(*args) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "packager.cli", *args], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def test_build_writes_a_program_per_accelerator_kernel(tmp_path):
    """`packager build` for accel-sim: kernels/program.accel holds one program per
    accelerator kernel, every accel node of graph.json calls one of them, bundle.cmake
    asks for the simulator, the manifest says what ran where."""
    pytest.importorskip("packager.accel.codegen")
    model = tmp_path / "q.onnx"
    onnx.save(quantized_resnet("int8"), model)
    out = _cli("build", str(model), "--board", "accel-sim", "-o", str(tmp_path / "b"))
    assert "accel: 7 of 7 convs/dense (100.0% of multiply-accumulates)" in out
    bundle = tmp_path / "b"
    config, programs = read_programs((bundle / "kernels" / "program.accel").read_bytes())
    names = {p.name for p in programs}
    nodes = json.loads((bundle / "graph.json").read_text())["nodes"]
    accel = [n for n in nodes if n.get("device") == "accel"]
    assert len(accel) == 7 and {n["func"] for n in accel} == names
    assert all(p.insns[-1]["opcode"] == 4 and p.n_args == 4 for p in programs)
    assert (config.block_in, config.inp_depth) == (16, 2048)
    assert "set(PK_ACCEL sim)\n" in (bundle / "bundle.cmake").read_text()
    manifest = json.loads((bundle / "manifest.json").read_text())["accel"]
    assert manifest["driver"] == "sim" and manifest["programs"] == len(programs)
    assert manifest["node_calls"]["accel"] == 7


def test_inspect_plan_shows_the_accelerator_nodes(tmp_path):
    pytest.importorskip("packager.accel.codegen")
    model = tmp_path / "q.onnx"
    onnx.save(mixed_model(np.int8), model)
    out = _cli("inspect", str(model), "--plan", "--board", "accel-sim")
    rows = [line.split() for line in out.splitlines() if "accel_conv2d" in line]
    assert rows and all(r[2] == "accel" for r in rows)
    assert "accel: 2 of 6 convs/dense" in out and "grouped conv (groups 2) (1)" in out


@pytest.mark.parametrize(
    "c, kw, stride, dilation, pad, w, dtype",
    [(3, 7, 2, 1, 3, 32, "uint8"), (3, 3, 1, 1, 1, 9, "int8"), (2, 5, 3, 2, 4, 13, "uint8")],
)
def test_tap_pack_moves_kernel_columns_into_channels(c, kw, stride, dilation, pad, w, dtype):
    """accel_pack with taps against numpy: channel ci*KW + k of output column ow holds
    input column ow*stride + k*dilation - pad, the zero point outside the row, shifted
    by -128 for uint8, zeros past C*KW."""
    from packager import te
    from packager.ops.registry import get_op
    from packager.te.evaluator import evaluate

    rng = np.random.default_rng(c + kw)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, c, 4, w)).astype(dtype)
    out_w = (w + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    zp = 37 if dtype == "uint8" else -5
    taps = {"kw": kw, "stride": stride, "dilation": dilation, "pad": pad, "out_w": out_w,
            "pad_value": zp}  # fmt: skip
    t = te.placeholder(x.shape, dtype, "x")
    attrs = {"block": 16, "shift": dtype == "uint8", "taps": taps}
    (y,) = get_op("accel_pack").compute([t], attrs)
    (got,) = evaluate([y], {t: x})
    padded = np.full((1, c, 4, w + 2 * pad + stride * out_w), zp, np.int32)
    padded[..., pad : pad + w] = x
    want = np.zeros((1, -(-c * kw // 16) * 16, 4, out_w), np.int32)
    for ci in range(c):
        for k in range(kw):
            cols = np.arange(out_w) * stride + k * dilation
            want[0, ci * kw + k] = padded[0, ci][:, cols]
    want[:, : c * kw] -= 128 if dtype == "uint8" else 0
    want = want.reshape(1, -1, 16, 4, out_w).transpose(0, 1, 3, 4, 2).astype(np.int8)
    assert got.shape == want.shape and np.array_equal(got, want)


def test_stem_reads_its_input_tap_packed(sim):
    """The 3-channel 7x7 stride-2 stem of the ResNet: its accel conv takes 21 channels
    (2 blocks) of width 1, stride 1 across, from a tap-packed input; the bytes stay the
    host's (test_placed_graph_gives_the_host_bytes)."""
    graph, _ = prepare_graph(quantized_resnet("uint8"), sim, disabled_passes={"fuse"})
    stem = next(n for n in graph.nodes if n.op == "accel_conv2d")
    assert stem.attrs["c"] == 21 and graph.values[stem.inputs[1]].shape[1:4] == (2, 7, 1)
    assert stem.attrs["strides"] == [2, 1] and stem.attrs["pads"] == [3, 0, 3, 0]
    pack = next(n for n in graph.nodes if stem.inputs[0] in n.outputs)
    assert pack.op == "accel_pack" and pack.attrs["taps"]["kw"] == 7
    assert graph.values[stem.inputs[0]].shape == (1, 2, 32, 16, 16)
    assert stem.attrs["macs"] == 16 * 16 * 16 * 3 * 7 * 7  # the model's, not the packed
