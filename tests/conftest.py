import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))


@pytest.fixture(autouse=True, scope="session")
def _object_cache(tmp_path_factory):
    """Tests share one object cache, kept across runs unless CI asks for a clean one."""
    os.environ.setdefault("PACKAGER_CACHE_DIR", str(ROOT / ".cache"))
    # The user's own profiles and tuning logs stay out of the tests: empty homes.
    home = tmp_path_factory.mktemp("xdg")
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ["XDG_DATA_HOME"] = str(home / "data")
    os.environ.pop("PACKAGER_BOARDS_DIR", None)
    yield


@pytest.fixture(autouse=True)
def _environment_kept():
    """What a test (or a bench's main it calls in-process) sets in os.environ stays in it:
    a PACKAGER_NUM_THREADS=1 left behind made later tests in the same worker run one
    thread."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def cli(capsys):
    """Run the packager CLI in-process: returns (exit code, stdout, stderr)."""
    from packager.cli import main

    def run(*args):
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
