/* pk_parallel_for: the parallel loop generated kernels call.
 *
 * Built with PK_USE_THREADS it runs on a pool of POSIX threads started on first use; built
 * without, it is a plain loop and the bundle needs no pthreads (single-core boards, targets
 * without threads).
 *
 * Thread count: PACKAGER_NUM_THREADS from the environment, else PK_NUM_THREADS (from the board
 * profile's cores), else 1. Pinning: PACKAGER_PIN_CORES or PK_PIN_CORES, a comma-separated
 * list of core ids ("4,5" for the big cores of a big.LITTLE board); thread k (the caller is
 * thread 0) runs on the k-th listed core. pk_graph_create refuses a malformed value of either
 * variable, or a core the machine does not have (pk_parallel_env_error), so a typo is an error
 * rather than a silent single thread or an unpinned pool.
 *
 * Workers spin briefly for the next job before sleeping (kernels come microseconds apart).
 * Each thread owns one contiguous range of a loop's indices, the same in every loop, and
 * takes it in shrinking chunks; a thread done with its own takes from the back of the
 * others' (run_ranges): kernels parallelize outer loops whose iterations are large, so
 * the atomic takes are cheap next to the work, uneven iterations balance themselves, a
 * thread's next index is mostly its own (a conv tile that prefetches the next tile's
 * weights fetches them for itself), and a kernel reads the rows its thread wrote in the
 * one before from that core's cache. The caller waits only for the workers that took
 * part in a loop: on a busy machine a worker may not run for a scheduler time slice, and
 * the caller then does the whole loop itself (its range, then the others') instead of
 * waiting for it. A parallel loop inside a parallel loop, or one started while another
 * thread owns the pool, runs serially in the calling thread.
 */
#if defined(PK_USE_THREADS) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setaffinity_np */
#elif !defined(_POSIX_C_SOURCE) && (defined(__unix__) || defined(__APPLE__))
#define _POSIX_C_SOURCE 200809L /* sysconf */
#endif
#include "pk_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#define PK_MAX_THREADS 256

/* A thread count: digits only, >= 1, capped at PK_MAX_THREADS; 0 when malformed. */
static int parse_threads(const char* s) {
    if (*s < '0' || *s > '9') return 0; /* strtol would take "-2", " 4" and "+4" */
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || v < 1) return 0;
    return (errno == ERANGE || v > PK_MAX_THREADS) ? PK_MAX_THREADS : (int)v;
}

/* A comma-separated list of core ids ("4,5") into out; the count, or -1 when malformed
 * (an empty entry, a sign, junk, more than PK_MAX_THREADS ids). */
static int parse_cores(const char* s, int* out) {
    int n = 0;
    if (!*s) return 0;
    for (;;) {
        if (*s < '0' || *s > '9' || n == PK_MAX_THREADS) return -1;
        char* end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || v > INT_MAX) return -1;
        out[n++] = (int)v;
        if (!*end) return n;
        if (*end != ',') return -1;
        s = end + 1;
    }
}

/* Cores the machine has, 0 when it cannot tell (then any id is taken). */
static int machine_cores(void) {
#ifdef _SC_NPROCESSORS_CONF
    long n = sysconf(_SC_NPROCESSORS_CONF);
    return n > 0 && n < INT_MAX ? (int)n : 0;
#else
    return 0;
#endif
}

/* Writes into buf (no pk_fail: the tuner links this file without the rest of the runtime). */
int pk_parallel_env_error(char* buf, size_t cap) {
    const char* s = getenv("PACKAGER_NUM_THREADS");
    if (s && *s && !parse_threads(s))
        return snprintf(buf, cap, "PACKAGER_NUM_THREADS='%.64s': expected a number of threads >= 1",
                        s);
    s = getenv("PACKAGER_PIN_CORES");
    int cores[PK_MAX_THREADS], have = machine_cores();
    int n = s ? parse_cores(s, cores) : 0;
    if (n < 0)
        return snprintf(buf, cap,
                        "PACKAGER_PIN_CORES='%.64s': expected a comma-separated list of at most "
                        "%d core ids, such as 0,1",
                        s, PK_MAX_THREADS);
    for (int i = 0; i < n; i++)
        if (have && cores[i] >= have)
            return snprintf(buf, cap,
                            "PACKAGER_PIN_CORES='%.64s': core %d is not on this machine (it has "
                            "cores 0-%d)",
                            s, cores[i], have - 1);
    return 0;
}

