/* pk_parallel_for: the parallel loop generated kernels call.
 *
 * Built with PK_USE_THREADS it runs on a pool of POSIX threads started on first use; built
 * without, it is a plain loop and the bundle needs no pthreads (single-core boards, targets
 * without threads).
 *
 * Thread count: PACKAGER_NUM_THREADS from the environment, else PK_NUM_THREADS (from the board
 * profile's cores), else 1. Pinning: PACKAGER_PIN_CORES or PK_PIN_CORES, a comma-separated
 * list of core ids ("4,5" for the big cores of a big.LITTLE board); thread k (the caller is
 * thread 0) runs on the k-th listed core.
 *
 * Workers spin briefly for the next job before sleeping (kernels come microseconds apart).
 * Work is handed out one index at a time through an atomic counter: kernels parallelize
 * outer loops whose iterations are large, so the counter is cheap next to the work, and
 * uneven iterations balance themselves. A parallel loop inside a parallel loop, or one
 * started while another thread owns the pool, runs serially in the calling thread.
 */
#if defined(PK_USE_THREADS) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* pthread_setaffinity_np */
#endif
#include "pk_kernel.h"

static void run_serial(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        body(ctx, i);
}

#ifndef PK_USE_THREADS

void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    run_serial(body, ctx, n);
}

#else

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#ifndef PK_NUM_THREADS
#define PK_NUM_THREADS 1
#endif
#ifndef PK_PIN_CORES
#define PK_PIN_CORES ""
#endif
#define PK_MAX_THREADS 256

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER; /* a new job was posted */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER; /* the last worker is done */
static pthread_mutex_t owner = PTHREAD_MUTEX_INITIALIZER; /* held while a loop uses the pool */

typedef struct {
    int workers; /* threads besides the caller */
    int cores[PK_MAX_THREADS];
    int ncores;
    unsigned long generation;
    void (*body)(void* ctx, int64_t i);
    void* ctx;
    int64_t n;
    int64_t next; /* next index to hand out (atomic) */
    int active;   /* workers not done with the current job */
} pk_pool;

static pk_pool pool;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static __thread int in_parallel; /* set while this thread runs loop bodies */

static int env_int(const char* name, int fallback) {
    const char* s = getenv(name);
    if (!s || !*s) return fallback;
    char* end;
    long v = strtol(s, &end, 10);
    return (*end || v < 1) ? fallback : (int)(v > PK_MAX_THREADS ? PK_MAX_THREADS : v);
}

static int parse_cores(const char* s, int* out) {
    int n = 0;
    while (s && *s && n < PK_MAX_THREADS) {
        char* end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0) return 0; /* malformed: no pinning rather than a wrong one */
        out[n++] = (int)v;
        s = (*end == ',') ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return n;
}

static void pin(int thread) {
#ifdef __linux__
    if (thread >= pool.ncores) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pool.cores[thread], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
    (void)thread;
#endif
}

static void run_chunks(void) {
    in_parallel = 1;
    for (;;) {
        int64_t i = __atomic_fetch_add(&pool.next, 1, __ATOMIC_RELAXED);
        if (i >= pool.n) break;
        pool.body(pool.ctx, i);
    }
    in_parallel = 0;
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

static unsigned long next_job(unsigned long seen) {
    for (int i = 0; i < PK_SPIN; i++) {
        unsigned long g = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
        if (g != seen) return g;
        cpu_relax(i);
    }
    pthread_mutex_lock(&mu);
    while (__atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE) == seen)
        pthread_cond_wait(&work_cv, &mu);
    pthread_mutex_unlock(&mu);
    return __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
}

static void* worker(void* arg) {
    pin((int)(intptr_t)arg);
    unsigned long seen = 0;
    for (;;) {
        seen = next_job(seen);
        run_chunks();
        if (__atomic_sub_fetch(&pool.active, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&mu); /* under the lock: the caller cannot miss the signal */
            pthread_cond_signal(&done_cv);
            pthread_mutex_unlock(&mu);
        }
    }
    return NULL;
}

static void start_pool(void) {
    const char* pins = getenv("PACKAGER_PIN_CORES");
    pool.ncores = parse_cores(pins ? pins : PK_PIN_CORES, pool.cores);
    int threads = env_int("PACKAGER_NUM_THREADS", PK_NUM_THREADS);
    pin(0);
    for (int k = 1; k < threads; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, (void*)(intptr_t)k) != 0)
            break; /* fewer threads than asked still computes the right answer */
        pthread_detach(t);
        pool.workers++;
    }
}

void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    pthread_once(&pool_once, start_pool);
    if (n <= 1 || pool.workers == 0 || in_parallel || pthread_mutex_trylock(&owner)) {
        run_serial(body, ctx, n);
        return;
    }
    pool.body = body;
    pool.ctx = ctx;
    pool.n = n;
    pool.next = 0;
    pool.active = pool.workers;
    pthread_mutex_lock(&mu);
    __atomic_add_fetch(&pool.generation, 1, __ATOMIC_RELEASE); /* publishes the job */
    pthread_cond_broadcast(&work_cv);
    pthread_mutex_unlock(&mu);

    run_chunks();

    for (int i = 0; i < PK_SPIN && __atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0; i++)
        cpu_relax(i);
    pthread_mutex_lock(&mu);
    while (__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0)
        pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_unlock(&owner);
}

#endif
