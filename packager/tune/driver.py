"""The timing driver: one C program that times many candidate kernels of a task.

Candidates are C functions with distinct names, linked into one binary with the
default-schedule kernel (``pk_ref``). The driver fills the inputs from a fixed PRNG,
runs the reference once, then for each candidate named on its command line: prints
``S id`` (so a crash or a hang can be blamed on it), runs it once and compares every
output with the reference (that call is also the warm-up, and its time calibrates how
many calls make one sample: a slow candidate costs one call per sample more), printing
``R id ERROR`` for one that fails. The candidates that passed are then timed in turns,
one sample of each per round (``S id`` before each), and at the end each prints
``R id ok t1 t2 ...`` (seconds per call, one per sample): on a board whose speed moves
with its neighbours' load or its temperature, every candidate's samples span the whole
batch, so a slow phase does not fall on the candidates that happened to run in it.
Before each timed call the constant arguments (weights) are flushed from the caches
(``flush_args``; x86 and AArch64), and only the call is timed: measured hot, a candidate
that keeps a large layer's filters in L2 won tuning runs (1.94x) and was no faster inside
the model. The other inputs are written again before each timed call, as the kernel
before them in a model writes them: a parallel loop on the runtime's own pool over their
rows (the dims outside the last two, as a producer's parallel loop runs over them),
each row's cache lines read and written by the thread that took it (``produce_args``).
Left as the candidate's last call left them, a 2-thread config that has each thread read
the whole input (parallel over output channels only) found it in both cores' caches and
won a 112x112 expand conv (140 against 145 us), then ran 1.25x slower than the default in
the model, where each core holds the half it wrote. (The pool's threads are then awake
for the call, as between a model's kernels.) Flushed instead, a single-threaded config of a 56x56
conv won by reading it from memory as fast as two threads, and ran about 1.3x slower
inside the model.
Usage: ``driver MIN_SECONDS SAMPLES POS...`` (POS: position in the candidate table).
"""

from __future__ import annotations

import math

from ..te.ir import PrimFunc

_DTYPE_CODE = {"float32": 0, "float64": 1}
FLUSHING_ARCHS = ("x86_64", "aarch64")  # the board arches whose flush_args flushes

# The C helpers every timing driver shares (the OpenCL one too): a clock, seeded inputs and
# the comparison of a candidate's outputs with the reference's.
HELPERS = r"""
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static double urand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static void fill(void *p, int dt, size_t bytes) {
    size_t i;
    if (dt == 0) for (i = 0; i < bytes / 4; ++i) ((float *)p)[i] = (float)(2 * urand() - 1);
    else if (dt == 1) for (i = 0; i < bytes / 8; ++i) ((double *)p)[i] = 2 * urand() - 1;
    else memset(p, 0, bytes); /* integers: zeros are valid indices and counts */
}

static int close_to(double g, double w) {
    if (w != w) return g != g;
    return fabs(g - w) <= 1e-3 * (1.0 + fabs(w));
}

static int same(const void *got, const void *want, int dt, size_t bytes) {
    size_t i;
    if (dt == 0) {
        for (i = 0; i < bytes / 4; ++i)
            if (!close_to(((const float *)got)[i], ((const float *)want)[i])) return 0;
        return 1;
    }
    if (dt == 1) {
        for (i = 0; i < bytes / 8; ++i)
            if (!close_to(((const double *)got)[i], ((const double *)want)[i])) return 0;
        return 1;
    }
    return memcmp(got, want, bytes) == 0;
}

"""

