"""Imports every op module of the package so that each registers its ops."""

import importlib
import pkgutil

from .. import ops

for _m in sorted(m.name for m in pkgutil.iter_modules(ops.__path__)):
    if not _m.startswith("_") and _m != "registry":
        importlib.import_module(f"{ops.__name__}.{_m}")
