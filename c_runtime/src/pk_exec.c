/* Graph lifetime and execution: create/destroy, binding params and memory, running nodes,
 * copying inputs and outputs. */
#include "pk_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PB "params.bin"

pk_status pk_graph_bind_params(pk_graph* g, const void* params, size_t params_len) {
    pk_param* t;
    int32_t n;
    pk_status s = pk_params_parse(params, params_len, &t, &n);
    if (s) return s;
    for (int32_t i = 0; i < g->num_entries && !s; i++) {
        const pk_entry* en = &g->entries[i];
        pk_storage* st = &g->storage[en->sid];
        if (st->kind != PK_ST_PARAM) continue;
        size_t len = strlen(st->param);
        const pk_param* p = NULL;
        for (int32_t k = 0; k < n && !p; k++)
            if (t[k].name_len == len && memcmp(t[k].name, st->param, len) == 0) p = &t[k];
        if (!p) {
            s = pk_fail(PK_ERR_FORMAT, PB ": no tensor '%s' (param of entry %d)", st->param,
                        (int)i);
        } else if (p->dtype != en->dtype || p->ndim != en->ndim ||
                   memcmp(p->shape, en->shape, (size_t)en->ndim * sizeof *en->shape) != 0 ||
                   p->bytes != st->bytes) {
            s = pk_fail(PK_ERR_FORMAT,
                        PB ": tensor '%s' has dtype %s, ndim %d, %zu bytes; graph.json entry %d "
                           "wants dtype %s, ndim %d, %zu bytes (or a different shape)",
                        st->param, pk_dtype_name((pk_dtype)p->dtype), (int)p->ndim, p->bytes,
                        (int)i, pk_dtype_name((pk_dtype)en->dtype), (int)en->ndim, st->bytes);
        } else {
            st->ptr = (unsigned char*)(uintptr_t)p->data; /* kernels take void*, never write */
        }
    }
    free(t);
    /* subgraphs' params are tensors of the same params.bin */
    for (int32_t n = 0; n < g->num_nodes && !s; n++)
        for (int32_t k = 0; k < g->nodes[n].num_subs && !s; k++)
            s = pk_graph_bind_params(g->nodes[n].subs[k], params, params_len);
    return s;
}

