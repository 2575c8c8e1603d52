"""Winograd's transformed filters on a board with little memory: a ResNet-style network
(ResNet-18's stages at 56x56, 28x28 and 14x14, where the untuned rule picks F(4x4) and
F(2x2)) keeps its params within 1.3x of its weights when the profile's ram_mb is under
2048, still matches ONNX Runtime, and keeps every Winograd form with plenty of memory; the
manifest and the build summary give the sizes the files have."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import networks
import onnx
import pytest

from packager.boards import load_board
from packager.graph import conv_algorithms as ca
from packager.native import build_run_bundle
from packager.package import prepare_graph

ROOT = Path(__file__).resolve().parent.parent


def resnet_style() -> onnx.ModelProto:
    # three of ResNet-18's stages at 224x224: by the untuned rule its params are 1.9x its
    # weights (F(4x4) at 56x56 and 28x28, F(2x2) at 14x14)
    return networks.resnet(seed=4, blocks=(1, 1, 1), width=64, size=224, classes=10)


def profile(tmp_path: Path, ram_mb: int) -> Path:
    text = (ROOT / "board_profiles" / "host.yaml").read_text()
    path = tmp_path / f"host{ram_mb}.yaml"
    path.write_text(text.replace("name: host", f"name: host{ram_mb}") + f"ram_mb: {ram_mb}\n")
    return path


def weights_bytes(model: onnx.ModelProto, board_file: Path) -> int:
    """The weights as the build packs them (batch norms folded), before any transform."""
    graph, _ = prepare_graph(model, load_board(board_file))
    return sum(v.nbytes for v in graph.consts())


def build(cli, tmp_path: Path, ram_mb: int) -> tuple[Path, str, int]:
    """(bundle, the build's last line, the weights' bytes) of the ResNet-style model."""
    model_path = tmp_path / "resnet.onnx"
    if not model_path.exists():
        onnx.save(resnet_style(), model_path)
    board = profile(tmp_path, ram_mb)
    out = tmp_path / f"b{ram_mb}"
    code, _, err = cli("build", model_path, "--board", board, "-o", out)
    assert code == 0, err
    return out, err.strip().splitlines()[-1], weights_bytes(onnx.load(model_path), board)


def winograd_tiles(bundle: Path) -> list[int]:
    """The tile of each conv whose filters params.bin holds transformed."""
    graph = json.loads((bundle / "graph.json").read_text())
    params = [n["name"] for n in graph["nodes"] if n["op"] == "param"]
    return sorted(int(n[-1]) for n in params if re.search(r"__winograd\d$", n))


def check_sizes(bundle: Path, summary: str) -> dict:
    """The manifest's and the summary's sizes are those of the files."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    params = (bundle / "params.bin").stat().st_size
    assert manifest["memory"]["params_bytes"] == params
    extra = manifest["winograd_filters"]["extra_bytes"]
    assert f"params {params / 1e6:.1f} MB (Winograd filters +{extra / 1e6:.1f} MB)" in summary
    return manifest


def test_a_small_board_keeps_params_within_1_3x_of_the_weights(cli, tmp_path):
    bundle, summary, weights = build(cli, tmp_path, 512)
    params = (bundle / "params.bin").stat().st_size
    assert params <= 1.3 * weights, (params, weights)
    manifest = check_sizes(bundle, summary)
    budget = manifest["winograd_filters"]["budget_bytes"]
    assert budget == int(ca.WINOGRAD_EXTRA_SHARE * weights)
    assert 0 < manifest["winograd_filters"]["extra_bytes"] <= budget
    # The F(4x4) convs at 56x56 save the most per byte: they stay, the others run direct.
    assert winograd_tiles(bundle) == [4, 4]
    build_run_bundle(bundle)
    r = subprocess.run(
        [bundle / "build" / "run_bundle", bundle, "--selftest"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "selftest: PASS" in r.stdout, r.stdout + r.stderr


def test_a_board_with_plenty_of_memory_keeps_every_winograd_form(cli, tmp_path):
    bundle, summary, weights = build(cli, tmp_path, 4096)
    manifest = check_sizes(bundle, summary)
    assert manifest["winograd_filters"]["budget_bytes"] is None
    assert winograd_tiles(bundle) == [2, 4, 4, 4]
    assert (bundle / "params.bin").stat().st_size > 1.8 * weights


@pytest.mark.parametrize(
    "ram_mb,budget", [(512, 280), (2047, 280), (2048, None), (None, None), (16384, None)]
)
def test_the_budget_applies_under_2_gib(ram_mb, budget):
    ram = None if ram_mb is None else ram_mb << 20
    assert ca.filter_budget(ram, 1000) == budget
