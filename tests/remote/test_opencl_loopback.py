"""A board with an OpenCL GPU over SSH: the loopback sshd plays the board and PoCL its
GPU. Package for it, deploy (the self-test runs on the board), run and bench."""

import json

import numpy as np
import pytest

from packager.boards import load_board
from packager.package import package

from .conftest import ROOT, write_profile

EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def board(sshd, tmp_path_factory):
    d = tmp_path_factory.mktemp("boards")
    work = tmp_path_factory.mktemp("board-root") / "work"
    return write_profile(d, "host-opencl", [sshd.connection(str(work))])


def test_deploy_run_bench_with_opencl(board, cli, tmp_path):
    bundle = package(str(EXAMPLE), load_board(board), str(tmp_path / "bundle"))
    graph = json.loads((bundle / "graph.json").read_text())
    assert any(n.get("device") == "opencl" for n in graph["nodes"])

    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 0, out + err
    assert "selftest PASS" in out

    res = tmp_path / "res"
    code, out, err = cli("run", bundle, "--board", board, "--fill", "zeros", "--output-dir", res)
    assert code == 0, out + err
    assert "opencl" in err.lower()  # run_bundle names the OpenCL device it runs on
    (got,) = [np.load(p) for p in res.iterdir()]
    assert got.shape == (1, 10) and np.isfinite(got).all()

    code, out, err = cli("bench", bundle, "--board", board, "--repeat", "3")
    assert code == 0, out + err
    assert json.loads(out.strip().splitlines()[-1])["median_ms"] > 0
