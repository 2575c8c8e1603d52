/* graph.json loader and validator. Every index and size is checked before use, so a corrupt
 * or hostile graph.json yields PK_ERR_FORMAT and a message naming the field, never UB. */
#include "pk_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GJ "graph.json"

typedef struct {
    pj_doc d;
    int32_t root;  /* the graph's object: the document's top, or a subgraph inside it */
    int32_t depth; /* subgraphs around this one */
    pk_graph* g;
} loader;

static const char* const type_names[] = {"null", "bool", "number", "string", "array", "object"};

/* Looks up obj[key] and checks its type; on failure records a message naming `where`. */
static int32_t field(loader* L, int32_t obj, const char* where, const char* key, int type,
                     pk_status* s) {
    int32_t t = pj_get(&L->d, obj, key);
    if (t < 0) {
        *s = pk_fail(PK_ERR_FORMAT, GJ ": %s: missing field '%s'", where, key);
    } else if (L->d.toks[t].type != type) {
        *s = pk_fail(PK_ERR_FORMAT, GJ ": %s.%s: expected %s, got %s", where, key, type_names[type],
                     type_names[L->d.toks[t].type]);
        t = -1;
    }
    return t;
}

/* Integer in [lo, hi] from token t. */
static pk_status get_int(loader* L, int32_t t, int64_t lo, int64_t hi, const char* where,
                         int32_t index, int64_t* out) {
    if (!pj_int(&L->d, t, out))
        return pk_fail(PK_ERR_FORMAT, GJ ": %s[%d]: expected an integer", where, (int)index);
    if (*out < lo || *out > hi)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s[%d]: %lld is out of range [%lld, %lld]", where,
                       (int)index, (long long)*out, (long long)lo, (long long)hi);
    return PK_OK;
}

/* Checks that `t` is an array of exactly `n` elements (n < 0: any length). */
static pk_status check_len(loader* L, int32_t t, int64_t n, const char* where) {
    if (L->d.toks[t].type != PJ_ARR)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s: expected an array", where);
    if (n >= 0 && L->d.toks[t].count != n)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s: has %d elements, expected %lld", where,
                       (int)L->d.toks[t].count, (long long)n);
    return PK_OK;
}

static char* dup_string(loader* L, int32_t t, pk_status* s) {
    char* out = pj_strdup(&L->d, t);
    if (!out) *s = pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    return out;
}

/* Reads a [node, output] pair and converts it to an entry id; the node must be < limit. */
static pk_status entry_ref(loader* L, int32_t t, int32_t limit, const char* where, int32_t i,
                           int32_t* eid) {
    pk_graph* g = L->g;
    int64_t n, k;
    if (L->d.toks[t].type != PJ_ARR || L->d.toks[t].count != 2)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s[%d]: expected [node, output]", where, (int)i);
    if (!pj_int(&L->d, t + 1, &n) || !pj_int(&L->d, t + 2, &k) || n < 0 || n >= limit)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s[%d]: node index must be an integer in [0, %d)",
                       where, (int)i, (int)limit);
    if (k < 0 || k >= g->nodes[n].num_outputs)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s[%d]: node %d has no output %lld", where, (int)i,
                       (int)n, (long long)k);
    *eid = g->row_ptr[n] + (int32_t)k;
    return PK_OK;
}

/* Optional "device": "cpu" (the default), "opencl" or "accel". */
static pk_status parse_device(loader* L, int32_t t, int32_t i) {
    static const char* const names[] = {"cpu", "opencl", "accel"};
    pk_node* node = &L->g->nodes[i];
    int32_t dev = pj_get(&L->d, t, "device");
    node->device = dev < 0 ? PK_DEV_CPU : -1;
    for (int32_t k = 0; dev >= 0 && k < PK_DEV_COUNT; k++)
        if (pj_streq(&L->d, dev, names[k])) node->device = k;
    if (node->device < 0)
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s': device must be \"cpu\", \"opencl\" or \"accel\"",
                       (int)i, node->name);
#ifndef PK_OPENCL
    if (node->device == PK_DEV_OPENCL)
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s' runs on opencl, but this runtime was built without "
                          "OpenCL (PK_OPENCL)",
                       (int)i, node->name);
#endif
#ifndef PK_ACCEL
    if (node->device == PK_DEV_ACCEL)
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s' runs on accel, but this runtime was built without "
                          "the accelerator (PK_ACCEL)",
                       (int)i, node->name);
#endif
    return PK_OK;
}

/* Optional cost fields of a kernel node (docs/bundle-format.md): "flops" and "bytes", finite
 * numbers >= 0, and "ops", op names, kept as one string separated by spaces. */
static pk_status parse_cost(loader* L, int32_t t, int32_t i) {
    static const char* const keys[] = {"flops", "bytes"};
    pk_node* node = &L->g->nodes[i];
    double* values[] = {&node->flops, &node->bytes};
    for (int k = 0; k < 2; k++) {
        int32_t v = pj_get(&L->d, t, keys[k]);
        *values[k] = -1;
        if (v >= 0 && (!pj_double(&L->d, v, values[k]) || !(*values[k] >= 0) || *values[k] > 1e300))
            return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d].%s: expected a finite number >= 0",
                           (int)i, keys[k]);
    }
    int32_t ops = pj_get(&L->d, t, "ops");
    if (ops < 0) return PK_OK;
    if (L->d.toks[ops].type != PJ_ARR)
        return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d].ops: expected an array of op names", (int)i);
    size_t len = 1; /* raw lengths bound the decoded ones */
    for (int32_t e = ops + 1, k = 0; k < L->d.toks[ops].count; k++, e = L->d.toks[e].next)
        len += (size_t)L->d.toks[e].len + 1;
    if (!(node->ops = calloc(len, 1))) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    for (int32_t e = ops + 1, k = 0; k < L->d.toks[ops].count; k++, e = L->d.toks[e].next) {
        char* name = pj_strdup(&L->d, e);
        int ok = name && *name && !strchr(name, ' ');
        if (ok) strcat(strcat(node->ops, k ? " " : ""), name);
        free(name);
        if (!ok)
            return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d].ops[%d]: expected an op name (a string)",
                           (int)i, (int)k);
    }
    return PK_OK;
}

