/* pk_parallel_for: serial for now; a thread pool replaces this file later without changing
 * the signature generated kernels call. */
#include "pk_kernel.h"

void pk_parallel_for(void (*body)(void* ctx, int64_t i), void* ctx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        body(ctx, i);
}
