"""The timing driver flushes a kernel's weights from the caches before each timed call, so
a candidate is timed with them arriving as they do inside a model (its input, just written
by the kernel before it there, stays); the records say so, and only such records confirm
a config."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from packager.boards import load_board
from packager.tune.driver import FLUSHING_ARCHS, driver_source
from packager.tune.log import FLUSHED, WARM, confirming, make_record
from packager.tune.measure import Measurer, Settings
from packager.tune.space import space_of
from packager.tune.tasks import default_func

from .test_tune_host import direct_task


def _disassembly(cc: str, objdump: str, source: str, tmp_path) -> str:
    src, obj = tmp_path / "driver.c", tmp_path / "driver.o"
    src.write_text(source)
    subprocess.run([cc, "-O2", "-std=c99", "-c", str(src), "-o", str(obj)], check=True)
    return subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize(
    "cc,objdump,flush,fence",
    [
        ("gcc", "objdump", r"\bclflush\b", r"\bmfence\b"),
        ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-objdump", r"\bdc\s+civac\b", r"\bdsb\s+ish\b"),
    ],
)
def test_the_driver_flushes_each_argument(conv_onnx, tmp_path, cc, objdump, flush, fence):
    task = direct_task(conv_onnx, load_board("host"))
    ref = default_func(task)
    ref.name = "pk_ref"
    weights = [task.graph.values[i].is_const for i in task.node.inputs]
    assert weights == [False, True, True]  # data, filters, bias
    source = driver_source(ref, len(weights), {}, weights)
    asm = _disassembly(cc, objdump, source, tmp_path)
    assert re.search(flush, asm) and re.search(fence, asm)
    assert "static const int FLUSH[] = {0, 1, 1, 0};" in source  # not the data nor output
    # flushed before the clock starts, and only the call timed
    timed = re.search(
        r"flush_args\(\);[^\n]*\n\s*t0 = now\(\);\s*FNS\[k\]\(args\);\s*sum \+= now\(\) - t0;",
        source,
    )
    assert timed, source


def test_cpu_records_are_marked_flushed(conv_onnx):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)
    d = space.default_index()
    (m,) = Measurer(board, Settings(min_seconds=0.002, samples=2)).measure(
        task, [(d, space.get(d))]
    )
    assert m.error is None and np.isfinite(m.median)
    assert m.extra["caches"] == FLUSHED


def test_only_records_timed_as_the_driver_times_confirm(conv_onnx):
    """A confirm round's record counts with its weights flushed, or warm where the CPU
    cannot flush them (ARMv7); one from before the driver flushed does not."""
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)

    def rec(caches):
        extra = {"confirm": True, **({"caches": caches} if caches else {})}
        return make_record(board, task, 1, space.get(1), [1e-4], None, extra=extra)

    assert [confirming(rec(c)) for c in (FLUSHED, WARM, None)] == [True, True, False]
    assert "x86_64" in FLUSHING_ARCHS and "aarch64" in FLUSHING_ARCHS
    assert "armv7" not in FLUSHING_ARCHS