/* A loop's "num_carried" (values carried from one iteration to the next, the first outputs)
 * and "max_trips" (the most iterations it may run; its scan outputs hold that many). */
static pk_status parse_loop(loader* L, int32_t t, int32_t i, int64_t nout) {
    pk_node* node = &L->g->nodes[i];
    pk_status s = PK_OK;
    char where[48];
    int64_t v;
    snprintf(where, sizeof where, "nodes[%d]", (int)i);
    int32_t nc = field(L, t, where, "num_carried", PJ_NUM, &s);
    int32_t mt = field(L, t, where, "max_trips", PJ_NUM, &s);
    if (s) return s;
    if (!pj_int(&L->d, nc, &v) || v < 0 || v > nout)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.num_carried: expected an integer in [0, %lld]",
                       where, (long long)nout);
    node->num_carried = (int32_t)v;
    if (!pj_int(&L->d, mt, &v) || v < 0 || v > PK_MAX_TRIPS)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.max_trips: expected an integer in [0, %lld]", where,
                       (long long)PK_MAX_TRIPS);
    node->max_trips = v;
    return PK_OK;
}

static pk_status parse_node(loader* L, int32_t t, int32_t i) {
    static const char* const ops[] = {"input", "param", "kernel", "if", "loop"};
    pk_node* node = &L->g->nodes[i];
    pk_status s = PK_OK;
    char where[48];
    snprintf(where, sizeof where, "nodes[%d]", (int)i);
    if (L->d.toks[t].type != PJ_OBJ)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s: expected an object", where);
    int32_t op = field(L, t, where, "op", PJ_STR, &s);
    int32_t name = field(L, t, where, "name", PJ_STR, &s);
    if (s) return s;
    node->op = -1;
    for (int32_t k = 0; k < 5; k++)
        if (pj_streq(&L->d, op, ops[k])) node->op = k;
    if (node->op < 0)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.op: must be input, param, kernel, if or loop",
                       where);
    if (!(node->name = dup_string(L, name, &s))) return s;
    int64_t nout = 1;
    int32_t t_nout = pj_get(&L->d, t, "num_outputs");
    if (t_nout >= 0 && !pj_int(&L->d, t_nout, &nout))
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.num_outputs: expected an integer", where);
    if (node->op == PK_NODE_KERNEL) {
        int32_t func = field(L, t, where, "func", PJ_STR, &s);
        if (s || !(node->func = dup_string(L, func, &s))) return s;
        if ((s = parse_device(L, t, i)) || (s = parse_cost(L, t, i))) return s;
        if (nout < 1 || nout > INT32_MAX / 2)
            return pk_fail(PK_ERR_FORMAT, GJ ": %s.num_outputs: %lld is out of range", where,
                           (long long)nout);
    } else if (node->op >= PK_NODE_IF) {
        node->flops = node->bytes = -1; /* unknown: its subgraphs' kernels do the work */
        if (nout < 0 || nout > INT32_MAX / 2)
            return pk_fail(PK_ERR_FORMAT, GJ ": %s.num_outputs: %lld is out of range", where,
                           (long long)nout);
        if (node->op == PK_NODE_LOOP && (s = parse_loop(L, t, i, nout))) return s;
    } else if (nout != 1) {
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.num_outputs: input and param nodes have 1", where);
    }
    node->num_outputs = (int32_t)nout;
    return PK_OK;
}

/* Optional "inplace": [[out, in], ...], strictly ascending by out (so each output appears
 * once and lookups can bisect); whether the pair may really share memory is checked later. */
static pk_status parse_inplace(loader* L, int32_t t, int32_t i) {
    pk_node* node = &L->g->nodes[i];
    int32_t ip = pj_get(&L->d, t, "inplace");
    if (ip < 0) return PK_OK;
    if (node->op != PK_NODE_KERNEL || L->d.toks[ip].type != PJ_ARR)
        return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d].inplace: expected an array (kernels only)",
                       (int)i);
    node->num_inplace = L->d.toks[ip].count;
    node->inplace = calloc((size_t)node->num_inplace + 1, sizeof *node->inplace);
    if (!node->inplace) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t e = ip + 1;
    for (int32_t k = 0; k < node->num_inplace; k++, e = L->d.toks[e].next) {
        int64_t out, in;
        if (L->d.toks[e].type != PJ_ARR || L->d.toks[e].count != 2 || !pj_int(&L->d, e + 1, &out) ||
            !pj_int(&L->d, e + 2, &in) || out < 0 || out >= node->num_outputs || in < 0 ||
            in >= node->num_inputs || (k > 0 && out <= node->inplace[k - 1][0]))
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": nodes[%d].inplace[%d]: expected [output, input] positions of "
                              "the node, ascending by output",
                           (int)i, (int)k);
        node->inplace[k][0] = (int32_t)out;
        node->inplace[k][1] = (int32_t)in;
    }
    return PK_OK;
}

