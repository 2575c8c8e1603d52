"""The per-kernel profile: graph.json's ops, flops and bytes of each kernel node, run_bundle
--profile's table and --profile-json's document (docs/bundle-format.md), `packager run
--profile`. A real build of a model whose two convolutions share one kernel (2 calls)."""

import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROW = re.compile(
    r"(?P<func>\S+)\s+(?P<ops>\S+)\s+(?P<calls>\d+)\s+(?P<ms>[\d.]+)\s+(?P<share>[\d.]+)%\s+"
    r"(?:(?P<rate>[\d.]+) (?P<unit>GFLOP/s|GB/s)|-)\s+(?P<device>\S+)"
)
KEYS = {"version", "bundle", "model", "board", "threads", "repeat", "device", "total", "kernels"}
KERNEL_KEYS = {"func", "device", "ops", "nodes", "calls", "median_ms", "share", "flops", "bytes"}


def two_convs() -> onnx.ModelProto:
    """conv+relu twice on the same shapes (one kernel, two calls), a max pool, an add."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), w)
        for w in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu_a"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu_b"),
        helper.make_node(
            "MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Add", ["p", "p"], ["y"], name="twice"),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from packager.boards import load_board
    from packager.cli import main
    from packager.runner import build

    d = tmp_path_factory.mktemp("profile")
    onnx.save(two_convs(), d / "two_convs.onnx")
    out = d / "b"
    assert main(["build", str(d / "two_convs.onnx"), "--board", "host", "-o", str(out)]) == 0
    build(out, load_board("host"))
    return out


def run_bundle(bundle: Path, *args, graph_dir: Path | None = None) -> subprocess.CompletedProcess:
    exe = bundle / "build" / "run_bundle"
    where = graph_dir or bundle
    return subprocess.run([exe, where, *map(str, args)], capture_output=True, text=True)


def kernel_nodes(bundle: Path) -> list[dict]:
    graph = json.loads((bundle / "graph.json").read_text())
    return [n for n in graph["nodes"] if n["op"] == "kernel"]


def table(stdout: str) -> tuple[list[dict], str]:
    """The table's rows (parsed) and its total line."""
    lines = stdout.strip().splitlines()
    head = next(k for k, line in enumerate(lines) if line.startswith("kernel "))
    assert lines[head].split() == ["kernel", "ops", "fused", "calls", "median", "ms", "%"] + [
        "total",
        "rate",
        "device",
    ]
    total = next(k for k in range(head, len(lines)) if lines[k].startswith("total "))
    rows = [ROW.fullmatch(line.strip()) for line in lines[head + 1 : total]]
    assert all(rows), lines[head + 1 : total]
    return [r.groupdict() for r in rows], lines[total]


def old_bundle(bundle: Path, tmp_path: Path) -> Path:
    """The bundle's graph.json as a packager before the profile fields wrote it."""
    graph = json.loads((bundle / "graph.json").read_text())
    for n in graph["nodes"]:
        for key in ("ops", "flops", "bytes"):
            n.pop(key, None)
    tmp_path.mkdir()
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    (tmp_path / "params.bin").write_bytes((bundle / "params.bin").read_bytes())
    return tmp_path


def test_kernel_nodes_carry_ops_flops_bytes(bundle):
    graph = json.loads((bundle / "graph.json").read_text())
    shapes, dtypes = graph["attrs"]["shape"], graph["attrs"]["dtype"]
    row = graph["node_row_ptr"]
    by_func = {}
    for n in kernel_nodes(bundle):
        entries = [row[i] + k for i, k in n["inputs"]]
        entries += [row[graph["nodes"].index(n)] + k for k in range(n["num_outputs"])]
        assert all(dtypes[e] == "float32" for e in entries)
        assert n["bytes"] == sum(4 * math.prod(shapes[e]) for e in entries)
        by_func.setdefault(n["func"], []).append(n)
    conv = next(ns for f, ns in by_func.items() if "conv" in f)
    assert len(conv) == 2 and conv[0]["flops"] == conv[1]["flops"]
    assert conv[0]["ops"][0].startswith("conv") and conv[0]["ops"][-1] == "relu"
    # 2 flops per multiply-add, 8x8x3x3 of them per output element, 8x16x16 elements
    assert 2 * 8 * 9 * 8 * 256 <= conv[0]["flops"] <= 1.2 * 2 * 8 * 9 * 8 * 256
    pool = next(ns[0] for f, ns in by_func.items() if "pool" in f)
    assert pool["ops"][0].startswith("max_pool") and pool["flops"] == 0


