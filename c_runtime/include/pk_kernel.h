/* pk_kernel.h - what generated kernels and kernels/registry.c include. */
#ifndef PK_KERNEL_H
#define PK_KERNEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* args: buffers of the node's inputs in order, then of its outputs. Returns 0, or non-zero
 * when the data make the computation impossible. */
typedef int32_t (*pk_kernel_fn)(void* const* args);

typedef struct {
    const char* name;
    pk_kernel_fn fn;
} pk_kernel_entry;

/* Defined by kernels/registry.c. The runtime bisects when the table is sorted by strcmp
 * order of names (the packager writes it so) and scans linearly otherwise. */
extern const pk_kernel_entry pk_kernel_table[];
extern const int32_t pk_kernel_count;

/* Calls body(ctx, i) for every i in [0, n), in any order and possibly concurrently:
 * iterations must be independent. */
void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n);

/* A kernel's large temporary (NULL when out of memory), and giving it back: the runtime
 * keeps a few freed blocks for the next call (src/pk_scratch.c). */
void* pk_scratch_alloc(size_t bytes);
void pk_scratch_free(void* p);
/* Frees the kept blocks (pk_graph_destroy calls it). */
void pk_scratch_release(void);

#ifdef __cplusplus
}
#endif
#endif