int32_t pk_node_inplace_input(const pk_node* node, int32_t out) {
    int32_t lo = 0, hi = node->num_inplace;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (node->inplace[mid][0] == out) return node->inplace[mid][1];
        if (node->inplace[mid][0] < out)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Node inputs are resolved after node_row_ptr is known; they must name earlier nodes. */
static pk_status parse_node_inputs(loader* L, int32_t t, int32_t i) {
    pk_node* node = &L->g->nodes[i];
    pk_status s = PK_OK;
    char where[48];
    snprintf(where, sizeof where, "nodes[%d]", (int)i);
    int32_t in = field(L, t, where, "inputs", PJ_ARR, &s);
    if (s) return s;
    snprintf(where, sizeof where, "nodes[%d].inputs", (int)i);
    node->num_inputs = L->d.toks[in].count;
    if (node->op < PK_NODE_KERNEL && node->num_inputs != 0)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s: input and param nodes take no inputs", where);
    node->inputs = calloc((size_t)node->num_inputs + 1, sizeof *node->inputs);
    if (!node->inputs) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t e = in + 1;
    for (int32_t k = 0; k < node->num_inputs; k++, e = L->d.toks[e].next)
        if ((s = entry_ref(L, e, i, where, k, &node->inputs[k]))) return s;
    return parse_inplace(L, t, i);
}

static pk_status parse_nodes(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t nodes = field(L, L->root, "(root)", "nodes", PJ_ARR, &s);
    int32_t rp = field(L, L->root, "(root)", "node_row_ptr", PJ_ARR, &s);
    if (s) return s;
    g->num_nodes = L->d.toks[nodes].count;
    g->nodes = calloc((size_t)g->num_nodes + 1, sizeof *g->nodes);
    g->row_ptr = calloc((size_t)g->num_nodes + 1, sizeof *g->row_ptr);
    if (!g->nodes || !g->row_ptr) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t t = nodes + 1;
    for (int32_t i = 0; i < g->num_nodes; i++, t = L->d.toks[t].next)
        if ((s = parse_node(L, t, i))) return s;
    if ((s = check_len(L, rp, (int64_t)g->num_nodes + 1, "node_row_ptr"))) return s;
    /* node_row_ptr must be the prefix sums of num_outputs. */
    t = rp + 1;
    for (int32_t i = 0; i <= g->num_nodes; i++, t = L->d.toks[t].next) {
        int64_t v, want = i == 0 ? 0 : (int64_t)g->row_ptr[i - 1] + g->nodes[i - 1].num_outputs;
        if ((s = get_int(L, t, 0, INT32_MAX / 2, "node_row_ptr", i, &v))) return s;
        if (v != want)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": node_row_ptr[%d]: %lld, but node outputs sum to %lld", (int)i,
                           (long long)v, (long long)want);
        g->row_ptr[i] = (int32_t)v;
    }
    g->num_entries = g->row_ptr[g->num_nodes];
    t = nodes + 1;
    for (int32_t i = 0; i < g->num_nodes; i++, t = L->d.toks[t].next)
        if ((s = parse_node_inputs(L, t, i))) return s;
    return PK_OK;
}

static pk_status parse_shapes(loader* L, int32_t attrs) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t sh = field(L, attrs, "attrs", "shape", PJ_ARR, &s);
    if (s || (s = check_len(L, sh, g->num_entries, "attrs.shape"))) return s;
    size_t total = 0;
    int32_t t = sh + 1;
    for (int32_t e = 0; e < g->num_entries; e++, t = L->d.toks[t].next) {
        if (L->d.toks[t].type != PJ_ARR || L->d.toks[t].count > PK_MAX_NDIM)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": attrs.shape[%d]: expected a list of at most %d "
                              "dims",
                           (int)e, PK_MAX_NDIM);
        total += (size_t)L->d.toks[t].count;
    }
    g->dims = calloc(total + 1, sizeof *g->dims);
    if (!g->dims) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int64_t* dim = g->dims;
    t = sh + 1;
    for (int32_t e = 0; e < g->num_entries; e++, t = L->d.toks[t].next) {
        pk_entry* en = &g->entries[e];
        en->shape = dim;
        en->ndim = L->d.toks[t].count;
        int32_t d = t + 1;
        for (int32_t k = 0; k < en->ndim; k++, d = L->d.toks[d].next)
            if (!pj_int(&L->d, d, &dim[k]) || dim[k] < 0)
                return pk_fail(PK_ERR_FORMAT,
                               GJ ": attrs.shape[%d][%d]: expected a non-negative integer", (int)e,
                               (int)k);
        dim += en->ndim;
    }
    return PK_OK;
}

static pk_status parse_attrs(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t attrs = field(L, L->root, "(root)", "attrs", PJ_OBJ, &s);
    if (s) return s;
    int32_t dt = field(L, attrs, "attrs", "dtype", PJ_ARR, &s);
    int32_t sid = field(L, attrs, "attrs", "storage_id", PJ_ARR, &s);
    if (s || (s = check_len(L, dt, g->num_entries, "attrs.dtype")) ||
        (s = check_len(L, sid, g->num_entries, "attrs.storage_id")))
        return s;
    g->entries = calloc((size_t)g->num_entries + 1, sizeof *g->entries);
    if (!g->entries) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    if ((s = parse_shapes(L, attrs))) return s;
    int32_t td = dt + 1, ts = sid + 1;
    for (int32_t e = 0; e < g->num_entries; e++) {
        pk_entry* en = &g->entries[e];
        const pk_dtype_desc* desc = NULL;
        if (L->d.toks[td].type == PJ_STR && L->d.toks[td].len < 16) { /* longest is 7 */
            char* str = pj_strdup(&L->d, td);
            if (str) desc = pk_dtype_by_name(str);
            free(str);
        }
        if (!desc) return pk_fail(PK_ERR_FORMAT, GJ ": attrs.dtype[%d]: unknown dtype", (int)e);
        en->dtype = (int32_t)desc->code;
        if (!pk_shape_bytes(en->shape, en->ndim, desc->size, &en->bytes))
            return pk_fail(PK_ERR_FORMAT, GJ ": attrs.shape[%d]: size overflows", (int)e);
        int64_t v;
        if ((s = get_int(L, ts, 0, INT32_MAX - 1, "attrs.storage_id", e, &v))) return s;
        en->sid = (int32_t)v;
        td = L->d.toks[td].next;
        ts = L->d.toks[ts].next;
    }
    for (int32_t n = 0; n < g->num_nodes; n++)
        for (int32_t e = g->row_ptr[n]; e < g->row_ptr[n + 1]; e++)
            g->entries[e].node = n;
    return PK_OK;
}

