"""`packager run` trusts no bundle: the manifest is checked field by field, every file
against its sha256, the build is redone when anything it reads changed, and a crash of
run_bundle is named by its signal."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from packager.cli import main

    out = tmp_path_factory.mktemp("b") / "tiny"
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(out)]) == 0
    return out


@pytest.fixture
def copy(tiny, tmp_path):
    dest = tmp_path / "b"
    shutil.copytree(tiny, dest, ignore=shutil.ignore_patterns("build"))
    return dest


def run(cli, bundle: Path, res: Path, *extra):
    x = bundle / "selftest" / "input_0.npy"
    return cli(
        "run", bundle, "--board", "host", "--input", f"input={x}", "--output-dir", res, *extra
    )


def edit_manifest(bundle: Path, change) -> None:
    path = bundle / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _drop(key):
    return lambda d: d.pop(key)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _first_input(field, value):
    return lambda d: d["inputs"][0].__setitem__(field, value)


def _file_key(rel):
    def change(d):
        d["files"][rel] = "0" * 64

    return change


def _digest(value):
    return lambda d: d["files"].__setitem__("params.bin", value)


BAD_MANIFESTS = {
    "no_inputs": (_drop("inputs"), "inputs: missing or not a list"),
    "outputs_not_list": (_set("outputs", {"y": 1}), "outputs: missing or not a list"),
    "format": (_set("format", "zip"), "format: expected 'packager-bundle', got 'zip'"),
    "board": (_drop("board"), "board: expected an object"),
    "shape_type": (_first_input("shape", "1,3"), "inputs[0]: shape: expected a list"),
    "dtype_type": (_first_input("dtype", 4), "inputs[0]: dtype: expected a string"),
    "name_missing": (lambda d: d["inputs"][0].pop("name"), "inputs[0]: name: expected"),
    "files_missing": (_drop("files"), "files: missing or not an object"),
    "short_digest": (_digest("abc"), "files['params.bin']: expected a sha256"),
    "absolute": (_file_key("/etc/passwd"), "'/etc/passwd' is not a plain relative path"),
    "dotdot": (_file_key("kernels/../../x"), "'kernels/../../x' is not a plain relative"),
    "dot": (_file_key("./graph.json"), "'./graph.json' is not a plain relative path"),
    "empty_part": (_file_key("kernels//a.c"), "'kernels//a.c' is not a plain relative"),
    "backslash": (_file_key("kernels\\a.c"), "is not a plain relative path"),
}


@pytest.mark.parametrize("case", sorted(BAD_MANIFESTS))
def test_bad_manifest_refused_naming_the_field(copy, cli, tmp_path, case):
    change, message = BAD_MANIFESTS[case]
    edit_manifest(copy, change)
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 2, err
    assert f"{copy / 'manifest.json'}: " in err and message in err, err
    assert not (tmp_path / "res").exists() and not (copy / "build").exists()


def test_malformed_manifest_json(copy, cli, tmp_path):
    (copy / "manifest.json").write_text('{"format": "packager-bundle", ')
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 2 and "manifest.json: not valid JSON" in err, err


def test_file_through_a_symlink_refused(copy, cli, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(copy / "kernels", elsewhere)
    (copy / "kernels").symlink_to(elsewhere)
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 2, err
    assert "goes through a symbolic link (kernels)" in err


def test_changed_file_refused_unless_no_verify(copy, cli, tmp_path):
    params = copy / "params.bin"
    data = bytearray(params.read_bytes())
    data[-1] ^= 0x40  # one flipped bit in the last weight: runs fine, answers wrong
    params.write_bytes(bytes(data))
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 2, err
    assert (
        f"{params}: sha256 mismatch: the bundle was changed after packaging; package it "
        "again, or run with --no-verify" in err
    )
    assert not (tmp_path / "res").exists()
    code, _, err = run(cli, copy, tmp_path / "res", "--no-verify")
    assert code == 0, err


@pytest.mark.parametrize("command", ["deploy", "bench"])
def test_deploy_and_bench_verify_too(copy, cli, command):
    kernel = sorted((copy / "kernels").glob("*.c"))[0]
    kernel.write_text(kernel.read_text() + "\n/* edited */\n")
    code, _, err = cli(command, copy, "--board", "host")
    assert code == 2, err
    assert f"{kernel}: sha256 mismatch: the bundle was changed after packaging" in err
    assert not (copy / "build").exists()  # refused before anything was built
    code, out, err = cli(command, copy, "--board", "host", "--no-verify")
    assert code == 0, err
    assert "selftest PASS" in out or "median_ms" in out


def test_missing_file_refused(copy, cli, tmp_path):
    (copy / "kernels" / "registry.c").unlink()
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 2 and "registry.c: missing" in err, err


CRASH = """
#include <signal.h>
/* Crash on start: the test of how a crash of run_bundle is reported. */
__attribute__((constructor)) static void crash_on_start(void) { raise(SIGSEGV); }
"""


def test_edited_source_rebuilds_and_a_crash_is_named(copy, cli, tmp_path):
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 0 and "building" in err, err
    code, _, err = run(cli, copy, tmp_path / "res")
    assert code == 0 and "building" not in err, err  # built once, stamp kept
    stamp = (copy / "build" / ".built-from").read_text()
    assert "kernels/registry.c" in stamp
    with open(copy / "kernels" / "registry.c", "a") as f:
        f.write(CRASH)
    code, _, err = run(cli, copy, tmp_path / "res2", "--no-verify")
    assert "building" in err, err  # the source changed, the manifest did not
    assert code == 1, err
    assert "error: run_bundle was killed by SIGSEGV" in err
    assert not (tmp_path / "res2").exists() or not any((tmp_path / "res2").iterdir())


def test_failed_build_is_not_taken_as_built(copy, cli, tmp_path):
    with open(copy / "kernels" / "registry.c", "a") as f:
        f.write("\nthis is not C;\n")
    code, _, err = run(cli, copy, tmp_path / "res", "--no-verify")
    assert code == 2 and "build failed" in err, err
    assert not (copy / "build" / ".built-from").exists()
    code, _, err = run(cli, copy, tmp_path / "res", "--no-verify")
    assert code == 2 and "build failed" in err, err  # tried again, not run stale
