"""The packager's work directory on a board (a real sshd on 127.0.0.1): it is created with
mode 0700 and marked, `deploy` and `clean` never touch what the packager did not write,
and a workdir that is /, a top-level or login directory, someone else's, or shared is
refused with the device and the path named."""

import os
import stat
from pathlib import Path

import pytest

from packager.boards import Connection, load_board
from packager.package import package
from packager.remote import device_ops, transfer, workdir
from packager.remote.errors import RemoteError
from packager.remote.shell import command
from packager.remote.ssh import Limits, Session

from .conftest import ROOT, write_profile
from .sshd import free_port

EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def foreign_files(root: Path) -> dict[Path, bytes]:
    """Files that are not the packager's, in the workdir's parent and inside it."""
    files = {
        root / "neighbour.txt": b"beside the workdir\n",
        root / "w" / "notes.txt": b"\x00mine, not the packager's\xff",
        root / "w" / "data" / "keep.bin": os.urandom(64),
        root / "w" / ".hidden": b"dot file",
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def assert_intact(files: dict[Path, bytes]) -> None:
    for path, data in files.items():
        assert path.read_bytes() == data, path


@pytest.fixture
def tiny(sshd, tmp_path):
    """A board whose workdir is tmp/board/w, and a bundle `tiny` built for it."""
    board = write_profile(
        tmp_path / "boards", "qemu-aarch64", [sshd.connection(str(tmp_path / "board" / "w"))]
    )
    bundle = package(str(EXAMPLE), load_board(board), str(tmp_path / "tiny"))
    return board, bundle, tmp_path / "board"


@pytest.mark.parametrize("spelling", [".", "SUB/.."])
def test_deploy_of_a_relative_name_and_clean_keep_other_files(tiny, cli, monkeypatch, spelling):
    board, bundle, root = tiny
    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 0, out + err
    w = root / "w"
    assert (w / workdir.MARK).read_text().startswith("This directory was created by the packager")
    assert stat.S_IMODE(w.stat().st_mode) == 0o700
    files = foreign_files(root)

    sub = next(p.name for p in bundle.iterdir() if p.is_dir())
    monkeypatch.chdir(bundle)
    code, out, err = cli("deploy", spelling.replace("SUB", sub), "--board", board)
    assert code == 0, out + err
    assert "selftest PASS" in out and "uploaded 0 file(s)" in out  # the same bundle, `tiny`
    assert_intact(files)
    assert (w / "tiny" / transfer.MARKER).is_file()
    assert sorted(p.name for p in w.iterdir()) == sorted(
        [workdir.MARK, "tiny", "notes.txt", "data", ".hidden"]
    )

    code, out, err = cli("clean", "--board", board)
    assert code == 0, out + err
    assert "removed 1 item(s)" in out and "kept the directory" in out and "notes.txt" in out
    assert_intact(files)
    assert not (w / "tiny").exists()
    assert sorted(p.name for p in w.iterdir()) == sorted(
        [workdir.MARK, ".hidden", "data", "notes.txt"]
    )


def test_clean_removes_runs_partials_and_then_the_workdir(tiny, cli, sshd):
    board, bundle, root = tiny
    assert cli("deploy", bundle, "--board", board)[0] == 0
    w = root / "w"
    (w / ".runs" / "abc").mkdir(parents=True)
    (w / ".tiny.partial").mkdir()
    (w / ".tiny.old" / "x").mkdir(parents=True)
    (root / "neighbour.txt").write_bytes(b"stays")
    code, out, err = cli("clean", "--board", board)
    assert code == 0, out + err
    assert f"127.0.0.1:{sshd.port}: removed {w}" in out
    assert not w.exists() and (root / "neighbour.txt").read_bytes() == b"stays"
    code, out, err = cli("clean", "--board", board)  # again: nothing there any more
    assert code == 0 and f"nothing to clean: {w} does not exist" in out


def test_deploy_into_someone_elses_directory_is_refused(tiny, cli, sshd):
    board, bundle, root = tiny
    files = foreign_files(root)  # tmp/board/w exists, is not empty and is not marked
    for args in [("deploy", bundle), ("clean",)]:
        code, out, err = cli(*args, "--board", board)
        assert code == 2
        text = out + err
        assert f"127.0.0.1:{sshd.port}" in text and f"connection.workdir {root / 'w'}" in text
        assert "is not a packager work directory (it has no .packager-workdir)" in text
    assert_intact(files)
    assert not (root / "w" / "tiny").exists() and not (root / "w" / workdir.MARK).exists()


def test_a_directory_with_the_bundles_name_that_is_not_a_bundle_is_kept(tiny, cli):
    board, bundle, root = tiny
    assert cli("deploy", bundle, "--board", board)[0] == 0
    (root / "w" / "tiny" / transfer.MARKER).unlink()  # now just a directory called tiny
    (root / "w" / "tiny" / "mine.txt").write_bytes(b"mine")
    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 2
    assert "tiny exists and is not a bundle the packager deployed" in out + err
    assert (root / "w" / "tiny" / "mine.txt").read_bytes() == b"mine"
    assert cli("clean", "--board", board)[0] == 0
    assert (root / "w" / "tiny" / "mine.txt").read_bytes() == b"mine"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_workdir_in_a_world_writable_directory_is_private(sshd, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    s = session(sshd, str(shared / "pk"))
    try:
        assert workdir.prepare(s) == str(shared / "pk")
        assert stat.S_IMODE((shared / "pk").stat().st_mode) == 0o700
        (shared / "pk").chmod(0o777)  # opened up afterwards: no longer used
        with pytest.raises(RemoteError) as info:
            workdir.prepare(s)
        assert "is writable by other users" in str(info.value)
        with pytest.raises(RemoteError):
            device_ops.clean(s)
        assert (shared / "pk" / workdir.MARK).is_file()

        (shared / "pk").chmod(0o700)
        os.chown(shared / "pk", 65534, 65534)  # now another user's (the tests run as root)
        with pytest.raises(RemoteError) as info:
            device_ops.clean(s)
        assert "belongs to another user" in str(info.value)
        assert (shared / "pk" / workdir.MARK).is_file()
    finally:
        s.close()


def test_bundle_name_must_be_safe(tmp_path):
    for name in ["with space", ".hidden", "a'b"]:
        with pytest.raises(RemoteError) as info:
            device_ops.remote_name(tmp_path / name)
        assert f"the bundle directory's name {name!r} cannot name a directory" in str(info.value)
    with pytest.raises(RemoteError) as info:
        device_ops.remote_name(Path("/"))
    assert "the bundle directory's name '' cannot" in str(info.value)
    assert device_ops.remote_name(tmp_path / "-m.v1_x") == "-m.v1_x"


@pytest.mark.parametrize(
    "given, shown",
    [
        ("/", "/"),
        ("//usr", "/usr"),
        ("/usr/", "/usr"),
        ("/tmp/x/..", "/tmp"),
        ("/home/x", "/home/x"),
        ("/root", "/root"),
        ("/root/.cache/..", "/root"),
        ("~", "~/."),
        ("~/", "~/."),
        ("~/x/../..", "~/.."),
        ("..", "~/.."),
        ("~other/w", "~other/w"),
    ],
)
def test_broad_workdirs_refused_before_anything_runs(given, shown):
    """Refused from the path alone, without connecting: the device here does not exist."""
    conn = Connection("127.0.0.1", free_port(), None, None, None, given, None)
    s = Session("b", conn, Limits(retries=0, connect_timeout_s=1))
    for op in (device_ops.clean, workdir.prepare):
        with pytest.raises(RemoteError) as info:
            op(s)
        msg = str(info.value)
        assert msg.startswith(f"board b (127.0.0.1:{conn.port}): connection.workdir {given}")
        assert f"({shown})" in msg or given == shown
        assert "set connection.workdir to a directory of its own" in msg


def test_workdirs_that_resolve_to_broad_places_refused_on_the_device(sshd, tmp_path):
    """Links that look harmless but lead to /, the login directory, or one of its
    ancestors: decided on the device, from the physical path."""
    for target, why in [("/", "is / or a top-level directory"), (Path.home(), "login")]:
        link = tmp_path / f"link{len(why)}"
        link.symlink_to(target)
        s = session(sshd, str(link))
        try:
            for op in (device_ops.clean, workdir.prepare):
                with pytest.raises(RemoteError) as info:
                    op(s)
                assert f"connection.workdir {link} " in str(info.value) and why in str(info.value)
        finally:
            s.close()
        assert link.is_symlink()


def test_home_relative_workdir(sshd):
    name = f".cache/packager-test-{os.getpid()}"
    s = session(sshd, f"~/{name}")
    try:
        assert workdir.prepare(s) == str(Path.home().resolve() / name)
        assert stat.S_IMODE((Path.home() / name).stat().st_mode) == 0o700
        assert device_ops.clean(s) == f"removed {Path.home().resolve() / name}"
    finally:
        s.close()
    assert not (Path.home() / name).exists()


def test_remote_commands_end_options_before_paths():
    """A path beginning with '-' is never read as an option."""
    assert command(["./build/run_bundle", "."], cwd="-w") == "cd -- -w && exec ./build/run_bundle ."
    assert transfer._prepare_script("/w/-b", "/w/.-b.partial") == (
        "mkdir -p -- /w && if [ ! -d /w/.-b.partial ] && [ -d /w/-b ]; then "
        "cp -a -- /w/-b /w/.-b.partial; fi && mkdir -p -- /w/.-b.partial && "
        "rm -f -- /w/.-b.partial/.packager-complete"
    )
    assert transfer._swap_script("/w/-b", "/w/.-b.partial") == (
        "rm -rf -- /w/.-b.old && { if [ -e /w/-b ]; then mv -- /w/-b /w/.-b.old; fi; } "
        "&& mv -- /w/.-b.partial /w/-b && rm -rf -- /w/.-b.old"
    )


def session(server, path: str) -> Session:
    conn = Connection(**{**server.connection(path), "exec_wrapper": None})
    return Session("b", conn, Limits(retries=0))
