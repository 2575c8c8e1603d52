import json
import re
from pathlib import Path

import pytest

from packager import boards
from packager.boards import (
    Board,
    check_board_file,
    list_boards,
    load_board,
    render_schema_doc,
    schema_keys,
    schema_markdown,
)
from packager.errors import PackagerError

REPO = Path(__file__).resolve().parent.parent

VALID = """\
name: {name}
description: a test board
arch: aarch64
cpu: cortex-a72
cores: 4
vector_bits: 128
toolchain:
  cc: aarch64-linux-gnu-gcc
  cflags: ["-O2"]
"""


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """An empty boards dir, found as board_profiles/ relative to the working directory."""
    directory = tmp_path / "board_profiles"
    directory.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(boards.BOARDS_DIR_ENV, str(directory))
    return directory


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text)
    return path


def error_of(path) -> str:
    with pytest.raises(PackagerError) as info:
        check_board_file(path)
    return str(info.value)


# --- the repository's profiles ---------------------------------------------------------------


def test_load_host(monkeypatch):
    monkeypatch.delenv(boards.BOARDS_DIR_ENV, raising=False)
    board = load_board("host")
    assert board.name == "host"
    assert board.arch == "x86_64"
    assert board.cpu == "native"
    assert board.cores >= 1
    assert board.vector_bits in (128, 256, 512) and "vector_bits" in board.detected
    assert board.toolchain.cc == "cc"
    assert board.toolchain.cflags == ("-O3", "-fno-tree-coalesce-vars", "-march=native")
    assert board.connection is None and board.connections == ()
    assert board.is_local
    assert board.path == REPO / "board_profiles" / "host.yaml"


def test_load_by_path_is_the_same_board(monkeypatch):
    monkeypatch.delenv(boards.BOARDS_DIR_ENV, raising=False)
    assert load_board(str(REPO / "board_profiles" / "host.yaml")) == load_board("host")
    assert load_board(REPO / "board_profiles" / "host.yaml") == load_board("host")


def test_list_repository_boards(monkeypatch):
    monkeypatch.delenv(boards.BOARDS_DIR_ENV, raising=False)
    listed = list_boards()
    assert "host" in [b.name for b in listed]
    assert [b.name for b in listed] == sorted(b.name for b in listed)
    assert all(isinstance(b, Board) for b in listed)


SHIPPED = sorted(p.stem for p in (REPO / "board_profiles").glob("*.yaml"))


def test_list_boards_adds_the_env_dir_to_the_shipped(profiles):
    write(profiles, "b", VALID.format(name="b"))
    write(profiles, "a", VALID.format(name="a"))
    listed = list_boards()
    assert [b.name for b in listed] == sorted(["a", "b", *SHIPPED])
    assert {b.name for b in listed if boards.is_user_board(b)} == {"a", "b"}


def test_user_boards_from_xdg_config_home(tmp_path, monkeypatch):
    monkeypatch.delenv(boards.BOARDS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    directory = tmp_path / "packager" / "boards"
    directory.mkdir(parents=True)
    write(directory, "mine", VALID.format(name="mine"))
    assert load_board("mine").path == directory / "mine.yaml"
    assert [b.name for b in list_boards()] == sorted(["mine", *SHIPPED])


def test_user_board_takes_precedence_over_shipped(profiles, cli):
    path = write(profiles, "rpi4", VALID.format(name="rpi4").replace("a test", "my own"))
    assert load_board("rpi4").path == path
    assert load_board("rpi4").description == "my own board"
    code, out, _ = cli("boards")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines() if line}
    assert rows["rpi4"].split()[2] == "user" and "(replaces the shipped one)" in rows["rpi4"]
    assert rows["rpi3"].split()[2] == "shipped"
    assert f"shipped profiles: {REPO / 'board_profiles'}" in out
    assert f"user profiles:    {profiles}" in out


# --- connections -------------------------------------------------------------------------------