static pk_status parse_storage_item(loader* L, int32_t t, int32_t i) {
    static const char* const kinds[] = {"input", "param", "output", "arena"};
    pk_storage* st = &L->g->storage[i];
    pk_status s = PK_OK;
    char where[48];
    int64_t v;
    snprintf(where, sizeof where, "storage[%d]", (int)i);
    if (L->d.toks[t].type != PJ_OBJ)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s: expected an object", where);
    int32_t kind = field(L, t, where, "kind", PJ_STR, &s);
    int32_t bytes = field(L, t, where, "bytes", PJ_NUM, &s);
    if (s) return s;
    st->kind = -1;
    for (int32_t k = 0; k < 4; k++)
        if (pj_streq(&L->d, kind, kinds[k])) st->kind = k;
    if (st->kind < 0)
        return pk_fail(PK_ERR_FORMAT, GJ ": %s.kind: must be input, param, output or arena", where);
    /* INT64_MAX / 2 keeps offset + bytes and the 64-byte rounding free of overflow. */
    if ((s = get_int(L, bytes, 0, INT64_MAX / 2, "storage.bytes", i, &v))) return s;
    st->bytes = (size_t)v;
    if (st->kind == PK_ST_ARENA) {
        int32_t off = field(L, t, where, "offset", PJ_NUM, &s);
        if (s || (s = get_int(L, off, 0, INT64_MAX / 2, "storage.offset", i, &v))) return s;
        if (v % PK_ALIGN != 0 || (uint64_t)v + st->bytes > L->g->arena_bytes)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": %s: offset %lld + bytes %zu is misaligned or past "
                              "arena_bytes %zu",
                           where, (long long)v, st->bytes, L->g->arena_bytes);
        st->offset = (size_t)v;
    }
    if (st->kind == PK_ST_PARAM) {
        int32_t p = field(L, t, where, "param", PJ_STR, &s);
        if (s || !(st->param = dup_string(L, p, &s))) return s;
    }
    return PK_OK;
}

static pk_status parse_storage(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int64_t v;
    int32_t st = field(L, L->root, "(root)", "storage", PJ_ARR, &s);
    int32_t ab = field(L, L->root, "(root)", "arena_bytes", PJ_NUM, &s);
    if (s || (s = get_int(L, ab, 0, INT64_MAX / 4, "arena_bytes", 0, &v))) return s;
    g->arena_bytes = (size_t)v;
    g->num_storage = L->d.toks[st].count;
    g->storage = calloc((size_t)g->num_storage + 1, sizeof *g->storage);
    if (!g->storage) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t t = st + 1;
    for (int32_t i = 0; i < g->num_storage; i++, t = L->d.toks[t].next)
        if ((s = parse_storage_item(L, t, i))) return s;
    return PK_OK;
}

/* arg_nodes must list exactly the input and param nodes, ascending. */
static pk_status check_arg_nodes(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t an = field(L, L->root, "(root)", "arg_nodes", PJ_ARR, &s);
    if (s) return s;
    int32_t t = an + 1, k = 0;
    for (int32_t n = 0; n < g->num_nodes; n++) {
        if (g->nodes[n].op >= PK_NODE_KERNEL) continue;
        int64_t v = -1;
        if (k < L->d.toks[an].count) pj_int(&L->d, t, &v);
        if (v != n)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": arg_nodes[%d]: expected node %d (the input and param nodes, "
                              "ascending)",
                           (int)k, (int)n);
        k++;
        t = L->d.toks[t].next;
    }
    if (k != L->d.toks[an].count)
        return pk_fail(PK_ERR_FORMAT, GJ ": arg_nodes: has %d elements, expected %d",
                       (int)L->d.toks[an].count, (int)k);
    return PK_OK;
}

static pk_status parse_io(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t heads = field(L, L->root, "(root)", "heads", PJ_ARR, &s);
    int32_t outs = field(L, L->root, "(root)", "outputs", PJ_ARR, &s);
    if (s || (s = check_len(L, outs, L->d.toks[heads].count, "outputs"))) return s;
    g->num_outputs = L->d.toks[heads].count;
    for (int32_t n = 0; n < g->num_nodes; n++)
        g->num_inputs += g->nodes[n].op == PK_NODE_INPUT;
    g->output_entries = calloc((size_t)g->num_outputs + 1, sizeof *g->output_entries);
    g->output_names = calloc((size_t)g->num_outputs + 1, sizeof *g->output_names);
    g->input_entries = calloc((size_t)g->num_inputs + 1, sizeof *g->input_entries);
    g->input_set = calloc((size_t)g->num_inputs + 1, 1);
    if (!g->output_entries || !g->output_names || !g->input_entries || !g->input_set)
        return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t th = heads + 1, to = outs + 1;
    for (int32_t i = 0; i < g->num_outputs; i++) {
        if ((s = entry_ref(L, th, g->num_nodes, "heads", i, &g->output_entries[i]))) return s;
        if (L->d.toks[to].type != PJ_STR)
            return pk_fail(PK_ERR_FORMAT, GJ ": outputs[%d]: expected a string", (int)i);
        if (!(g->output_names[i] = dup_string(L, to, &s))) return s;
        th = L->d.toks[th].next;
        to = L->d.toks[to].next;
    }
    for (int32_t n = 0, k = 0; n < g->num_nodes; n++)
        if (g->nodes[n].op == PK_NODE_INPUT) g->input_entries[k++] = g->row_ptr[n];
    return PK_OK;
}

/* Names of inputs, and of outputs, must be non-empty and unique (tools address them by name). */
static pk_status check_names(const pk_graph* g) {
    for (int32_t i = 0; i < g->num_inputs; i++) {
        const char* a = g->nodes[g->entries[g->input_entries[i]].node].name;
        if (!a[0]) return pk_fail(PK_ERR_FORMAT, GJ ": input %d has an empty name", (int)i);
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(a, g->nodes[g->entries[g->input_entries[j]].node].name))
                return pk_fail(PK_ERR_FORMAT, GJ ": inputs %d and %d share name '%s'", (int)j,
                               (int)i, a);
    }
    for (int32_t i = 0; i < g->num_outputs; i++) {
        if (!g->output_names[i][0])
            return pk_fail(PK_ERR_FORMAT, GJ ": outputs[%d] is empty", (int)i);
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(g->output_names[i], g->output_names[j]))
                return pk_fail(PK_ERR_FORMAT, GJ ": outputs %d and %d share name '%s'", (int)j,
                               (int)i, g->output_names[i]);
    }
    return PK_OK;
}

/* Each entry's storage must exist, be big enough and be of the kind its producer needs;
 * input, param and output storages belong to exactly one entry. */