static void run_serial(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        body(ctx, i);
}

#ifndef PK_USE_THREADS

void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    run_serial(body, ctx, n);
}

int pk_parallel_threads(void) {
    return 1;
}

#else

#include <pthread.h>
#include <sched.h>

#ifndef PK_NUM_THREADS
#define PK_NUM_THREADS 1
#endif
#ifndef PK_PIN_CORES
#define PK_PIN_CORES ""
#endif

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER; /* a new job was posted */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* the last worker left */
static pthread_mutex_t owner = PTHREAD_MUTEX_INITIALIZER; /* held while a loop uses the pool */

/* The job word: job number (high 32 bits), OPEN, and how many workers entered the job
 * (low bits). A worker takes part in a job only by entering it with a compare-and-swap on
 * this word while it is open; the caller closes it once every index is handed out and
 * then waits only for the workers that entered. A worker the OS has not run yet (another
 * process on its core, a slow wake-up) thus costs the caller nothing: it finds the job
 * closed, or a newer one, when it runs. The job number in the word keeps such a late
 * worker from entering a later job with an earlier one's view. */
#define JOB_OPEN ((uint64_t)1 << 31)
#define JOB_ENTERED (JOB_OPEN - 1)

typedef struct {
    int workers;    /* threads besides the caller */
    int caller_cpu; /* the CPU the caller started the pool on, -1 if unknown */
    int cores[PK_MAX_THREADS];
    int ncores;
    uint64_t job; /* the job word (atomic) */
    void (*body)(void* ctx, int64_t i);
    void* ctx;
    int64_t n;
    int64_t next; /* next index to hand out (atomic) */
    int left;     /* workers that entered the current job and are done with it (atomic) */
} pk_pool;

static pk_pool pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static __thread int in_parallel; /* set while this thread runs loop bodies */

/* The environment's value when pk_parallel_check_env accepts it, else the board's. */
static int thread_count(void) {
    const char* s = getenv("PACKAGER_NUM_THREADS");
    int n = (s && *s) ? parse_threads(s) : 0;
    return n ? n : PK_NUM_THREADS;
}

#ifdef __linux__
/* Unpinned, worker k starts on the k-th CPU after the caller's in the process's CPU set,
 * then takes the whole set back: the scheduler may move it later, but it does not start
 * on the caller's core. Left to itself, it had at times (a run started just after
 * another process's) put both threads on one core for a whole run: tv_mobilenet_v2 at
 * 2 threads 3.9-4.9 ms in 3 of 16 runs, at its 1-thread time, against 2.6-3.0. */
static void place(int thread) {
    cpu_set_t all, one;
    if (pool.caller_cpu < 0 || sched_getaffinity(0, sizeof all, &all) != 0) return;
    int others = CPU_COUNT(&all) - CPU_ISSET(pool.caller_cpu, &all);
    if (others < 1) return;
    int skip = (thread - 1) % others, cpu = pool.caller_cpu;
    for (int seen = -1; seen < skip;) {
        cpu = (cpu + 1) % CPU_SETSIZE;
        if (cpu != pool.caller_cpu && CPU_ISSET(cpu, &all)) seen++;
    }
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0)
        pthread_setaffinity_np(pthread_self(), sizeof all, &all);
}
#endif

static void pin(int thread) {
#ifdef __linux__
    if (thread >= pool.ncores) {
        if (thread > 0) place(thread);
        return;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pool.cores[thread], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)thread;
#endif
}

/* Thread k of T owns the k-th of T contiguous ranges of the indices, the same split in
 * every loop: kernels parallelize the same outer dimension one after another (rows of an
 * image, mostly), so the rows a thread writes in one kernel are the rows it reads in the
 * next, from its own core's cache. A range is one word, its next index in the low half
 * and its end in the high half. The owner takes chunks of a quarter of what is left from
 * the front; a thread whose own range is done takes half of what is left of another's
 * from the back, so a late or slow thread's work is shared and its next indices stay its
 * own. Loops of 2^32 indices or more take chunks from one counter (run_shared). */
