"""Tuning the OpenCL schedules of a board with a GPU: host-opencl, this machine's PoCL
device. Tasks of GPU kernels are measured on the OpenCL device, their records carry the
OpenCL target's fingerprint, and a build gives the GPU kernels the tuned knobs."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.codegen.opencl import launch_of
from packager.ops.opencl import generic
from packager.target import Target
from packager.tune.features import feature_length, features
from packager.tune.log import cost, read_records
from packager.tune.measure import Measurer, Settings
from packager.tune.run import model_tasks
from packager.tune.space import space_of, valid
from packager.tune.tasks import lower_config
from tests.helpers import ort_outputs
from tests.remote.conftest import sshd  # noqa: F401  (fixture)

BOARD = "host-opencl"


def two_convs(hw: int = 14) -> onnx.ModelProto:
    """conv 3x3 + relu, max-pool, conv 3x3 + relu: three GPU kernels with templates."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, hw // 2, hw // 2])
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "two_convs", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "two_convs.onnx"
    onnx.save(two_convs(), path)
    return path


def gpu_tasks(path):
    return [t for t in model_tasks(str(path), load_board(BOARD)) if t.family == "opencl"]


def local_sizes(bundle) -> dict[str, tuple]:
    """Each OpenCL kernel's work-group size, from kernels/registry.c."""
    text = (bundle / "kernels" / "registry.c").read_text()
    rows = re.findall(r'\{"(k_\w+)", "[^"]*", \{[\d, ]+\}, \{(\d+), (\d+), (\d+)\}\}', text)
    return {name: tuple(map(int, sizes)) for name, *sizes in rows}


def test_gpu_kernels_are_tasks_of_the_opencl_target(model_path):
    tasks = gpu_tasks(model_path)
    assert len(tasks) >= 2
    want = Target.opencl(load_board(BOARD))
    assert all(t.target == want for t in tasks)
    knobs = {t.template: {k.name for k in space_of(t).knobs} for t in tasks}
    assert {"group_size", "group_shape"} <= knobs["conv2d_nchwc"]  # the OpenCL template's
    assert any("group" in k for op, k in knobs.items() if "pool" in op)