static int overlaps(const void* a, size_t an, const void* b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

/* A kernel's outputs must not overlap any other of its arguments (generated kernels declare
 * them `restrict`), except an output declared in place over an input, which must be exactly
 * that input's buffer (its kernel was generated for that). */
static pk_status check_aliasing(const pk_graph* g, int32_t n) {
    const pk_node* node = &g->nodes[n];
    int32_t nargs = node->num_inputs + node->num_outputs;
    for (int32_t a = node->num_inputs; a < nargs; a++) {
        size_t abytes = g->entries[g->row_ptr[n] + a - node->num_inputs].bytes;
        int32_t over = pk_node_inplace_input(node, a - node->num_inputs);
        for (int32_t b = 0; b < nargs; b++) {
            if (b == a) continue;
            int32_t eb =
                b < node->num_inputs ? node->inputs[b] : g->row_ptr[n] + b - node->num_inputs;
            if (b == over && node->args[a] == node->args[b] && abytes == g->entries[eb].bytes)
                continue;
            if (overlaps(node->args[a], abytes, node->args[b], g->entries[eb].bytes))
                return pk_fail(PK_ERR_FORMAT,
                               "graph.json: nodes[%d] '%s': argument %d overlaps argument %d "
                               "in memory",
                               (int)n, node->name, (int)a, (int)b);
        }
    }
    return PK_OK;
}

/* A subgraph has memory of its own (its arena, inputs and outputs), allocated at load;
 * its inputs are set by the node that runs it, before every run. */
static pk_status place_sub(pk_graph* sub) {
    unsigned char* memory = pk_aligned_alloc(sub->memory_bytes);
    if (!memory)
        return pk_fail(PK_ERR_NOMEM, "cannot allocate %zu bytes of subgraph memory",
                       sub->memory_bytes);
    sub->own_memory = 1;
    memset(sub->input_set, 1, (size_t)sub->num_inputs);
    return pk_graph_place(sub, memory);
}

pk_status pk_graph_place(pk_graph* g, unsigned char* memory) {
    g->memory = memory;
    for (int32_t i = 0; i < g->num_storage; i++) {
        pk_storage* st = &g->storage[i];
        if (st->kind != PK_ST_PARAM) st->ptr = memory + st->offset;
    }
    for (int32_t n = 0; n < g->num_nodes; n++) {
        pk_node* node = &g->nodes[n];
        for (int32_t k = 0; k < node->num_subs; k++) {
            pk_status s = place_sub(node->subs[k]);
            if (s) return s;
        }
        if (node->op != PK_NODE_KERNEL) continue;
        node->args = calloc((size_t)node->num_inputs + (size_t)node->num_outputs, sizeof(void*));
        if (!node->args) return pk_fail(PK_ERR_NOMEM, "out of memory for kernel arguments");
        for (int32_t k = 0; k < node->num_inputs; k++)
            node->args[k] = g->storage[g->entries[node->inputs[k]].sid].ptr;
        for (int32_t k = 0; k < node->num_outputs; k++)
            node->args[node->num_inputs + k] = g->storage[g->entries[g->row_ptr[n] + k].sid].ptr;
        pk_status s = check_aliasing(g, n);
        if (s) return s;
    }
    return PK_OK;
}

void pk_graph_free_parts(pk_graph* g) {
    if (g->dev) {
        g->dev->free(g);
        g->dev->release(g);
    }
    free(g->valid);
    free(g->device_name);
    free(g->dir);
    free(g->accel_stats);
    for (int32_t n = 0; g->nodes && n < g->num_nodes; n++) {
        free(g->nodes[n].name);
        free(g->nodes[n].func);
        free(g->nodes[n].inputs);
        free(g->nodes[n].args);
        free(g->nodes[n].inplace);
        free(g->nodes[n].ops);
        for (int32_t k = 0; g->nodes[n].subs && k < g->nodes[n].num_subs; k++) {
            if (g->nodes[n].subs[k]) pk_graph_free_parts(g->nodes[n].subs[k]);
            free(g->nodes[n].subs[k]);
        }
        free(g->nodes[n].subs);
    }
    for (int32_t i = 0; g->storage && i < g->num_storage; i++)
        free(g->storage[i].param);
    for (int32_t i = 0; g->output_names && i < g->num_outputs; i++)
        free(g->output_names[i]);
    free(g->nodes);
    free(g->row_ptr);
    free(g->entries);
    free(g->dims);
    free(g->storage);
    free(g->input_entries);
    free(g->output_entries);
    free(g->output_names);
    free(g->input_set);
    if (g->own_memory) pk_aligned_free(g->memory);
    pk_aligned_free(g->own_params);
    memset(g, 0, sizeof *g);
}

static int host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* The device backend of a graph with device nodes: every entry starts valid on the host only,
 * params on both (the backend uploads them once). */
static pk_status attach_device(pk_graph* g, const void* params) {
    static const pk_backend* const backends[PK_DEV_COUNT] = {
        NULL,
#ifdef PK_OPENCL
        &pk_opencl_backend,
#else
        NULL,
#endif
#ifdef PK_ACCEL
        &pk_accel_backend,
#else
        NULL,
#endif
    };
    g->params = params;
    for (int32_t n = 0; n < g->num_nodes; n++) {
        const pk_backend* b = backends[g->nodes[n].device];
        if (b && g->dev && b != g->dev)
            return pk_fail(PK_ERR_FORMAT,
                           "graph.json: nodes[%d] '%s' runs on %s, but an earlier node runs on "
                           "%s: a graph uses one device besides the cpu",
                           (int)n, g->nodes[n].name, b->name, g->dev->name);
        if (b) g->dev = b;
    }
    if (!g->dev) return PK_OK;
    if (!(g->valid = malloc((size_t)g->num_entries + 1)))
        return pk_fail(PK_ERR_NOMEM, "out of memory");
    for (int32_t e = 0; e < g->num_entries; e++)
        g->valid[e] = g->storage[g->entries[e].sid].kind == PK_ST_PARAM ? PK_ON_HOST | PK_ON_DEVICE
                                                                        : PK_ON_HOST;
    pk_status s = g->dev->init(g);
    return s ? s : g->dev->alloc(g);
}

/* Takes ownership of own_params (may be NULL) and dir (the bundle directory, may be NULL)
 * whatever the outcome. */
static pk_status create(const char* json, size_t json_len, const void* params, size_t params_len,
                        void* own_params, char* dir, void* memory, size_t memory_len,
                        pk_graph** out) {
    char env_error[256];
    pk_status s = PK_OK;
    *out = NULL;
    if (pk_parallel_env_error(env_error, sizeof env_error)) {
        pk_aligned_free(own_params);
        free(dir);
        return pk_fail(PK_ERR_ARG, "%s", env_error);
    }
    pk_graph* g = calloc(1, sizeof *g);
    if (!g) {
        pk_aligned_free(own_params);
        free(dir);
        return pk_fail(PK_ERR_NOMEM, "out of memory");
    }
    g->own_params = own_params;
    g->dir = dir;
    if (!host_is_little_endian()) s = pk_fail(PK_ERR_ARG, "big-endian hosts are not supported");
    if (!s && ((uintptr_t)params % PK_ALIGN) != 0) {
        /* Misaligned caller buffer: copy once so every tensor is 64-byte aligned. */
        if (!(g->own_params = pk_aligned_alloc(params_len)))
            s = pk_fail(PK_ERR_NOMEM, PB ": no memory to copy %zu bytes", params_len);
        else
            params = memcpy(g->own_params, params, params_len);
    }
    if (!s) s = pk_graph_parse(g, json, json_len);
    if (!s) s = pk_graph_bind_params(g, params, params_len);
    if (!s && memory && ((uintptr_t)memory % PK_ALIGN != 0 || memory_len < g->memory_bytes))
        s = pk_fail(PK_ERR_ARG, "memory must be 64-byte aligned and at least %zu bytes",
                    g->memory_bytes);
    if (!s && !memory) {
        g->own_memory = 1;
        if (!(memory = pk_aligned_alloc(g->memory_bytes)))
            s = pk_fail(PK_ERR_NOMEM, "cannot allocate %zu bytes of tensor memory",
                        g->memory_bytes);
    }
    if (!s) s = pk_graph_place(g, memory);
    if (!s) s = attach_device(g, params);
    if (s) {
        pk_graph_destroy(g);
        return s;
    }
    *out = g;
    return PK_OK;
}

pk_status pk_graph_create(const char* json, size_t json_len, const void* params, size_t params_len,
                          void* memory, size_t memory_len, pk_graph** out) {
    if (!out) return pk_fail(PK_ERR_ARG, "pk_graph_create: out is NULL");
    *out = NULL;
    if (!json || (!params && params_len))
        return pk_fail(PK_ERR_ARG, "pk_graph_create: json or params is NULL");
    return create(json, json_len, params ? params : "", params_len, NULL, NULL, memory, memory_len,
                  out);
}

pk_status pk_graph_memory_bytes(const char* json, size_t json_len, size_t* out) {
    pk_graph g;
    memset(&g, 0, sizeof g);
    if (!json || !out) return pk_fail(PK_ERR_ARG, "pk_graph_memory_bytes: NULL argument");
    pk_status s = pk_graph_parse(&g, json, json_len);
    *out = s ? 0 : g.memory_bytes;
    pk_graph_free_parts(&g);
    return s;
}

/* DIR/NAME in a new malloc'ed string (no length limit of our own), or NULL. */
static char* join_path(const char* dir, const char* name) {
    size_t a = strlen(dir), b = strlen(name);
    char* p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

pk_status pk_graph_load_dir(const char* dir, pk_graph** out) {
    void *json = NULL, *params = NULL;
    size_t json_len = 0, params_len = 0;
    if (!out || !dir) return pk_fail(PK_ERR_ARG, "pk_graph_load_dir: NULL argument");
    *out = NULL;
    char* gpath = join_path(dir, "graph.json");
    char* ppath = join_path(dir, "params.bin");
    pk_status s = gpath && ppath ? PK_OK : pk_fail(PK_ERR_NOMEM, "out of memory");
    if (!s) s = pk_read_file(gpath, &json, &json_len);
    if (!s) s = pk_read_file(ppath, &params, &params_len);
    char* own_dir = s ? NULL : malloc(strlen(dir) + 1);
    if (!s && !own_dir) s = pk_fail(PK_ERR_NOMEM, "out of memory");
    if (!s)
        s = create(json, json_len, params, params_len, params, strcpy(own_dir, dir), NULL, 0, out);
    else
        pk_aligned_free(params);
    pk_aligned_free(json);
    free(gpath);
    free(ppath);
    return s;
}

void pk_graph_destroy(pk_graph* g) {
    if (!g) return;
    pk_graph_free_parts(g);
    free(g);
    pk_scratch_release();
}

int32_t pk_graph_num_inputs(const pk_graph* g) {
    return g ? g->num_inputs : 0;
}

int32_t pk_graph_num_outputs(const pk_graph* g) {
    return g ? g->num_outputs : 0;
}

static void entry_info(const pk_graph* g, int32_t e, const char* name, pk_tensor_info* out) {
    out->dtype = (pk_dtype)g->entries[e].dtype;
    out->ndim = g->entries[e].ndim;
    out->shape = g->entries[e].shape;
    out->bytes = g->entries[e].bytes;
    out->name = name;
}

static pk_status check_index(const pk_graph* g, int32_t i, int32_t n, const char* what) {
    if (!g) return pk_fail(PK_ERR_ARG, "%s: graph is NULL", what);
    if (i < 0 || i >= n)
        return pk_fail(PK_ERR_ARG, "%s: index %d is not in [0, %d)", what, (int)i, (int)n);
    return PK_OK;
}

pk_status pk_graph_input_info(const pk_graph* g, int32_t i, pk_tensor_info* out) {
    pk_status s = check_index(g, i, pk_graph_num_inputs(g), "input");
    if (s) return s;
    int32_t e = g->input_entries[i];
    entry_info(g, e, g->nodes[g->entries[e].node].name, out);
    return PK_OK;
}

pk_status pk_graph_output_info(const pk_graph* g, int32_t i, pk_tensor_info* out) {
    pk_status s = check_index(g, i, pk_graph_num_outputs(g), "output");
    if (s) return s;
    entry_info(g, g->output_entries[i], g->output_names[i], out);
    return PK_OK;
}

int32_t pk_graph_input_index(const pk_graph* g, const char* name) {
    for (int32_t i = 0; g && name && i < g->num_inputs; i++)
        if (!strcmp(g->nodes[g->entries[g->input_entries[i]].node].name, name)) return i;
    return -1;
}

int32_t pk_graph_output_index(const pk_graph* g, const char* name) {
    for (int32_t i = 0; g && name && i < g->num_outputs; i++)
        if (!strcmp(g->output_names[i], name)) return i;
    return -1;
}

pk_status pk_graph_set_input(pk_graph* g, int32_t i, const void* data, size_t bytes) {
    pk_status s = check_index(g, i, pk_graph_num_inputs(g), "set_input");
    if (s) return s;
    const pk_entry* en = &g->entries[g->input_entries[i]];
    if (bytes != en->bytes)
        return pk_fail(PK_ERR_ARG, "set_input: input %d '%s' takes %zu bytes, got %zu", (int)i,
                       g->nodes[en->node].name, en->bytes, bytes);
    if (bytes && !data) return pk_fail(PK_ERR_ARG, "set_input: data is NULL");
    if (bytes) memcpy(g->storage[en->sid].ptr, data, bytes);
    if (g->valid) g->valid[g->input_entries[i]] = PK_ON_HOST;
    g->input_set[i] = 1;
    return PK_OK;
}

/* The CPU backend: kernels read and write host memory directly, nothing to set up or copy. */
static pk_status cpu_run(pk_graph* g, int32_t n, double* device_ms) {
    const pk_node* node = &g->nodes[n];
    int32_t rc = node->fn(node->args);
    (void)device_ms;
    if (rc != 0)
        return pk_fail(PK_ERR_KERNEL, "run: node %d '%s' (func %s) failed with code %d", (int)n,
                       node->name, node->func, (int)rc);
    return PK_OK;
}

static pk_status cpu_nothing(pk_graph* g) {
    (void)g;
    return PK_OK;
}

static void cpu_nothing_void(pk_graph* g) {
    (void)g;
}

static pk_status cpu_no_copy(pk_graph* g, int32_t e) {
    (void)g;
    (void)e;
    return PK_OK;
}

const pk_backend pk_cpu_backend = {"cpu",       cpu_nothing,      cpu_nothing_void,
                                   cpu_nothing, cpu_nothing_void, cpu_no_copy,
                                   cpu_no_copy, cpu_run,          cpu_nothing};

/* Device copies, all of them: entry e's value is made valid at `where` (PK_ON_HOST or
 * PK_ON_DEVICE) by copying it from the other side when it is not there yet. */
static pk_status make_valid(pk_graph* g, int32_t e, unsigned char where) {
    if (g->valid[e] & where) return PK_OK;
    pk_status s = where == PK_ON_DEVICE ? g->dev->copy_in(g, e) : g->dev->copy_out(g, e);
    if (s) return s;
    g->valid[e] |= where;
    g->copies++;
    return PK_OK;
}

static pk_status stage_inputs(pk_graph* g, int32_t n, unsigned char where) {
    pk_status s = PK_OK;
    for (int32_t k = 0; k < g->nodes[n].num_inputs && !s; k++)
        s = make_valid(g, g->nodes[n].inputs[k], where);
    return s;
}

static unsigned char* entry_ptr(const pk_graph* g, int32_t e) {
    return g->storage[g->entries[e].sid].ptr;
}

/* Entry de of dst takes the value of entry se of src (the load checked their sizes). */
static void copy_entry(const pk_graph* dst, int32_t de, const pk_graph* src, int32_t se) {
    if (dst->entries[de].bytes)
        memmove(entry_ptr(dst, de), entry_ptr(src, se), dst->entries[de].bytes);
}

/* An if: the branch its condition picks runs on the node's other inputs. */
static pk_status run_if(pk_graph* g, int32_t n) {
    const pk_node* node = &g->nodes[n];
    pk_graph* b = node->subs[*entry_ptr(g, node->inputs[0]) ? 0 : 1];
    for (int32_t j = 0; j < b->num_inputs; j++)
        copy_entry(b, b->input_entries[j], g, node->inputs[j + 1]);
    pk_status s = pk_graph_run_nodes(b, NULL, NULL);
    for (int32_t j = 0; j < node->num_outputs && !s; j++)
        copy_entry(g, g->row_ptr[n] + j, b, b->output_entries[j]);
    return s;
}

/* A loop: the body runs while the iteration is below the trip count and the condition
 * holds, carrying values from one iteration to the next and stacking its scan outputs. It
 * never runs more than max_trips iterations: a model that would is stopped with an error. */
static pk_status run_loop(pk_graph* g, int32_t n) {
    const pk_node* node = &g->nodes[n];
    pk_graph* b = node->subs[0];
    int32_t nc = node->num_carried, nscan = node->num_outputs - nc;
    int64_t trips, i = 0;
    memcpy(&trips, entry_ptr(g, node->inputs[0]), sizeof trips);
    unsigned char cond = *entry_ptr(g, node->inputs[1]) != 0;
    for (int32_t j = 2; j < b->num_inputs; j++)
        copy_entry(b, b->input_entries[j], g, node->inputs[j]);
    for (int32_t j = 0; j < nc; j++) /* what a loop of no iterations gives */
        copy_entry(g, g->row_ptr[n] + j, g, node->inputs[2 + j]);
    for (; i < trips && cond; i++) {
        if (i >= node->max_trips)
            return pk_fail(PK_ERR_KERNEL,
                           "run: node %d '%s': the loop did not end within %lld iterations "
                           "(its max_trips)",
                           (int)n, node->name, (long long)node->max_trips);
        memcpy(entry_ptr(b, b->input_entries[0]), &i, sizeof i);
        *entry_ptr(b, b->input_entries[1]) = cond;
        pk_status s = pk_graph_run_nodes(b, NULL, NULL);
        if (s) return s;
        cond = *entry_ptr(b, b->output_entries[0]) != 0;
        for (int32_t j = 0; j < nscan; j++) {
            int32_t head = b->output_entries[1 + nc + j];
            size_t bytes = b->entries[head].bytes;
            if (bytes)
                memcpy(entry_ptr(g, g->row_ptr[n] + nc + j) + (size_t)i * bytes, entry_ptr(b, head),
                       bytes);
        }
        /* through the node's outputs: a carried head may be another carried input */
        for (int32_t j = 0; j < nc; j++)
            copy_entry(g, g->row_ptr[n] + j, b, b->output_entries[1 + j]);
        for (int32_t j = 0; j < nc; j++)
            copy_entry(b, b->input_entries[2 + j], g, g->row_ptr[n] + j);
    }
    if (nscan && i != node->max_trips)
        return pk_fail(PK_ERR_KERNEL,
                       "run: node %d '%s': the loop ran %lld iterations, but its scan outputs "
                       "hold %lld",
                       (int)n, node->name, (long long)i, (long long)node->max_trips);
    return PK_OK;
}

/* Runs every kernel in order; with a clock, adds each node's time to node_ms[n] (device
 * nodes: the host time of their copies plus the device's own time of the kernel). */
pk_status pk_graph_run_nodes(pk_graph* g, double (*clock_ms)(void), double* node_ms) {
    if (!g) return pk_fail(PK_ERR_ARG, "run: graph is NULL");
    for (int32_t i = 0; i < g->num_inputs; i++)
        if (!g->input_set[i])
            return pk_fail(PK_ERR_ARG, "run: input %d '%s' was never set", (int)i,
                           g->nodes[g->entries[g->input_entries[i]].node].name);
    for (int32_t n = 0; n < g->num_nodes; n++) {
        const pk_node* node = &g->nodes[n];
        if (node->op < PK_NODE_KERNEL) continue;
        unsigned char where = node->device == PK_DEV_CPU ? PK_ON_HOST : PK_ON_DEVICE;
        double start = clock_ms ? clock_ms() : 0, device_ms = 0;
        pk_status s = g->dev ? stage_inputs(g, n, where) : PK_OK;
        if (!s && node->device == PK_DEV_CPU) {
            /* a direct call: the CPU path stays as cheap as before; subgraphs run on the CPU */
            s = node->op == PK_NODE_KERNEL ? cpu_run(g, n, NULL)
                : node->op == PK_NODE_IF   ? run_if(g, n)
                                           : run_loop(g, n);
            if (clock_ms) node_ms[n] += clock_ms() - start;
        } else if (!s) {
            double staged = clock_ms ? clock_ms() : 0;
            s = g->dev->run(g, n, clock_ms ? &device_ms : NULL);
            if (clock_ms) node_ms[n] += staged - start + device_ms;
        }
        if (s) return s;
        for (int32_t e = g->row_ptr[n]; g->dev && e < g->row_ptr[n + 1]; e++)
            g->valid[e] = where;
    }
    if (!g->dev) return PK_OK;
    pk_status s = PK_OK;
    for (int32_t i = 0; i < g->num_outputs && !s; i++)
        s = make_valid(g, g->output_entries[i], PK_ON_HOST);
    return s ? s : g->dev->sync(g);
}

pk_status pk_graph_run(pk_graph* g) {
    return pk_graph_run_nodes(g, NULL, NULL);
}

pk_status pk_graph_run_profiled(pk_graph* g, double (*clock_ms)(void), double* node_ms) {
    if (!clock_ms || !node_ms) return pk_fail(PK_ERR_ARG, "run_profiled: clock or times is NULL");
    return pk_graph_run_nodes(g, clock_ms, node_ms);
}

int32_t pk_graph_num_nodes(const pk_graph* g) {
    return g ? g->num_nodes : 0;
}

const char* pk_graph_node_name(const pk_graph* g, int32_t n) {
    return (g && n >= 0 && n < g->num_nodes) ? g->nodes[n].name : NULL;
}

const char* pk_graph_node_func(const pk_graph* g, int32_t n) {
    if (!g || n < 0 || n >= g->num_nodes || g->nodes[n].op < PK_NODE_KERNEL) return NULL;
    if (g->nodes[n].op == PK_NODE_KERNEL) return g->nodes[n].func;
    return g->nodes[n].op == PK_NODE_IF ? "(if)" : "(loop)"; /* timed with its subgraphs */
}

const char* pk_graph_node_device(const pk_graph* g, int32_t n) {
    if (!pk_graph_node_func(g, n)) return NULL;
    return g->nodes[n].device == PK_DEV_CPU ? pk_cpu_backend.name : g->dev->name;
}

const char* pk_graph_node_ops(const pk_graph* g, int32_t n) {
    return pk_graph_node_func(g, n) ? g->nodes[n].ops : NULL;
}

double pk_graph_node_flops(const pk_graph* g, int32_t n) {
    return pk_graph_node_func(g, n) ? g->nodes[n].flops : -1;
}

double pk_graph_node_bytes(const pk_graph* g, int32_t n) {
    return pk_graph_node_func(g, n) ? g->nodes[n].bytes : -1;
}

const char* pk_graph_device_name(const pk_graph* g) {
    return g ? g->device_name : NULL;
}

int pk_graph_node_accel_stats(const pk_graph* g, int32_t n, pk_accel_stats* out) {
    if (!g || !g->accel_stats || n < 0 || n >= g->num_nodes || !out ||
        g->nodes[n].op != PK_NODE_KERNEL || g->nodes[n].device != PK_DEV_ACCEL)
        return 0;
    *out = g->accel_stats[n];
    return 1;
}

int64_t pk_graph_copy_count(const pk_graph* g) {
    return g ? g->copies : 0;
}

pk_status pk_graph_get_output(const pk_graph* g, int32_t i, void* dst, size_t bytes) {
    pk_status s = check_index(g, i, pk_graph_num_outputs(g), "get_output");
    if (s) return s;
    const pk_entry* en = &g->entries[g->output_entries[i]];
    if (bytes != en->bytes)
        return pk_fail(PK_ERR_ARG, "get_output: output %d '%s' has %zu bytes, got %zu", (int)i,
                       g->output_names[i], en->bytes, bytes);
    if (bytes && !dst) return pk_fail(PK_ERR_ARG, "get_output: dst is NULL");
    if (bytes) memcpy(dst, g->storage[en->sid].ptr, bytes);
    return PK_OK;
}