def test_remote_board_defaults(profiles):
    text = VALID.format(name="rpi") + "connection:\n  host: rpi.local\n  user: pi\n"
    board = check_board_file(write(profiles, "rpi", text))
    assert not board.is_local
    assert board.connection.host == "rpi.local"
    assert board.connection.port == 22
    assert board.connection.workdir == "~/.cache/packager"
    assert board.connection.key is None
    assert board.connections == (board.connection,)


def test_connection_pool(profiles):
    text = VALID.format(name="pool") + (
        "connections:\n  - host: a.local\n  - host: b.local\n    port: 2222\n"
    )
    board = check_board_file(write(profiles, "pool", text))
    assert [c.host for c in board.connections] == ["a.local", "b.local"]
    assert board.connections[1].port == 2222
    assert board.connection == board.connections[0]


def test_connection_and_connections_together(profiles):
    text = VALID.format(name="x") + "connection:\n  host: a\nconnections:\n  - host: b\n"
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: give either 'connection' or 'connections', not both"
    )


# --- one negative test per error class ---------------------------------------------------------


def test_unknown_key(profiles):
    path = write(profiles, "x", VALID.format(name="x") + "cores_count: 4\n")
    message = error_of(path)
    assert message.startswith("board_profiles/x.yaml: unknown key 'cores_count' (known: name, ")
    assert "cores" in message and "toolchain" in message


def test_unknown_nested_key(profiles):
    text = VALID.format(name="x") + "connection:\n  host: a\n  prot: 2222\n"
    assert "board_profiles/x.yaml: connection: unknown key 'prot'" in error_of(
        write(profiles, "x", text)
    )


def test_wrong_type_at_nested_key(profiles):
    text = VALID.format(name="x").replace('cflags: ["-O2"]', "cflags: 3")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: toolchain.cflags: expected a list of strings, got int"
    )


def test_wrong_type_in_list_item(profiles):
    text = VALID.format(name="x").replace('cflags: ["-O2"]', 'cflags: ["-O2", 3]')
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: toolchain.cflags[1]: expected a string, got int"
    )


def test_bool_is_not_an_int(profiles):
    text = VALID.format(name="x").replace("cores: 4", "cores: true")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: cores: expected an integer, got bool"
    )


def test_missing_key(profiles):
    text = VALID.format(name="x").replace("arch: aarch64\n", "")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: missing required key 'arch'"
    )


def test_missing_nested_key(profiles):
    text = VALID.format(name="x") + "connection:\n  user: pi\n"
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: connection: missing required key 'host'"
    )


def test_bad_arch_value(profiles):
    text = VALID.format(name="x").replace("arch: aarch64", "arch: arm64")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: arch: 'arm64' is not one of x86_64, aarch64, armv7"
    )


def test_bad_vector_bits_and_cores(profiles):
    text = VALID.format(name="x").replace("vector_bits: 128", "vector_bits: 64")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: vector_bits: 64 is not one of 128, 256, 512"
    )
    text = VALID.format(name="x").replace("cores: 4", "cores: 0")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: cores: 0 is less than the minimum 1"
    )


def test_bad_yaml_syntax_names_the_line(profiles):
    text = VALID.format(name="x").replace("cores: 4", "cores: 4: 5")
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: invalid YAML at line 5, column 9: "
        "mapping values are not allowed here"
    )


def test_duplicate_key_is_an_error(profiles):
    text = VALID.format(name="x") + "cores: 8\n"
    assert error_of(write(profiles, "x", text)) == (
        "board_profiles/x.yaml: invalid YAML at line 10, column 1: duplicate key 'cores'"
    )


def test_top_level_not_a_mapping(profiles):
    assert error_of(write(profiles, "x", "- a\n- b\n")) == (
        "board_profiles/x.yaml: expected a mapping at the top level, got list"
    )
    assert error_of(write(profiles, "y", "")) == (
        "board_profiles/y.yaml: expected a mapping at the top level, got null"
    )


def test_name_must_match_stem(profiles):
    path = write(profiles, "x", VALID.format(name="other"))
    assert error_of(path) == (
        "board_profiles/x.yaml: name: 'other' does not match the file name (expected 'x')"
    )