def test_profile_table_has_a_row_per_kernel(bundle):
    r = run_bundle(bundle, "--repeat", "5", "--profile")
    assert r.returncode == 0, r.stderr
    rows, total = table(r.stdout)
    nodes = kernel_nodes(bundle)
    funcs = {n["func"] for n in nodes}
    assert sorted(row["func"] for row in rows) == sorted(funcs)
    for row in rows:
        calls = [n for n in nodes if n["func"] == row["func"]]
        assert int(row["calls"]) == len(calls)
        assert row["ops"].split("+")[: len(calls[0]["ops"])] == calls[0]["ops"]
        assert row["device"] == "cpu"
        # a pool (no flops) or an add (a flop per 12 bytes) is rated in GB/s
        want = "GFLOP/s" if calls[0]["flops"] >= calls[0]["bytes"] else "GB/s"
        assert row["unit"] == want, row
    assert any(row["unit"] == "GB/s" and "max_pool" in row["ops"] for row in rows)
    ms = [float(row["ms"]) for row in rows]
    assert ms == sorted(ms, reverse=True)
    assert abs(sum(float(row["share"]) for row in rows) - 100) < 0.5
    assert total.split()[:4] == ["total", f"({len(funcs)}", "kernels)", str(len(nodes))]
    timing = json.loads(r.stdout.strip().splitlines()[-1])
    assert list(timing) == ["median_ms", "min_ms", "mean_ms", "repeat"] and timing["repeat"] == 5


def test_profile_json_follows_the_contract(bundle, tmp_path):
    doc_path = tmp_path / "p.json"
    r = run_bundle(bundle, "--repeat", "5", "--profile-json", doc_path)
    assert r.returncode == 0, r.stderr
    rows, _ = table(r.stdout)  # --profile-json implies the table
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary left
    doc = json.loads(doc_path.read_text())
    assert set(doc) == KEYS
    assert (doc["version"], doc["bundle"], doc["repeat"]) == (1, str(bundle), 5)
    assert (doc["model"], doc["board"], doc["device"]) == ("two_convs", "host", "cpu")
    assert doc["threads"] >= 1
    timing = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["total"] == {k: timing[k] for k in ("median_ms", "min_ms", "mean_ms")}
    kernels = doc["kernels"]
    assert [k["func"] for k in kernels] == [row["func"] for row in rows]
    assert [k["median_ms"] for k in kernels] == sorted(
        (k["median_ms"] for k in kernels), reverse=True
    )
    assert abs(sum(k["share"] for k in kernels) - 1) < 1e-3
    nodes = kernel_nodes(bundle)
    for k in kernels:
        assert KERNEL_KEYS <= set(k)
        calls = [n for n in nodes if n["func"] == k["func"]]
        assert k["nodes"] == [n["name"] for n in calls] and k["calls"] == len(calls)
        assert k["ops"] == calls[0]["ops"]
        assert k["flops"] == pytest.approx(sum(n["flops"] for n in calls))
        assert k["bytes"] == pytest.approx(sum(n["bytes"] for n in calls))
        assert k["gbps"] == pytest.approx(k["bytes"] / k["median_ms"] / 1e6, rel=1e-3)
        if k["flops"]:
            assert k["gflops"] == pytest.approx(k["flops"] / k["median_ms"] / 1e6, rel=1e-3)
        else:
            assert k["gflops"] is None
    assert max(k["calls"] for k in kernels) == 2  # the shared conv kernel