typedef struct {
    uint64_t word;
    char pad[56]; /* a cache line each: the owners' takes do not contend */
} pk_range;

#if defined(__GNUC__)
static pk_range ranges[PK_MAX_THREADS] __attribute__((aligned(64)));
#else
static pk_range ranges[PK_MAX_THREADS];
#endif

static void split_ranges(int64_t n, int threads) {
    for (int k = 0; k < threads; k++) {
        uint64_t lo = (uint64_t)(n * k / threads), hi = (uint64_t)(n * (k + 1) / threads);
        __atomic_store_n(&ranges[k].word, (hi << 32) | lo, __ATOMIC_RELAXED);
    }
}

/* A chunk [*lo, *hi) of range r, from its front (owner) or its back; 0 when it is empty. */
static int take(pk_range* r, int owner, int64_t* lo, int64_t* hi) {
    uint64_t w = __atomic_load_n(&r->word, __ATOMIC_RELAXED);
    for (;;) {
        uint32_t next = (uint32_t)w, end = (uint32_t)(w >> 32);
        if (next >= end) return 0;
        uint32_t left = end - next;
        uint32_t n = owner ? (left + 3) / 4 : (left + 1) / 2;
        uint64_t after = owner ? w + n : ((uint64_t)(end - n) << 32) | next;
        if (__atomic_compare_exchange_n(&r->word, &w, after, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            *lo = owner ? next : end - n;
            *hi = owner ? next + n : end;
            return 1;
        }
    }
}

static void run_ranges(void (*body)(void* ctx, int64_t i), void* ctx, int self, int threads) {
    in_parallel = 1;
    int64_t lo, hi;
    for (int j = 0; j < threads; j++) {
        pk_range* r = &ranges[(self + j) % threads];
        while (take(r, j == 0, &lo, &hi))
            for (int64_t i = lo; i < hi; i++)
                body(ctx, i);
    }
    in_parallel = 0;
}

static void run_shared(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    in_parallel = 1;
    int64_t share = 2 * (int64_t)(pool.workers + 1);
    int64_t i = __atomic_load_n(&pool.next, __ATOMIC_RELAXED);
    for (;;) {
        if (i >= n) break;
        int64_t take = (n - i) / share;
        if (take < 1) take = 1;
        if (!__atomic_compare_exchange_n(&pool.next, &i, i + take, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED))
            continue; /* another thread took indices first: i is the new next */
        for (int64_t end = i + take; i < end; i++)
            body(ctx, i);
        i = __atomic_load_n(&pool.next, __ATOMIC_RELAXED);
    }
    in_parallel = 0;
}

/* Thread ``self``'s part of the current job. */
static void run_job(int self) {
    if (pool.n <= (int64_t)UINT32_MAX)
        run_ranges(pool.body, pool.ctx, self, pool.workers + 1);
    else
        run_shared(pool.body, pool.ctx, pool.n);
}

/* Kernels follow each other within microseconds; a worker that sleeps between them
 * pays a wake-up that costs as much as a small kernel. So it spins a little first,
 * yielding now and then so that an oversubscribed machine still makes progress. */
#define PK_SPIN 4000

static void cpu_relax(int i) {
    if ((i & 63) == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield");
#endif
}

static uint32_t job_number(uint64_t w) {
    return (uint32_t)(w >> 32);
}

/* Waits for a job newer than ``seen`` and enters it; returns its number. A job found
 * closed (the others finished it first) is skipped. */
static uint32_t enter_next_job(uint32_t seen) {
    for (int i = 0;; i++) {
        uint64_t w = __atomic_load_n(&pool.job, __ATOMIC_ACQUIRE);
        if (job_number(w) != seen) {
            if (!(w & JOB_OPEN)) {
                seen = job_number(w); /* over before this worker got to it */
                i = 0;
                continue;
            }
            if (__atomic_compare_exchange_n(&pool.job, &w, w + 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE))
                return job_number(w);
            continue; /* the word changed (another worker entered, or it closed): look again */
        }
        if (i < PK_SPIN) {
            cpu_relax(i);
            continue;
        }
        pthread_mutex_lock(&mu);
        while (job_number(__atomic_load_n(&pool.job, __ATOMIC_ACQUIRE)) == seen)
            pthread_cond_wait(&work_cv, &mu);
        pthread_mutex_unlock(&mu);
        i = 0;
    }
}

static void* worker(void* arg) {
    int self = (int)(intptr_t)arg;
    pin(self);
    uint32_t seen = 0;
    for (;;) {
        seen = enter_next_job(seen);
        /* Entered: the caller waits for this worker before it changes the job. */
        run_job(self);
        /* Leave. Sequentially consistent with the caller's close and its reading of
         * ``left``: either the caller sees this worker gone, or this worker sees the job
         * closed and, if it is the last to leave, signals (under the lock: the caller
         * cannot miss it). */
        int left = __atomic_add_fetch(&pool.left, 1, __ATOMIC_SEQ_CST);
        uint64_t w = __atomic_load_n(&pool.job, __ATOMIC_SEQ_CST);
        if (!(w & JOB_OPEN) && left == (int)(w & JOB_ENTERED)) {
            pthread_mutex_lock(&mu);
            pthread_cond_signal(&done_cv);
            pthread_mutex_unlock(&mu);
        }
    }
    return NULL;
}

static void start_pool(void) {
    const char* pins = getenv("PACKAGER_PIN_CORES");
    pool.ncores = parse_cores(pins ? pins : PK_PIN_CORES, pool.cores);
    if (pool.ncores < 0) pool.ncores = 0; /* malformed: no pinning rather than a wrong one */
    int threads = thread_count();
    pin(0);
#ifdef __linux__
    pool.caller_cpu = sched_getcpu();
#else
    pool.caller_cpu = -1;
#endif
    for (int k = 1; k < threads; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void*)(intptr_t)k) != 0)
            break; /* fewer threads than asked still computes the right answer */
        pthread_detach(t);
        pool.workers++;
    }
}

