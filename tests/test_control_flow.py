"""Runtime control flow (If on a runtime condition, Loop, Scan) and --input-value: each model
built and run through the real path (bundle, CMake, run_bundle) and checked against ONNX
Runtime; a Silero-style VAD built both ways and run over 10 chunks with its state carried."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from packager.cli import main
from packager.errors import PackagerError
from packager.frontend.importer import freeze_inputs
from packager.native import build_run_bundle

from .helpers import ort_outputs, run_model

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
import vad  # noqa: E402

RNG = np.random.default_rng(3)
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def if_on_data():
    """y = sum(x) > 0 ? relu(x * w) : x - w, the branches reading x and w from outside."""
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["yt"])],
        "then",
        [],
        [vi("yt", T.FLOAT, [2, 3])],
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["x", "w"], ["ye"])], "else", [], [vi("ye", T.FLOAT, [2, 3])]
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    w = RNG.standard_normal((2, 3)).astype(np.float32)
    inits = [_init("w", w), _init("zero", np.float32(0))]
    return _model(nodes, [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3])], inits)


def test_runtime_if_takes_either_branch_like_ort():
    model = if_on_data()
    for x in (np.abs(RNG.standard_normal((2, 3))), -np.abs(RNG.standard_normal((2, 3)))):
        feeds = {"x": x.astype(np.float32)}
        (got,) = run_model(model, feeds)
        (want,) = ort_outputs(model, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_runtime_if_is_a_control_flow_node_with_both_branches(tmp_path):
    onnx.save(if_on_data(), tmp_path / "m.onnx")
    assert (
        main(["build", str(tmp_path / "m.onnx"), "--board", "host", "-o", str(tmp_path / "b")]) == 0
    )
    doc = json.loads((tmp_path / "b" / "graph.json").read_text())
    (node,) = [n for n in doc["nodes"] if n["op"] == "if"]
    assert len(node["branches"]) == 2
    params = [n["name"] for b in node["branches"] for n in b["nodes"] if n["op"] == "param"]
    assert params == ["y.0/w", "y.1/w"]  # each branch's weights, named after its place


def loop_model(trips_known=True):
    """acc = a0; for i < M while acc[0] < limit: acc += x * (i + 1); scan = acc * 2."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
            helper.make_node("Add", ["fi", "one"], ["k"]),
            helper.make_node("Mul", ["x", "k"], ["step"]),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Gather", ["acc_out", "zero_i"], ["first"], axis=0),
            helper.make_node("Less", ["first", "limit"], ["cond_out"]),
            helper.make_node("Mul", ["acc_out", "two"], ["scan"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("acc_in", T.FLOAT, [3])],
        [vi("cond_out", T.BOOL, []), vi("acc_out", T.FLOAT, [3])]
        + ([vi("scan", T.FLOAT, [3])] if trips_known else []),
    )
    outs = ["acc", "scans"] if trips_known else ["acc"]
    nodes = [helper.make_node("Loop", ["M", "", "a0"], outs, body=body)]
    inits = [
        _init("one", np.float32(1)),
        _init("two", np.float32(2)),
        _init("zero_i", np.int64(0)),
        _init("limit", np.float32(1e9)),
    ]
    inputs = [vi("x", T.FLOAT, [3]), vi("a0", T.FLOAT, [3])]
    outputs = [vi("acc", T.FLOAT, [3])]
    if trips_known:
        inits.append(_init("M", np.int64(6)))
        outputs.append(vi("scans", T.FLOAT, [6, 3]))
    else:
        inputs.append(vi("M", T.INT64, []))
    return _model(nodes, inputs, outputs, inits)


