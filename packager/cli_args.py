"""What the CLI's commands share: parsing of ``NAME=...`` arguments, the options of the board
commands, and progress messages. The command modules (cli, cli_remote, tune/cli) import it;
it imports none of them."""

from __future__ import annotations

import argparse
import sys

from .errors import PackagerError


def parse_shape(text: str) -> tuple[str, list[int]]:
    name, sep, dims = text.rpartition("=")
    try:
        if not sep or not name:
            raise ValueError
        shape = [int(d) for d in dims.split(",")] if dims.strip() else []
        if any(d < 0 for d in shape):
            raise ValueError
    except ValueError:
        raise PackagerError(
            f"--input-shape {text!r}: expected NAME=D0,D1,... with non-negative integers"
        ) from None
    return name, shape


BOARD_HELP = "board profile: a name from `packager boards` or a path to a YAML file"


def parse_input(text: str) -> tuple[str, str]:
    name, sep, path = text.rpartition("=")
    if not sep or not name or not path:
        raise PackagerError(f"--input {text!r}: expected NAME=FILE.npy")
    return name, path


def parse_inputs(texts: list[str] | None) -> dict[str, str]:
    """The --input values by name; a name given twice is refused (else the last would win)."""
    inputs: dict[str, str] = {}
    for text in texts or []:
        name, path = parse_input(text)
        if name in inputs:
            raise PackagerError(f"--input {name} given twice ({inputs[name]} and {path})")
        inputs[name] = path
    return inputs


def input_shapes(args) -> dict[str, list[int]]:
    """The --input-shape values by name; a name given twice is refused (else the last
    would win)."""
    shapes: dict[str, list[int]] = {}
    for text in args.input_shape or []:
        name, shape = parse_shape(text)
        if name in shapes:
            raise PackagerError(f"--input-shape {name} given twice ({shapes[name]} and {shape})")
        shapes[name] = shape
    return shapes


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Console:
    """Messages and progress on stderr. A terminal gets progress as one line redrawn in
    place (cleared before a message takes its place); a file or a pipe gets none of it,
    so logs hold the messages only."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.shown = False  # a progress line is on screen

    def log(self, msg: str) -> None:
        self.clear()
        print(msg, file=self.stream, flush=True)

    def progress(self, what: str, done: int, total: int) -> None:
        if not self.tty:
            return
        self.stream.write(f"\r\033[K{what} {done}/{total}")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Take the progress line off the screen (before an error is printed)."""
        if self.shown:
            self.stream.write("\r\033[K")
            self.shown = False


def add_connection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="kill a remote command (and its process group) after S seconds (default 600)",
    )
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S", help="default 10")
    p.add_argument(
        "--retries",
        type=int,
        default=3,
        metavar="N",
        help="reconnect N times, with backoff, when a connection drops (default 3)",
    )
    p.add_argument(
        "--trust-on-first-use",
        action="store_true",
        help="accept an unknown host key and record it in known_hosts (a changed key is "
        "always refused)",
    )


def add_verify_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking every bundle file against the sha256 in manifest.json (for a "
        "generated kernel edited on purpose)",
    )


def input_values(args) -> dict[str, str]:
    """The --input-value texts by name (VALUE or FILE.npy, read against the model's
    declared input by frontend.importer.freeze_inputs); a name given twice is refused."""
    values: dict[str, str] = {}
    for text in getattr(args, "input_value", None) or []:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise PackagerError(
                f"--input-value {text!r}: expected NAME=VALUE (a number, or numbers "
                "separated by commas) or NAME=FILE.npy"
            )
        if name in values:
            raise PackagerError(f"--input-value {name} given twice ({values[name]} and {value})")
        values[name] = value
    return values
