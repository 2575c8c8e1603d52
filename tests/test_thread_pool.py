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

# Chunked hand-out (run_ranges: each thread grabs a quarter of what is left of its own
# range, then half of what is left of another's from its back, with a compare-and-swap;
# run_shared, for loops of 2^32 indices or more, max(1, remaining / (2 * threads)) from
# one counter): loops of 1, 2, 3, 7, 1000 and 100003 indices back to back, then loops
# whose slow indices are the first few (all in the first, largest grab), the last few, or
# one in many. A slow body sleeps before it counts, so a caller that returned before a
# worker finished its run would find that index uncounted. Last, the grabs are bounded:
# while the thread that took index 0 sleeps on it, the others run the rest of the loop, so
# it runs fewer than half the indices (it could take all of them if one grab took the
# whole loop; some of 10 such loops suffice, as a worker may come late to any one).
CHUNK_PROGRAM = r"""
#include "pk_kernel.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define GUARD 64 /* counters past n: must stay 0 */
typedef struct {
    int* hits;
    int64_t n;
    int64_t slow_first; /* indices below this are slow */
    int64_t slow_last;  /* the last this many indices are slow */
    int64_t slow_every; /* every slow_every-th index is slow (0: none) */
    long sleep_ns;
    int out_of_range;
    uintptr_t* owner; /* if set: owner[i] = the thread that ran index i */
} job_t;

static __thread char thread_tag;

static void body(void* p, int64_t i) {
    job_t* j = p;
    if (i < 0 || i >= j->n) {
        __atomic_fetch_add(&j->out_of_range, 1, __ATOMIC_RELAXED);
        return;
    }
    int slow = i < j->slow_first || i >= j->n - j->slow_last;
    if (slow || (j->slow_every && i % j->slow_every == 0)) {
        struct timespec ts = {0, j->sleep_ns};
        nanosleep(&ts, NULL);
    }
    if (j->owner) j->owner[i] = (uintptr_t)&thread_tag; /* one per thread */
    __atomic_fetch_add(&j->hits[i], 1, __ATOMIC_RELAXED);
}

static int run(job_t* j, const char* what, int rep) {
    memset(j->hits, 0, (size_t)(j->n + GUARD) * sizeof *j->hits);
    j->out_of_range = 0;
    pk_parallel_for(body, j, j->n);
    if (j->out_of_range) {
        printf("%s n=%ld rep %d: %d calls out of range\n", what, (long)j->n, rep, j->out_of_range);
        return 1;
    }
    for (int64_t i = 0; i < j->n + GUARD; i++) {
        if (j->hits[i] != (i < j->n)) {
            printf("%s n=%ld rep %d: index %ld ran %d times\n", what, (long)j->n, rep, (long)i,
                   j->hits[i]);
            return 1;
        }
    }
    return 0;
}

int main(void) {
    static const int64_t sizes[] = {1, 2, 3, 7, 1000, 100003};
    static int hits[100003 + GUARD];
    job_t j;
    memset(&j, 0, sizeof j);
    j.hits = hits;
    for (int rep = 0; rep < 1000; rep++) {
        for (int s = 0; s < 6; s++) {
            if (sizes[s] > 1000 && rep % 50) continue;
            j.n = sizes[s];
            if (run(&j, "even", rep)) return 1;
        }
    }
    static const int64_t uneven[] = {2, 3, 7, 1000, 100003};
    for (int rep = 0; rep < 4; rep++) {
        for (int s = 0; s < 5; s++) {
            memset(&j, 0, sizeof j);
            j.hits = hits;
            j.n = uneven[s];
            j.sleep_ns = 2000000; /* 2 ms, against well under a microsecond for the others */
            j.slow_first = 4;
            if (run(&j, "first 4 slow", rep)) return 1;
            j.slow_first = 0;
            j.slow_last = 4;
            if (run(&j, "last 4 slow", rep)) return 1;
            j.slow_last = 0;
            j.slow_every = j.n > 1000 ? 5000 : 97;
            j.sleep_ns = 200000;
            if (run(&j, "one in many slow", rep)) return 1;
            j.slow_every = 0;
            j.slow_first = 1;
            j.sleep_ns = 20000000; /* index 0 alone: 20 ms */
            if (run(&j, "index 0 slow", rep)) return 1;
        }
    }
    const char* threads = getenv("PACKAGER_NUM_THREADS");
    if (threads && atoi(threads) > 1) {
        static uintptr_t owner[1000];
        int spread = 0;
        for (int rep = 0; rep < 10 && !spread; rep++) {
            memset(&j, 0, sizeof j);
            j.hits = hits;
            j.owner = owner;
            j.n = 1000;
            j.slow_first = 1;
            j.sleep_ns = 20000000;
            if (run(&j, "index 0 slow, owners", rep)) return 1;
            int same = 0;
            for (int i = 0; i < 1000; i++)
                same += owner[i] == owner[0];
            spread = same < 500;
        }
        if (!spread) {
            puts("the thread that ran index 0 ran half the loop or more, 10 times out of 10");
            return 1;
        }
    }
    puts("ok");
    return 0;
}
"""