_MAIN = r"""
/* The constant arguments (weights) out of every cache level before each timed call: in
 * a whole model a kernel's weights arrive from memory or the last-level cache, not from
 * the L1 and L2 its previous call left them in, while its input was just written by the
 * kernel before it. (x86 and AArch64; elsewhere no flush.) */
static void flush_args(void) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    int i;
    size_t b;
    for (i = 0; i < NARGS; ++i)
        for (b = 0; FLUSH[i] && b < BYTES[i]; b += 64) {
#if defined(__aarch64__)
            __asm__ volatile("dc civac, %0" : : "r"((char *)args[i] + b) : "memory");
#else
            __builtin_ia32_clflush((char *)args[i] + b);
#endif
        }
#if defined(__aarch64__)
    __asm__ volatile("dsb ish" : : : "memory");
#else
    __builtin_ia32_mfence();
#endif
#endif
}

/* The inputs that are not flushed, written as their producer in a model writes them:
 * by the threads of the pool, row by row, so each row's lines sit dirty in the cache of
 * the core that took it (a row: the input's dims outside its last two). */
extern void pk_parallel_for(void (*body)(void *ctx, int64_t i), void *ctx, int64_t n);

static void produce_row(void *ctx, int64_t r) {
    int i = *(const int *)ctx;
    volatile unsigned char *p = (volatile unsigned char *)args[i];
    uint64_t b = (uint64_t)r * BYTES[i] / ROWS[i], end = (uint64_t)(r + 1) * BYTES[i] / ROWS[i];
    for (; b < end; b += 64) p[b] = p[b]; /* 64-bit: r * BYTES overflows a 32-bit size_t */
}

static void produce_args(void) {
    int i;
    for (i = 0; i < NIN; ++i)
        if (!FLUSH[i] && BYTES[i]) pk_parallel_for(produce_row, &i, (int64_t)ROWS[i]);
}

/* One sample of candidate k: the mean of `number` calls, each after a flush of the
 * weights and the inputs written again. */
static double sample(int k, int number) {
    double t0, sum = 0;
    int n;
    for (n = 0; n < number; ++n) {
        flush_args(); /* not timed */
        produce_args();
        t0 = now();
        FNS[k](args);
        sum += now() - t0;
    }
    return sum / number;
}

int main(int argc, char **argv) {
    double min_s = argc > 1 ? atof(argv[1]) : 0.05;
    int samples = argc > 2 ? atoi(argv[2]) : 5, a, i;
    void *ref[NARGS];
#ifdef __GLIBC__
    /* Keep freed memory: a kernel's large temporaries would otherwise go back to the
     * OS after every call and fault in again on the next (a long-running bundle reuses
     * them), and candidates with big temporaries (Winograd) would be timed with that. */
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
#endif
    for (i = 0; i < NARGS; ++i) {
        args[i] = malloc(BYTES[i] + 64);
        fill(args[i], DT[i], BYTES[i]);
    }
    if (pk_ref(args) != 0) { printf("E reference failed\n"); return 3; }
    for (i = NIN; i < NARGS; ++i) {
        ref[i] = malloc(BYTES[i] + 1);
        memcpy(ref[i], args[i], BYTES[i]);
    }
    size_t most = (size_t)argc, per = (size_t)(samples > 0 ? samples : 1);
    int *kept = malloc(sizeof(int) * most), *number = malloc(sizeof(int) * most);
    double *times = malloc(sizeof(double) * most * per);
    int nk = 0, r, j;
    for (a = 3; a < argc; ++a) {
        int k = atoi(argv[a]), ok = 1;
        double t0, one;
        printf("S %d\n", IDS[k]);
        fflush(stdout);
        for (i = NIN; i < NARGS; ++i) memset(args[i], 0xff, BYTES[i]); /* NaN: unwritten fails */
        t0 = now();
        /* the checked call is also the warm-up (caches, page faults) and the calibration */
        if (FNS[k](args) != 0) { printf("R %d runtime_error\n", IDS[k]); fflush(stdout); continue; }
        one = now() - t0;
        for (i = NIN; i < NARGS; ++i) ok = ok && same(args[i], ref[i], DT[i], BYTES[i]);
        if (!ok) { printf("R %d wrong_answer\n", IDS[k]); fflush(stdout); continue; }
        number[nk] = one > 0 ? (int)(min_s / (double)per / one) + 1 : 1;
        kept[nk++] = k;
    }
    for (r = 0; r < samples; ++r) /* a round: one sample of each, from a new first one */
        for (j = 0; j < nk; ++j) {
            int c = (j + r) % nk;
            printf("S %d\n", IDS[kept[c]]);
            fflush(stdout);
            times[c * samples + r] = sample(kept[c], number[c]);
        }
    for (j = 0; j < nk; ++j) {
        printf("R %d ok", IDS[kept[j]]);
        for (r = 0; r < samples; ++r) printf(" %.9e", times[j * samples + r]);
        printf("\n");
    }
    return 0;
}
"""


def driver_source(
    ref: PrimFunc, n_inputs: int, candidates: dict[int, str], flush: list[bool] | None = None
) -> str:
    """C source of the driver for candidates {config index: function name}; ``flush``:
    per input, whether it is flushed from the caches before each timed call (the
    constant ones: weights; default none)."""
    flags = [int(bool(f)) for f in (flush or [])][:n_inputs]
    flags += [0] * (len(ref.params) - len(flags))
    names = list(candidates.values())
    ids = list(candidates)
    params = ref.params
    nbytes = [b.size * _elem_bytes(b.dtype) for b in params]
    codes = [str(_DTYPE_CODE.get(b.dtype, 2)) for b in params]
    lines = [
        "#define _POSIX_C_SOURCE 199309L",
        "#include <math.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "#include <time.h>",
        "#ifdef __GLIBC__",
        "#include <malloc.h>",
        "#endif",
        "typedef int32_t (*kfn)(void *const *);",
        "extern int32_t pk_ref(void *const *);",
        *[f"extern int32_t {n}(void *const *);" for n in names],
        f"static const kfn FNS[] = {{{', '.join(names) or '0'}}};",
        f"static const int IDS[] = {{{', '.join(map(str, ids)) or '0'}}};",
        f"#define NARGS {len(params)}",
        f"#define NIN {n_inputs}",
        f"static const size_t BYTES[] = {{{', '.join(f'{n}u' for n in nbytes)}}};",
        f"static const int DT[] = {{{', '.join(codes)}}};",
        f"static const int FLUSH[] = {{{', '.join(map(str, flags))}}};",
        f"static const size_t ROWS[] = {{{', '.join(f'{_rows(b.shape)}u' for b in params)}}};",
        "static void *args[NARGS];",
    ]
    return "\n".join(lines) + HELPERS + _MAIN


def _rows(shape) -> int:
    """How many rows a producer's parallel loop runs over: the dims outside the last two
    (the first of a matrix, one for a vector or a scalar)."""
    dims = [int(d) for d in shape]
    outer = dims[:-2] if len(dims) > 2 else dims[:1]
    return max(1, math.prod(outer))


def _elem_bytes(dtype: str) -> int:
    if dtype == "bool":
        return 1
    return max(1, int("".join(c for c in dtype if c.isdigit()) or 8) // 8)


def parse_output(text: str) -> tuple[dict[int, tuple[str | None, list[float]]], int | None]:
    """({config index: (error or None, costs)}, the index started last)."""
    results: dict = {}
    started = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "S":
            started = int(parts[1])
        elif len(parts) >= 3 and parts[0] == "R":
            err = None if parts[2] == "ok" else parts[2]
            results[int(parts[1])] = (err, [float(x) for x in parts[3:]])
    return results, started