static pk_status check_storage_use(pk_graph* g) {
    static const char* const kinds[] = {"input", "param", "output", "arena"};
    int32_t* users = calloc((size_t)g->num_storage + 1, sizeof *users);
    if (!users) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    pk_status s = PK_OK;
    for (int32_t e = 0; e < g->num_entries && !s; e++) {
        const pk_entry* en = &g->entries[e];
        const pk_node* node = &g->nodes[en->node];
        if (en->sid >= g->num_storage) {
            s = pk_fail(PK_ERR_FORMAT, GJ ": attrs.storage_id[%d]: %d is not below %d storages",
                        (int)e, (int)en->sid, (int)g->num_storage);
            break;
        }
        const pk_storage* st = &g->storage[en->sid];
        int ok = node->op == PK_NODE_INPUT ? st->kind == PK_ST_INPUT
                 : node->op == PK_NODE_PARAM
                     ? st->kind == PK_ST_PARAM && !strcmp(st->param, node->name)
                     : st->kind == PK_ST_OUTPUT || st->kind == PK_ST_ARENA; /* kernel, if, loop */
        if (!ok)
            s = pk_fail(PK_ERR_FORMAT,
                        GJ ": entry %d (node %d '%s'): storage %d of kind %s does not fit the "
                           "node (param storages must name the node's tensor)",
                        (int)e, (int)en->node, node->name, (int)en->sid, kinds[st->kind]);
        else if (st->bytes < en->bytes)
            s = pk_fail(PK_ERR_FORMAT, GJ ": entry %d needs %zu bytes, storage %d has %zu", (int)e,
                        en->bytes, (int)en->sid, st->bytes);
        else if (st->kind != PK_ST_ARENA && ++users[en->sid] > 1)
            s = pk_fail(PK_ERR_FORMAT, GJ ": storage %d (kind %s) is used by several entries",
                        (int)en->sid, kinds[st->kind]);
    }
    free(users);
    return s;
}

/* The kernel table ends with a {0, 0, 0} sentinel exactly at pk_kernel_count: finding it
 * there (stopping at the first NULL name) keeps an edited count from reading past the
 * table. Names must be unique and every entry needs a function and a signature. */
static pk_status check_kernel_table(int* sorted) {
    int32_t n = 0;
    while (n < pk_kernel_count && pk_kernel_table[n].name)
        n++;
    if (pk_kernel_count < 0 || n < pk_kernel_count)
        return pk_fail(PK_ERR_FORMAT,
                       "kernel table: pk_kernel_count is %d, but the {0, 0, 0} sentinel is "
                       "entry %d",
                       (int)pk_kernel_count, (int)n);
    if (pk_kernel_table[n].name)
        return pk_fail(PK_ERR_FORMAT,
                       "kernel table: entry %d ('%s') should be the {0, 0, 0} sentinel after "
                       "pk_kernel_count = %d entries",
                       (int)n, pk_kernel_table[n].name, (int)pk_kernel_count);
    *sorted = 1;
    for (int32_t i = 0; i < n; i++) {
        const pk_kernel_entry* k = &pk_kernel_table[i];
        if (!k->fn || !k->signature)
            return pk_fail(PK_ERR_FORMAT, "kernel table: entry %d '%s' has no %s", (int)i, k->name,
                           k->fn ? "signature" : "function");
        if (i > 0 && strcmp(pk_kernel_table[i - 1].name, k->name) >= 0) *sorted = 0;
    }
    for (int32_t i = 0; i < n && !*sorted; i++)
        for (int32_t j = 0; j < i; j++)
            if (!strcmp(pk_kernel_table[i].name, pk_kernel_table[j].name))
                return pk_fail(PK_ERR_FORMAT, "kernel table: entries %d and %d share name '%s'",
                               (int)j, (int)i, pk_kernel_table[i].name);
    return PK_OK;
}

