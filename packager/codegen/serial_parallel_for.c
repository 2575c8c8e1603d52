/* A serial pk_parallel_for, linked by the Python build helper when the real
 * runtime (c_runtime) is not part of the library: same semantics, one thread. */
#include "pk_kernel.h"

void pk_parallel_for(void (*body)(void *ctx, int64_t i), void *ctx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) body(ctx, i);
}
