"""Imports every converter module so that each registers its converters."""

import importlib
import pkgutil

from . import __name__ as _pkg
from . import __path__ as _path

for _m in sorted(m.name for m in pkgutil.iter_modules(_path)):
    if not _m.startswith("_") and _m != "registry":
        importlib.import_module(f"{_pkg}.{_m}")
