"""The command line end to end: build, run, inspect, boards, and every bad input refused
with exit code 2, a message naming what is wrong, and nothing written."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "build" not in p.parts
    }


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from packager.cli import main

    out = tmp_path_factory.mktemp("b") / "tiny"
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(out)]) == 0
    return out


def test_bundle_layout(bundle):
    for name in [
        "graph.json",
        "params.bin",
        "manifest.json",
        "CMakeLists.txt",
        "kernels/registry.c",
        "runtime/include/pk_runtime.h",
        "selftest/input_0.npy",
        "selftest/output_0.npy",
    ]:
        assert (bundle / name).is_file(), name
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["inputs"] == [
        {"name": "input", "shape": [1, 3, 32, 32], "dtype": "float32", "file": "input.npy"}
    ]
    assert manifest["board"]["name"] == "host"
    import hashlib

    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((bundle / rel).read_bytes()).hexdigest() == digest, rel


def test_build_is_byte_identical(bundle, cli, tmp_path):
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", tmp_path / "again")
    assert code == 0, err
    assert tree_bytes(tmp_path / "again") == tree_bytes(bundle)


def test_run_matches_selftest_and_reports_timing(bundle, cli, tmp_path):
    code, out, err = cli(
        "run",
        bundle,
        "--board",
        "host",
        "--input",
        f"input={bundle / 'selftest' / 'input_0.npy'}",
        "--output-dir",
        tmp_path / "res",
        "--repeat",
        "3",
    )
    assert code == 0, err
    timing = json.loads(out.strip().splitlines()[-1])
    assert timing["median_ms"] > 0
    outputs = json.loads((bundle / "manifest.json").read_text())["outputs"]
    got = np.load(tmp_path / "res" / outputs[0]["file"])
    want = np.load(bundle / "selftest" / "output_0.npy")
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def test_selftest_passes_on_the_built_bundle(bundle, cli, tmp_path):
    import subprocess

    cli(
        "run",
        bundle,
        "--board",
        "host",
        "--input",
        f"input={bundle / 'selftest' / 'input_0.npy'}",
        "--output-dir",
        tmp_path,
    )
    r = subprocess.run(
        [bundle / "build" / "run_bundle", bundle, "--selftest"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout


def save(model, path):
    onnx.save(model, path)
    return path


def one_node_model(op_type, domain="", dims=(1, 4), extra_nodes=()):
    nodes = [helper.make_node(op_type, ["x"], ["y"], name="first", domain=domain), *extra_nodes]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, list(dims))],
    )
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def assert_refused(cli, tmp_path, args, *fragments):
    out = tmp_path / "out"  # an earlier bundle, which a failed build must leave as it is
    out.mkdir(exist_ok=True)
    (out / "manifest.json").write_text('{"format": "packager-bundle"}')
    (out / "keep.txt").write_text("untouched")
    code, _, err = cli(*args, "-o", out) if args[0] == "build" else cli(*args)
    assert code == 2, err
    for f in fragments:
        assert f in err, (f, err)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt", "manifest.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp")]


def test_corrupt_onnx(cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 10)
    assert_refused(cli, tmp_path, ["build", bad, "--board", "host"], str(bad), "ONNX")


def test_unsupported_ops_listed_together(cli, tmp_path):
    extra = [
        helper.make_node("Unique", ["y"], ["z"], name="second"),
        helper.make_node("Relu", ["z"], ["w"], name="third"),
    ]
    model = one_node_model("NonZero", extra_nodes=extra)
    path = save(model, tmp_path / "m.onnx")
    assert_refused(
        cli,
        tmp_path,
        ["build", path, "--board", "host"],
        "2 unsupported op type(s)",
        "NonZero (first at node 'first')",
        "Unique (first at node 'second')",
    )


def test_dynamic_dim_needs_input_shape(cli, tmp_path):
    model = one_node_model("Relu", dims=("batch", 4))
    path = save(model, tmp_path / "m.onnx")
    assert_refused(
        cli,
        tmp_path,
        ["build", path, "--board", "host"],
        "input 'x' has dynamic dims [batch, 4]",
        "--input-shape x=",
    )
    code, _, err = cli(
        "build", path, "--board", "host", "-o", tmp_path / "ok", "--input-shape", "x=3,4"
    )
    assert code == 0, err
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [3, 4]


def test_bad_board_field(cli, tmp_path):
    board = tmp_path / "myboard.yaml"
    text = (
        (ROOT / "board_profiles" / "host.yaml").read_text().replace("name: host", "name: myboard")
    )
    board.write_text(text + "\nfrequency: 3\n")
    assert_refused(
        cli,
        tmp_path,
        ["build", EXAMPLE, "--board", board],
        "myboard.yaml",
        "unknown key 'frequency'",
    )
    code, _, err = cli("boards", "--check", board)
    assert code == 2 and "frequency" in err


def test_truncated_params_refused(bundle, cli, tmp_path):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy, ignore=shutil.ignore_patterns("build"))
    data = (copy / "params.bin").read_bytes()
    (copy / "params.bin").write_bytes(data[: len(data) // 2])
    res = tmp_path / "res"
    code, _, err = cli(
        "run",
        copy,
        "--board",
        "host",
        "--input",
        f"input={copy / 'selftest' / 'input_0.npy'}",
        "--output-dir",
        res,
    )
    assert code == 2, err
    assert "params.bin" in err
    assert not res.exists()


def test_wrong_input_shape_refused(bundle, cli, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 16, 16), np.float32))
    res = tmp_path / "res"
    code, _, err = cli(
        "run", bundle, "--board", "host", "--input", f"input={x}", "--output-dir", res
    )
    assert code == 2
    assert "expected float32[1, 3, 32, 32], got float32[1, 3, 16, 16]" in err
    assert not res.exists()


def test_inspect(cli, tmp_path):
    code, out, _ = cli("inspect", EXAMPLE)
    assert code == 0
    assert (
        "Conv" in out
        and "supported" in out
        and "input: float[1, 3, 32, 32]" in out.replace("float32", "float")
    )
    path = save(one_node_model("NonZero"), tmp_path / "m.onnx")
    code, out, _ = cli("inspect", path)
    assert code == 0 and "unsupported: NonZero" in out


def test_boards_list(cli):
    code, out, _ = cli("boards")
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert code == 0 and "x86_64" in rows["host"] and "x86_64" in rows["accel-sim"]


def test_version(cli, capsys):
    from packager import __version__
    from packager.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"packager {__version__}\n"


def test_help_explains(cli, capsys):
    from packager.cli import main

    with pytest.raises(SystemExit) as e:
        main(["build", "--help"])
    assert e.value.code == 0
    assert "renamed to OUT" in capsys.readouterr().out


def test_input_given_twice_refused(bundle, cli, tmp_path):
    """The second --input of a name would silently replace the first: refused."""
    x = bundle / "selftest" / "input_0.npy"
    code, _, err = cli(
        "run",
        bundle,
        "--board",
        "host",
        "--input",
        f"input={x}",
        "--input",
        f"input={x}",
        "--output-dir",
        tmp_path / "res",
    )
    assert code == 2 and "--input input given twice" in err, err
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("command", ["tune", "run", "bench", "clean", "deploy", "build"])
def test_board_help(command, capsys):
    from packager.cli import main

    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "--board BOARD board profile: a name from `packager boards` or a path to a YAML file" in out
    )


def test_new_opset_warns(cli, tmp_path):
    """An ai.onnx opset newer than the packager was tested with: one warning line naming the
    model, its opset and the newest tested one; build and inspect still go on."""
    from packager.frontend.importer import NEWEST_TESTED_OPSET

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    want = (
        f"warning: {path}: ai.onnx opset 99 is newer than the newest the packager was tested "
        f"with ({NEWEST_TESTED_OPSET})"
    )
    code, _, err = cli("inspect", path)
    assert code == 0 and [line for line in err.splitlines() if "warning" in line] == [
        want + "; check the results"
    ], err
    code, _, err = cli("build", path, "--board", "host", "-o", tmp_path / "out")
    assert code == 0 and err.count(want) == 1, err


@pytest.mark.parametrize("command", ["build", "inspect", "tune"])
def test_input_shape_given_twice_refused(cli, tmp_path, command):
    """The second --input-shape of a name would silently replace the first: refused before
    anything is read or written."""
    extra = {
        "build": ["--board", "host", "-o", tmp_path / "b"],
        "tune": ["--board", "host", "--log", tmp_path / "t.jsonl"],
    }
    shapes = ["--input-shape", "input=1,3,32,32", "--input-shape", "input=1,3,64,64"]
    code, _, err = cli(command, EXAMPLE, *extra.get(command, []), *shapes)
    assert code == 2, err
    assert "error: --input-shape input given twice ([1, 3, 32, 32] and [1, 3, 64, 64])" in err
    assert list(tmp_path.iterdir()) == []
