"""Packaging: the project metadata is in pyproject.toml; this only adds the build step that
copies the checkout's C runtime, board profiles and tuning logs into the package
(``packager/_data/``), so an installed packager carries them (packager/resources.py)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Source folder -> what of it ships (the C runtime's own unit tests stay behind).
DATA = {
    "c_runtime": shutil.ignore_patterns("tests", ".*"),
    "board_profiles": shutil.ignore_patterns(".*"),
    "tuning_logs": shutil.ignore_patterns(".*"),
}


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout itself
        target = Path(self.build_lib) / "packager" / "_data"
        shutil.rmtree(target, ignore_errors=True)  # no stale files from an earlier build
        for name, ignore in DATA.items():
            source = HERE / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; build from a full checkout")
            shutil.copytree(source, target / name, ignore=ignore)


setup(cmdclass={"build_py": BuildPyWithData})
