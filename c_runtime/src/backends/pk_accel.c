/* The accelerator backend (built with PK_ACCEL, on the simulator or the board driver of
 * c_runtime/accel/): the bundle's kernels/program.accel checked whole at load, one program
 * per accel node by its func, device mirrors of the host `memory` region and of params.bin
 * at the same offsets, each program's micro-ops in device memory, and one instruction buffer
 * per node relocated once at load (the memory plan fixes every argument's offset), so a run
 * only starts the device and waits. */
#ifdef PK_ACCEL
#include "pk_accel.h"
#include "pk_accel_program.h"
#include "pk_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef PK_ACCEL_UIO
#define DRIVER "uio"
#else
#define DRIVER "sim"
#endif
#define TIMEOUT_MS 10000 /* a run of one kernel; the cycle model's longest are milliseconds */

typedef struct {
    pk_accel* dev;
    void* bytes; /* the program file, which `file` points into */
    pk_accel_file file;
    int32_t* prog; /* per node: its program, -1 for the others */
    pk_accel_buf memory, params;
    pk_accel_buf* uops;  /* per program */
    pk_accel_buf* insns; /* per node */
} accel_state;

static pk_status driver_fail(const accel_state* st, int rc, const char* what) {
    return pk_fail(PK_ERR_DEVICE, "accel (%s): %s failed with code %d: %s", DRIVER, what, rc,
                   st->dev ? pk_accel_last_error(st->dev) : "the device did not open");
}

static int on_accel(const pk_graph* g, int32_t n) {
    return g->nodes[n].op == PK_NODE_KERNEL && g->nodes[n].device == PK_DEV_ACCEL;
}

static int32_t arg_entry(const pk_graph* g, int32_t n, int32_t k) {
    const pk_node* node = &g->nodes[n];
    return k < node->num_inputs ? node->inputs[k] : g->row_ptr[n] + k - node->num_inputs;
}

/* Each accel node's program, by its func, checked against the node's arguments. */
static pk_status bind_nodes(pk_graph* g, accel_state* st) {
    size_t* bytes = malloc(((size_t)g->num_entries + 1) * sizeof *bytes);
    pk_status s = bytes ? PK_OK : pk_fail(PK_ERR_NOMEM, "out of memory");
    for (int32_t n = 0; n < g->num_nodes && !s; n++) {
        const pk_node* node = &g->nodes[n];
        char where[160];
        st->prog[n] = on_accel(g, n) ? pk_accel_file_find(&st->file, node->func) : -1;
        if (!on_accel(g, n)) continue;
        if (st->prog[n] < 0) {
            s = pk_fail(PK_ERR_FORMAT,
                        PK_ACCEL_FILE ": no program '%s' for graph.json nodes[%d] '%s' (device "
                                      "accel)",
                        node->func, (int)n, node->name);
            break;
        }
        int32_t nargs = node->num_inputs + node->num_outputs;
        for (int32_t k = 0; k < nargs; k++)
            bytes[k] = g->entries[arg_entry(g, n, k)].bytes;
        snprintf(where, sizeof where, "graph.json nodes[%d] '%.100s'", (int)n, node->name);
        s = pk_accel_check_args(&st->file, st->prog[n], bytes, nargs, where);
    }
    free(bytes);
    return s;
}

static pk_status accel_init(pk_graph* g) {
    accel_state* st = calloc(1, sizeof *st);
    if (!st) return pk_fail(PK_ERR_NOMEM, "out of memory");
    g->dev_state = st;
    st->prog = malloc(((size_t)g->num_nodes + 1) * sizeof *st->prog);
    g->accel_stats = calloc((size_t)g->num_nodes + 1, sizeof *g->accel_stats);
    g->device_name = malloc(sizeof DRIVER);
    if (!st->prog || !g->accel_stats || !g->device_name)
        return pk_fail(PK_ERR_NOMEM, "out of memory");
    strcpy(g->device_name, DRIVER);
    if (!g->dir)
        return pk_fail(
            PK_ERR_ARG,
            "graph.json: kernels run on accel, whose programs are the bundle's " PK_ACCEL_FILE
            ": load the bundle with pk_graph_load_dir");
    size_t len = strlen(g->dir) + sizeof PK_ACCEL_FILE + 1, size;
    char* path = malloc(len);
    if (!path) return pk_fail(PK_ERR_NOMEM, "out of memory");
    snprintf(path, len, "%s/%s", g->dir, PK_ACCEL_FILE);
    pk_status s = pk_read_file(path, &st->bytes, &size);
    free(path);
    if (!s) s = pk_accel_file_parse(st->bytes, size, &st->file);
    if (!s) s = bind_nodes(g, st);
    if (s) return s;
    const pk_accel_file_config* c = &st->file.cfg;
    pk_accel_config cfg = {c->batch,     c->block_in,           c->block_out, c->uop_depth,
                           c->inp_depth, c->wgt_depth,          c->acc_depth, c->dma_latency_cycles,
                           c->clock_mhz, c->dma_bytes_per_cycle};
    int rc = pk_accel_open(&cfg, getenv("PACKAGER_ACCEL_DEVICE"), &st->dev);
    return rc ? driver_fail(st, rc, "opening the device") : PK_OK;
}