/* Kernel lookup: bisect when the table is sorted (the packager writes it so), else scan. */
static const pk_kernel_entry* find_kernel(const char* name, int sorted) {
    int32_t lo = 0, hi = pk_kernel_count;
    if (!sorted) {
        for (int32_t i = 0; i < pk_kernel_count; i++)
            if (!strcmp(pk_kernel_table[i].name, name)) return &pk_kernel_table[i];
        return NULL;
    }
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pk_kernel_table[mid].name, name);
        if (c == 0) return &pk_kernel_table[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* An entry as the signatures spell it: "float32[1,3,8,8]" (at most 32 dims of 20 digits). */
static void describe_entry(const pk_entry* en, char* buf, size_t cap) {
    int n = snprintf(buf, cap, "%s[", pk_dtype_name((pk_dtype)en->dtype));
    for (int32_t i = 0; i < en->ndim && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? "," : "", (long long)en->shape[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

/* The node's arguments (its inputs, then its outputs) must be exactly what the function
 * was generated for: a wrong buffer size would make the kernel read or write out of bounds. */
static pk_status check_signature(const pk_graph* g, int32_t n, const char* signature) {
    const pk_node* node = &g->nodes[n];
    int32_t nargs = node->num_inputs + node->num_outputs, want = signature[0] != 0;
    for (const char* c = signature; *c; c++)
        want += *c == ' ';
    if (want != nargs)
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s': func '%s' takes %d arguments, the node passes %d "
                          "(%d inputs, %d outputs)",
                       (int)n, node->name, node->func, (int)want, (int)nargs, (int)node->num_inputs,
                       (int)node->num_outputs);
    const char* sig = signature;
    for (int32_t a = 0; a < nargs; a++) {
        char got[32 * 21 + 16];
        size_t len = strcspn(sig, " ");
        int32_t e = a < node->num_inputs ? node->inputs[a] : g->row_ptr[n] + a - node->num_inputs;
        describe_entry(&g->entries[e], got, sizeof got);
        if (strlen(got) != len || memcmp(got, sig, len) != 0)
            return pk_fail(
                PK_ERR_FORMAT,
                GJ ": nodes[%d] '%s': func '%s' argument %d (%s %d): expected %.*s, "
                   "got %s",
                (int)n, node->name, node->func, (int)a, a < node->num_inputs ? "input" : "output",
                (int)(a < node->num_inputs ? a : a - node->num_inputs), (int)len, sig, got);
        sig += len + (sig[len] == ' ');
    }
    return PK_OK;
}

#ifdef PK_OPENCL
/* The OpenCL table: sentinel at pk_cl_kernel_count, sorted by name without duplicates (the
 * packager writes it so), a signature and a launch whose global size is a non-zero multiple
 * of the local size in every dimension. */
static pk_status check_cl_kernel_table(void) {
    int32_t n = 0;
    while (n < pk_cl_kernel_count && pk_cl_kernel_table[n].name)
        n++;
    if (pk_cl_kernel_count < 0 || n < pk_cl_kernel_count || pk_cl_kernel_table[n].name)
        return pk_fail(PK_ERR_FORMAT,
                       "OpenCL kernel table: the sentinel is not entry pk_cl_kernel_count = %d",
                       (int)pk_cl_kernel_count);
    for (int32_t i = 0; i < n; i++) {
        const pk_cl_kernel_entry* k = &pk_cl_kernel_table[i];
        int ok = k->signature && (i == 0 || strcmp(pk_cl_kernel_table[i - 1].name, k->name) < 0);
        for (int d = 0; d < 3; d++)
            ok = ok && k->global[d] && (!k->local[d] || k->global[d] % k->local[d] == 0);
        if (!ok)
            return pk_fail(PK_ERR_FORMAT,
                           "OpenCL kernel table: entry %d '%s' is out of order, has no "
                           "signature or a global size that is not a multiple of the local size",
                           (int)i, k->name);
    }
    return PK_OK;
}

static const pk_cl_kernel_entry* find_cl_kernel(const char* name) {
    int32_t lo = 0, hi = pk_cl_kernel_count;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pk_cl_kernel_table[mid].name, name);
        if (c == 0) return &pk_cl_kernel_table[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
#endif

/* Each kernel node's function, from the table of its device, checked against its signature. */
static pk_status resolve_kernels(pk_graph* g, int32_t depth) {
    int sorted = 0;
    pk_status s = check_kernel_table(&sorted);
#ifdef PK_OPENCL
    if (!s) s = check_cl_kernel_table();
#endif
    for (int32_t n = 0; n < g->num_nodes && !s; n++) {
        pk_node* node = &g->nodes[n];
        if (node->op != PK_NODE_KERNEL) continue;
        if (depth > 0 && node->device != PK_DEV_CPU)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": nodes[%d] '%s': nodes inside a subgraph run on the cpu", (int)n,
                           node->name);
        /* an accel node's func names a program of kernels/program.accel, bound at init */
        if (node->device == PK_DEV_ACCEL) continue;
        const char* signature = NULL;
        if (node->device == PK_DEV_CPU) {
            const pk_kernel_entry* k = find_kernel(node->func, sorted);
            if (k) node->fn = k->fn, signature = k->signature;
        }
#ifdef PK_OPENCL
        if (node->device == PK_DEV_OPENCL && (node->cl = find_cl_kernel(node->func)))
            signature = node->cl->signature;
#endif
        if (!signature)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": nodes[%d] '%s': func '%s' is not in the %skernel table", (int)n,
                           node->name, node->func, node->device == PK_DEV_CPU ? "" : "OpenCL ");
        s = check_signature(g, n, signature);
    }
    return s;
}

/* Entries sharing an arena storage id must have disjoint lifetimes: every read must see the
 * entry that was last written to that storage. Heads are read after the last node. */
static pk_status check_lifetimes(const pk_graph* g) {
    int32_t* owner = malloc(((size_t)g->num_storage + 1) * sizeof *owner);
    if (!owner) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    pk_status s = PK_OK;
    for (int32_t i = 0; i < g->num_storage; i++)
        owner[i] = -1;
    for (int32_t n = 0; n <= g->num_nodes && !s; n++) {
        const pk_node* node = n < g->num_nodes ? &g->nodes[n] : NULL;
        int32_t nin = node ? node->num_inputs : g->num_outputs;
        const int32_t* in = node ? node->inputs : g->output_entries;
        for (int32_t k = 0; k < nin && !s; k++)
            if (owner[g->entries[in[k]].sid] != in[k])
                s = pk_fail(PK_ERR_FORMAT,
                            GJ ": %s %d reads entry %d, but its storage %d was overwritten by "
                               "entry %d",
                            node ? "node" : "head", (int)(node ? n : k), (int)in[k],
                            (int)g->entries[in[k]].sid, (int)owner[g->entries[in[k]].sid]);
        if (node)
            for (int32_t e = g->row_ptr[n]; e < g->row_ptr[n + 1]; e++)
                owner[g->entries[e].sid] = e;
    }
    free(owner);
    return s;
}

/* The last node reading each entry (num_nodes for heads; its own node when never read). */
static int32_t* last_uses(const pk_graph* g) {
    int32_t* last = malloc(((size_t)g->num_entries + 1) * sizeof *last);
    if (!last) return NULL;
    for (int32_t e = 0; e < g->num_entries; e++)
        last[e] = g->entries[e].node;
    for (int32_t n = 0; n < g->num_nodes; n++)
        for (int32_t k = 0; k < g->nodes[n].num_inputs; k++)
            if (last[g->nodes[n].inputs[k]] < n) last[g->nodes[n].inputs[k]] = n;
    for (int32_t k = 0; k < g->num_outputs; k++)
        last[g->output_entries[k]] = g->num_nodes;
    return last;
}

/* An in-place pair is exact aliasing: output and input in the same arena storage, of the
 * same size, the input read for the last time by this node. */
static pk_status check_inplace(const pk_graph* g, const int32_t* last) {
    for (int32_t n = 0; n < g->num_nodes; n++) {
        const pk_node* node = &g->nodes[n];
        for (int32_t k = 0; k < node->num_inplace; k++) {
            const pk_entry* out = &g->entries[g->row_ptr[n] + node->inplace[k][0]];
            int32_t in = node->inputs[node->inplace[k][1]];
            if (out->sid != g->entries[in].sid || g->storage[out->sid].kind != PK_ST_ARENA ||
                out->bytes != g->entries[in].bytes || last[in] != n)
                return pk_fail(PK_ERR_FORMAT,
                               GJ ": nodes[%d].inplace[%d]: output %d may only overwrite input "
                                  "%d if both have the same arena storage and size and the input "
                                  "is not read later",
                               (int)n, (int)k, (int)node->inplace[k][0], (int)node->inplace[k][1]);
        }
    }
    return PK_OK;
}

static int entries_overlap(const pk_graph* g, int32_t a, int32_t b) {
    size_t x = g->storage[g->entries[a].sid].offset, y = g->storage[g->entries[b].sid].offset;
    return x < y + g->entries[b].bytes && y < x + g->entries[a].bytes;
}

/* Arena entries whose bytes overlap (same storage or not) must not be alive at once; the only
 * exception is an output and the input it is declared to overwrite. Sweeps the nodes keeping
 * the list of arena entries still to be read (small in real graphs). */
static pk_status check_overlaps(const pk_graph* g, const int32_t* last) {
    int32_t* live = malloc(((size_t)g->num_entries + 1) * sizeof *live);
    if (!live) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    int32_t nlive = 0;
    pk_status s = PK_OK;
    for (int32_t n = 0; n < g->num_nodes && !s; n++) {
        const pk_node* node = &g->nodes[n];
        int32_t kept = 0;
        for (int32_t q = 0; q < nlive; q++)
            if (last[live[q]] >= n) live[kept++] = live[q];
        nlive = kept;
        for (int32_t e = g->row_ptr[n]; e < g->row_ptr[n + 1] && !s; e++) {
            if (g->storage[g->entries[e].sid].kind != PK_ST_ARENA || !g->entries[e].bytes) continue;
            int32_t pos = pk_node_inplace_input(node, e - g->row_ptr[n]);
            int32_t over = pos < 0 ? -1 : node->inputs[pos];
            for (int32_t q = 0; q < nlive && !s; q++)
                if (live[q] != over && entries_overlap(g, e, live[q]))
                    s = pk_fail(PK_ERR_FORMAT,
                                GJ ": entry %d (node %d '%s') overlaps entry %d in the arena "
                                   "while that is still alive",
                                (int)e, (int)n, node->name, (int)live[q]);
            live[nlive++] = e;
        }
    }
    free(live);
    return s;
}

/* Sharing memory: in-place pairs, then byte overlaps between arena entries. */
static pk_status check_sharing(const pk_graph* g) {
    int32_t* last = last_uses(g);
    if (!last) return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    pk_status s = check_inplace(g, last);
    if (!s) s = check_overlaps(g, last);
    free(last);
    return s;
}

/* Sums the 64-aligned sizes of the arena and the input and output storages. */
static void plan_memory(pk_graph* g) {
    size_t off = pk_align_up(g->arena_bytes);
    for (int32_t i = 0; i < g->num_storage; i++) {
        pk_storage* st = &g->storage[i];
        if (st->kind != PK_ST_INPUT && st->kind != PK_ST_OUTPUT) continue;
        st->offset = off;
        off += pk_align_up(st->bytes);
    }
    g->memory_bytes = off;
}

/* ---- control flow: subgraphs and how they bind to their node ---- */

static pk_status parse_body(loader* L);

static int same_type(const pk_entry* a, const pk_entry* b) {
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape);
}

static int one_of(const pk_entry* en, pk_dtype dtype) {
    return en->dtype == (int32_t)dtype && en->bytes == pk_dtype_by_code(dtype)->size;
}

/* "graph.json: nodes[2] 'loop' body: <what>: <a> ..., the node's <b> is ..." */
static pk_status mismatch(int32_t n, const pk_node* node, const char* sub, const char* what,
                          const pk_entry* a, const char* other, const pk_entry* b) {
    char x[160], y[160];
    describe_entry(a, x, sizeof x);
    describe_entry(b, y, sizeof y);
    return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d] '%s' %s: %s is %s, %s is %s", (int)n, node->name,
                   sub, what, x, other, y);
}

