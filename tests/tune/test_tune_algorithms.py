"""A 3x3 stride-1 conv is tuned in each of its forms (direct, Winograd F(2x2), F(4x4)),
and the build runs the form whose record is fastest."""

from __future__ import annotations

import json

import pytest

from packager.boards import load_board
from packager.runner import selftest_local
from packager.tune.log import choose, confirming, cost, read_records
from packager.tune.run import model_tasks

TEMPLATES = ["conv2d_nchwc", "conv2d_winograd_nchwc", "conv2d_winograd_nchwc"]


def _kernels(bundle) -> str:
    return " ".join(sorted(p.name for p in (bundle / "kernels").glob("k_*.c")))


def test_every_form_of_a_conv_is_a_task(conv_onnx):
    tasks = model_tasks(str(conv_onnx), load_board("host"))
    assert sorted(t.template for t in tasks) == sorted(TEMPLATES)
    tiles = sorted(
        t.node.attrs["nodes"][0]["attrs"].get("tile", 0) for t in tasks if t.node.op == "fused"
    )
    assert tiles == [0, 2, 4]


@pytest.mark.parametrize("bits,multiple", [(256, 6), (512, 1)])
def test_winograd_tasks_are_the_kernels_the_build_makes(conv_onnx, bits, multiple):
    """The tuner's Winograd forms carry the tile_multiple a build for the board gives
    them (16 vector registers: 6), so their records' keys are those of the build's
    kernels."""
    import dataclasses

    board = dataclasses.replace(load_board("host"), vector_bits=bits)
    tasks = model_tasks(str(conv_onnx), board)
    wino = [t.node.attrs["nodes"][0]["attrs"] for t in tasks if t.template == TEMPLATES[1]]
    assert [a.get("tile_multiple", 1) for a in wino] == [multiple, multiple]


@pytest.mark.parametrize(
    "algorithms,want",
    [
        (["direct"], ["conv2d_nchwc"]),
        (["winograd_4"], ["conv2d_winograd_nchwc F4x4"]),
        (["winograd_2", "direct"], ["conv2d_nchwc", "conv2d_winograd_nchwc F2x2"]),
    ],
)
def test_tune_can_keep_to_some_forms(conv_onnx, algorithms, want):
    tasks = model_tasks(str(conv_onnx), load_board("host"), algorithms=algorithms)
    assert sorted(t.label.rsplit(" ", 1)[0] for t in tasks) == want
    assert len({t.flops for t in tasks}) == 1  # every form counts the direct conv's work


@pytest.mark.slow
def test_the_build_takes_the_fastest_form(conv_onnx, tmp_path, cli):
    log = tmp_path / "conv.jsonl"
    # without the model check, whose failed rounds (test_model_check.py) would follow
    # the records this test reads last
    args = ("tune", conv_onnx, "--board", "host", "--trials", 4, "--log", log)
    code, _, err = cli(*args, "--no-model-check")
    assert code == 0, err
    records = read_records(log)
    assert {r["task"]["template"] for r in records} == set(TEMPLATES)
    # The chosen config of each form is measured again, side by side, at the end.
    recheck, tuned = records[-3:], records[:-3]
    assert len({r["task"]["key"] for r in recheck}) == 3 and all(map(confirming, recheck))
    for r in recheck:
        mine = [x for x in tuned if x["task"]["key"] == r["task"]["key"]]
        assert r["config"]["knobs"] == choose(mine)["config"]["knobs"]
    assert "measuring the chosen config of each form again (1 conv)" in err
    keys = {r["task"]["key"] for r in records}
    chosen = [choose([r for r in records if r["task"]["key"] == k]) for k in keys]
    fastest = min(chosen, key=cost)
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err
    uses_winograd = "winograd" in _kernels(tmp_path / "b")
    assert uses_winograd == (fastest["task"]["template"] == "conv2d_winograd_nchwc")
    assert selftest_local(tmp_path / "b", load_board("host")).returncode == 0

    # The same log with its costs swapped around: whichever form is made fastest is used.
    for template, tile in [("conv2d_nchwc", None), ("conv2d_winograd_nchwc", 2)]:
        edited = tmp_path / f"edited_{tile}.jsonl"
        lines = []
        for r in records:
            inner = json.loads(r["task"]["key"])[0][1][0][1]
            chosen = r["task"]["template"] == template and inner.get("tile") == tile
            if r["result"]["costs"]:
                r = {**r, "result": {**r["result"], "costs": [1e-6 if chosen else 1.0]}}
            lines.append(json.dumps(r))
        edited.write_text("\n".join(lines) + "\n")
        out = tmp_path / f"b_{tile}"
        code, _, err = cli("build", conv_onnx, "--board", "host", "-o", out, "--tuning-log", edited)
        assert code == 0, err
        assert ("winograd" in _kernels(out)) == (tile is not None)
        if tile is not None:
            assert json.loads((out / "graph.json").read_text())  # a valid bundle
            assert selftest_local(out, load_board("host")).returncode == 0