def test_a_graph_json_without_the_fields_still_profiles(bundle, tmp_path):
    old = old_bundle(bundle, tmp_path / "old")
    r = run_bundle(bundle, "--repeat", "3", "--profile-json", tmp_path / "p.json", graph_dir=old)
    assert r.returncode == 0, r.stderr
    rows, total = table(r.stdout)
    assert rows and all(row["rate"] is None and row["ops"] == "-" for row in rows)
    assert "GFLOP/s" not in total
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["model"] == "" and doc["board"] == ""  # no manifest.json beside it
    for k in doc["kernels"]:
        assert k["ops"] == [] and k["calls"] >= 1
        assert (k["flops"], k["bytes"], k["gflops"], k["gbps"]) == (None, None, None, None)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("flops", "many", "nodes[{i}].flops: expected a finite number >= 0"),
        ("bytes", -1, "nodes[{i}].bytes: expected a finite number >= 0"),
        ("ops", "conv", "nodes[{i}].ops: expected an array of op names"),
        ("ops", ["conv", 3], "nodes[{i}].ops[1]: expected an op name"),
        ("ops", ["a b"], "nodes[{i}].ops[0]: expected an op name"),
    ],
)
def test_bad_profile_fields_are_refused(bundle, tmp_path, field, value, message):
    graph = json.loads((bundle / "graph.json").read_text())
    i = next(k for k, n in enumerate(graph["nodes"]) if n["op"] == "kernel")
    graph["nodes"][i][field] = value
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    (tmp_path / "params.bin").write_bytes((bundle / "params.bin").read_bytes())
    r = run_bundle(bundle, graph_dir=tmp_path)
    assert r.returncode == 2
    assert message.format(i=i) in r.stderr


def test_profile_json_path_errors(bundle, tmp_path):
    target = tmp_path / "dir"
    target.mkdir()
    (target / "keep").write_text("x")
    r = run_bundle(bundle, "--repeat", "2", "--profile-json", target)
    assert r.returncode == 2 and f"--profile-json {target}: is a directory" in r.stderr
    assert r.stdout == "" and [p.name for p in target.iterdir()] == ["keep"]
    missing = tmp_path / "no" / "p.json"
    r = run_bundle(bundle, "--repeat", "2", "--profile-json", missing)
    assert r.returncode == 2 and f"--profile-json {missing}: cannot write" in r.stderr
    r = run_bundle(bundle, "--profile-json", tmp_path / "p.json")
    assert r.returncode == 2 and "--profile-json needs --repeat N" in r.stderr
    assert not (tmp_path / "p.json").exists()


def test_packager_run_profile(bundle, cli, tmp_path):
    code, out, err = cli("run", bundle, "--board", "host", "--profile")
    assert code == 0, err
    rows, _ = table(out)
    assert len(rows) == len({n["func"] for n in kernel_nodes(bundle)})
    assert json.loads(out.strip().splitlines()[-1])["repeat"] == 20  # --profile's default

    doc_path = tmp_path / "p.json"
    code, out, err = cli(
        "run", bundle, "--board", "host", "--repeat", "3", "--profile-json", doc_path
    )
    assert code == 0, err
    doc = json.loads(doc_path.read_text())
    assert doc["repeat"] == 3 and [k["func"] for k in doc["kernels"]] == [
        r["func"] for r in table(out)[0]
    ]

    code, out, err = cli("run", bundle, "--board", "host", "--profile-json", tmp_path)
    assert code == 2 and f"--profile-json {tmp_path}: is a directory" in err


def test_op_names_are_escaped_in_the_document(bundle, tmp_path):
    graph = json.loads((bundle / "graph.json").read_text())
    node = next(n for n in graph["nodes"] if n["op"] == "kernel")
    node["ops"] = ['we"ird\\op', "tab\there"]
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    (tmp_path / "params.bin").write_bytes((bundle / "params.bin").read_bytes())
    doc_path = tmp_path / "p.json"
    r = run_bundle(bundle, "--repeat", "2", "--profile-json", doc_path, graph_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    kernels = json.loads(doc_path.read_text())["kernels"]
    assert next(k for k in kernels if k["func"] == node["func"])["ops"] == node["ops"]