static void accel_release(pk_graph* g) {
    accel_state* st = g->dev_state;
    if (!st) return;
    if (st->dev) pk_accel_close(st->dev);
    pk_accel_file_free(&st->file);
    pk_aligned_free(st->bytes);
    free(st->prog);
    free(st);
    g->dev_state = NULL;
}

/* The device buffer and byte offset of entry e (the same offset as on the host). */
static const pk_accel_buf* entry_buffer(const pk_graph* g, int32_t e, size_t* offset) {
    const accel_state* st = g->dev_state;
    const pk_storage* s = &g->storage[g->entries[e].sid];
    int param = s->kind == PK_ST_PARAM;
    *offset = (size_t)(s->ptr - (param ? g->params : g->memory));
    return param ? &st->params : &st->memory;
}

/* The end of the params the accel nodes read (0: none, no mirror). */
static size_t params_bytes(const pk_graph* g) {
    size_t end = 0;
    for (int32_t n = 0; n < g->num_nodes; n++)
        for (int32_t k = 0; on_accel(g, n) && k < g->nodes[n].num_inputs; k++) {
            const pk_storage* s = &g->storage[g->entries[g->nodes[n].inputs[k]].sid];
            if (s->kind == PK_ST_PARAM && (size_t)(s->ptr - g->params) + s->bytes > end)
                end = (size_t)(s->ptr - g->params) + s->bytes;
        }
    return end;
}

/* A device buffer holding a copy of `bytes` (at least 1 byte, flushed). */
static pk_status upload(accel_state* st, const void* data, size_t bytes, pk_accel_buf* buf,
                        const char* what) {
    int rc = pk_accel_alloc(st->dev, bytes ? bytes : 1, buf);
    if (rc) return driver_fail(st, rc, what);
    if (bytes) memcpy(buf->host, data, bytes);
    rc = pk_accel_flush(st->dev, buf, 0, bytes ? bytes : 1);
    return rc ? driver_fail(st, rc, what) : PK_OK;
}

/* Node n's instructions with every dram_base turned into a physical address: its region's
 * (an argument's place in a mirror, or the program's micro-ops) plus the offset there. */
static pk_status relocate(pk_graph* g, accel_state* st, int32_t n) {
    const pk_accel_prog* p = &st->file.progs[st->prog[n]];
    pk_accel_buf* buf = &st->insns[n];
    pk_status s = upload(st, p->insns, (size_t)p->n_insns * PK_ACCEL_INSN_BYTES, buf,
                         "allocating instructions");
    for (uint32_t i = 0; i < p->n_insns && !s; i++) {
        unsigned char* w = (unsigned char*)buf->host + (size_t)i * PK_ACCEL_INSN_BYTES;
        int32_t r = p->region[i];
        size_t offset = 0;
        const pk_accel_buf* base = r == PK_ACCEL_UOPS ? &st->uops[st->prog[n]]
                                   : r >= 0           ? entry_buffer(g, arg_entry(g, n, r), &offset)
                                                      : NULL;
        if (!base) continue;
        uint64_t phys = (uint64_t)base->phys + offset + pk_accel_insn_dram_base(w);
        if (phys > UINT32_MAX)
            return pk_fail(PK_ERR_DEVICE,
                           "accel: node %d '%s' instruction %u: address %llu past 32 bits", (int)n,
                           g->nodes[n].name, (unsigned)i, (unsigned long long)phys);
        pk_accel_insn_set_dram_base(w, (uint32_t)phys);
    }
    int rc = s ? 0 : pk_accel_flush(st->dev, buf, 0, buf->size);
    return rc ? driver_fail(st, rc, "flushing instructions") : s;
}

