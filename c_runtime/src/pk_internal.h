/* pk_internal.h - shared between the runtime's source files; not installed for users. */
#ifndef PK_INTERNAL_H
#define PK_INTERNAL_H

#include "pk_kernel.h"
#include "pk_runtime.h"

#include <stddef.h>
#include <stdint.h>

#define PK_ALIGN 64
#define PK_MAX_JSON_BYTES ((size_t)64 << 20) /* keeps offsets and token counts in int32 */
#define PK_MAX_JSON_DEPTH 64

#if defined(__GNUC__)
#define PK_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PK_PRINTF(a, b)
#endif

/* ---- errors (pk_error.c) ---- */
/* Records a message for pk_last_error() and returns `s`, so callers can `return pk_fail(..)`. */
pk_status pk_fail(pk_status s, const char* fmt, ...) PK_PRINTF(2, 3);

/* ---- threads (pk_parallel.c) ---- */
/* When PACKAGER_NUM_THREADS or PACKAGER_PIN_CORES is malformed or names a core the machine
 * does not have: a message naming the variable and its value in buf, and non-zero. */
int pk_parallel_env_error(char* buf, size_t cap);
/* Threads that run parallel loops (the caller included), starting the pool if need be. */
int pk_parallel_threads(void);

/* ---- dtypes (pk_dtype.c) ---- */
typedef struct {
    pk_dtype code;
    const char* name; /* as in graph.json */
    size_t size;      /* bytes per element */
    const char* npy;  /* numpy descr, little-endian */
    int is_float;
} pk_dtype_desc;

const pk_dtype_desc* pk_dtype_by_code(int32_t code);
const pk_dtype_desc* pk_dtype_by_name(const char* name);
const pk_dtype_desc* pk_dtype_by_npy(const char* descr);

/* Overflow-checked element count and byte size of a shape; 0 on overflow or negative dim. */
int pk_shape_bytes(const int64_t* shape, int32_t ndim, size_t elem_size, size_t* bytes);
size_t pk_align_up(size_t n); /* to PK_ALIGN; caller ensures no overflow */

/* ---- memory (pk_mem.c) ---- */
void* pk_aligned_alloc(size_t bytes); /* 64-aligned, zeroed; free with pk_aligned_free */
void pk_aligned_free(void* p);
/* Blocks on huge pages (pk_scratch.c): pk_huge_map gives a zeroed one of at least 2 MiB, or
 * NULL (then use malloc, and pk_huge_tag(p, raw, 0) the 16 bytes before it); pk_huge_unmap
 * unmaps one of its blocks and returns 1, or returns 0 for a tagged malloc'd one. */
void pk_huge_tag(void* p, const void* raw, size_t length);
void* pk_huge_map(size_t bytes);
int pk_huge_unmap(void* p);
/* Reads a whole regular file into a 64-aligned buffer with one spare NUL byte after the
 * data. Directories, FIFOs and devices are refused without reading (PK_ERR_IO). */
pk_status pk_read_file(const char* path, void** data, size_t* len);
/* The last 200 characters of a path, for messages: a long path must leave room for the
 * reason after it in the 1024-byte message buffer. */
const char* pk_short_path(const char* path);
/* PK_OK if path names a regular file, else PK_ERR_IO with a message saying what it is. */
pk_status pk_check_regular_file(const char* path);

/* ---- JSON (pk_json.c) ---- */
typedef enum { PJ_NULL, PJ_BOOL, PJ_NUM, PJ_STR, PJ_ARR, PJ_OBJ } pj_type;

typedef struct {
    int32_t type;
    int32_t start; /* byte offset of the token's text (strings: after the quote) */
    int32_t len;   /* byte length of that text (strings: without quotes, escapes raw) */
    int32_t count; /* arrays: elements, objects: key/value pairs */
    int32_t next;  /* index of the token after this whole subtree */
} pj_tok;

typedef struct {
    const char* src;
    const char* what; /* file name for messages */
    pj_tok* toks;
    int32_t ntok, cap;
} pj_doc;

/* Parses one JSON value (RFC 8259, no duplicate-key check) into d->toks; tokens are stored
 * in document order, so the first child of token t is t + 1. */
pk_status pj_parse(pj_doc* d, const char* src, size_t len, const char* what);
void pj_free(pj_doc* d);
int32_t pj_get(const pj_doc* d, int32_t obj, const char* key); /* value token or -1 */
int pj_int(const pj_doc* d, int32_t t, int64_t* out);          /* 0 if not an integer */
int pj_double(const pj_doc* d, int32_t t, double* out);        /* 0 if not a number */
int pj_streq(const pj_doc* d, int32_t t, const char* s);
char* pj_strdup(const pj_doc* d, int32_t t); /* decoded, NUL-terminated; NULL if not string */

/* ---- params.bin (pk_params.c) ---- */
typedef struct {
    const char* name; /* not NUL-terminated */
    size_t name_len;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[PK_MAX_NDIM];
    const void* data;
    size_t bytes;
} pk_param;

/* Parses and checks the table of params.bin; entries point into `buf`. */
pk_status pk_params_parse(const uint8_t* buf, size_t len, pk_param** out, int32_t* count);
#endif
