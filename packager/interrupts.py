"""Ctrl-C and SIGTERM that cannot be lost.

Python raises the KeyboardInterrupt of a signal wherever the main thread happens to be,
and where that is a finalizer (`__del__`, a weakref callback: xgboost's DMatrix has one)
the exception is printed as "Exception ignored in ..." and dropped, and the work goes on.
So the handlers below also note the signal, and long loops call `check()` between steps,
which raises it again if it was dropped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_noted: list[int] = []


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, unwinding like Ctrl-C through every cleanup on the way out."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def raise_interrupted(signum, frame):
    _noted.append(signum)
    raise Interrupted(signum)


def check() -> None:
    """Raise the interrupt a finalizer swallowed, if one did."""
    if _noted:
        raise Interrupted(_noted[0])


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """For the length of one command: SIGTERM unwinds like Ctrl-C, and both are noted.
    A SIGINT that was ignored when the process started (a background job's) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield  # handlers can only be set from the main thread
        return
    old = {signal.SIGTERM: signal.signal(signal.SIGTERM, raise_interrupted)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, raise_interrupted)
    _noted.clear()
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        _noted.clear()