# The same split in every loop: with 2 threads and bodies of even cost, the caller runs
# the first half of each loop's indices and the worker the second (a kernel then reads
# from its own core's cache the rows it wrote in the one before). Prints the share of the
# first halves' indices the caller ran, over 300 loops of 64 indices of about 2 us each.
AFFINITY_PROGRAM = r"""
#include "pk_kernel.h"
#include <stdio.h>
#include <time.h>

#define N 64
static __thread char thread_tag;
static uintptr_t owner[N];

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void body(void* p, int64_t i) {
    (void)p;
    double end = now_us() + 2.0;
    while (now_us() < end) {
    }
    owner[i] = (uintptr_t)&thread_tag;
}

int main(void) {
    long first_half = 0, by_caller = 0;
    for (int k = 0; k < 300; k++) {
        pk_parallel_for(body, NULL, N);
        for (int i = 0; i < N / 2; i++) {
            first_half++;
            by_caller += owner[i] == (uintptr_t)&thread_tag;
        }
    }
    printf("%.3f\n", (double)by_caller / first_half);
    return 0;
}
"""

# Unpinned workers start on a CPU other than the caller's and then take the process's
# whole CPU set back (place()): prints the worker's CPU count of its mask, the process's,
# and whether the worker ran the first loop's indices on a CPU other than the caller's.
PLACEMENT_PROGRAM = r"""
#define _GNU_SOURCE
#include "pk_kernel.h"
#include <sched.h>
#include <stdio.h>

static int worker_mask = -1, worker_cpu = -1;
static int caller_cpu;
static __thread int is_caller;

static void body(void* p, int64_t i) {
    (void)p;
    (void)i;
    volatile double x = 0; /* long enough a body that the worker takes some indices */
    for (int k = 0; k < 20000; k++) x += k;
    if (is_caller) return;
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    worker_mask = CPU_COUNT(&set);
    worker_cpu = sched_getcpu();
}

int main(void) {
    is_caller = 1;
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    for (int k = 0; k < 50 && worker_mask < 0; k++)
        pk_parallel_for(body, NULL, 64);
    caller_cpu = sched_getcpu();
    printf("%d %d %d\n", worker_mask, CPU_COUNT(&set), worker_cpu != caller_cpu);
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


def _build(
    tmp: Path, sanitizer: str | None, program: str = PROGRAM, name: str = "pool_test"
) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp / f"{name}.c"
    src.write_text(program)
    exe = tmp / f"{name}_{sanitizer}"
    cmd = [
        cc,
        "-O1",
        "-g",
        *(SANITIZERS[sanitizer][0].split() if sanitizer else ["-O2"]),
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


@pytest.mark.parametrize("sanitizer", list(SANITIZERS))
def test_chunks_every_index_once_under_sanitizers(tmp_path, sanitizer):
    exe = _build(tmp_path, sanitizer, CHUNK_PROGRAM, "chunk_test")
    for threads in ("1", "2", "5"):
        env = {**os.environ, **SANITIZERS[sanitizer][1], "PACKAGER_NUM_THREADS": threads}
        r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0 and r.stdout.strip() == "ok", (threads, r.stdout, r.stderr)
        assert "WARNING" not in r.stderr, r.stderr


def test_each_thread_runs_its_own_range_of_every_loop(tmp_path):
    exe = _build(tmp_path, None, AFFINITY_PROGRAM, "affinity_test")
    env = {**os.environ, "PACKAGER_NUM_THREADS": "2"}
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    # guided chunks from one counter gave the caller 0.5-0.6 of the first halves
    assert float(r.stdout) >= 0.9, r.stdout


def test_an_unpinned_worker_keeps_the_whole_cpu_set(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may run on one CPU only: nothing to place a worker on")
    exe = _build(tmp_path, None, PLACEMENT_PROGRAM, "placement_test")
    env = {**os.environ, "PACKAGER_NUM_THREADS": "2"}
    env.pop("PACKAGER_PIN_CORES", None)
    r = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    worker_mask, process_mask, _ = (int(v) for v in r.stdout.split())
    # the worker ran (it took indices) and was not left pinned to the CPU it started on
    assert worker_mask == process_mask >= 2, r.stdout
