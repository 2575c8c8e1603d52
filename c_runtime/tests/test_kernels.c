/* Kernel table for the runtime tests: fixed-size float32 kernels on 4 elements. */
#include "pk_kernel.h"

static int32_t k_add4(void* const* args) {
    const float* a = args[0];
    const float* b = args[1];
    float* y = args[2];
    for (int i = 0; i < 4; i++)
        y[i] = a[i] + b[i];
    return 0;
}

typedef struct {
    const float* x;
    float* y;
} relu_ctx;

static void relu_body(void* ctx, int64_t i) {
    relu_ctx* c = ctx;
    c->y[i] = c->x[i] > 0 ? c->x[i] : 0;
}

static int32_t k_relu4(void* const* args) {
    relu_ctx c = {args[0], args[1]};
    pk_parallel_for(relu_body, &c, 4);
    return 0;
}

/* Fails when its first input element is negative, as a data-dependent kernel would. */
static int32_t k_check4(void* const* args) {
    const float* a = args[0];
    float* y = args[1];
    memcpy(y, a, 4 * sizeof *a);
    return a[0] < 0 ? 7 : 0;
}

/* One bool: whether the first element is below 10 (a loop's data-dependent condition). */
static int32_t k_less4(void* const* args) {
    const float* a = args[0];
    *(unsigned char*)args[1] = a[0] < 10;
    return 0;
}

const pk_kernel_entry pk_kernel_table[] = {
    {"k_add4", k_add4, "float32[4] float32[4] float32[4]"},
    {"k_check4", k_check4, "float32[4] float32[4]"},
    {"k_less4", k_less4, "float32[4] bool[]"},
    {"k_relu4", k_relu4, "float32[4] float32[4]"},
    {0, 0, 0},
};
const int32_t pk_kernel_count = 4;

#ifdef PK_OPENCL /* a runtime with the OpenCL backend also needs the (here empty) OpenCL table */
const pk_cl_kernel_entry pk_cl_kernel_table[] = {{0, 0, {0, 0, 0}, {0, 0, 0}}};
const int32_t pk_cl_kernel_count = 0;
const char pk_cl_program_source[] = "";
#endif
