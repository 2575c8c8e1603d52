"""The timing driver flushes a kernel's weights from the caches before each timed call and
writes its input again on the runtime's pool, so a candidate is timed with them arriving as
they do inside a model (the weights from memory, the input from the caches of the threads
of the kernel before it); the records say so, and only such records confirm a config."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from packager.boards import load_board
from packager.codegen.build import INCLUDE
from packager.codegen.c import codegen_c
from packager.tune.driver import FLUSHING_ARCHS, driver_source
from packager.tune.log import FLUSHED, PRODUCED, WARM, confirming, make_record
from packager.tune.measure import SCRATCH, Measurer, Settings
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
    # flushed and the input produced before the clock starts, and only the call timed
    timed = re.search(
        r"flush_args\(\);[^\n]*\n\s*produce_args\(\);\s*t0 = now\(\);"
        r"\s*FNS\[k\]\(args\);\s*sum \+= now\(\) - t0;",
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
    assert m.extra["caches"] == FLUSHED and m.extra["inputs"] == PRODUCED


def test_only_records_timed_as_the_driver_times_confirm(conv_onnx):
    """A confirm round's record counts with its weights flushed, or warm where the CPU
    cannot flush them (ARMv7), and its inputs produced on the pool; one from before the
    driver flushed does not, nor one from before it produced the inputs on a target of
    several cores (with one core, producing them changed nothing)."""
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)

    def rec(caches, inputs=PRODUCED, cores=2):
        extra = {"confirm": True, **({"caches": caches} if caches else {})}
        extra.update({"inputs": inputs} if inputs else {})
        r = make_record(board, task, 1, space.get(1), [1e-4], None, extra=extra)
        r["target"]["cores"] = cores
        return r

    assert [confirming(rec(c)) for c in (FLUSHED, WARM, None)] == [True, True, False]
    assert [confirming(rec(FLUSHED, None, cores)) for cores in (2, 4, 1)] == [False, False, True]
    assert confirming(rec(WARM, None, 1)) and not confirming(rec(None, None, 1))
    assert "x86_64" in FLUSHING_ARCHS and "aarch64" in FLUSHING_ARCHS
    assert "armv7" not in FLUSHING_ARCHS


_COUNTING_POOL = r"""
#include <stdint.h>
#include <stdio.h>
/* The pool's entry point, serial, naming each loop's body and extent on stderr. */
void pk_parallel_for(void (*body)(void *ctx, int64_t i), void *ctx, int64_t n) {
    int64_t i;
    fprintf(stderr, "P %p %lld\n", (void *)body, (long long)n);
    for (i = 0; i < n; ++i) body(ctx, i);
}
"""


def test_the_driver_writes_the_input_again_on_the_pool_before_each_timed_call(conv_onnx, tmp_path):
    """produce_args: the data input (not the weights) goes through pk_parallel_for over its
    rows (the dims outside its last two, here blocks x height) before every timed call, and
    the candidate timed after it still computes the reference's answer."""
    task = direct_task(conv_onnx, load_board("host"))
    ref = default_func(task)
    ref.name = "pk_ref"
    n, cb, h, _, _ = ref.params[0].shape
    weights = [task.graph.values[i].is_const for i in task.node.inputs]
    source = driver_source(ref, len(weights), {7: "pk_ref"}, weights)
    assert f"static const size_t ROWS[] = {{{n * cb * h}u," in source
    files = {"driver.c": source, "kernel.c": codegen_c(ref), "pool.c": _COUNTING_POOL}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    exe = tmp_path / "driver"
    subprocess.run(
        ["gcc", "-O1", "-std=gnu11", "-no-pie", f"-I{INCLUDE}", *files, str(SCRATCH), "-lm"]
        + ["-o", str(exe)],
        cwd=tmp_path,
        check=True,
    )
    run = subprocess.run([str(exe), "0.001", "3", "0"], capture_output=True, text=True, check=True)
    assert re.search(r"^R 7 ok( \S+){3}$", run.stdout, re.M), run.stdout
    symbols = subprocess.run(["nm", str(exe)], capture_output=True, text=True, check=True).stdout
    (produce,) = re.findall(r"^0*([0-9a-f]+) t produce_row$", symbols, re.M)
    loops = re.findall(r"^P 0x0*([0-9a-f]+) (\d+)$", run.stderr, re.M)
    produced = [int(extent) for body, extent in loops if body == produce]
    assert len(produced) >= 3 and set(produced) == {n * cb * h}  # at least one per sample
    # the kernel's own loops ran too: the produce loop is the driver's, not the kernel's
    assert any(body != produce for body, _ in loops)
