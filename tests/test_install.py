"""The packager as a user installs it: a wheel built from the repository, installed into a
fresh virtual environment, run from a directory that has nothing to do with the checkout.

Nothing is downloaded: the wheel is built with this environment's setuptools, and the fresh
environment reaches the third-party dependencies through a .pth file naming the
directories they are installed in here."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DEPENDENCIES = ("onnx", "numpy", "xgboost", "yaml", "paramiko", "cmake")
# Never part of a build: environments, caches, earlier build output.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".cache", "build", "out", "__pycache__", "*.egg-info", ".*_cache"
)


def shipped(folder: str, pattern: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).glob(pattern) if p.is_file())


def build_wheel(tmp: Path) -> Path:
    # From a copy, so the build writes nothing into the checkout.
    source = tmp / "src"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    out = tmp / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run([*pip, "-w", str(out), str(source)], capture_output=True, text=True)
    # setuptools before 70.1 builds wheels only with the `wheel` package: the test extra
    # (pip install -e ".[test]") brings a newer one.
    assert done.returncode == 0, f"building the wheel failed:\n{done.stdout}{done.stderr}"
    (wheel,) = out.glob("packager-*.whl")
    return wheel


def fresh_venv(tmp: Path, wheel: Path, env: dict) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    # With the checkout on PYTHONPATH pip would find packager "already installed".
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True, env=env)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    homes = {str(Path(importlib.util.find_spec(m).origin).parents[1]) for m in DEPENDENCIES}
    (Path(site) / "_dev_dependencies.pth").write_text("\n".join(sorted(homes)) + "\n")
    return venv


@pytest.mark.slow
def test_wheel_installs_and_works_from_any_directory(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    runtime = [
        *shipped("c_runtime", "include/*"),
        *shipped("c_runtime", "src/*"),
        *shipped("c_runtime", "tools/*"),
        "c_runtime/CMakeLists.txt",
        "c_runtime/bundle/CMakeLists.txt",
    ]
    data = [*runtime, *shipped("board_profiles", "*.yaml"), *shipped("tuning_logs", "*/*.jsonl")]
    assert len(data) > 20
    missing = [f for f in data if f"packager/_data/{f}" not in names]
    assert missing == []
    assert "packager/codegen/serial_parallel_for.c" in names
    assert not any(n.startswith("packager/_data/c_runtime/tests/") for n in names)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PACKAGER_BOARDS_DIR")}
    venv = fresh_venv(tmp_path, wheel, env)
    work = tmp_path / "work"  # unrelated to the checkout, and the checkout is off sys.path
    work.mkdir()
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )

    def run(*args) -> str:
        done = subprocess.run(
            [str(a) for a in args], cwd=work, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{args}: {done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    where = run(
        venv / "bin" / "python",
        "-c",
        "import packager, packager.resources as r; print(packager.__file__, r.installed())",
    )
    module, installed = where.split()
    assert Path(module).is_relative_to(venv) and installed == "True"

    from packager import __version__

    assert run(venv / "bin" / "packager", "--version").strip() == f"packager {__version__}"

    user_boards = tmp_path / "config" / "packager" / "boards"
    user_boards.mkdir(parents=True)
    host = (ROOT / "board_profiles" / "host.yaml").read_text()
    (user_boards / "mine.yaml").write_text(host.replace("name: host", "name: mine"))
    listed = {
        line.split()[0]: line.split()[2] for line in run("packager", "boards").splitlines()[:-3]
    }
    assert listed == {p.stem: "shipped" for p in (ROOT / "board_profiles").glob("*.yaml")} | {
        "mine": "user"
    }

    shutil.copyfile(ROOT / "examples" / "tiny_cnn.onnx", work / "tiny_cnn.onnx")
    untuned = run("packager", "build", "tiny_cnn.onnx", "--board", "host", "-o", "b")
    (line,) = [x for x in untuned.splitlines() if "tunable kernels use default schedules" in x]
    manifest = json.loads((work / "b" / "manifest.json").read_text())
    args = []
    for i, spec in enumerate(manifest["inputs"]):
        x = np.random.default_rng(i).standard_normal(spec["shape"]).astype(spec["dtype"])
        np.save(work / f"x{i}.npy", x)
        args += ["--input", f"{spec['name']}=x{i}.npy"]
    run("packager", "run", "b", "--board", "host", *args, "--output-dir", "res")
    for spec in manifest["outputs"]:
        y = np.load(work / "res" / spec["file"])
        assert list(y.shape) == spec["shape"] and str(y.dtype) == spec["dtype"]
        assert np.allclose(y.sum(axis=-1), 1, atol=1e-5)  # tiny_cnn ends in a softmax
    assert "selftest: PASS" in run(work / "b" / "build" / "run_bundle", "b", "--selftest")

    # Tuning logs go to the user's data directory, never into the installed package, and the
    # next build reads them.
    tuned = run("packager", "tune", "tiny_cnn.onnx", "--board", "host", "--trials", "1")
    log = tmp_path / "data" / "packager" / "tuning_logs" / "host" / "tiny_cnn.jsonl"
    assert f"log: {log}" in tuned and log.stat().st_size > 0
    assert not list((venv / "lib").rglob("tiny_cnn.jsonl"))
    rebuilt = run("packager", "build", "tiny_cnn.onnx", "--board", "host", "-o", "b2")
    count = line.split()[0]
    assert f"{count} of {count} tunable kernels use tuned schedules" in rebuilt