int pk_parallel_threads(void) {
    pthread_once(&pool_once, start_pool);
    return pool.workers + 1;
}

void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    pthread_once(&pool_once, start_pool);
    if (n <= 1 || pool.workers == 0 || in_parallel || pthread_mutex_trylock(&owner)) {
        run_serial(body, ctx, n);
        return;
    }
    /* No worker is inside a job here (the last caller waited for those that entered), so
     * the job's fields can be written; the release store of the open word publishes them. */
    pool.body = body;
    pool.ctx = ctx;
    pool.n = n;
    __atomic_store_n(&pool.next, 0, __ATOMIC_RELAXED);
    if (n <= (int64_t)UINT32_MAX) split_ranges(n, pool.workers + 1);
    __atomic_store_n(&pool.left, 0, __ATOMIC_RELAXED);
    uint32_t number = job_number(__atomic_load_n(&pool.job, __ATOMIC_RELAXED)) + 1;
    pthread_mutex_lock(&mu);
    __atomic_store_n(&pool.job, ((uint64_t)number << 32) | JOB_OPEN, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&mu);

    run_job(0);

    /* Every index is handed out: close the job, then wait for the workers that entered. */
    uint64_t w = __atomic_load_n(&pool.job, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(&pool.job, &w, w & ~JOB_OPEN, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
    int entered = (int)(w & JOB_ENTERED);
    for (int i = 0; i < PK_SPIN && __atomic_load_n(&pool.left, __ATOMIC_SEQ_CST) < entered; i++)
        cpu_relax(i);
    if (__atomic_load_n(&pool.left, __ATOMIC_SEQ_CST) < entered) {
        pthread_mutex_lock(&mu);
        while (__atomic_load_n(&pool.left, __ATOMIC_SEQ_CST) < entered)
            pthread_cond_wait(&done_cv, &mu);
        pthread_mutex_unlock(&mu);
    }
    pthread_mutex_unlock(&owner);
}

#endif
