"""A tuning record applies only on the target it was measured on: a record of another CPU
(or one without a target) is left out with one line saying so, unless the build is asked
for it (--use-foreign-records)."""

from __future__ import annotations

import json

import pytest

from packager.boards import load_board
from packager.target import Target
from packager.tune.log import FLUSHED, PRODUCED, make_record
from packager.tune.space import space_of

from .test_tune_host import direct_task

OTHER = "Some Other CPU"


def _log(conv_onnx, path, target_changes):
    """A log with one good record of the conv's direct form (not its default config), of
    a confirm round (what the build takes)."""
    task = direct_task(conv_onnx, load_board("host"))
    space = space_of(task)
    index = (space.default_index() + 1) % space.size
    rec = make_record(
        task.board,
        task,
        index,
        space.get(index),
        [1e-4] * 3,
        None,
        extra={"confirm": True, "caches": FLUSHED, "inputs": PRODUCED},
    )
    if target_changes is None:
        del rec["target"]
    else:
        rec["target"].update(target_changes)
    path.write_text(json.dumps(rec) + "\n")
    return path


def test_a_record_of_this_target_applies(conv_onnx, tmp_path, cli):
    log = _log(conv_onnx, tmp_path / "own.jsonl", {})
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err
    assert "another CPU" not in err


def test_a_record_of_another_cpu_is_not_applied_and_the_build_says_so(conv_onnx, tmp_path, cli):
    log = _log(conv_onnx, tmp_path / "other.jsonl", {"cpu_name": OTHER})
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use default schedules" in err
    board = load_board("host")
    name = f"{OTHER} ({board.cpu_id})" if board.cpu_id else OTHER
    line = (
        f"1 tuning record was measured on another CPU ({name}, {board.vector_bits}-bit, "
        f"{board.cores} cores); not applied: --use-foreign-records to apply them"
    )
    assert [x for x in err.splitlines() if "another CPU" in x] == [line]

    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "f", "--tuning-log", log,
        "--use-foreign-records",
    )  # fmt: skip
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err
    assert "1 tuning record was measured on another CPU" in err and "applied (--use" in err


def test_a_record_without_a_target_is_foreign(conv_onnx, tmp_path, cli):
    log = _log(conv_onnx, tmp_path / "old.jsonl", None)
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use default schedules" in err
    assert "1 tuning record was measured on another CPU (not recorded); not applied" in err


def test_other_vector_width_or_features_make_a_record_foreign(conv_onnx, tmp_path, cli):
    for changes in ({"vector_bits": 128}, {"features": ["neon"]}, {"cores": 64}):
        log = _log(conv_onnx, tmp_path / "x.jsonl", changes)
        out = tmp_path / f"b{len(list(tmp_path.iterdir()))}"
        code, _, err = cli("build", conv_onnx, "--board", "host", "-o", out, "--tuning-log", log)
        assert code == 0 and "1 of 1 tunable kernels use default schedules" in err, changes


def test_another_family_or_model_of_the_same_cpu_name_is_foreign(conv_onnx, tmp_path, cli):
    """A virtual machine names Zen 3 and Zen 4 alike (``AMD EPYC``): the record's cpu_id
    (vendor, family, model) tells them apart."""
    board = load_board("host")
    if not board.cpu_id:
        pytest.skip("this machine's /proc/cpuinfo gives no x86 family and model")
    log = _log(conv_onnx, tmp_path / "zen.jsonl", {"cpu_id": "AuthenticAMD family 25 model 1"})
    if board.cpu_id == "AuthenticAMD family 25 model 1":
        log = _log(conv_onnx, tmp_path / "zen.jsonl", {"cpu_id": "AuthenticAMD family 25 model 17"})
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use default schedules" in err
    assert "1 tuning record was measured on another CPU" in err


def test_a_record_written_before_cpu_ids_applies_on_its_cpu_name(conv_onnx, tmp_path, cli):
    """Records from before fingerprints carried cpu_id match on the rest of the target."""
    board = load_board("host")
    log = _log(conv_onnx, tmp_path / "old.jsonl", {})
    rec = json.loads(log.read_text())
    rec["target"].pop("cpu_id", None)
    log.write_text(json.dumps(rec) + "\n")
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err
    assert "another CPU" not in err
    assert bool(board.cpu_id) == (rec["target"] != Target.cpu(board).fingerprint())
