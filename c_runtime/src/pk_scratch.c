/* pk_scratch_alloc / pk_scratch_free: the large temporaries of generated kernels (a padded
 * input, Winograd's transformed tiles).
 *
 * A freed block is kept for the next call instead of going back to the C library, which
 * may hand it to the OS: the next call then takes a page fault per 4 KiB page it touches
 * (ResNet-18's 56x56 Winograd conv, 3.6 MB of temporaries, ran in 1.5 ms instead of 0.6 ms
 * on 2 threads). At most PK_SCRATCH_SLOTS blocks are kept, the largest ones;
 * pk_scratch_release() frees them (pk_graph_destroy calls it).
 *
 * A spin lock guards the slots (no pthreads: single-thread bundles link without them):
 * kernels allocate outside their parallel loops, so it is contended only when two graphs
 * run at once. Blocks of PK_HUGE_MIN bytes or more are mapped on huge pages where the
 * system has them (pk_huge_map, below), the rest come from malloc.
 */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS, madvise */
#endif
#include "pk_kernel.h"

#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* Huge pages, below; pk_aligned_alloc's large blocks use them too (pk_internal.h declares
 * the three for pk_mem.c; this file is also compiled alone, without that header). */
#define PK_HUGE_MIN ((size_t)2 << 20) /* smaller blocks stay with malloc */
#define PK_HUGE_HEADER 64             /* before the pointer: 64-byte alignment kept */
void pk_huge_tag(void* p, const void* raw, size_t length);
void* pk_huge_map(size_t bytes);
int pk_huge_unmap(void* p);

#define PK_SCRATCH_SLOTS 8
/* holds the size, then pk_huge_tag's words; the block keeps malloc's alignment */
#define PK_SCRATCH_HEADER PK_HUGE_HEADER

typedef struct {
    void* base; /* the block's header (PK_SCRATCH_HEADER bytes before it); NULL: empty */
    size_t size;
} pk_slot;

static pk_slot slots[PK_SCRATCH_SLOTS];
static char lock_flag;

static void lock(void) {
    while (__atomic_test_and_set(&lock_flag, __ATOMIC_ACQUIRE)) {
    }
}

static void unlock(void) {
    __atomic_clear(&lock_flag, __ATOMIC_RELEASE);
}

static void* user_ptr(void* base) {
    return (char*)base + PK_SCRATCH_HEADER;
}

void* pk_scratch_alloc(size_t bytes) {
    int best = -1;
    lock();
    for (int k = 0; k < PK_SCRATCH_SLOTS; k++) {
        if (slots[k].base && slots[k].size >= bytes &&
            (best < 0 || slots[k].size < slots[best].size))
            best = k;
    }
    void* base = NULL;
    if (best >= 0) {
        base = slots[best].base;
        slots[best].base = NULL;
    }
    unlock();
    if (base) return user_ptr(base);
    void* p = pk_huge_map(bytes);
    if (p) {
        base = (char*)p - PK_SCRATCH_HEADER;
    } else {
        if (bytes > (size_t)-1 - PK_SCRATCH_HEADER) return NULL;
        base = malloc(bytes + PK_SCRATCH_HEADER);
        if (!base) return NULL;
        pk_huge_tag(user_ptr(base), NULL, 0);
    }
    *(size_t*)base = bytes;
    return user_ptr(base);
}

/* Large blocks on transparent huge pages: the kernels' temporaries here, params and tensor
 * memory through pk_aligned_alloc (pk_mem.c).
 *
 * A block of PK_HUGE_MIN bytes or more is its own anonymous mapping, starting 64 bytes
 * past a 2 MiB boundary and advised MADV_HUGEPAGE, so Linux backs it with 2 MiB pages
 * where its transparent huge pages are "always" or "madvise" (the common default; malloc's
 * blocks stay on 4 KiB pages there). A model's weights and activations are read in long
 * streams: on 4 KiB pages every 4 KiB of them costs a TLB entry (ResNet-18's 59 MB of
 * params are 14,500 pages; a Zen 3's L2 TLB holds 2,048).
 * Measured on a Zen 3 (AVX2, 1 thread, run_bundle --repeat 15-30 pinned to one core, the
 * old and new runtime's processes alternated 12-20 times, median of the pairs' ratios):
 * tv_resnet18 0.958x its time (medians 33.4 -> 31.7 ms), tv_mobilenet_v2 0.941x (8.58 ->
 * 7.94 ms; its slowest run 11.4 -> 10.6 ms), its int8 build, 3.5 MB of params, 1.005x.
 * Elsewhere (no MADV_HUGEPAGE, a kernel without THP, a failed mapping) the callers fall
 * back to malloc.
 *
 * The 16 bytes just before a block's pointer say where it came from: {mapping, length}
 * from pk_huge_map, {whatever the caller keeps, 0} for the caller's malloc'd blocks.
 */