@pytest.mark.parametrize("name", ["a b", "-x", ".x", "x;y", "x$(id)", "é"])
def test_board_name_from_a_safe_set(profiles, name):
    """A board's name reaches CMake and remote shells: plain characters only."""
    path = write(profiles, name, VALID.format(name=f'"{name}"'))
    assert error_of(path) == (
        f"board_profiles/{name}.yaml: name: {name!r} is not allowed: use letters, digits, "
        f"`.`, `_`, `-`; first a letter or digit"
    )


@pytest.mark.parametrize(
    "wrapper, problem",
    [
        ("taskset -c '4,5", "is not valid shell words (No closing quotation)"),
        ('env "A=b', "is not valid shell words (No closing quotation)"),
        ("-c 4", "begins with an option ('-c'), not a command"),
    ],
)
def test_exec_wrapper_must_split(profiles, wrapper, problem):
    conn = "connections:\n  - host: a\n  - host: b\n    exec_wrapper: {w}\n"
    text = VALID.format(name="x") + conn.format(w=json.dumps(wrapper))
    assert error_of(write(profiles, "x", text)) == (
        f"board_profiles/x.yaml: connections[1].exec_wrapper: {wrapper!r} {problem}"
    )


def test_unknown_profile_name_lists_known(profiles):
    write(profiles, "alpha", VALID.format(name="alpha"))
    write(profiles, "beta", VALID.format(name="beta"))
    with pytest.raises(PackagerError) as info:
        load_board("gamma")
    assert str(info.value) == (
        f"unknown board 'gamma' (known: {', '.join(sorted(['alpha', 'beta', *SHIPPED]))}; "
        f"profiles are read from {profiles} and {REPO / 'board_profiles'})"
    )


def test_missing_file(profiles):
    with pytest.raises(PackagerError) as info:
        load_board("board_profiles/nope.yaml")
    assert str(info.value) == "board_profiles/nope.yaml: no such board profile file"


# --- documentation -----------------------------------------------------------------------------


def test_schema_markdown_has_every_field():
    table = schema_markdown()
    keys = schema_keys()
    for key in [
        "name", "description", "arch", "cpu", "cores", "vector_bits",
        "toolchain.cc", "toolchain.cflags", "connection.host", "connection.port",
        "connection.user", "connection.key", "connection.known_hosts", "connection.workdir",
        "connection.exec_wrapper", "connections",
    ]:  # fmt: skip
        assert key in keys
    for key in keys:
        assert f"| `{key}` |" in table


def test_docs_are_up_to_date():
    text = (REPO / "docs" / "boards.md").read_text()
    assert render_schema_doc(text) == text, "run `python -m packager.boards` to regenerate"


def test_docs_example_is_a_valid_profile(profiles):
    text = (REPO / "docs" / "boards.md").read_text()
    example = re.search(r"```yaml\n(.*?)```", text, re.S).group(1)
    board = check_board_file(write(profiles, "rpi4", example))
    assert board.connection.host == "rpi4.local"


# the local machine (with or without its OpenCL device or a simulated accelerator) and the
# emulated boards are not real
REAL_BOARDS = [n for n in SHIPPED if not n.startswith(("host", "qemu-", "accel-sim"))]


@pytest.mark.parametrize("name", REAL_BOARDS)
def test_shipped_real_boards_state_memory_and_pin_no_key(name):
    """A shipped profile must work for anyone: no private key path of one person (ssh-agent
    and ~/.ssh/id_* are tried instead), and the board's memory so big models are refused."""
    board = load_board(name)
    assert all(c.key is None for c in board.connections), name
    assert board.ram_mb is not None and board.ram_mb >= 256, name


def test_raspberry_pi_5_and_zero_2_w_profiles():
    rpi5, zero = load_board("rpi5"), load_board("rpi-zero2w")
    assert (rpi5.arch, rpi5.cpu, rpi5.cores, rpi5.vector_bits) == ("aarch64", "cortex-a76", 4, 128)
    assert "-mcpu=cortex-a76" in rpi5.toolchain.cflags
    assert (zero.arch, zero.cpu, zero.cores, zero.ram_mb) == ("aarch64", "cortex-a53", 4, 512)
