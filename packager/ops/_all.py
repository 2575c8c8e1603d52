"""Imports every op module of the package, and every module of its per-target template
subpackages (opencl/), so that each registers its ops and schedules."""

import importlib
import pkgutil

from .. import ops
from . import opencl

for _pkg in (ops, opencl):
    for _m in sorted(m.name for m in pkgutil.iter_modules(_pkg.__path__)):
        if not _m.startswith("_") and _m != "registry" and _m != "opencl":
            importlib.import_module(f"{_pkg.__name__}.{_m}")