#define PK_HUGE_PAGE ((size_t)2 << 20)

#if defined(__linux__) && defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
#define PK_HUGE_PAGES 1
#endif

/* {mapping or caller's word, mapping length or 0}, just before p. */
void pk_huge_tag(void* p, const void* raw, size_t length) {
    uintptr_t words[2] = {(uintptr_t)raw, (uintptr_t)length};
    memcpy((unsigned char*)p - sizeof words, words, sizeof words);
}

static size_t pk_huge_length(const void* p) {
    uintptr_t words[2];
    memcpy(words, (const unsigned char*)p - sizeof words, sizeof words);
    return (size_t)words[1];
}

/* A zeroed block of `bytes` with PK_HUGE_HEADER bytes before it, on huge pages; NULL when
 * it is under PK_HUGE_MIN or cannot be mapped (the caller then uses malloc). */
void* pk_huge_map(size_t bytes) {
#ifdef PK_HUGE_PAGES
    if (bytes < PK_HUGE_MIN || bytes > SIZE_MAX - PK_HUGE_HEADER - PK_HUGE_PAGE) return NULL;
    size_t length = bytes + PK_HUGE_HEADER + PK_HUGE_PAGE;
    void* raw = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t base = ((uintptr_t)raw + PK_HUGE_PAGE - 1) & ~(uintptr_t)(PK_HUGE_PAGE - 1);
    /* The block's whole huge pages only: its tail keeps 4 KiB pages, so it holds no more
     * memory than on 4 KiB pages. Advice only: a kernel without THP refuses it. */
    size_t whole = (PK_HUGE_HEADER + bytes) & ~(PK_HUGE_PAGE - 1);
    (void)madvise((void*)base, whole, MADV_HUGEPAGE);
    void* p = (unsigned char*)base + PK_HUGE_HEADER;
    pk_huge_tag(p, raw, length);
    return p;
#else
    (void)bytes;
    return NULL;
#endif
}

/* Unmaps a block of pk_huge_map and returns 1; 0 (nothing done) for a block it did not map. */
int pk_huge_unmap(void* p) {
#ifdef PK_HUGE_PAGES
    size_t length = pk_huge_length(p);
    if (!length) return 0;
    uintptr_t words[2];
    memcpy(words, (unsigned char*)p - sizeof words, sizeof words);
    munmap((void*)words[0], length);
    return 1;
#else
    (void)p;
    return 0;
#endif
}

/* A block back to where it came from (its header's base). */
static void release(void* base) {
    if (base && !pk_huge_unmap(user_ptr(base))) free(base);
}

void pk_scratch_free(void* p) {
    if (!p) return;
    void* base = (char*)p - PK_SCRATCH_HEADER;
    size_t size = *(size_t*)base;
    int slot = -1;
    lock();
    for (int k = 0; k < PK_SCRATCH_SLOTS; k++) {
        if (!slots[k].base) {
            slot = k;
            break;
        }
        if (slots[k].size < size && (slot < 0 || slots[k].size < slots[slot].size)) slot = k;
    }
    void* evicted = NULL;
    if (slot >= 0) {
        evicted = slots[slot].base;
        slots[slot].base = base;
        slots[slot].size = size;
    } else {
        evicted = base; /* every kept block is larger */
    }
    unlock();
    release(evicted);
}

void pk_scratch_release(void) {
    void* kept[PK_SCRATCH_SLOTS];
    lock();
    for (int k = 0; k < PK_SCRATCH_SLOTS; k++) {
        kept[k] = slots[k].base;
        slots[k].base = NULL;
    }
    unlock();
    for (int k = 0; k < PK_SCRATCH_SLOTS; k++)
        release(kept[k]);
}
