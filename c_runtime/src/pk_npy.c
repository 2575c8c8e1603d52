/* .npy reader and writer. The header is a Python dict literal; we parse just the subset
 * numpy writes (strings, True/False, tuples of integers) with a bounded cursor. */
#include "pk_npy.h"
#include "pk_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char* s;
    size_t len, pos;
} cursor;

static void skip_ws(cursor* c) {
    while (c->pos < c->len && strchr(" \t\r\n", c->s[c->pos]) && c->s[c->pos])
        c->pos++;
}

static int eat(cursor* c, char ch) {
    skip_ws(c);
    if (c->pos < c->len && c->s[c->pos] == ch) {
        c->pos++;
        return 1;
    }
    return 0;
}

/* A quoted string without escapes (numpy never writes any) into out[cap]. */
static int read_str(cursor* c, char* out, size_t cap) {
    skip_ws(c);
    if (c->pos >= c->len || (c->s[c->pos] != '\'' && c->s[c->pos] != '"')) return 0;
    char q = c->s[c->pos++];
    size_t n = 0;
    while (c->pos < c->len && c->s[c->pos] != q) {
        if (n + 1 >= cap || c->s[c->pos] == '\\') return 0;
        out[n++] = c->s[c->pos++];
    }
    if (c->pos >= c->len) return 0;
    c->pos++;
    out[n] = 0;
    return 1;
}

static int read_word(cursor* c, const char* w) {
    size_t n = strlen(w);
    skip_ws(c);
    if (c->len - c->pos < n || memcmp(c->s + c->pos, w, n) != 0) return 0;
    c->pos += n;
    return 1;
}

static int read_dim(cursor* c, int64_t* v) {
    skip_ws(c);
    size_t start = c->pos;
    *v = 0;
    while (c->pos < c->len && c->s[c->pos] >= '0' && c->s[c->pos] <= '9') {
        int d = c->s[c->pos++] - '0';
        if (*v > (INT64_MAX - d) / 10) return 0;
        *v = *v * 10 + d;
    }
    if (c->pos < c->len && c->s[c->pos] == 'L') c->pos++; /* Python 2 longs */
    return c->pos > start;
}

/* "(2, 3)", "(5,)" or "()". */
static int read_shape(cursor* c, pk_npy* out) {
    if (!eat(c, '(')) return 0;
    out->ndim = 0;
    while (!eat(c, ')')) {
        if (out->ndim == PK_MAX_NDIM || !read_dim(c, &out->shape[out->ndim++])) return 0;
        if (!eat(c, ',')) return eat(c, ')');
    }
    return 1;
}

static pk_status parse_header(cursor* c, const char* what, pk_npy* out) {
    char key[32], descr[16] = "";
    int fortran = -1, have_shape = 0;
    if (!eat(c, '{')) return pk_fail(PK_ERR_FORMAT, "%s: npy header is not a dict", what);
    while (!eat(c, '}')) {
        if (!read_str(c, key, sizeof key) || !eat(c, ':'))
            return pk_fail(PK_ERR_FORMAT, "%s: bad npy header key", what);
        int ok;
        if (!strcmp(key, "descr"))
            ok = read_str(c, descr, sizeof descr);
        else if (!strcmp(key, "fortran_order")) {
            fortran = read_word(c, "True") ? 1 : read_word(c, "False") ? 0 : -1;
            ok = fortran >= 0;
        } else if (!strcmp(key, "shape"))
            ok = have_shape = read_shape(c, out);
        else
            return pk_fail(PK_ERR_FORMAT, "%s: unknown npy header key '%s'", what, key);
        if (!ok) return pk_fail(PK_ERR_FORMAT, "%s: bad npy header value for '%s'", what, key);
        if (!eat(c, ',')) {
            if (!eat(c, '}')) return pk_fail(PK_ERR_FORMAT, "%s: bad npy header dict", what);
            break;
        }
    }
    if (!descr[0] || fortran < 0 || !have_shape)
        return pk_fail(PK_ERR_FORMAT, "%s: npy header lacks descr, fortran_order or shape", what);
    out->fortran_order = fortran;
    if (descr[0] == '>')
        return pk_fail(PK_ERR_FORMAT, "%s: big-endian dtype '%s' is not supported", what, descr);
    const pk_dtype_desc* dt = pk_dtype_by_npy(descr);
    if (!dt) return pk_fail(PK_ERR_FORMAT, "%s: unsupported npy dtype '%s'", what, descr);
    out->dtype = dt->code;
    return PK_OK;
}

