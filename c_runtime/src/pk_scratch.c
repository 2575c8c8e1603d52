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
 * run at once.
 */
#include "pk_kernel.h"

#define PK_SCRATCH_SLOTS 8
#define PK_SCRATCH_HEADER 64 /* holds the size; the block keeps malloc's alignment */

typedef struct {
    void* base; /* what malloc returned; NULL if the slot is empty */
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
    if (bytes > (size_t)-1 - PK_SCRATCH_HEADER) return NULL;
    base = malloc(bytes + PK_SCRATCH_HEADER);
    if (!base) return NULL;
    *(size_t*)base = bytes;
    return user_ptr(base);
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
    free(evicted);
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
        free(kept[k]);
}
