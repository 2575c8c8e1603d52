/* The dtype table: one row per dtype, so code, name, size and npy descr never disagree. */
#include "pk_internal.h"

#include <string.h>

static const pk_dtype_desc pk_dtypes[] = {
    {PK_FLOAT32, "float32", 4, "<f4", 1}, {PK_FLOAT64, "float64", 8, "<f8", 1},
    {PK_INT8, "int8", 1, "|i1", 0},       {PK_INT16, "int16", 2, "<i2", 0},
    {PK_INT32, "int32", 4, "<i4", 0},     {PK_INT64, "int64", 8, "<i8", 0},
    {PK_UINT8, "uint8", 1, "|u1", 0},     {PK_UINT16, "uint16", 2, "<u2", 0},
    {PK_UINT32, "uint32", 4, "<u4", 0},   {PK_UINT64, "uint64", 8, "<u8", 0},
    {PK_BOOL, "bool", 1, "|b1", 0},
};
#define PK_NUM_DTYPES ((int32_t)(sizeof pk_dtypes / sizeof pk_dtypes[0]))

const pk_dtype_desc* pk_dtype_by_code(int32_t code) {
    if (code < 1 || code > PK_NUM_DTYPES) return NULL;
    return &pk_dtypes[code - 1];
}

const pk_dtype_desc* pk_dtype_by_name(const char* name) {
    for (int32_t i = 0; i < PK_NUM_DTYPES; i++)
        if (strcmp(pk_dtypes[i].name, name) == 0) return &pk_dtypes[i];
    return NULL;
}

const pk_dtype_desc* pk_dtype_by_npy(const char* descr) {
    for (int32_t i = 0; i < PK_NUM_DTYPES; i++) {
        const char* want = pk_dtypes[i].npy;
        /* numpy writes '|' for one-byte types but accepts '<' and '='; so do we. */
        if (strcmp(want + 1, descr + (descr[0] ? 1 : 0)) != 0) continue;
        if (descr[0] == want[0] || descr[0] == '=' || (want[0] == '|' && descr[0] == '<'))
            return &pk_dtypes[i];
    }
    return NULL;
}

const char* pk_dtype_name(pk_dtype d) {
    const pk_dtype_desc* desc = pk_dtype_by_code((int32_t)d);
    return desc ? desc->name : "?";
}

int pk_shape_bytes(const int64_t* shape, int32_t ndim, size_t elem_size, size_t* bytes) {
    /* Bound by INT64_MAX as well as SIZE_MAX so sizes fit every integer type we use. */
    uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX : SIZE_MAX;
    uint64_t n = elem_size;
    int zero = 0;
    for (int32_t i = 0; i < ndim; i++) {
        if (shape[i] < 0) return 0;
        if (shape[i] == 0)
            zero = 1;
        else if (n > limit / (uint64_t)shape[i])
            return 0;
        else
            n *= (uint64_t)shape[i];
    }
    if (n > limit - PK_ALIGN) return 0; /* leaves room to round up to the alignment */
    *bytes = zero ? 0 : (size_t)n;
    return 1;
}

size_t pk_align_up(size_t n) {
    return (n + (PK_ALIGN - 1)) & ~(size_t)(PK_ALIGN - 1);
}
