"""Tuning over SSH on the emulated aarch64 board (sshd on 127.0.0.1, qemu-user): the
candidates are cross-compiled, uploaded as one driver and timed there. Timings under
emulation mean nothing; the path is what is tested."""

from __future__ import annotations

import itertools
import re

import pytest

from packager.boards import load_board
from packager.tune.log import SLOWER, confirming, cost, read_records
from packager.tune.measure import Measurer, Settings
from packager.tune.run import model_tasks
from packager.tune.space import space_of, valid
from tests.remote.conftest import own_sshd, sshd, write_profile  # noqa: F401  (fixtures)
from tests.remote.sshd import free_port


@pytest.mark.slow
def test_tune_over_ssh_on_the_emulated_board(sshd, conv_onnx, tmp_path, cli):  # noqa: F811
    board = write_profile(
        tmp_path / "boards", "qemu-aarch64", [sshd.connection(str(tmp_path / "w"))]
    )
    log = tmp_path / "q.jsonl"
    code, out, err = cli(
        "tune", conv_onnx, "--board", board, "--trials", 6, "--log", log,
        "--conv-algorithm", "direct",
    )  # fmt: skip
    assert code == 0, err
    # the default and the tuned build of the model ran in turns on the emulated board
    assert re.search(
        r"^model check: (no tuned kernel differs|\d+ of \d+ tuned kernels ran)", err, re.M
    ), err
    recs = read_records(log)
    failed = [r["result"] for r in recs if r["result"]["error"] not in (None, "invalid")]
    assert sum(cost(r) < float("inf") for r in recs if not confirming(r)) == 6, failed
    assert all(r["board"]["name"] == "qemu-aarch64" for r in recs)
    assert any(r["result"]["error"] is None and r["result"]["costs"] for r in recs)
    code, _, err = cli(
        "build", conv_onnx, "--board", board, "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err


@pytest.mark.slow
def test_tune_over_a_pool_uses_every_live_device(sshd, own_sshd, conv_onnx, tmp_path, cli):  # noqa: F811
    """Two emulated boards (two sshd) and a dead third: each batch is split between the
    two live devices, which measure at the same time; the dead one is taken out once."""
    dead = free_port()
    devices = [
        sshd.connection(str(tmp_path / "a")),
        own_sshd.connection(str(tmp_path / "b")),
        {**sshd.connection(str(tmp_path / "c")), "port": dead},
    ]
    board = write_profile(tmp_path / "boards", "qemu-aarch64", devices)
    log = tmp_path / "q.jsonl"
    code, out, err = cli(
        "tune", conv_onnx, "--board", board, "--trials", 8, "--tuner", "random", "--log", log,
        "--conv-algorithm", "direct",
    )  # fmt: skip
    assert code == 0, err
    assert f"127.0.0.1:{dead}: out of the pool" in err
    recs = read_records(log)
    measured = [r for r in recs if r["result"]["error"] not in ("invalid", SLOWER)]
    assert sum(cost(r) < float("inf") for r in recs if not confirming(r)) == 8
    live = {f"{sshd.user}@127.0.0.1:{sshd.port}", f"{own_sshd.user}@127.0.0.1:{own_sshd.port}"}
    by_device = {d: [r for r in measured if r["result"]["device"] == d] for d in live}
    assert {r["result"]["device"] for r in measured} == live  # no record from the dead one
    assert all(len(mine) >= 2 for mine in by_device.values()), by_device
    # the summary names the devices and what each measured
    for d in live:
        assert f"{d}: {len(by_device[d])} measured" in err


@pytest.mark.slow
def test_a_share_of_a_device_lost_mid_batch_is_measured_by_another(
    sshd,  # noqa: F811
    own_sshd,  # noqa: F811
    conv_onnx,
    tmp_path,
):
    board = load_board(
        write_profile(
            tmp_path / "boards",
            "qemu-aarch64",
            [sshd.connection(str(tmp_path / "a")), own_sshd.connection(str(tmp_path / "b"))],
        )
    )
    (task,) = model_tasks(str(conv_onnx), board, algorithms=["direct"])
    measurer = Measurer(board, Settings(min_seconds=0.001, samples=1))
    runner = measurer.runner
    keep, lose = (s.conn.label for s in runner.sessions)
    real_run = runner.run

    def run(exe, args, timeout, session=None):
        if session.conn.label == lose:
            own_sshd.stop()  # this device dies as it starts its share
        return real_run(exe, args, timeout, session)

    runner.run = run
    space = space_of(task)
    first = (i for i in range(space.size) if valid(task, space.get(i)))
    batch = [(i, space.get(i)) for i in itertools.islice(first, 6)]
    try:
        ms = measurer.measure(task, batch)
    finally:
        measurer.close()
    assert [m.error for m in ms] == [None] * 6 and all(m.costs for m in ms)
    assert {m.device for m in ms} == {keep}  # the lost share was measured again there
    assert lose in runner.down
    assert runner.summary() == [
        f"{keep}: 6 measured",
        f"{lose}: out of the pool: {runner.down[lose]}",
    ]
