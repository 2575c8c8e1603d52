/* A small JSON reader: validates the whole text and stores a flat token array (jsmn-like),
 * so the graph loader can look values up without building a tree of allocations.
 * Depth and length are bounded so hostile input cannot exhaust the stack or int32 offsets. */
#include "pk_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    pj_doc* d;
    const char* s;
    size_t len, pos;
} pj_parser;

static pk_status pj_value(pj_parser* p, int depth);

static pk_status pj_error(const pj_parser* p, const char* msg) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    return pk_fail(PK_ERR_FORMAT, "%s: line %zu column %zu: %s", p->d->what, line, col, msg);
}

static void pj_skip_ws(pj_parser* p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int pj_peek(const pj_parser* p) {
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static pk_status pj_push(pj_parser* p, int32_t type, size_t start, int32_t* index) {
    pj_doc* d = p->d;
    if (d->ntok == d->cap) {
        int32_t cap = d->cap ? d->cap * 2 : 256;
        pj_tok* t = realloc(d->toks, (size_t)cap * sizeof *t);
        if (!t) return pk_fail(PK_ERR_NOMEM, "%s: out of memory for tokens", d->what);
        d->toks = t;
        d->cap = cap;
    }
    *index = d->ntok++;
    pj_tok* t = &d->toks[*index];
    t->type = type;
    t->start = (int32_t)start;
    t->len = 0;
    t->count = 0;
    t->next = *index + 1;
    return PK_OK;
}

static int pj_hex(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at s (caller checked the length); -1 if invalid. */
static long pj_hex4(const char* s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = pj_hex((unsigned char)s[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static pk_status pj_string(pj_parser* p) {
    int32_t index;
    size_t start = ++p->pos; /* past the opening quote */
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) return pj_error(p, "control character in string");
        if (c == '\\') {
            if (p->pos + 1 >= p->len) break;
            char e = p->s[p->pos + 1];
            if (e == 'u') {
                if (p->len - p->pos < 6) break;
                long v = pj_hex4(p->s + p->pos + 2);
                if (v < 0) return pj_error(p, "bad \\u escape");
                if (v == 0) return pj_error(p, "\\u0000 is not allowed in strings");
                p->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) return pj_error(p, "bad escape in string");
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    if (p->pos >= p->len) return pj_error(p, "unterminated string");
    pk_status s = pj_push(p, PJ_STR, start, &index);
    if (s) return s;
    p->d->toks[index].len = (int32_t)(p->pos - start);
    p->pos++; /* closing quote */
    return PK_OK;
}

static int pj_digits(pj_parser* p) {
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos > start;
}

static pk_status pj_number(pj_parser* p) {
    int32_t index;
    size_t start = p->pos;
    if (pj_peek(p) == '-') p->pos++;
    if (pj_peek(p) == '0')
        p->pos++;
    else if (!pj_digits(p))
        return pj_error(p, "bad number");
    if (pj_peek(p) == '.') {
        p->pos++;
        if (!pj_digits(p)) return pj_error(p, "bad number fraction");
    }
    if (pj_peek(p) == 'e' || pj_peek(p) == 'E') {
        p->pos++;
        if (pj_peek(p) == '+' || pj_peek(p) == '-') p->pos++;
        if (!pj_digits(p)) return pj_error(p, "bad number exponent");
    }
    pk_status s = pj_push(p, PJ_NUM, start, &index);
    if (s) return s;
    p->d->toks[index].len = (int32_t)(p->pos - start);
    return PK_OK;
}

static pk_status pj_literal(pj_parser* p) {
    static const struct {
        const char* text;
        int32_t type;
    } lits[] = {{"true", PJ_BOOL}, {"false", PJ_BOOL}, {"null", PJ_NULL}};
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t n = strlen(lits[i].text);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, lits[i].text, n) == 0) {
            int32_t index;
            pk_status s = pj_push(p, lits[i].type, p->pos, &index);
            if (s) return s;
            p->d->toks[index].len = (int32_t)n;
            p->pos += n;
            return PK_OK;
        }
    }
    return pj_error(p, "unexpected character");
}

/* Arrays and objects share one loop; objects parse `"key": value` per element. */
static pk_status pj_container(pj_parser* p, int depth) {
    int is_obj = p->s[p->pos] == '{';
    char close = is_obj ? '}' : ']';
    int32_t index;
    if (depth >= PK_MAX_JSON_DEPTH) return pj_error(p, "nesting too deep");
    pk_status s = pj_push(p, is_obj ? PJ_OBJ : PJ_ARR, p->pos, &index);
    if (s) return s;
    p->pos++;
    pj_skip_ws(p);
    int32_t count = 0;
    if (pj_peek(p) == close) {
        p->pos++;
    } else {
        for (;;) {
            pj_skip_ws(p);
            if (is_obj) {
                if (pj_peek(p) != '"') return pj_error(p, "expected a string key");
                if ((s = pj_string(p))) return s;
                pj_skip_ws(p);
                if (pj_peek(p) != ':') return pj_error(p, "expected ':'");
                p->pos++;
            }
            if ((s = pj_value(p, depth + 1))) return s;
            if (count == INT32_MAX) return pj_error(p, "too many elements");
            count++;
            pj_skip_ws(p);
            int c = pj_peek(p);
            p->pos++;
            if (c == close) break;
            if (c != ',') {
                p->pos--;
                if (c < 0) return pj_error(p, "unexpected end of text");
                return pj_error(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
            }
        }
    }
    p->d->toks[index].count = count;
    p->d->toks[index].next = p->d->ntok;
    p->d->toks[index].len = (int32_t)(p->pos - (size_t)p->d->toks[index].start);
    return PK_OK;
}

static pk_status pj_value(pj_parser* p, int depth) {
    pj_skip_ws(p);
    int c = pj_peek(p);
    if (c == '{' || c == '[') return pj_container(p, depth);
    if (c == '"') return pj_string(p);
    if (c == '-' || (c >= '0' && c <= '9')) return pj_number(p);
    if (c < 0) return pj_error(p, "unexpected end of text");
    return pj_literal(p);
}

pk_status pj_parse(pj_doc* d, const char* src, size_t len, const char* what) {
    memset(d, 0, sizeof *d);
    d->src = src;
    d->what = what;
    if (len > PK_MAX_JSON_BYTES)
        return pk_fail(PK_ERR_FORMAT, "%s: %zu bytes is over the limit", what, len);
    pj_parser p = {d, src, len, 0};
    pk_status s = pj_value(&p, 0);
    if (s == PK_OK) {
        pj_skip_ws(&p);
        if (p.pos != len) s = pj_error(&p, "trailing characters after the value");
    }
    if (s) pj_free(d);
    return s;
}

void pj_free(pj_doc* d) {
    free(d->toks);
    d->toks = NULL;
    d->ntok = d->cap = 0;
}

/* Decodes string token t into dst (which has room for t's raw length + 1); returns length.
 * Escapes only shrink the text, so the raw length bounds the decoded one. */
static size_t pj_decode(const pj_doc* d, int32_t t, char* dst) {
    const char* s = d->src + d->toks[t].start;
    size_t n = (size_t)d->toks[t].len, o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            dst[o++] = s[i];
            continue;
        }
        char e = s[++i];
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char* f = strchr(from, e);
        if (e != 'u') {
            dst[o++] = to[f - from];
            continue;
        }
        unsigned long cp = (unsigned long)pj_hex4(s + i + 1);
        i += 4;
        /* Surrogate pair -> one code point; a lone surrogate becomes U+FFFD. */
        if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u') {
            long lo = pj_hex4(s + i + 3);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
                i += 6;
            }
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
        if (cp < 0x80) {
            dst[o++] = (char)cp;
        } else if (cp < 0x800) {
            dst[o++] = (char)(0xC0 | (cp >> 6));
            dst[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            dst[o++] = (char)(0xE0 | (cp >> 12));
            dst[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            dst[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            dst[o++] = (char)(0xF0 | (cp >> 18));
            dst[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            dst[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            dst[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    dst[o] = 0;
    return o;
}

char* pj_strdup(const pj_doc* d, int32_t t) {
    if (t < 0 || d->toks[t].type != PJ_STR) return NULL;
    char* out = malloc((size_t)d->toks[t].len + 1);
    if (out) pj_decode(d, t, out);
    return out;
}

int pj_streq(const pj_doc* d, int32_t t, const char* s) {
    if (t < 0 || d->toks[t].type != PJ_STR) return 0;
    const char* raw = d->src + d->toks[t].start;
    size_t n = (size_t)d->toks[t].len;
    if (!memchr(raw, '\\', n)) return strlen(s) == n && memcmp(raw, s, n) == 0;
    char* tmp = pj_strdup(d, t);
    int eq = tmp && strcmp(tmp, s) == 0;
    free(tmp);
    return eq;
}

int32_t pj_get(const pj_doc* d, int32_t obj, const char* key) {
    if (obj < 0 || d->toks[obj].type != PJ_OBJ) return -1;
    int32_t t = obj + 1;
    for (int32_t i = 0; i < d->toks[obj].count; i++) {
        int32_t value = t + 1;
        if (pj_streq(d, t, key)) return value;
        t = d->toks[value].next;
    }
    return -1;
}

int pj_int(const pj_doc* d, int32_t t, int64_t* out) {
    if (t < 0 || d->toks[t].type != PJ_NUM) return 0;
    const char* s = d->src + d->toks[t].start;
    int32_t n = d->toks[t].len, i = 0;
    int neg = s[0] == '-';
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (i = neg; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0; /* fraction or exponent: not an integer */
        unsigned digit = (unsigned)(s[i] - '0');
        if (v > (limit - digit) / 10) return 0;
        v = v * 10 + digit;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return 1;
}

int pj_double(const pj_doc* d, int32_t t, double* out) {
    if (t < 0 || d->toks[t].type != PJ_NUM) return 0;
    char buf[64];
    if (d->toks[t].len >= (int32_t)sizeof buf) return 0;
    memcpy(buf, d->src + d->toks[t].start, (size_t)d->toks[t].len);
    buf[d->toks[t].len] = 0;
    *out = strtod(buf, NULL);
    return 1;
}
