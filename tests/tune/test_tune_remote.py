"""Tuning over SSH on the emulated aarch64 board (sshd on 127.0.0.1, qemu-user): the
candidates are cross-compiled, uploaded as one driver and timed there. Timings under
emulation mean nothing; the path is what is tested."""

from __future__ import annotations

import pytest

from packager.tune.log import read_records
from tests.remote.conftest import sshd, write_profile  # noqa: F401  (the fixture)


@pytest.mark.slow
def test_tune_over_ssh_on_the_emulated_board(sshd, conv_onnx, tmp_path, cli):  # noqa: F811
    board = write_profile(
        tmp_path / "boards", "qemu-aarch64", [sshd.connection(str(tmp_path / "w"))]
    )
    log = tmp_path / "q.jsonl"
    code, out, err = cli("tune", conv_onnx, "--board", board, "--trials", 6, "--log", log)
    assert code == 0, err
    recs = read_records(log)
    assert len(recs) == 6
    assert all(r["board"]["name"] == "qemu-aarch64" for r in recs)
    assert any(r["result"]["error"] is None and r["result"]["costs"] for r in recs)
    code, _, err = cli(
        "build", conv_onnx, "--board", board, "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use a tuned config" in err