/* A subgraph's inputs are the node's inputs (an if: after the condition), by position, of
 * the same dtype and shape; its outputs (heads) are the node's outputs (a loop: after its
 * condition, the carried values, also equal to the carried inputs, then one element of
 * each scan output, which holds max_trips of them). */
static pk_status check_binding(const pk_graph* g, int32_t n, int32_t k, const char* sub) {
    const pk_node* node = &g->nodes[n];
    const pk_graph* b = node->subs[k];
    int is_if = node->op == PK_NODE_IF;
    int32_t skip = is_if ? 1 : 0, heads_skip = is_if ? 0 : 1;
    if (is_if && (node->num_inputs < 1 || !one_of(&g->entries[node->inputs[0]], PK_BOOL)))
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s': the condition (input 0) must be one bool", (int)n,
                       node->name);
    if (!is_if && (node->num_inputs < 2 + node->num_carried ||
                   !one_of(&g->entries[node->inputs[0]], PK_INT64) ||
                   !one_of(&g->entries[node->inputs[1]], PK_BOOL)))
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s': a loop's inputs are one int64 (trip count), one bool "
                          "(condition), then its %d carried values",
                       (int)n, node->name, (int)node->num_carried);
    if (b->num_inputs != node->num_inputs - skip ||
        b->num_outputs != node->num_outputs + heads_skip)
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s' %s: has %d inputs and %d outputs, the node binds %d "
                          "and %d",
                       (int)n, node->name, sub, (int)b->num_inputs, (int)b->num_outputs,
                       (int)(node->num_inputs - skip), (int)(node->num_outputs + heads_skip));
    char what[64];
    for (int32_t j = 0; j < b->num_inputs; j++) {
        const pk_entry* in = &b->entries[b->input_entries[j]];
        const pk_entry* out = &g->entries[node->inputs[j + skip]];
        snprintf(what, sizeof what, "input %d", (int)j);
        if (!is_if && j < 2 ? !one_of(in, j ? PK_BOOL : PK_INT64) : !same_type(in, out))
            return mismatch(n, node, sub, what, in, "the node's input", out);
    }
    if (!is_if && !one_of(&b->entries[b->output_entries[0]], PK_BOOL))
        return pk_fail(PK_ERR_FORMAT,
                       GJ ": nodes[%d] '%s' %s: output 0 (the condition) must be one bool", (int)n,
                       node->name, sub);
    for (int32_t j = 0; j < node->num_outputs; j++) {
        const pk_entry* head = &b->entries[b->output_entries[j + heads_skip]];
        const pk_entry* out = &g->entries[g->row_ptr[n] + j];
        snprintf(what, sizeof what, "output %d", (int)(j + heads_skip));
        if (is_if || j < node->num_carried) {
            if (!same_type(head, out))
                return mismatch(n, node, sub, what, head, "the node's output", out);
            if (!is_if && !same_type(head, &b->entries[b->input_entries[2 + j]]))
                return mismatch(n, node, sub, what, head, "its carried input",
                                &b->entries[b->input_entries[2 + j]]);
            continue;
        }
        /* a scan output: the node's output is max_trips of the head, stacked */
        if (head->dtype != out->dtype || out->ndim != head->ndim + 1 ||
            out->shape[0] != node->max_trips ||
            memcmp(out->shape + 1, head->shape, (size_t)head->ndim * sizeof *head->shape))
            return mismatch(n, node, sub, what, head, "the node's scan output (max_trips of them)",
                            out);
    }
    return PK_OK;
}

