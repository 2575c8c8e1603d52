"""In place end to end: kernels generated without `restrict` on the aliased pair only,
the lowering refusing kernels that cannot work in place, bundles that run and match the
reference, the runtime refusing forged overlaps, manifest stats and `inspect --plan`."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from packager.boards import load_board
from packager.errors import PackagerError
from packager.graph.ir import Graph, Node, Value
from packager.lowering import lower_node
from packager.native import build_run_bundle
from packager.package import package


def one_node(op: str, shape=(4, 8), attrs=None) -> tuple[Node, Graph]:
    values = {n: Value(n, shape, "float32") for n in ("x", "y")}
    node = Node(op, op, ["x"], ["y"], attrs or {})
    return node, Graph("g", ["x"], ["y"], [node], values)


def pointer_lines(source: str) -> dict[str, str]:
    """Kernel argument name -> its declaration line."""
    found = re.findall(r"^\s*(.*\b(\w+) = \(.*\)args\[\d+\];)$", source, re.M)
    return {name: line for line, name in found}


def test_inplace_pair_loses_restrict_and_nothing_else():
    node, graph = one_node("relu")
    plain = pointer_lines(lower_node(node, graph, "k_plain").source)
    alias = pointer_lines(lower_node(node, graph, "k_alias", inplace=[(0, 0)]).source)
    assert len(plain) == 2 and all("restrict" in line for line in plain.values())
    assert len(alias) == 2 and not any("restrict" in line for line in alias.values())


def test_lowering_refuses_inplace_for_a_kernel_that_reads_elsewhere():
    node, graph = one_node("softmax", attrs={"axes": [1]})
    with pytest.raises(PackagerError, match="cannot be written over input 0"):
        lower_node(node, graph, "k_bad", inplace=[(0, 0)])


# ---- a packaged model ------------------------------------------------------------------------


def chain_model() -> onnx.ModelProto:
    """Conv, two softmaxes (opaque: fusion leaves them alone), then elementwise ops on both,
    which fusion groups into one kernel that can write over a dying softmax output."""
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], rng.standard_normal(216))
    b = helper.make_tensor("b", TensorProto.FLOAT, [8, 1, 1], rng.standard_normal(8))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Softmax", ["c"], ["s"], axis=1),
        helper.make_node("Softmax", ["s"], ["t"], axis=2),
        helper.make_node("Add", ["s", "t"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "b"], ["m"]),
        helper.make_node("Softmax", ["m"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def chain_bundle(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inplace")
    onnx.save(chain_model(), d / "chain.onnx")
    out = package(str(d / "chain.onnx"), load_board("host"), str(d / "bundle"))
    build_run_bundle(out)
    return out


def run_bundle(bundle: Path, *args: str) -> subprocess.CompletedProcess:
    exe = bundle / "build" / "run_bundle"
    return subprocess.run([exe, bundle, *args], capture_output=True, text=True)


def test_inplace_bundle_matches_the_reference(chain_bundle):
    gj = json.loads((chain_bundle / "graph.json").read_text())
    assert any(n.get("inplace") for n in gj["nodes"])
    r = run_bundle(chain_bundle, "--selftest")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr


def test_manifest_stats(chain_bundle):
    stats = json.loads((chain_bundle / "manifest.json").read_text())["stats"]
    assert stats["nodes"] == len(stats["fused_groups"]) >= 1
    assert all(isinstance(g, list) and g for g in stats["fused_groups"])
    assert stats["live_lower_bound_bytes"] <= stats["arena_bytes"] <= stats["no_reuse_bytes"]
    assert stats["params_bytes"] == (216 + 8) * 4 and stats["inplace_nodes"] >= 1


def forged(bundle: Path, tmp_path: Path, edit) -> subprocess.CompletedProcess:
    """The bundle with graph.json changed by ``edit(doc)``, run."""
    copy = tmp_path / "forged"
    subprocess.run(["cp", "-r", bundle, copy], check=True)
    doc = json.loads((copy / "graph.json").read_text())
    edit(doc)
    (copy / "graph.json").write_text(json.dumps(doc))
    return run_bundle(copy, "--selftest")


def test_runtime_refuses_inplace_that_is_not_declared(chain_bundle, tmp_path):
    def drop(doc):
        for n in doc["nodes"]:
            n.pop("inplace", None)

    r = forged(chain_bundle, tmp_path, drop)
    assert r.returncode == 2 and "overlaps entry" in r.stderr, r.stderr


def test_runtime_refuses_overlapping_live_tensors(chain_bundle, tmp_path):
    def squash(doc):  # every arena storage at offset 0
        for st in doc["storage"]:
            if st["kind"] == "arena":
                st["offset"] = 0

    r = forged(chain_bundle, tmp_path, squash)
    assert r.returncode == 2 and "overlaps entry" in r.stderr, r.stderr


# ---- inspect --plan --------------------------------------------------------------------------


def test_inspect_plan_tables(cli, tmp_path):
    onnx.save(chain_model(), tmp_path / "chain.onnx")
    code, out, err = cli("inspect", tmp_path / "chain.onnx", "--plan")
    assert code == 0, err
    kernels, memory = out.split("memory plan")
    assert re.search(r"step\s+kernel\s+ops\s+inputs\s+outputs", kernels)
    assert "1x3x8x8" in kernels and "conv" in kernels
    assert re.search(r"#\s+tensor\s+bytes\s+offset\s+first\s+last\s+storage", memory)
    rows = [line.split() for line in memory.splitlines() if re.match(r"\s*\d+\s", line)]
    assert rows and all(len(r) == 7 for r in rows)
    for line in ("arena:", "live lower bound:", "no reuse:", "in place:", "params:"):
        assert line in memory


def test_inspect_plan_png(cli, tmp_path):
    onnx.save(chain_model(), tmp_path / "chain.onnx")
    png = tmp_path / "plan.png"
    code, out, err = cli("inspect", tmp_path / "chain.onnx", "--plan-png", png)
    assert code == 0 and str(png) in out, err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 2_000 < len(data) < 200_000
    width, height, depth, color = struct.unpack(">IIBB", data[16:26])
    assert (width, height, depth, color) == (960, 540, 8, 2)
    (length,) = struct.unpack(">I", data[33:37])
    assert data[37:41] == b"IDAT"
    raw = zlib.decompress(data[41 : 41 + length])
    assert len(raw) == height * (1 + 3 * width)
    pixels = np.frombuffer(raw, np.uint8).reshape(height, -1)[:, 1:]
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 4  # more than a blank page