def test_tune_then_build_applies_the_gpu_records(model_path, tmp_path, cli):
    log = tmp_path / "t.jsonl"
    code, out, err = cli(
        "tune", model_path, "--board", BOARD, "--trials", 3, "--tuner", "random", "--log", log
    )
    assert code == 0, err
    recs = read_records(log)
    fingerprint = Target.opencl(load_board(BOARD)).fingerprint()
    assert {r["target"]["family"] for r in recs} == {"opencl"}
    assert all(r["target"] == fingerprint for r in recs)
    tasks = {r["task"]["key"] for r in recs if cost(r) < float("inf")}
    assert len(tasks) >= 2

    # Keep, per task, only its measured settings with a work-group size other than the
    # default's, so the build can only take a tuned one.
    by_task = {t.key: t for t in gpu_tasks(model_path)}
    kept, tuned_launch = [], {}
    for r in [r for r in recs if cost(r) < float("inf")]:
        task = by_task[r["task"]["key"]]
        default = launch_of(lower_config(task, None, "d")).local_size
        launch = launch_of(lower_config(task, r["config"]["knobs"], "c")).local_size
        if launch != default:
            kept.append(r)
            tuned_launch.setdefault(task.key, set()).add(launch)
    assert kept, "no measured setting changes a work-group size"
    log.write_text("".join(json.dumps(r) + "\n" for r in kept))

    code, _, err = cli("build", model_path, "--board", BOARD, "-o", tmp_path / "t")
    assert code == 0 and re.search(r"(\d+) of \1 tunable kernels use default schedules", err), err
    code, _, err = cli(
        "build", model_path, "--board", BOARD, "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0, err
    n = len(tuned_launch)
    assert re.search(rf"\b{n} of \d+ tunable kernels use tuned schedules", err), err
    untuned, tuned = local_sizes(tmp_path / "t"), local_sizes(tmp_path / "b")
    assert sum(tuned[k] != untuned[k] for k in tuned) == n

    x = np.random.default_rng(1).uniform(-1, 1, (1, 8, 14, 14)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = tmp_path / "res"
    code, out, err = cli(
        "run",
        tmp_path / "b",
        "--board",
        BOARD,
        "--input",
        f"x={tmp_path / 'x.npy'}",
        "--output-dir",
        res,
    )
    assert code == 0, err
    (got,) = [np.load(p) for p in res.iterdir()]
    (want,) = ort_outputs(two_convs(), {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_gpu_features_have_one_length_and_follow_the_knobs(model_path):
    task = gpu_tasks(model_path)[0]
    space = space_of(task)
    prims = [valid(task, space.get(i)) for i in range(0, space.size, max(1, space.size // 40))]
    feats = [features(p, "opencl") for p in prims if p is not None]
    assert len(feats) > 4
    assert {len(f) for f in feats} == {feature_length("opencl")}
    assert feature_length("opencl") > feature_length("cpu")
    gpu = np.stack([f[feature_length("cpu") :] for f in feats])
    assert len({tuple(row) for row in gpu}) > 2  # work-group sizes, tiles, vectors differ
    sizes = next(k.candidates for k in space.knobs if k.name == "group_size")
    one = {"tile_ow": 1, "tile_oc": 1}  # a work-item per output: enough for any group
    small = features(valid(task, {**one, "group_size": min(sizes)}), "opencl")
    large = features(valid(task, {**one, "group_size": max(sizes)}), "opencl")
    k = feature_length("cpu")
    assert small[k] < large[k]  # log2 of the work-group size


def test_failing_candidates_give_error_records(tmp_path, monkeypatch):
    """A setting the template refuses is ``invalid``; a work-group larger than the real
    device allows (the profile claims a bigger one) fails at launch: ``runtime_error``."""
    path = tmp_path / "big.onnx"
    onnx.save(two_convs(hw=48), path)
    task = gpu_tasks(path)[0]
    measurer = Measurer(load_board(BOARD), Settings(min_seconds=0.001, samples=2))
    refused = {"tile_ow": 8, "tile_oc": 4, "unroll_kw": True, "vector": 1}
    (m,) = measurer.measure(task, [(1, refused)])
    assert m.error == "invalid" and m.median == float("inf")

    big = replace(task.target, max_work_group_size=1 << 16, max_work_item_sizes=(1 << 16,) * 3)
    monkeypatch.setattr(generic.bind_flat, "__defaults__", (8192,))
    task = replace(task, target=big)
    args, outs, anchor = task.computes()
    from packager import te

    prim = te.lower(generic.gpu_default_schedule(outs, big), args + outs, "pk_cand_2")
    assert launch_of(prim).work_group_items > 4096
    from packager.tune.measure import Measurement

    cand = Measurement(2, {}, prim=prim)
    measurer._measure_cl_local(task, [cand])
    assert cand.error == "runtime_error"


@pytest.mark.slow
def test_tune_gpu_kernels_over_ssh_on_the_loopback_board(sshd, model_path, tmp_path, cli):  # noqa: F811
    """The loopback sshd plays a board with an OpenCL GPU (PoCL): candidates are timed by
    the OpenCL timing driver run there."""
    from tests.remote.conftest import write_profile

    board = write_profile(tmp_path / "boards", BOARD, [sshd.connection(str(tmp_path / "w"))])
    log = tmp_path / "r.jsonl"
    code, out, err = cli(
        "tune", model_path, "--board", board, "--trials", 2, "--tuner", "random", "--log", log
    )
    assert code == 0, err
    recs = read_records(log)
    assert {r["target"]["family"] for r in recs} == {"opencl"}
    good = [r for r in recs if cost(r) < float("inf")]
    assert len({r["task"]["key"] for r in good}) >= 2
    assert all("device" in r["result"] and r["host"] is None for r in good)  # measured there
    code, _, err = cli(
        "build", model_path, "--board", board, "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and re.search(r"\b[1-9]\d* of \d+ tunable kernels use tuned", err)
