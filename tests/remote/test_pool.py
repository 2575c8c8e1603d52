"""A pool of three devices, one of them dead: deploy and measurement finish on the other
two, a device lost mid-job has its job retried elsewhere, and the summary says who did what.
Also a board that builds on the device instead of cross-compiling."""

import json

from packager.boards import load_board
from packager.package import package
from packager.remote import device_ops, pool
from packager.remote.ssh import Limits, Session

from .conftest import ROOT, write_profile
from .sshd import free_port

EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def test_one_dead_device_in_a_pool_of_three(sshd, own_sshd, tmp_path, cli):
    dead = free_port()
    board = write_profile(
        tmp_path / "boards",
        "qemu-aarch64",
        [
            sshd.connection(str(tmp_path / "a")),
            own_sshd.connection(str(tmp_path / "b")),
            {**sshd.connection(str(tmp_path / "c")), "port": dead},
        ],
    )
    bundles = [tmp_path / "m1", tmp_path / "m2", tmp_path / "m3"]
    package(str(EXAMPLE), load_board(board), str(bundles[0]))
    for b in bundles[1:]:
        package(str(EXAMPLE), load_board(board), str(b))

    code, out, err = cli("deploy", bundles[0], "--board", board, "--retries", "1")
    assert code == 0, out + err
    assert out.count("selftest PASS") == 2
    assert f"127.0.0.1:{dead}: out of the pool" in err and "connect failed" in err

    code, out, err = cli("bench", *bundles, "--board", board, "--repeat", "2", "--retries", "1")
    assert code == 0, out + err
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert [r["bundle"] for r in rows] == [str(b) for b in bundles]
    live = {f"{sshd.user}@127.0.0.1:{sshd.port}", f"{own_sshd.user}@127.0.0.1:{own_sshd.port}"}
    assert {r["device"] for r in rows} <= live
    assert f"127.0.0.1:{dead}: out of the pool" in err


def test_job_of_a_device_lost_mid_job_goes_to_another(sshd, own_sshd, tmp_path):
    limits = Limits(retries=0, connect_timeout_s=3)
    keep = Session("b", load_conn(sshd, tmp_path / "k"), limits)
    lose = Session("b", load_conn(own_sshd, tmp_path / "l"), limits)
    done_by = {}

    def work(s: Session, job: int):
        if s is lose:
            own_sshd.stop()  # this device dies during its first job
        done_by[job] = s.conn.port
        return s.sh(f"echo {job}").stdout.strip()

    report = pool.spread([lose, keep], list(range(4)), work)
    assert [o.result for o in report.outcomes] == ["0", "1", "2", "3"]
    assert {o.device for o in report.outcomes} == {keep.conn.label}
    assert list(report.down) == [lose.conn.label]
    assert any("out of the pool" in line for line in report.summary())
    keep.close()


def load_conn(server, workdir):
    from packager.boards import Connection

    return Connection(**{**server.connection(str(workdir)), "exec_wrapper": None})


def test_build_on_the_device(sshd, tmp_path, cli):
    """An x86_64 board reached over SSH that builds the bundle itself with its cmake and cc."""
    board = write_profile(
        tmp_path / "boards",
        "qemu-aarch64",
        [{**sshd.connection(str(tmp_path / "w")), "exec_wrapper": None}],
        arch="x86_64",
        vector_bits=256,
        toolchain={"cc": "cc", "cflags": ["-O2"], "build_on_device": True},
    )
    bundle = package(str(EXAMPLE), load_board(board), str(tmp_path / "tiny"))
    text = (bundle / "toolchain.cmake").read_text()
    assert "CMAKE_SYSTEM_NAME" not in text and 'set(CMAKE_C_COMPILER "cc")' in text
    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 0, out + err
    assert "selftest PASS" in out
    assert not (bundle / "build").exists()  # nothing compiled on this side
    assert (tmp_path / "w" / "tiny" / "build" / "run_bundle").is_file()
    assert device_ops.EXE == "build/run_bundle"
