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

/* A kernel function and its signature: one "dtype[d0,d1,...]" per argument (inputs, then
 * outputs), separated by single spaces, e.g. "float32[1,3,8,8] float32[4] float32[1,4,6,6]";
 * a scalar is "float32[]". The runtime checks every node calling `fn` against it at load. */
typedef struct {
    const char* name;
    pk_kernel_fn fn;
    const char* signature;
} pk_kernel_entry;

/* Defined by kernels/registry.c: pk_kernel_count entries sorted by strcmp order of names
 * (the runtime bisects; it scans linearly if they are not sorted), then a {0, 0, 0}
 * sentinel. A table whose sentinel is not at pk_kernel_count, or with duplicate names or
 * a missing function or signature, is refused at load. */
extern const pk_kernel_entry pk_kernel_table[];
extern const int32_t pk_kernel_count;

/* An OpenCL kernel of kernels/program.cl (bundles with OpenCL kernels only): its name, its
 * signature (as above) and its launch: global = work-items per dimension (a multiple of
 * local), local all 0 = the driver chooses; unused dimensions are 1. Kernel argument k takes
 * two OpenCL parameters: `__global T* NAME_base` (a cl_mem) and `const ulong NAME_off` (the
 * element offset of the tensor in it). */
typedef struct {
    const char* name;
    const char* signature;
    uint32_t global[3];
    uint32_t local[3];
} pk_cl_kernel_entry;

/* Defined by kernels/registry.c when the bundle has OpenCL kernels: sorted by name, then a
 * {0, 0, {0, 0, 0}, {0, 0, 0}} sentinel at pk_cl_kernel_count; the program's source. */
extern const pk_cl_kernel_entry pk_cl_kernel_table[];
extern const int32_t pk_cl_kernel_count;
extern const char pk_cl_program_source[];

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
