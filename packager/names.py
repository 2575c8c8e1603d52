"""File-name forms of tensor names."""

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(name: str) -> str:
    """Every character outside [A-Za-z0-9._-] replaced by '_'."""
    return _UNSAFE.sub("_", name)