static pk_status accel_alloc(pk_graph* g) {
    accel_state* st = g->dev_state;
    int32_t count = st->file.count;
    st->uops = calloc((size_t)count + 1, sizeof *st->uops);
    st->insns = calloc((size_t)g->num_nodes + 1, sizeof *st->insns);
    if (!st->uops || !st->insns) return pk_fail(PK_ERR_NOMEM, "out of memory");
    /* the tensor mirror's contents come with the copies */
    int rc = pk_accel_alloc(st->dev, g->memory_bytes ? g->memory_bytes : 1, &st->memory);
    pk_status s = rc ? driver_fail(st, rc, "allocating tensor memory") : PK_OK;
    if (!s) s = upload(st, g->params, params_bytes(g), &st->params, "uploading params");
    for (int32_t k = 0; k < count && !s; k++) {
        const pk_accel_prog* p = &st->file.progs[k];
        s = upload(st, p->uops, (size_t)p->n_uops * PK_ACCEL_UOP_BYTES, &st->uops[k],
                   "uploading micro-ops");
    }
    for (int32_t n = 0; n < g->num_nodes && !s; n++)
        if (st->prog[n] >= 0) s = relocate(g, st, n);
    return s;
}

static void free_buf(accel_state* st, pk_accel_buf* buf) {
    if (buf->host) pk_accel_free(st->dev, buf);
    memset(buf, 0, sizeof *buf);
}

static void accel_free(pk_graph* g) {
    accel_state* st = g->dev_state;
    if (!st) return;
    for (int32_t n = 0; st->insns && n < g->num_nodes; n++)
        free_buf(st, &st->insns[n]);
    for (int32_t k = 0; st->uops && k < st->file.count; k++)
        free_buf(st, &st->uops[k]);
    free_buf(st, &st->memory);
    free_buf(st, &st->params);
    free(st->uops);
    free(st->insns);
    st->uops = st->insns = NULL;
}

static pk_status accel_copy(pk_graph* g, int32_t e, int to_device) {
    accel_state* st = g->dev_state;
    size_t offset, bytes = g->entries[e].bytes;
    const pk_accel_buf* buf = entry_buffer(g, e, &offset);
    unsigned char* host = g->storage[g->entries[e].sid].ptr;
    unsigned char* dev = (unsigned char*)buf->host + offset;
    if (!bytes) return PK_OK;
    if (to_device) memcpy(dev, host, bytes);
    int rc = to_device ? pk_accel_flush(st->dev, buf, offset, bytes)
                       : pk_accel_invalidate(st->dev, buf, offset, bytes);
    if (rc) return driver_fail(st, rc, to_device ? "flush" : "invalidate");
    if (!to_device) memcpy(host, dev, bytes);
    return PK_OK;
}

static pk_status accel_copy_in(pk_graph* g, int32_t e) {
    return accel_copy(g, e, 1);
}

static pk_status accel_copy_out(pk_graph* g, int32_t e) {
    return accel_copy(g, e, 0);
}

static void add_counters(pk_accel_stats* t, const pk_accel_counters* c) {
    t->runs++;
    t->cycles += c->cycles;
    for (int k = 0; k < 5; k++)
        t->insns += c->insns[k];
    for (int k = 0; k < PK_ACCEL_MODULES; k++)
        t->busy[k] += c->busy[k], t->stall[k] += c->stall[k];
    for (int k = 0; k < 4; k++)
        t->load_bytes += c->load_bytes[k];
    t->store_bytes += c->store_bytes;
    t->gemm_cycles += c->gemm_cycles;
    t->alu_cycles += c->alu_cycles;
    t->macs += c->macs;
}

/* The device's time is the cycle count at the program file's clock. */
static pk_status accel_run(pk_graph* g, int32_t n, double* device_ms) {
    accel_state* st = g->dev_state;
    const pk_accel_prog* p = &st->file.progs[st->prog[n]];
    pk_accel_counters c;
    memset(&c, 0, sizeof c);
    int rc = pk_accel_run(st->dev, &st->insns[n], p->n_insns, TIMEOUT_MS, &c);
    if (rc)
        return pk_fail(PK_ERR_DEVICE, "run: node %d '%s' (program %s) on accel (%s): code %d: %s",
                       (int)n, g->nodes[n].name, p->name, DRIVER, rc, pk_accel_last_error(st->dev));
    add_counters(&g->accel_stats[n], &c);
    if (device_ms) *device_ms += (double)c.cycles / (st->file.cfg.clock_mhz * 1e3);
    return PK_OK;
}

static pk_status accel_sync(pk_graph* g) {
    (void)g; /* every run waited for its FINISH */
    return PK_OK;
}

const pk_backend pk_accel_backend = {"accel",        accel_init, accel_release,
                                     accel_alloc,    accel_free, accel_copy_in,
                                     accel_copy_out, accel_run,  accel_sync};
#else
typedef int pk_accel_backend_not_built; /* ISO C wants something in a translation unit */
#endif
