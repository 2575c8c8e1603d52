/* params.bin reader: checks every field against the buffer before trusting it. Integers are
 * decoded byte by byte, so unaligned fields and the host's byte order do not matter. */
#include "pk_internal.h"

#include <stdlib.h>
#include <string.h>

#define PK_PARAMS_HEADER 24

typedef struct {
    const uint8_t* buf;
    size_t len, pos;
    int32_t index; /* tensor being read, for messages */
} pk_reader;

static int rd_bytes(pk_reader* r, size_t n, const uint8_t** p) {
    if (r->len - r->pos < n) return 0;
    *p = r->buf + r->pos;
    r->pos += n;
    return 1;
}

static int rd_uint(pk_reader* r, size_t n, uint64_t* out) {
    const uint8_t* p;
    if (!rd_bytes(r, n, &p)) return 0;
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;)
        v = (v << 8) | p[i];
    *out = v;
    return 1;
}

static pk_status truncated(const pk_reader* r, const char* field) {
    return pk_fail(PK_ERR_FORMAT, "params.bin: tensor %d: file truncated in %s (offset %zu)",
                   (int)r->index, field, r->pos);
}

static pk_status read_record(pk_reader* r, pk_param* t, size_t* data_end) {
    uint64_t v, offset, size;
    const uint8_t* name;
    if (!rd_uint(r, 2, &v)) return truncated(r, "name length");
    if (!rd_bytes(r, (size_t)v, &name)) return truncated(r, "name");
    t->name = (const char*)name;
    t->name_len = (size_t)v;
    if (!rd_uint(r, 1, &v)) return truncated(r, "dtype");
    const pk_dtype_desc* dt = pk_dtype_by_code((int32_t)v);
    if (!dt)
        return pk_fail(PK_ERR_FORMAT, "params.bin: tensor %d '%.*s': unknown dtype code %d",
                       (int)r->index, (int)t->name_len, t->name, (int)v);
    t->dtype = (int32_t)dt->code;
    if (!rd_uint(r, 1, &v)) return truncated(r, "ndim");
    if (v > PK_MAX_NDIM)
        return pk_fail(PK_ERR_FORMAT, "params.bin: tensor %d '%.*s': ndim %d over limit %d",
                       (int)r->index, (int)t->name_len, t->name, (int)v, PK_MAX_NDIM);
    t->ndim = (int32_t)v;
    for (int32_t i = 0; i < t->ndim; i++) {
        if (!rd_uint(r, 8, &v)) return truncated(r, "dims");
        t->shape[i] = (int64_t)v;
    }
    if (!rd_uint(r, 8, &offset)) return truncated(r, "data offset");
    if (!rd_uint(r, 8, &size)) return truncated(r, "data size");
    size_t want;
    if (!pk_shape_bytes(t->shape, t->ndim, dt->size, &want))
        return pk_fail(PK_ERR_FORMAT, "params.bin: tensor %d '%.*s': negative dim or size overflow",
                       (int)r->index, (int)t->name_len, t->name);
    if (size != want)
        return pk_fail(PK_ERR_FORMAT,
                       "params.bin: tensor %d '%.*s': data size %llu, shape needs %zu",
                       (int)r->index, (int)t->name_len, t->name, (unsigned long long)size, want);
    if (offset % PK_ALIGN != 0 || offset < *data_end || offset > r->len || size > r->len - offset)
        return pk_fail(PK_ERR_FORMAT,
                       "params.bin: tensor %d '%.*s': data at offset %llu size %llu is "
                       "misaligned, overlaps earlier data or is past the end (%zu bytes)",
                       (int)r->index, (int)t->name_len, t->name, (unsigned long long)offset,
                       (unsigned long long)size, r->len);
    t->data = r->buf + offset;
    t->bytes = (size_t)size;
    *data_end = (size_t)(offset + size);
    return PK_OK;
}

/* Names must be unique so a param node names exactly one tensor. Quadratic, but run once
 * per load on tens to thousands of names. */
static pk_status check_unique(const pk_param* t, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < i; j++)
            if (t[i].name_len == t[j].name_len && memcmp(t[i].name, t[j].name, t[i].name_len) == 0)
                return pk_fail(PK_ERR_FORMAT, "params.bin: tensors %d and %d share name '%.*s'",
                               (int)j, (int)i, (int)t[i].name_len, t[i].name);
    return PK_OK;
}

pk_status pk_params_parse(const uint8_t* buf, size_t len, pk_param** out, int32_t* count) {
    pk_reader r = {buf, len, 0, -1};
    const uint8_t* magic;
    uint64_t version, n, total;
    *out = NULL;
    *count = 0;
    if (!rd_bytes(&r, 8, &magic) || !rd_uint(&r, 4, &version) || !rd_uint(&r, 4, &n) ||
        !rd_uint(&r, 8, &total))
        return pk_fail(PK_ERR_FORMAT, "params.bin: %zu bytes is shorter than the header", len);
    if (memcmp(magic, "PKPARAMS", 8) != 0)
        return pk_fail(PK_ERR_FORMAT, "params.bin: bad magic (not a params file)");
    if (version != 1)
        return pk_fail(PK_ERR_FORMAT, "params.bin: version %llu, expected 1",
                       (unsigned long long)version);
    if (total != len)
        return pk_fail(PK_ERR_FORMAT, "params.bin: header says %llu bytes, file has %zu",
                       (unsigned long long)total, len);
    /* Each record takes at least 2+1+1+8+8 bytes: bounds n before allocating for it. */
    if (n > (len - PK_PARAMS_HEADER) / 20 || n > INT32_MAX)
        return pk_fail(PK_ERR_FORMAT, "params.bin: tensor count %llu does not fit the file",
                       (unsigned long long)n);
    pk_param* t = calloc(n ? (size_t)n : 1, sizeof *t);
    if (!t)
        return pk_fail(PK_ERR_NOMEM, "params.bin: no memory for %llu tensors",
                       (unsigned long long)n);
    size_t data_end = 0;
    pk_status s = PK_OK;
    for (r.index = 0; s == PK_OK && r.index < (int32_t)n; r.index++)
        s = read_record(&r, &t[r.index], &data_end);
    for (int32_t i = 0; s == PK_OK && i < (int32_t)n; i++)
        if ((const uint8_t*)t[i].data < buf + r.pos && t[i].bytes > 0)
            s = pk_fail(PK_ERR_FORMAT, "params.bin: tensor %d data overlaps the table", (int)i);
    if (s == PK_OK) s = check_unique(t, (int32_t)n);
    if (s) {
        free(t);
        return s;
    }
    *out = t;
    *count = (int32_t)n;
    return PK_OK;
}
