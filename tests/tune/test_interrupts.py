"""A Ctrl-C that lands in a finalizer is not lost. CI once saw `packager tune` go on for
minutes after SIGINT: the KeyboardInterrupt was raised inside xgboost's `DMatrix.__del__`,
where Python prints "Exception ignored in ..." and drops it."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

from packager import interrupts
from packager.boards import load_board
from packager.tune.log import TuningLog
from packager.tune.measure import Measurement
from packager.tune.run import model_tasks
from packager.tune.tuner import Options, tune_task


@pytest.fixture
def sigint_default():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


class _SignalsWhenCollected:
    def __init__(self, sig):
        self.sig = sig

    def __del__(self):
        signal.raise_signal(self.sig)


def _swallowed(sig) -> None:
    """The signal arrives while a finalizer runs: its exception is printed and dropped."""
    _SignalsWhenCollected(sig)
    gc.collect()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_check_raises_the_interrupt_a_finalizer_swallowed(sig, sigint_default, monkeypatch):
    dropped = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    with interrupts.handled():
        interrupts.check()  # nothing noted yet
        _swallowed(sig)
        assert dropped == [interrupts.Interrupted]  # Python printed it and went on
        with pytest.raises(interrupts.Interrupted) as e:
            interrupts.check()
        assert e.value.signum == sig
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    interrupts.check()  # the next command starts clean


def test_an_ignored_sigint_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.handled():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is interrupts.raise_interrupted
    finally:
        signal.signal(signal.SIGINT, before)


class _Board:
    """Measures made-up times; the signal arrives during the first batch, in a finalizer."""

    def __init__(self, board):
        self.board, self.batches = board, 0

    def measure(self, task, batch):
        self.batches += 1
        if self.batches == 1:
            _swallowed(signal.SIGINT)
        return [Measurement(i, knobs, [1e-3 * (1 + i % 7)]) for i, knobs in batch]


def test_tuning_stops_after_the_batch_the_signal_came_in(
    conv_onnx, tmp_path, sigint_default, monkeypatch
):
    board = load_board("host")
    (task,) = model_tasks(str(conv_onnx), board, algorithms=["direct"])
    log = TuningLog(tmp_path / "t.jsonl")
    stub = _Board(board)
    monkeypatch.setattr(sys, "unraisablehook", lambda u: None)
    with interrupts.handled(), pytest.raises(interrupts.Interrupted):
        tune_task(task, stub, log, Options(trials=40, batch=8, tuner="random"))
    assert stub.batches == 1
    assert len(log.records()) == 8  # the batch's measurements are kept
