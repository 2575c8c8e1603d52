"""Where the packager's files are: the C runtime, the board profiles, the tuning logs.

The sources of truth are the checkout's top-level ``c_runtime/``, ``board_profiles/`` and
``tuning_logs/``. Building a wheel copies them into the package as ``packager/_data/``
(setup.py), so an installed packager reads its package data and a source checkout
(``pip install -e .`` or ``PYTHONPATH``) reads the checkout. Every other module asks here;
none computes repository paths itself.

Beside the shipped files, each user has their own (XDG base directories):

- board profiles: ``$PACKAGER_BOARDS_DIR``, else ``${XDG_CONFIG_HOME:-~/.config}/packager/boards/``;
- tuning logs: ``${XDG_DATA_HOME:-~/.local/share}/packager/tuning_logs/BOARD/``.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DATA = PACKAGE / "_data"  # filled by setup.py's build_py; absent in a source checkout
CHECKOUT = PACKAGE.parent
BOARDS_DIR_ENV = "PACKAGER_BOARDS_DIR"


def installed() -> bool:
    """True when the package carries its own data (a wheel install), False in a checkout."""
    return (DATA / "c_runtime").is_dir()


def _shipped(name: str) -> Path:
    return (DATA if installed() else CHECKOUT) / name


def c_runtime() -> Path:
    """The C runtime sources a bundle copies (include/, src/, tools/, CMake files)."""
    return _shipped("c_runtime")


def shipped_boards() -> Path:
    """The board profiles that come with the packager."""
    return _shipped("board_profiles")


def shipped_tuning_logs() -> Path:
    """The tuning logs that come with the packager, one folder per board."""
    return _shipped("tuning_logs")


def checkout() -> Path | None:
    """The source checkout the package runs from, None for an installed package."""
    return None if installed() else CHECKOUT


def user_boards() -> Path:
    """The user's own board profiles, listed beside (and taking precedence over) the
    shipped ones."""
    env = os.environ.get(BOARDS_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return _xdg("XDG_CONFIG_HOME", ".config") / "packager" / "boards"


def user_tuning_logs() -> Path:
    """The user's tuning logs, one folder per board."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "packager" / "tuning_logs"


def tuning_log_home() -> Path:
    """Where ``packager tune`` writes by default: the checkout's ``tuning_logs/`` when
    running from a source checkout (that is how the shipped logs are made), the user's
    data directory otherwise. Never into an installed package."""
    root = checkout()
    return root / "tuning_logs" if root is not None else user_tuning_logs()


def _xdg(variable: str, default: str) -> Path:
    # The XDG spec: an unset, empty or relative value means the default.
    value = os.environ.get(variable, "")
    return Path(value) if os.path.isabs(value) else Path.home() / default