pk_status pk_npy_parse(const void* buf, size_t len, const char* what, pk_npy* out) {
    const unsigned char* b = buf;
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return pk_fail(PK_ERR_FORMAT, "%s: not an .npy file", what);
    if (b[6] < 1 || b[6] > 3)
        return pk_fail(PK_ERR_FORMAT, "%s: unsupported npy version %d", what, (int)b[6]);
    size_t field = b[6] == 1 ? 2 : 4, hlen = 0;
    if (len < 8 + field) return pk_fail(PK_ERR_FORMAT, "%s: truncated npy header", what);
    for (size_t i = field; i-- > 0;)
        hlen = hlen * 256 + b[8 + i];
    size_t start = 8 + field;
    if (hlen > len - start) return pk_fail(PK_ERR_FORMAT, "%s: truncated npy header", what);
    cursor c = {(const char*)b + start, hlen, 0};
    pk_status s = parse_header(&c, what, out);
    if (s) return s;
    size_t want;
    if (!pk_shape_bytes(out->shape, out->ndim, pk_dtype_by_code(out->dtype)->size, &want))
        return pk_fail(PK_ERR_FORMAT, "%s: npy shape is too large", what);
    if (len - start - hlen != want)
        return pk_fail(PK_ERR_FORMAT, "%s: npy data has %zu bytes, shape needs %zu", what,
                       len - start - hlen, want);
    out->data = b + start + hlen;
    out->bytes = want;
    return PK_OK;
}

/* Column-major src into row-major dst: walks dst in order, stepping src by each dimension's
 * Fortran stride. */
static void fortran_to_c(const unsigned char* src, unsigned char* dst, const pk_npy* a) {
    size_t esize = pk_dtype_by_code(a->dtype)->size, n = a->bytes / esize;
    int64_t idx[PK_MAX_NDIM] = {0}, stride[PK_MAX_NDIM], step = 1;
    for (int32_t k = 0; k < a->ndim; k++) {
        stride[k] = step;
        step *= a->shape[k];
    }
    for (size_t c = 0; c < n; c++) {
        int64_t at = 0;
        for (int32_t k = 0; k < a->ndim; k++)
            at += idx[k] * stride[k];
        memcpy(dst + c * esize, src + (size_t)at * esize, esize);
        for (int32_t k = a->ndim - 1; k >= 0 && ++idx[k] == a->shape[k]; k--)
            idx[k] = 0;
    }
}

/* Replaces *buffer by a new one holding a's data in C order. */
static pk_status to_c_order(pk_npy* a, void** buffer, const char* what) {
    a->fortran_order = 0;
    if (a->ndim < 2 || a->bytes == 0) return PK_OK; /* the same bytes either way */
    void* c = pk_aligned_alloc(a->bytes);
    if (!c) return pk_fail(PK_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, a->bytes);
    fortran_to_c(a->data, c, a);
    pk_aligned_free(*buffer);
    *buffer = c;
    a->data = c;
    return PK_OK;
}

pk_status pk_npy_load(const char* path, pk_npy* out, void** buffer) {
    size_t len;
    *buffer = NULL;
    pk_status s = pk_read_file(path, buffer, &len);
    if (!s) s = pk_npy_parse(*buffer, len, pk_short_path(path), out);
    /* The header length is the file's choice; move the data to the 64-aligned start of the
     * buffer so it can be read as its dtype. */
    if (!s && (uintptr_t)out->data % PK_ALIGN != 0)
        out->data = memmove(*buffer, out->data, out->bytes);
    if (!s && out->fortran_order) s = to_c_order(out, buffer, pk_short_path(path));
    if (s) {
        pk_aligned_free(*buffer);
        *buffer = NULL;
    }
    return s;
}

void pk_npy_free(void* buffer) {
    pk_aligned_free(buffer);
}

pk_status pk_npy_save(const char* path, pk_dtype dtype, int32_t ndim, const int64_t* shape,
                      const void* data, size_t bytes) {
    const pk_dtype_desc* dt = pk_dtype_by_code((int32_t)dtype);
    char header[64 + 24 * PK_MAX_NDIM];
    if (!dt || ndim < 0 || ndim > PK_MAX_NDIM)
        return pk_fail(PK_ERR_ARG, "%s: bad dtype or ndim", path);
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     dt->npy);
    for (int32_t i = 0; i < ndim; i++)
        n += snprintf(header + n, sizeof header - (size_t)n, "%lld%s", (long long)shape[i],
                      ndim == 1      ? ","
                      : i + 1 < ndim ? ", "
                                     : "");
    n += snprintf(header + n, sizeof header - (size_t)n, "), }");
    /* Pad with spaces and a final newline so the data starts at a multiple of 64. */
    size_t total = pk_align_up(10 + (size_t)n + 1);
    int v2 = total - 10 > 65535;
    if (v2) total = pk_align_up(12 + (size_t)n + 1);
    size_t start = v2 ? 12 : 10, hlen = total - start;
    FILE* f = fopen(path, "wb");
    if (!f)
        return pk_fail(PK_ERR_IO, "%s: cannot create (%s)", pk_short_path(path), strerror(errno));
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', v2 ? 2 : 1, 0};
    for (size_t i = 0; i < start - 8; i++)
        pre[8 + i] = (unsigned char)(hlen >> (8 * i));
    int ok = fwrite(pre, 1, start, f) == start && fwrite(header, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = start + (size_t)n; ok && i + 1 < total; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    ok = fclose(f) == 0 && ok;
    return ok ? PK_OK : pk_fail(PK_ERR_IO, "%s: write failed", pk_short_path(path));
}