/* Parses the subgraph object at token t into a new graph; errors inside it are prefixed
 * with where it sits ("graph.json: nodes[2] 'loop' body: nodes[0]...: ..."). */
static pk_status parse_sub(loader* L, int32_t t, int32_t n, int32_t k, const char* sub) {
    pk_node* node = &L->g->nodes[n];
    if (L->d.toks[t].type != PJ_OBJ)
        return pk_fail(PK_ERR_FORMAT, GJ ": nodes[%d] '%s' %s: expected an object", (int)n,
                       node->name, sub);
    if (!(node->subs[k] = calloc(1, sizeof(pk_graph))))
        return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
    loader C = *L;
    C.root = t;
    C.depth = L->depth + 1;
    C.g = node->subs[k];
    pk_status s = parse_body(&C);
    if (s) {
        char msg[1024];
        const char* inner = pk_last_error();
        if (!strncmp(inner, GJ ": ", sizeof GJ + 1)) inner += sizeof GJ + 1;
        snprintf(msg, sizeof msg, "%s", inner);
        return pk_fail(s, GJ ": nodes[%d] '%s' %s: %s", (int)n, node->name, sub, msg);
    }
    return check_binding(L->g, n, k, sub);
}

/* The subgraphs of each control-flow node: an if's "branches" (then, else), a loop's "body". */
static pk_status parse_subgraphs(loader* L) {
    pk_graph* g = L->g;
    pk_status s = PK_OK;
    int32_t t = pj_get(&L->d, L->root, "nodes") + 1;
    for (int32_t n = 0; n < g->num_nodes && !s; n++, t = L->d.toks[t].next) {
        pk_node* node = &g->nodes[n];
        if (node->op < PK_NODE_IF) continue;
        char where[48], sub[64];
        snprintf(where, sizeof where, "nodes[%d]", (int)n);
        if (L->depth >= PK_MAX_SUBGRAPH_DEPTH)
            return pk_fail(PK_ERR_FORMAT,
                           GJ ": nodes[%d] '%s': control-flow nodes nested more than %d deep",
                           (int)n, node->name, PK_MAX_SUBGRAPH_DEPTH);
        int is_if = node->op == PK_NODE_IF;
        int32_t first =
            field(L, t, where, is_if ? "branches" : "body", is_if ? PJ_ARR : PJ_OBJ, &s);
        if (s) return s;
        if (is_if) {
            snprintf(sub, sizeof sub, "%s.branches", where);
            if ((s = check_len(L, first, 2, sub))) return s;
            first++;
        }
        node->num_subs = is_if ? 2 : 1;
        if (!(node->subs = calloc((size_t)node->num_subs, sizeof *node->subs)))
            return pk_fail(PK_ERR_NOMEM, GJ ": out of memory");
        for (int32_t k = 0; k < node->num_subs && !s; k++, first = L->d.toks[first].next) {
            if (is_if)
                snprintf(sub, sizeof sub, "branches[%d]", (int)k);
            else
                snprintf(sub, sizeof sub, "body");
            s = parse_sub(L, first, n, k, sub);
        }
    }
    return s;
}

static pk_status check_header(loader* L) {
    pk_status s = PK_OK;
    int64_t version = 0;
    if (L->d.toks[0].type != PJ_OBJ)
        return pk_fail(PK_ERR_FORMAT, GJ ": top level is not an object");
    int32_t fmt = field(L, L->root, "(root)", "format", PJ_STR, &s);
    int32_t ver = field(L, L->root, "(root)", "version", PJ_NUM, &s);
    if (s) return s;
    if (!pj_streq(&L->d, fmt, "packager-graph"))
        return pk_fail(PK_ERR_FORMAT, GJ ": format is not \"packager-graph\"");
    if (!pj_int(&L->d, ver, &version) || version != 1)
        return pk_fail(PK_ERR_FORMAT, GJ ": version is not 1");
    return PK_OK;
}

/* Sizes of storages are summed in plan_memory; the limits in parse_storage_item (each
 * below INT64_MAX/2) do not bound the sum of many, so check it here. */
static pk_status check_total(const pk_graph* g) {
    uint64_t total = pk_align_up(g->arena_bytes);
    for (int32_t i = 0; i < g->num_storage; i++) {
        const pk_storage* st = &g->storage[i];
        if (st->kind != PK_ST_INPUT && st->kind != PK_ST_OUTPUT) continue;
        total += pk_align_up(st->bytes);
        if (total > (uint64_t)INT64_MAX / 2 || total > SIZE_MAX / 2)
            return pk_fail(PK_ERR_FORMAT, GJ ": input and output storages are too large");
    }
    return PK_OK;
}

/* Everything of a graph object after the header: the document's top or a subgraph. */
static pk_status parse_body(loader* L) {
    pk_graph* g = L->g;
    pk_status s;
    if (!(s = parse_nodes(L)) && !(s = parse_attrs(L)) && !(s = parse_storage(L)) &&
        !(s = check_arg_nodes(L)) && !(s = parse_io(L)) && !(s = check_names(g)) &&
        !(s = check_storage_use(g)) && !(s = check_total(g)) && !(s = check_lifetimes(g)) &&
        !(s = check_sharing(g)) && !(s = resolve_kernels(g, L->depth)) && !(s = parse_subgraphs(L)))
        plan_memory(g);
    return s;
}

pk_status pk_graph_parse(pk_graph* g, const char* json, size_t json_len) {
    loader L;
    L.g = g;
    L.root = 0;
    L.depth = 0;
    pk_status s = pj_parse(&L.d, json, json_len, GJ);
    if (s) return s;
    if (!(s = check_header(&L))) s = parse_body(&L);
    pj_free(&L.d);
    return s;
}
