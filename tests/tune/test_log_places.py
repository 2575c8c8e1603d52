"""Where tuning logs are read from and written to (packager/resources.py)."""

from pathlib import Path

from packager import resources
from packager.boards import load_board
from packager.tune.apply import log_files
from packager.tune.run import default_log_path

ROOT = Path(__file__).resolve().parents[2]


def test_default_log_in_a_source_checkout_is_beside_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not relative to the working directory
    assert not resources.installed()
    path = default_log_path("models/net.onnx", load_board("host"))
    assert path == ROOT / "tuning_logs" / "host" / "net.jsonl"


def test_build_reads_shipped_user_and_given_logs_once_each(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    user = tmp_path / "data" / "packager" / "tuning_logs" / "host"
    user.mkdir(parents=True)
    (user / "mine.jsonl").write_text("")
    (user / "other.txt").write_text("")
    shipped = sorted((ROOT / "tuning_logs" / "host").glob("*.jsonl"))
    assert shipped
    extra = tmp_path / "extra.jsonl"
    files = log_files("host", [str(extra), str(user / "mine.jsonl")])
    assert files == [*shipped, user / "mine.jsonl", extra]
    assert log_files("rpi4") == []
