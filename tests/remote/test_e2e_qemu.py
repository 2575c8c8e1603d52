"""End to end on emulated ARM boards: package for the board, cross-compile, deploy over
SSH, self-test on the board (under qemu-user), run on an input, fetch the outputs and
compare them with ONNX Runtime."""

import json

import networks
import numpy as np
import onnx
import pytest

from tests.helpers import ort_outputs

from .conftest import write_profile

LIGHT_SQUEEZENET = (
    onnx.__file__.rsplit("/", 1)[0] + "/backend/test/data/light/light_squeezenet.onnx"
)
MODELS = {
    "squeezenet": lambda: onnx.load(LIGHT_SQUEEZENET),
    "mobilenet_v2": lambda: networks.mobilenet_v2(seed=1),
    "resnet_winograd": lambda: networks.resnet(seed=2, blocks=(1, 1, 1, 1), width=16, size=64),
}
# Extra build options per model: the Winograd convs in NEON's 4-lane blocks.
BUILD_ARGS = {"resnet_winograd": ["--conv-algorithm", "winograd_4"]}


@pytest.mark.slow
@pytest.mark.parametrize("board_name", ["qemu-aarch64", "qemu-armv7"])
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_model_on_emulated_board(board_name, model_name, sshd, tmp_path, cli):
    board = write_profile(tmp_path / "boards", board_name, [sshd.connection(str(tmp_path / "w"))])
    model = MODELS[model_name]()
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / model_name
    extra = BUILD_ARGS.get(model_name, [])
    code, _, err = cli("build", tmp_path / "m.onnx", "--board", board, "-o", out, *extra)
    assert code == 0, err
    if extra:
        assert any("winograd" in p.name for p in (out / "kernels").glob("*.c"))

    code, text, err = cli("deploy", out, "--board", board)
    assert code == 0, text + err
    assert "selftest PASS" in text

    inits = {t.name for t in model.graph.initializer}
    (vi,) = [v for v in model.graph.input if v.name not in inits]
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = tmp_path / "res"
    code, text, err = cli(
        "run", out, "--board", board, "--input", f"{vi.name}={tmp_path / 'x.npy'}",
        "--output-dir", res,
    )  # fmt: skip
    assert code == 0, err
    (want,) = ort_outputs(model, {vi.name: x})
    manifest = json.loads((out / "manifest.json").read_text())
    got = np.load(res / manifest["outputs"][0]["file"])
    # Winograd rounds differently from a direct sum: its outputs compare at their scale.
    atol = 1e-4 * np.abs(want).max() if extra else 1e-5
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=atol)
