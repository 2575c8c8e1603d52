"""`packager report`: the HTML page of a real bundle (facts, per-layer times, memory plan,
tuning curves), rendered by headless Chromium; the memory plan read back from graph.json
equals the compiler's; the files it refuses to write; matplotlib missing."""

import json
import math
import re
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest

from packager.graph.plan_png import HEIGHT, LEFT, RIGHT, TOP, WIDTH, _legend_width, color
from packager.report import facts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
CONV_KEY = [
    ["fused", [["conv2d_nchwc", {}, ["in0"], ["v1"]], ["relu", {}, ["v1"], ["v2"]]], ["v2"]],
    [[[1, 3, 32, 32, 8], "float32"]],
    1,
    [],
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    from packager.cli import main

    out = tmp_path_factory.mktemp("b") / "tiny"
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(out)]) == 0
    return out


def write_profile(bundle: Path, path: Path) -> list[str]:
    """A profile per the contract for ``bundle``: its kernels from graph.json, the later
    ones slower; returns the funcs."""
    graph = json.loads((bundle / "graph.json").read_text())
    groups = json.loads((bundle / "manifest.json").read_text())["stats"]["fused_groups"]
    kernels = [n for n in graph["nodes"] if n["op"] == "kernel"]
    rows = []
    for k, node in enumerate(kernels):
        ms, flops = 0.1 * (k + 1), 1e6 * (k + 1)
        rows.append(
            {"func": node["func"], "device": "cpu", "ops": groups[k], "nodes": [node["name"]],
             "calls": 1, "median_ms": ms, "share": 0.0, "flops": flops, "bytes": 4e4,
             "gflops": flops / ms / 1e6, "gbps": 4e4 / ms / 1e6}
        )  # fmt: skip
    total = sum(r["median_ms"] for r in rows)
    for r in rows:
        r["share"] = r["median_ms"] / total
    doc = {
        "version": 1, "bundle": str(bundle), "model": "tiny_cnn", "board": "host",
        "threads": 2, "repeat": 20, "device": "cpu",
        "total": {"median_ms": total, "min_ms": total * 0.9, "mean_ms": total * 1.05},
        "kernels": rows[::-1],
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return [n["func"] for n in kernels]


def record(key, costs, error=None, flops=2e6, board="host") -> dict:
    return {
        "version": 1,
        "board": {"name": board, "cpu": "native", "arch": "x86_64"},
        "task": {"template": "conv2d_nchwc", "key": json.dumps(key), "flops": flops},
        "config": {"index": 0, "knobs": {}},
        "result": {"costs": costs, "error": error, "timestamp": 0.0},
    }


def write_log(path: Path) -> None:
    recs = [
        record(CONV_KEY, [], "compile_error"),
        record(CONV_KEY, [1e-3, 1e-3, 1e-3]),
        record("not the tuner's form", [1e-3]),
        record(CONV_KEY, [4e-3]),
        record(CONV_KEY, [5e-4]),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_report_page(bundle, cli, tmp_path):
    funcs = write_profile(bundle, tmp_path / "prof.json")
    write_log(tmp_path / "tune.jsonl")
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    out = tmp_path / "report.html"
    code, stdout, err = cli(
        "report", bundle, "-o", out, "--profile", tmp_path / "prof.json",
        "--tuning-log", tmp_path / "tune.jsonl",
    )  # fmt: skip
    assert code == 0, err
    assert str(out) in stdout
    page = out.read_text()
    for func in funcs:  # chart labels and table rows
        assert page.count(func) >= 2, func
    slowest = re.findall(r"<td>(k_\d+_\w+)</td>", page)
    assert slowest == funcs[::-1]  # the table is slowest first, as the chart
    # Build facts from the manifest and graph.json.
    for fact in ("tiny_cnn.onnx", "host (x86_64", "40,960 bytes", "8 distinct, 8 calls"):
        assert fact in page, fact
    # The memory plan: a legend entry per op kind, a hover title per arena tensor.
    assert "written by" in page
    tensors = facts.arena_tensors(facts.load_bundle(bundle))
    kinds = {t.kind for t in tensors}  # the layouts chosen depend on the machine's vectors
    assert {"max_pool", "reduce_mean", "gemm"} <= {k.removesuffix("_nchwc") for k in kinds}
    for kind in kinds:
        assert f">{kind}</text>" in page, kind
    for t in tensors:
        assert f"<title>{t.name} ({t.kind}, {t.func}): {t.nbytes:,} bytes" in page, t
    # Tuning curves: one labelled line per task, the y axis says "effective".
    assert "T1 conv2d_nchwc+relu 1x3x32x32x8" in page
    assert "T2 conv2d_nchwc" in page  # the key it cannot parse: the template's name
    assert "effective GFLOP/s" in page
    # Self-contained: nothing fetched, nothing run.
    assert not re.search(r"https?://", page)
    assert "<script" not in page and "src=" not in page and "@import" not in page
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before


def test_report_renders_in_chromium(bundle, cli, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it): page not rendered")
    write_profile(bundle, tmp_path / "prof.json")
    out = tmp_path / "report.html"
    assert cli("report", bundle, "-o", out, "--profile", tmp_path / "prof.json")[0] == 0
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
         "--window-size=1200,2000", out.resolve().as_uri()],
        capture_output=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert shot.is_file() and shot.stat().st_size > 10_000
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[:2] == (2000, 1200)
    assert float(img[..., :3].std()) > 0.05  # text, bars and rectangles, not a blank page
    assert len(np.unique((img[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50


def test_without_profile_says_how_to_get_one(bundle, cli, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = cli("report", bundle, "-o", out)
    assert code == 0, err
    page = out.read_text()
    assert "run_bundle BUNDLE --repeat 20 --profile-json prof.json" in page
    assert "--profile-json prof.json" in page and "packager run BUNDLE" in page
    assert "No tuning logs given" in page


def test_plan_from_graph_json_is_the_compilers(bundle):
    """Lifetimes, offsets and storages read back from graph.json equal the plan the
    compiler made, for a model with in-place chains too."""
    from packager.boards import load_board
    from packager.cli import main
    from packager.frontend.importer import load_model
    from packager.package import compile_model

    from .test_inplace import chain_model

    chain = bundle.parent / "chain.onnx"
    onnx.save(chain_model(), chain)
    assert main(["build", str(chain), "--board", "host", "-o", str(bundle.parent / "c")]) == 0
    for model, out in ((EXAMPLE, bundle), (chain, bundle.parent / "c")):
        c = compile_model(load_model(str(model)), load_board("host"), {}, str(model))
        got = facts.arena_tensors(facts.load_bundle(out))
        want = [
            (first, last, c.plan.storage[c.plan.storage_of[n]]["offset"], c.graph.values[n].nbytes)
            for n, (first, last) in c.plan.lifetimes.items()
        ]
        assert [(t.first, t.last, t.offset, t.nbytes) for t in got] == want
        storages = [c.plan.storage_of[n] for n in c.plan.lifetimes]
        assert [t.storage for t in got] == storages
    assert len(set(storages)) < len(storages)  # the chain's tensors share storages


def test_tuning_curve_values(tmp_path):
    write_log(tmp_path / "a.jsonl")
    other = tmp_path / "b.jsonl"
    other.write_text(json.dumps(record(CONV_KEY, [1e-3], board="rpi4")) + "\n")
    curves = facts.tuning_curves([str(tmp_path / "a.jsonl"), str(other)])
    assert [c.label for c in curves] == [
        "T1 conv2d_nchwc+relu 1x3x32x32x8 (host)",
        "T2 conv2d_nchwc (host)",
        "T3 conv2d_nchwc+relu 1x3x32x32x8 (rpi4)",
    ]
    first = curves[0].best_gflops
    assert math.isnan(first[0]) and first[1:] == [2.0, 2.0, 4.0]  # 2e6 flops / 1 ms, ...


def test_refusals(bundle, cli, tmp_path):
    notes = tmp_path / "notes.html"
    notes.write_text("<html>mine</html>")
    code, _, err = cli("report", bundle, "-o", notes)
    assert code == 2 and "is not a report written by `packager report`" in err, err
    assert notes.read_text() == "<html>mine</html>"
    code, _, err = cli("report", bundle, "-o", bundle / "report.html")
    assert code == 2 and "is inside the bundle" in err, err
    assert not (bundle / "report.html").exists()
    code, _, err = cli("report", bundle, "-o", tmp_path)
    assert code == 2 and "is a directory" in err, err
    code, _, err = cli("report", tmp_path, "-o", tmp_path / "r.html")
    assert code == 2 and f"{tmp_path}: not a bundle" in err, err
    prof = tmp_path / "prof.json"
    funcs = write_profile(bundle, prof)
    doc = json.loads(prof.read_text())
    doc["kernels"][0]["func"] = "k_99_other"
    prof.write_text(json.dumps(doc))
    code, _, err = cli("report", bundle, "-o", tmp_path / "r.html", "--profile", prof)
    assert code == 2 and "kernel k_99_other is not in" in err and "another bundle" in err, err
    doc["kernels"][0]["func"], doc["kernels"][0]["median_ms"] = funcs[0], "slow"
    prof.write_text(json.dumps(doc))
    code, _, err = cli("report", bundle, "-o", tmp_path / "r.html", "--profile", prof)
    assert code == 2 and "kernels[0]: median_ms and share must be numbers" in err, err
    prof.write_text('{"version": 2}')
    code, _, err = cli("report", bundle, "-o", tmp_path / "r.html", "--profile", prof)
    assert code == 2 and f"--profile {prof}: not a version 1 profile" in err, err
    report = tmp_path / "r.html"
    for _ in range(2):  # written, then replaced: a report may be overwritten
        code, _, err = cli("report", bundle, "-o", report)
        assert code == 0, err
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["notes.html", "prof.json", "r.html"]


def test_without_matplotlib(bundle, cli, tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    code, _, err = cli("report", bundle, "-o", tmp_path / "r.html")
    assert code == 2 and "matplotlib, which is not installed" in err, err
    assert "pip install packager[report]" in err
    assert not (tmp_path / "r.html").exists()


def png_pixels(data: bytes) -> np.ndarray:
    width, height = struct.unpack(">II", data[16:24])
    (length,) = struct.unpack(">I", data[33:37])
    raw = zlib.decompress(data[41 : 41 + length])
    return np.frombuffer(raw, np.uint8).reshape(height, -1)[:, 1:].reshape(height, width, 3)


def test_plan_png_has_a_legend_and_names(cli, tmp_path):
    png = tmp_path / "plan.png"
    (tmp_path / "b").mkdir()
    board = tmp_path / "b" / "host.yaml"  # the kinds below are those of 8-lane blocks
    text = (ROOT / "board_profiles" / "host.yaml").read_text()
    board.write_text(text.replace("\ndetect: true\n", "\ndetect: true\nvector_bits: 256\n"))
    code, _, err = cli("inspect", EXAMPLE, "--plan-png", png, "--board", board)
    assert code == 0, err
    img = png_pixels(png.read_bytes())
    assert img.shape == (HEIGHT, WIDTH, 3)
    kinds = ["conv2d_nchwc", "max_pool_nchwc", "reduce_mean", "layout_transform", "gemm"]
    x = WIDTH - RIGHT - _legend_width(kinds) + 16
    for key in range(len(kinds)):  # a colour square per kind, top to bottom
        y = TOP + key * 18 + 6
        assert (img[y, x + 6] == color(key)).all(), key
    # Rectangles are labelled with their names where they fit (maxpool_9__nchw8c is 136
    # pixels wide), not only with row numbers (those that fit: under 30 columns of text).
    plot = img[TOP:-40, LEFT : x - 16]
    text_columns = np.count_nonzero((plot.sum(axis=2) == 0).any(axis=0))
    assert text_columns > 80


def test_report_of_a_real_profile(bundle, cli, tmp_path):
    # The whole path: run_bundle profiles the bundle, the report reads what it wrote, and
    # the manifest's own facts (targets, tuning) are shown instead of the profile's now.
    prof = tmp_path / "prof.json"
    code, _, err = cli("run", bundle, "--board", "host", "--profile-json", prof, "--repeat", 3)
    assert code == 0, err
    doc = json.loads(prof.read_text())
    out = tmp_path / "r.html"
    code, _, err = cli("report", bundle, "-o", out, "--profile", prof)
    assert code == 0, err
    page = out.read_text()
    for row in doc["kernels"]:
        assert page.count(row["func"]) >= 2, row["func"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["tuning"]["tuned"] == 0 and manifest["tuning"]["default"] > 0
    assert manifest["targets"][0]["family"] == "cpu"
    assert "the bundle does not record them" not in page
    assert "not recorded in this bundle" not in page
