"""The host profile describes the machine it runs on (detect: true): cores, CPU name, ISA
features, vector width and caches read at load time, explicit YAML values first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packager.boards import load_board
from packager.cpuinfo import FEATURES, cpu_id, cpuinfo_fields, profile_values
from packager.errors import PackagerError
from packager.target import Target

CPUINFO = Path("/proc/cpuinfo").read_text()


def _field(name: str) -> str:
    return next(ln.split(":", 1)[1].strip() for ln in CPUINFO.splitlines() if ln.startswith(name))


def _flags() -> set[str]:
    line = next(
        ln for ln in CPUINFO.splitlines() if ln.split(":")[0].strip() in ("flags", "Features")
    )
    return set(line.split(":", 1)[1].split())


def _sys_kib(index: int) -> int:
    size = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size").read_text().strip()
    return int(size[:-1]) * {"K": 1, "M": 1024}[size[-1]]


def test_host_is_this_machine():
    board = load_board("host")
    assert board.cores == len(os.sched_getaffinity(0))
    assert list(board.features) == [f for f in FEATURES if f in _flags()]
    want_bits = 512 if "avx512f" in _flags() else 256 if "avx2" in _flags() else 128
    assert board.vector_bits == want_bits
    if "model name" in CPUINFO:
        assert board.cpu_name == _field("model name")
    assert board.cache.l1d_kib == _sys_kib(0)  # index0: the L1 data cache
    assert {"cores", "vector_bits", "cpu_name", "features", "cache.l1d_kib"} <= set(board.detected)


def test_the_fingerprint_names_the_cpu_and_its_features():
    board = load_board("host")
    fp = Target.cpu(board).fingerprint()
    assert fp["cpu_name"] == board.cpu_name and fp["features"] == list(board.features)
    assert fp["vector_bits"] == board.vector_bits and fp["cores"] == board.cores
    assert fp.get("cpu_id") == board.cpu_id


def test_an_x86_host_names_its_vendor_family_and_model():
    board = load_board("host")
    if "cpu family" not in CPUINFO:
        assert board.cpu_id is None  # ARM: the core's part is in its name
        return
    want = f"{_field('vendor_id')} family {_field('cpu family')} model {_field('model')}"
    assert board.cpu_id == want and "cpu_id" in board.detected


def _user_host(tmp_path, monkeypatch, text: str):
    monkeypatch.setenv("PACKAGER_BOARDS_DIR", str(tmp_path))
    (tmp_path / "host.yaml").write_text(text)


HEAD = "name: host\ndescription: pinned\ndetect: true\ncpu: native\ntoolchain: {cc: cc}\n"


def test_values_in_the_profile_take_precedence(tmp_path, monkeypatch):
    _user_host(tmp_path, monkeypatch, HEAD + "cores: 1\nvector_bits: 128\ncache: {l2_kib: 512}\n")
    board = load_board("host")
    assert (board.cores, board.vector_bits, board.cache.l2_kib) == (1, 128, 512)
    assert board.cache.l1d_kib == _sys_kib(0)  # not given: still detected
    assert "cores" not in board.detected and "cache.l2_kib" not in board.detected
    assert "cache.l1d_kib" in board.detected


def test_without_detect_nothing_is_read_from_the_machine(tmp_path, monkeypatch):
    _user_host(
        tmp_path, monkeypatch, HEAD.replace("detect: true", "arch: x86_64") + "vector_bits: 128\n"
    )
    with pytest.raises(PackagerError, match="host.yaml: missing required key 'cores'"):
        load_board("host")


def test_detect_is_refused_for_a_remote_board(tmp_path, monkeypatch):
    _user_host(tmp_path, monkeypatch, HEAD + "connection: {host: example.org}\n")
    with pytest.raises(PackagerError, match=r"detect: .* remote .*packager boards --probe host"):
        load_board("host")


def test_show_marks_the_detected_values(cli, tmp_path, monkeypatch):
    _user_host(tmp_path, monkeypatch, HEAD + "cores: 1\n")
    code, out, _ = cli("boards", "--show", "host")
    assert code == 0
    lines = out.splitlines()
    assert "cores: 1" in lines  # given: not marked
    bits = next(ln for ln in lines if ln.startswith("vector_bits:"))
    assert bits.split() == ["vector_bits:", str(load_board("host").vector_bits), "#", "detected"]


def test_cpu_id_is_an_x86_cpus_vendor_family_and_model_and_none_for_arm():
    xeon = (
        "vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
        "model name\t: Intel(R) Xeon(R) Processor\n"
    )
    assert cpu_id(cpuinfo_fields(xeon)) == "GenuineIntel family 6 model 143"
    a72 = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n"
    assert cpu_id(cpuinfo_fields(a72)) is None
    assert "cpu_id" not in profile_values({"arch": "aarch64", "cpuinfo": a72})
