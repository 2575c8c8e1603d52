"""Remote command lines. Every argument and path is quoted here, and only here: nothing
that reaches a remote shell is built by pasting strings together."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

# The first line a wrapped command prints: the id of its own process group, so that a
# command that outlives its timeout can be killed with everything it started.
PGID_TAG = "__packager_pgid__"


def q(arg: str) -> str:
    return shlex.quote(str(arg))


def join(argv: Sequence[str]) -> str:
    return " ".join(q(a) for a in argv)


def rpath(*parts: str) -> str:
    """A POSIX path on the board (never os.path: the host may not be POSIX)."""
    return posixpath.join(*parts)


def wrapper_argv(exec_wrapper: str | None) -> list[str]:
    """The profile's exec_wrapper as a list of arguments (shell syntax, then quoted again)."""
    return shlex.split(exec_wrapper) if exec_wrapper else []


def command(argv: Sequence[str], cwd: str | None = None, wrapper: str | None = None) -> str:
    """``cd CWD && exec WRAPPER... ARGV...`` with every word quoted."""
    run = "exec " + join([*wrapper_argv(wrapper), *argv])
    return f"cd -- {q(cwd)} && {run}" if cwd else run


def in_own_process_group(script: str) -> str:
    """Run ``script`` as the leader of a new session (setsid -w waits for it and passes its
    exit status on), printing the process group id first so it can be killed as a whole:
    sshd does not signal a command when the client gives up on it."""
    inner = f"echo {PGID_TAG} $$; {script}"
    return f"exec setsid -w sh -c {q(inner)}"


def kill_group(pgid: int, grace_s: float = 1.0) -> str:
    return (
        f"kill -TERM -- -{int(pgid)} 2>/dev/null; sleep {grace_s:g}; "
        f"kill -KILL -- -{int(pgid)} 2>/dev/null; true"
    )