def test_loop_with_trip_count_carried_value_and_scan_output_matches_ort():
    model = loop_model()
    feeds = {"x": RNG.standard_normal(3).astype(np.float32), "a0": np.ones(3, np.float32)}
    got = run_model(model, feeds)
    want = ort_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_with_runtime_trip_count_and_data_dependent_end_matches_ort():
    model = loop_model(trips_known=False)
    limit = next(t for t in model.graph.initializer if t.name == "limit")
    limit.CopyFrom(_init("limit", np.float32(10)))  # ends once acc[0] reaches 10
    for m, x0 in ((0, 1.0), (4, 1.0), (100, 1.0), (100, -1.0)):
        feeds = {
            "x": np.array([x0, 2, 3], np.float32),
            "a0": np.zeros(3, np.float32),
            "M": np.array(m, np.int64),
        }
        if x0 < 0:
            feeds["M"] = np.array(7, np.int64)  # never reaches the limit: runs all M
        (got,) = run_model(model, feeds)
        (want,) = ort_outputs(model, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def scan_model():
    """A running sum over axis 1 read backwards, its outputs stacked on axis 1 reversed."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
            helper.make_node("Relu", ["s_out"], ["y"]),
        ],
        "body",
        [vi("s_in", T.FLOAT, [2]), vi("xi", T.FLOAT, [2])],
        [vi("s_out", T.FLOAT, [2]), vi("y", T.FLOAT, [2])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1],
        scan_output_directions=[1],
    )
    return _model(
        [node],
        [vi("s0", T.FLOAT, [2]), vi("x", T.FLOAT, [2, 5])],
        [vi("s", T.FLOAT, [2]), vi("ys", T.FLOAT, [2, 5])],
    )


def test_scan_with_axes_and_reversed_directions_matches_ort():
    model = scan_model()
    feeds = {
        "s0": RNG.standard_normal(2).astype(np.float32),
        "x": RNG.standard_normal((2, 5)).astype(np.float32),
    }
    got = run_model(model, feeds)
    want = ort_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_with_scan_outputs_needs_a_package_time_trip_count():
    body = loop_model().graph.node[0].attribute[0].g
    model = _model(
        [helper.make_node("Loop", ["M", "", "a0"], ["acc", "scans"], body=body)],
        [vi("x", T.FLOAT, [3]), vi("a0", T.FLOAT, [3]), vi("M", T.INT64, [])],
        [vi("acc", T.FLOAT, [3]), vi("scans", T.FLOAT, [None, 3])],
        [_init(n, v) for n, v in (("one", np.float32(1)), ("two", np.float32(2)))]
        + [_init("zero_i", np.int64(0)), _init("limit", np.float32(1))],
    )
    with pytest.raises(PackagerError, match="a Loop with scan outputs needs a trip count known"):
        run_model(model, {})


# ---- --input-value ---------------------------------------------------------------------


def _build(tmp_path, model, name, *flags):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    out = tmp_path / name
    assert main(["build", str(path), "--board", "host", "-o", str(out), *flags]) == 0
    return out


def test_input_value_freezes_sr_and_folds_the_if(tmp_path):
    out = _build(tmp_path, vad.silero_vad(), "vad16k", "--input-value", "sr=16000")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input", "state"]
    assert manifest["input_values"] == {"sr": {"dtype": "int64", "shape": [], "value": 16000}}
    doc = json.loads((out / "graph.json").read_text())
    assert {n["op"] for n in doc["nodes"]} == {"input", "param", "kernel"}  # If folded
    full = json.loads((_build(tmp_path, vad.silero_vad(), "vad") / "graph.json").read_text())
    assert [n["op"] for n in full["nodes"]].count("if") == 1


@pytest.mark.parametrize(
    "text, message",
    [
        (
            {"rate": "16000"},
            "--input-value names 'rate', which is not an input (inputs: input, state, sr)",
        ),
        (
            {"sr": "16000.5"},
            "--input-value sr: '16000.5' is not a value of the input's dtype int64",
        ),
        (
            {"sr": "8000,16000"},
            "--input-value sr: the value has shape [2], the input is declared int64[]",
        ),
        (
            {"state": "1,2"},
            "--input-value state: the value has shape [2], the input is declared "
            "float32[2, 1, 128]",
        ),
        (
            {"sr": "99999999999999999999"},
            "'99999999999999999999' is not a value of the input's dtype int64",
        ),
    ],
)
def test_input_value_errors_name_the_input(text, message):
    with pytest.raises(PackagerError) as e:
        freeze_inputs(vad.silero_vad(), text, "vad.onnx")
    assert message in str(e.value)


def test_input_value_npy_must_have_the_input_dtype(tmp_path):
    np.save(tmp_path / "sr.npy", np.array(16000, np.int32))
    with pytest.raises(PackagerError, match=r"sr.npy holds int32, the input is int64"):
        freeze_inputs(vad.silero_vad(), {"sr": str(tmp_path / "sr.npy")}, "vad.onnx")
    np.save(tmp_path / "sr.npy", np.array(8000, np.int64))
    model, frozen = freeze_inputs(vad.silero_vad(), {"sr": str(tmp_path / "sr.npy")})
    assert frozen["sr"] == 8000 and [i.name for i in model.graph.input] == ["input", "state"]


def test_cli_input_value_given_twice_is_refused(tmp_path, capsys):
    onnx.save(vad.silero_vad(), tmp_path / "v.onnx")
    args = ["inspect", str(tmp_path / "v.onnx"), "--input-value", "sr=1", "--input-value", "sr=2"]
    assert main(args) == 2
    assert "--input-value sr given twice" in capsys.readouterr().err


# ---- the VAD, both ways, 10 chunks with the state carried ------------------------------


def _run_chunks(exe, bundle, names, chunks, rate, tmp: Path):
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for k, chunk in enumerate(chunks):
        feeds = {"input": chunk, "state": state, "sr": np.array(rate, np.int64)}
        cmd = [str(exe), str(bundle), "--output-dir", str(tmp / f"o{k}")]
        for name in names:
            np.save(tmp / f"{name}{k}.npy", feeds[name])
            cmd += ["--input", f"{name}={tmp / f'{name}{k}.npy'}"]
        subprocess.run(cmd, check=True, capture_output=True)
        probs.append(np.load(tmp / f"o{k}" / "output.npy"))
        state = np.load(tmp / f"o{k}" / "stateN.npy")
    return np.array(probs), state


def _ort_chunks(model, chunks, rate):
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for chunk in chunks:
        prob, state = ort_outputs(
            model, {"input": chunk, "state": state, "sr": np.array(rate, np.int64)}
        )
        probs.append(prob)
    return np.array(probs), state


def test_vad_both_ways_matches_ort_over_ten_chunks_with_its_state(tmp_path):
    model = vad.silero_vad()
    audio = np.concatenate([vad.vad_feeds(k)["input"] for k in range(10)], axis=1)
    chunks = [audio[:, k * 512 : (k + 1) * 512] for k in range(10)]
    cases = [
        ("vad", ["input", "state", "sr"], (), 16000),
        ("vad", ["input", "state", "sr"], (), 8000),
        ("vad16k", ["input", "state"], ("--input-value", "sr=16000"), 16000),
    ]
    built = {}
    for name, names, flags, rate in cases:
        if name not in built:
            bundle = _build(tmp_path, model, name, *flags)
            built[name] = (bundle, build_run_bundle(bundle))
        bundle, exe = built[name]
        work = tmp_path / f"run_{name}_{rate}"
        work.mkdir()
        got_p, got_s = _run_chunks(exe, bundle, names, chunks, rate, work)
        want_p, want_s = _ort_chunks(model, chunks, rate)
        np.testing.assert_allclose(got_p, want_p, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got_s, want_s, rtol=1e-4, atol=1e-5)
        assert np.ptp(got_p) > 0  # the state carried changes the answer chunk to chunk


def test_loop_swapping_carried_values_and_scanning_an_input_matches_ort():
    """a, b = b, a + b each iteration, and the scan output is the incoming a: heads that are
    the body's own inputs must be read before any carried value is written back."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["a_in", "b_in"], ["sum"]),
        ],
        "body",
        [
            vi("i", T.INT64, []),
            vi("cond_in", T.BOOL, []),
            vi("a_in", T.FLOAT, [2]),
            vi("b_in", T.FLOAT, [2]),
        ],
        [vi("cond_out", T.BOOL, []), vi("b_in", T.FLOAT, [2]), vi("sum", T.FLOAT, [2])]
        + [vi("a_in", T.FLOAT, [2])],
    )
    model = _model(
        [helper.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b", "seen"], body=body)],
        [vi("a0", T.FLOAT, [2]), vi("b0", T.FLOAT, [2])],
        [vi("a", T.FLOAT, [2]), vi("b", T.FLOAT, [2]), vi("seen", T.FLOAT, [5, 2])],
        [_init("M", np.int64(5))],
    )
    feeds = {"a0": np.array([0, 1], np.float32), "b0": np.array([1, 1], np.float32)}
    got = run_model(model, feeds)
    want = ort_outputs(model, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_tuning_tasks_and_plan_report_take_a_control_flow_graph(tmp_path, capsys):
    """The tuner's task extraction and inspect --plan / --plan-png read a graph whose
    nodes are control flow (the VAD's: an Equal and the If)."""
    from packager.boards import load_board
    from packager.package import prepare_graph
    from packager.tune.tasks import extract_tasks

    board = load_board("host")
    graph, plan = prepare_graph(vad.silero_vad(), board)
    assert [n.op for n in graph.nodes][-1] == "if"
    assert extract_tasks(graph, board, inplace=plan.inplace) == []  # none in the top graph
    onnx.save(vad.silero_vad(), tmp_path / "v.onnx")
    png = tmp_path / "p.png"
    args = ["inspect", str(tmp_path / "v.onnx"), "--board", "host", "--plan"]
    assert main([*args, "--plan-png", str(png)]) == 0
    assert png.stat().st_size > 0 and "kernel calls: 2" in capsys.readouterr().out


def nested_model():
    """A Loop whose body holds an If on the iteration's parity (a subgraph in a subgraph,
    each with weights of its own): acc += i even ? x * w : x - w."""
    w = RNG.standard_normal(4).astype(np.float32)
    then = helper.make_graph(
        [helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [vi("t", T.FLOAT, [4])]
    )
    other = helper.make_graph(
        [helper.make_node("Sub", ["x", "w2"], ["e"])],
        "else",
        [],
        [vi("e", T.FLOAT, [4])],
        [_init("w2", w * 3)],
    )
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["odd"]),
            helper.make_node("Equal", ["odd", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["step"], then_branch=then, else_branch=other),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("acc_in", T.FLOAT, [4])],
        [vi("cond_out", T.BOOL, []), vi("acc_out", T.FLOAT, [4])],
    )
    inits = [_init("w", w), _init("two", np.int64(2)), _init("zero", np.int64(0))]
    inits.append(_init("M", np.int64(5)))
    return _model(
        [helper.make_node("Loop", ["M", "", "a0"], ["acc"], body=body)],
        [vi("x", T.FLOAT, [4]), vi("a0", T.FLOAT, [4])],
        [vi("acc", T.FLOAT, [4])],
        inits,
    )


@pytest.mark.parametrize("board", ["host", "host-opencl"])
def test_if_nested_in_a_loop_matches_ort(board):
    """On a board with OpenCL too: the top graph may use the GPU, subgraphs run on the CPU."""
    from packager.boards import load_board

    model = nested_model()
    feeds = {"x": RNG.standard_normal(4).astype(np.float32), "a0": np.ones(4, np.float32)}
    (got,) = run_model(model, feeds, board=load_board(board))
    (want,) = ort_outputs(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
