"""The runtime's thread pool (c_runtime/src/pk_parallel.c) on its own, under ThreadSanitizer
and AddressSanitizer: every index of every loop runs exactly once, for loops of 0 to
hundreds of indices back to back, loops nested in loop bodies (run serially), more
threads than cores, and workers that come late to a loop (the caller must not wait for a
worker that never took part)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "c_runtime"

PROGRAM = r"""
#include "pk_kernel.h"
#include <stdio.h>
#include <time.h>

#define MAXN 300
typedef struct {
    int hits[MAXN];
    int inner[MAXN];
    int64_t n;
    int slow;
} job_t;

static void inner_body(void* p, int64_t i) {
    job_t* j = p;
    __atomic_fetch_add(&j->inner[i], 1, __ATOMIC_RELAXED);
}

static void body(void* p, int64_t i) {
    job_t* j = p;
    __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
    if (i == 3) pk_parallel_for(inner_body, j, j->n); /* nested: serial, still complete */
    if (j->slow && i % 16 == 0) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

int main(void) {
    static job_t job;
    for (int k = 0; k < 6000; k++) {
        memset(&job, 0, sizeof job);
        job.n = (k * 37) % MAXN;
        if (k % 5 == 0) job.n %= 8; /* small loops, as the tail kernels of a network */
        job.slow = (k % 97 == 0);
        pk_parallel_for(body, &job, job.n);
        for (int64_t i = 0; i < job.n; i++) {
            if (job.hits[i] != 1 || (job.n > 3 && job.inner[i] != 1)) {
                printf("loop %d (n=%ld): index %ld ran %d times (nested %d)\n", k, (long)job.n,
                       (long)i, job.hits[i], job.inner[i]);
                return 1;
            }
        }
    }
    puts("ok");
    return 0;
}
"""

SANITIZERS = {
    "thread": ("-fsanitize=thread", {"TSAN_OPTIONS": "halt_on_error=1:exitcode=66"}),
    "address": (
        "-fsanitize=address,undefined -fno-sanitize-recover=all",
        {"ASAN_OPTIONS": "exitcode=97", "UBSAN_OPTIONS": "exitcode=98"},
    ),
}


def _build(tmp: Path, sanitizer: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp / "pool_test.c"
    src.write_text(PROGRAM)
    exe = tmp / f"pool_test_{sanitizer}"
    cmd = [
        cc,
        "-O1",
        "-g",
        *SANITIZERS[sanitizer][0].split(),
        "-DPK_USE_THREADS",
        "-DPK_NUM_THREADS=2",
        '-DPK_PIN_CORES=""',
        f"-I{RUNTIME / 'include'}",
        str(src),
        str(RUNTIME / "src" / "pk_parallel.c"),
        "-o",
        str(exe),
        "-lpthread",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0 and "sanitize" in r.stderr:
        pytest.skip(f"{sanitizer} sanitizer unavailable: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.parametrize("sanitizer", list(SANITIZERS))
def test_every_index_once_under_sanitizers(tmp_path, sanitizer):
    exe = _build(tmp_path, sanitizer)
    for threads in ("1", "2", "5"):
        env = {**os.environ, **SANITIZERS[sanitizer][1], "PACKAGER_NUM_THREADS": threads}
        r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "ok", (threads, r.stdout, r.stderr)
        assert "WARNING" not in r.stderr, r.stderr
