/* pk_accel_sim.c - the accelerator's behavioural simulator behind the driver API
 * (docs/accel.md, "Simulator and cycle model").
 *
 * A run has three passes. Decode checks every instruction. Timing walks the three module
 * timelines with the token queues: an instruction starts when its module is free and the
 * tokens it pops were pushed; durations depend only on fields, so timing needs no data.
 * Effects then apply each instruction whole in order of start cycle (ties by program
 * order), so a program missing a token reads stale data exactly as the hardware would.
 * Checking mode tracks, per buffer entry, the last writer and the last reader of each
 * module, and vector clocks carried by the tokens say whether two accesses by different
 * modules are ordered; one that is not is a race.
 *
 * Integer arithmetic is done on uint32_t / int64_t so that wrapping and shifts are
 * defined; no index reaches a buffer unchecked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_accel.h"
#include "pk_accel_isa.h"

/* Physical addresses of device buffers start here (0 is never a valid buffer). */
#define SIM_PHYS_BASE 0x10000000u
#define SIM_ALIGN 64u
#define SIM_MAX_BLOCK 4096u /* keeps a GEMM dot product of int8 inside int32 */
#define SIM_MAX_DEPTH (1u << 16)

typedef struct {
    uint32_t phys;
    size_t size;
    unsigned char* host;
} sim_alloc;

/* Checking mode: who last touched a buffer entry (seq: the module's instruction number,
 * from 1; 0: never). */
typedef struct {
    uint32_t write_seq, read_seq[PK_ACCEL_MODULES];
    uint32_t write_insn, read_insn[PK_ACCEL_MODULES];
    uint8_t write_mod;
} sim_entry;

struct pk_accel {
    pk_accel_config cfg;
    int check;
    sim_alloc* allocs;
    size_t n_allocs, cap_allocs;
    uint64_t next_phys;
    uint32_t* uop;
    int8_t* wgt;
    int8_t* inp;
    int32_t* acc;
    sim_entry* track[PK_ACCEL_BUFS];
    char err[256];
};

/* One instruction of a run. */
typedef struct {
    pk_accel_insn in;
    int module;
    uint32_t seq; /* 1-based position in its module */
    uint64_t start, end;
    uint32_t vc[PK_ACCEL_MODULES]; /* vector clock: what it is ordered after */
} sim_slot;

static int fail(pk_accel* d, int rc, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#include <stdarg.h>
static int fail(pk_accel* d, int rc, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, sizeof d->err, fmt, ap);
    va_end(ap);
    return rc;
}

static const char* const MODULE_NAMES[PK_ACCEL_MODULES] = {"load", "compute", "store"};

/* ---- integer semantics ---------------------------------------------------------------- */

static int32_t to_i32(uint32_t u) {
    return u <= (uint32_t)INT32_MAX ? (int32_t)u : (int32_t)(u - 0x80000000u) - INT32_MAX - 1;
}

static int64_t shr64(int64_t a, unsigned s) {
    return a >= 0 ? a >> s : ~((~a) >> s);
}

static int32_t alu_shr(int32_t a, int32_t b) {
    int64_t s = b < 0 ? -(int64_t)b : b;
    if (s > 31) s = 31;
    if (b >= 0) return (int32_t)shr64(a, (unsigned)s);
    return to_i32((uint32_t)a << s);
}

static int32_t alu_apply(int64_t op, int32_t a, int32_t b) {
    switch (op) {
    case PK_ACCEL_ALU_MIN:
        return a < b ? a : b;
    case PK_ACCEL_ALU_MAX:
        return a > b ? a : b;
    case PK_ACCEL_ALU_ADD:
        return to_i32((uint32_t)a + (uint32_t)b);
    case PK_ACCEL_ALU_SHR:
        return alu_shr(a, b);
    case PK_ACCEL_ALU_MUL:
        return to_i32((uint32_t)a * (uint32_t)b);
    default:
        return (int32_t)shr64((int64_t)a * b, 32); /* MULHI */
    }
}

/* ---- device memory --------------------------------------------------------------------- */

static uint64_t lanes_of(const pk_accel_config* c, int buf) {
    const uint64_t lanes[PK_ACCEL_BUFS] = {1, (uint64_t)c->block_out * c->block_in,
                                           (uint64_t)c->batch * c->block_in,
                                           (uint64_t)c->batch * c->block_out};
    return lanes[buf];
}

static int config_ok(const pk_accel_config* c) {
    const uint32_t dims[] = {c->batch, c->block_in, c->block_out};
    const uint32_t depths[] = {c->uop_depth, c->wgt_depth, c->inp_depth, c->acc_depth};
    for (size_t k = 0; k < 3; k++)
        if (dims[k] == 0 || dims[k] > SIM_MAX_BLOCK) return 0;
    for (size_t k = 0; k < 4; k++)
        if (depths[k] == 0 || depths[k] > SIM_MAX_DEPTH) return 0;
    return (uint64_t)c->batch * c->block_in <= SIM_MAX_BLOCK * 16u &&
           (uint64_t)c->block_out * c->block_in <= SIM_MAX_BLOCK * 16u &&
           c->dma_bytes_per_cycle > 0 && c->dma_bytes_per_cycle < 1e9 && c->clock_mhz > 0 &&
           c->clock_mhz < 1e9;
}

/* Why the last pk_accel_open failed (there is no device to hold it). */
static char open_error[128];

int pk_accel_open(const pk_accel_config* cfg, const char* driver_arg, pk_accel** out) {
    (void)driver_arg;
    *out = NULL;
    if (!cfg || !config_ok(cfg)) {
        snprintf(open_error, sizeof open_error,
                 "bad accelerator configuration: dimensions 1..%u, depths 1..%u, positive clock "
                 "and DMA rate",
                 SIM_MAX_BLOCK, SIM_MAX_DEPTH);
        return PK_ACCEL_ERR_ARG;
    }
    pk_accel* d = calloc(1, sizeof *d);
    if (!d) return PK_ACCEL_ERR_NOMEM;
    d->cfg = *cfg;
    d->next_phys = SIM_PHYS_BASE;
    const char* env = getenv("PK_ACCEL_CHECK");
    d->check = env && strcmp(env, "1") == 0;
    d->uop = calloc(cfg->uop_depth, sizeof *d->uop);
    d->wgt = calloc(cfg->wgt_depth * lanes_of(cfg, PK_ACCEL_BUF_WGT), 1);
    d->inp = calloc(cfg->inp_depth * lanes_of(cfg, PK_ACCEL_BUF_INP), 1);
    d->acc = calloc(cfg->acc_depth * lanes_of(cfg, PK_ACCEL_BUF_ACC), sizeof *d->acc);
    if (!d->uop || !d->wgt || !d->inp || !d->acc) {
        pk_accel_close(d);
        return PK_ACCEL_ERR_NOMEM;
    }
    *out = d;
    return PK_ACCEL_OK;
}

void pk_accel_close(pk_accel* d) {
    if (!d) return;
    for (size_t k = 0; k < d->n_allocs; k++)
        free(d->allocs[k].host);
    free(d->allocs);
    free(d->uop);
    free(d->wgt);
    free(d->inp);
    free(d->acc);
    for (int b = 0; b < PK_ACCEL_BUFS; b++)
        free(d->track[b]);
    free(d);
}

int pk_accel_set_check(pk_accel* d, int on) {
    d->check = on != 0;
    return PK_ACCEL_OK;
}

const char* pk_accel_last_error(const pk_accel* d) {
    return d ? d->err : open_error;
}

int pk_accel_alloc(pk_accel* d, size_t size, pk_accel_buf* out) {
    memset(out, 0, sizeof *out);
    if (size == 0) return fail(d, PK_ACCEL_ERR_ARG, "alloc: size 0");
    uint64_t end = d->next_phys + (uint64_t)size;
    if (size > UINT32_MAX || end > UINT32_MAX)
        return fail(d, PK_ACCEL_ERR_NOMEM, "alloc: %zu bytes do not fit the 32-bit space", size);
    if (d->n_allocs == d->cap_allocs) {
        size_t cap = d->cap_allocs ? 2 * d->cap_allocs : 16;
        sim_alloc* grown = realloc(d->allocs, cap * sizeof *grown);
        if (!grown) return fail(d, PK_ACCEL_ERR_NOMEM, "alloc: out of host memory");
        d->allocs = grown;
        d->cap_allocs = cap;
    }
    unsigned char* host = calloc(size, 1);
    if (!host) return fail(d, PK_ACCEL_ERR_NOMEM, "alloc: out of host memory");
    sim_alloc a = {(uint32_t)d->next_phys, size, host};
    d->allocs[d->n_allocs++] = a;
    /* Bump only: a freed address is never handed out again, so a stale address in an
     * instruction cannot alias a newer buffer. */
    d->next_phys = (end + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    out->host = host;
    out->phys = a.phys;
    out->size = size;
    return PK_ACCEL_OK;
}

static sim_alloc* find_alloc(pk_accel* d, const pk_accel_buf* buf) {
    for (size_t k = 0; k < d->n_allocs; k++)
        if (d->allocs[k].phys == buf->phys && d->allocs[k].host == buf->host &&
            d->allocs[k].size >= buf->size)
            return &d->allocs[k];
    return NULL;
}

void pk_accel_free(pk_accel* d, pk_accel_buf* buf) {
    sim_alloc* a = buf && buf->host ? find_alloc(d, buf) : NULL;
    if (!a) return;
    free(a->host);
    *a = d->allocs[--d->n_allocs];
    memset(buf, 0, sizeof *buf);
}

static int sync_range(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size) {
    if (!buf || !find_alloc(d, buf)) return fail(d, PK_ACCEL_ERR_ARG, "not a device buffer");
    if (offset > buf->size || size > buf->size - offset)
        return fail(d, PK_ACCEL_ERR_ARG, "range %zu+%zu outside a buffer of %zu bytes", offset,
                    size, buf->size);
    return PK_ACCEL_OK;
}

/* The simulator shares memory with the host: nothing to write back or drop. */
int pk_accel_flush(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size) {
    return sync_range(d, buf, offset, size);
}

int pk_accel_invalidate(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size) {
    return sync_range(d, buf, offset, size);
}

/* Host memory behind [addr, addr + bytes) when it lies inside one allocation. */
static unsigned char* dram(pk_accel* d, uint64_t addr, uint64_t bytes) {
    for (size_t k = 0; k < d->n_allocs; k++) {
        const sim_alloc* a = &d->allocs[k];
        if (addr >= a->phys && addr + bytes <= (uint64_t)a->phys + a->size)
            return a->host + (addr - a->phys);
    }
    return NULL;
}

/* ---- timing ------------------------------------------------------------------------------ */

static uint64_t dram_bytes(const pk_accel_config* c, const pk_accel_insn* in) {
    int store = in->opcode == PK_ACCEL_OP_STORE;
    return (uint64_t)in->y_size * (uint64_t)in->x_size * pk_accel_dram_tile(c, in->buffer, store);
}

static uint64_t loop_iters(const pk_accel_insn* in) {
    return (uint64_t)(in->uop_end - in->uop_bgn) * (uint64_t)in->iter_out * (uint64_t)in->iter_in;
}

static uint64_t duration(const pk_accel_config* c, const pk_accel_insn* in) {
    if (in->opcode == PK_ACCEL_OP_LOAD || in->opcode == PK_ACCEL_OP_STORE) {
        double q = (double)dram_bytes(c, in) / c->dma_bytes_per_cycle;
        uint64_t t = (uint64_t)q;
        if ((double)t < q) t++;
        return c->dma_latency_cycles + t + (uint64_t)(in->y_pad_0 + in->y_pad_1);
    }
    if (in->opcode == PK_ACCEL_OP_FINISH) return 1;
    return loop_iters(in) + PK_ACCEL_PIPELINE_FILL;
}

/* Token queues, indexed from * PK_ACCEL_MODULES + to: pushed slots in order. */
typedef struct {
    uint32_t* pushed[PK_ACCEL_MODULES * PK_ACCEL_MODULES];
    uint32_t n_pushed[PK_ACCEL_MODULES * PK_ACCEL_MODULES];
    uint32_t n_popped[PK_ACCEL_MODULES * PK_ACCEL_MODULES];
} sim_queues;

/* The (from, to) queue of each flag of a module-`m` instruction, or -1 for a clear flag. */
static void flag_queues(const sim_slot* s, int pops[2], int pushes[2]) {
    int m = s->module, M = PK_ACCEL_MODULES;
    pops[0] = s->in.pop_prev ? (m - 1) * M + m : -1;
    pops[1] = s->in.pop_next ? (m + 1) * M + m : -1;
    pushes[0] = s->in.push_prev ? m * M + m - 1 : -1;
    pushes[1] = s->in.push_next ? m * M + m + 1 : -1;
}

static int can_start(const sim_slot* s, const sim_queues* q) {
    int pops[2], pushes[2];
    flag_queues(s, pops, pushes);
    for (int k = 0; k < 2; k++)
        if (pops[k] >= 0 && q->n_popped[pops[k]] >= q->n_pushed[pops[k]]) return 0;
    return 1;
}

/* Starts slot `i` now that its tokens are there: start, end, vector clock, pushes. */
static void schedule(sim_slot* slots, uint32_t i, sim_queues* q, uint64_t* free_at,
                     uint32_t vc[PK_ACCEL_MODULES][PK_ACCEL_MODULES], pk_accel_counters* cnt,
                     const pk_accel_config* cfg) {
    sim_slot* s = &slots[i];
    int pops[2], pushes[2], m = s->module;
    flag_queues(s, pops, pushes);
    uint64_t start = free_at[m];
    memcpy(s->vc, vc[m], sizeof s->vc);
    for (int k = 0; k < 2; k++) {
        if (pops[k] < 0) continue;
        const sim_slot* from = &slots[q->pushed[pops[k]][q->n_popped[pops[k]]++]];
        if (from->end > start) start = from->end;
        for (int j = 0; j < PK_ACCEL_MODULES; j++)
            if (from->vc[j] > s->vc[j]) s->vc[j] = from->vc[j];
    }
    s->vc[m] = s->seq;
    memcpy(vc[m], s->vc, sizeof s->vc);
    s->start = start;
    s->end = start + duration(cfg, &s->in);
    cnt->stall[m] += start - free_at[m];
    cnt->busy[m] += s->end - start;
    free_at[m] = s->end;
    for (int k = 0; k < 2; k++)
        if (pushes[k] >= 0) q->pushed[pushes[k]][q->n_pushed[pushes[k]]++] = i;
}

static int deadlock(pk_accel* d, const sim_slot* slots, uint32_t* const* order,
                    const uint32_t* next, const uint32_t* n, const sim_queues* q) {
    for (int m = 0; m < PK_ACCEL_MODULES; m++) {
        if (next[m] == n[m]) continue;
        uint32_t i = order[m][next[m]];
        const sim_slot* s = &slots[i];
        int pops[2], pushes[2];
        flag_queues(s, pops, pushes);
        /* the queue it waits on: the first of its pops with no token */
        int from = pops[0] >= 0 && q->n_popped[pops[0]] >= q->n_pushed[pops[0]] ? m - 1 : m + 1;
        return fail(d, PK_ACCEL_ERR_DEADLOCK,
                    "deadlock: instruction %u (%s) on the %s module waits for a token from the "
                    "%s module that no instruction pushes",
                    i, pk_accel_op_name(s->in.opcode), MODULE_NAMES[m], MODULE_NAMES[from]);
    }
    return PK_ACCEL_OK;
}

/* Checking mode: the hardware keeps tokens across runs, so one never popped would let the
 * next run skip a wait. */
static int leftover_tokens(pk_accel* d, const sim_queues* q) {
    for (int k = 0; k < PK_ACCEL_MODULES * PK_ACCEL_MODULES; k++)
        if (q->n_pushed[k] > q->n_popped[k])
            return fail(d, PK_ACCEL_ERR_RACE,
                        "race: %u token(s) from the %s module to the %s module are never popped; "
                        "the next run would start with them",
                        q->n_pushed[k] - q->n_popped[k], MODULE_NAMES[k / PK_ACCEL_MODULES],
                        MODULE_NAMES[k % PK_ACCEL_MODULES]);
    return PK_ACCEL_OK;
}

/* Runs the module timelines; fills start, end and vector clocks, busy and stall. */
static int run_timing(pk_accel* d, sim_slot* slots, uint32_t count, pk_accel_counters* cnt) {
    sim_queues q;
    uint32_t* order[PK_ACCEL_MODULES];
    uint32_t n[PK_ACCEL_MODULES] = {0}, next[PK_ACCEL_MODULES] = {0};
    uint64_t free_at[PK_ACCEL_MODULES] = {0};
    uint32_t vc[PK_ACCEL_MODULES][PK_ACCEL_MODULES];
    int rc = PK_ACCEL_OK;
    memset(&q, 0, sizeof q);
    memset(vc, 0, sizeof vc);
    for (int m = 0; m < PK_ACCEL_MODULES; m++)
        order[m] = malloc(count * sizeof(uint32_t));
    for (int k = 0; k < PK_ACCEL_MODULES * PK_ACCEL_MODULES; k++)
        q.pushed[k] = malloc(count * sizeof(uint32_t));
    for (int k = 0; k < PK_ACCEL_MODULES * PK_ACCEL_MODULES; k++)
        if (!q.pushed[k] || (k < PK_ACCEL_MODULES && !order[k]))
            rc = fail(d, PK_ACCEL_ERR_NOMEM, "run: out of host memory");
    for (uint32_t i = 0; i < count && rc == PK_ACCEL_OK; i++) {
        int m = slots[i].module;
        order[m][n[m]++] = i;
        slots[i].seq = n[m];
    }
    for (int progress = 1; progress && rc == PK_ACCEL_OK;) {
        progress = 0;
        for (int m = 0; m < PK_ACCEL_MODULES; m++)
            for (; next[m] < n[m] && can_start(&slots[order[m][next[m]]], &q); next[m]++) {
                schedule(slots, order[m][next[m]], &q, free_at, vc, cnt, &d->cfg);
                progress = 1;
            }
    }
    if (rc == PK_ACCEL_OK) rc = deadlock(d, slots, order, next, n, &q);
    if (rc == PK_ACCEL_OK && d->check) rc = leftover_tokens(d, &q);
    for (int m = 0; m < PK_ACCEL_MODULES; m++)
        free(order[m]);
    for (int k = 0; k < PK_ACCEL_MODULES * PK_ACCEL_MODULES; k++)
        free(q.pushed[k]);
    return rc;
}

/* ---- checking mode ------------------------------------------------------------------------ */

/* `later` (what: "reads" or "overwrites") conflicts with `earlier`, which `wrote` or read. */
static int race(pk_accel* d, const sim_slot* slots, uint32_t earlier, int wrote, uint32_t later,
                const char* what, int buf, uint64_t entry) {
    const sim_slot *a = &slots[earlier], *b = &slots[later];
    return fail(d, PK_ACCEL_ERR_RACE,
                "race on %s[%llu]: instruction %u (%s, %s module) %s it while instruction %u "
                "(%s, %s module) may still %s it: no dependency token orders them",
                pk_accel_buf_name(buf), (unsigned long long)entry, later,
                pk_accel_op_name(b->in.opcode), MODULE_NAMES[b->module], what, earlier,
                pk_accel_op_name(a->in.opcode), MODULE_NAMES[a->module], wrote ? "write" : "read");
}

/* An access by slot `i` to entry `e` of `buf`; a race when an earlier access by another
 * module, conflicting with it, is not ordered before it. */
static int track(pk_accel* d, const sim_slot* slots, uint32_t i, int buf, uint64_t e, int write) {
    sim_entry* t = &d->track[buf][e];
    const sim_slot* s = &slots[i];
    int m = s->module;
    if (t->write_seq && t->write_mod != m && t->write_seq > s->vc[t->write_mod])
        return race(d, slots, t->write_insn, 1, i, write ? "overwrites" : "reads", buf, e);
    if (!write) {
        t->read_seq[m] = s->seq;
        t->read_insn[m] = i;
        return PK_ACCEL_OK;
    }
    for (int o = 0; o < PK_ACCEL_MODULES; o++)
        if (o != m && t->read_seq[o] && t->read_seq[o] > s->vc[o])
            return race(d, slots, t->read_insn[o], 0, i, "overwrites", buf, e);
    memset(t, 0, sizeof *t);
    t->write_seq = s->seq;
    t->write_insn = i;
    t->write_mod = (uint8_t)m;
    return PK_ACCEL_OK;
}

static int track_range(pk_accel* d, const sim_slot* slots, uint32_t i, int buf, uint64_t first,
                       uint64_t n, int write) {
    if (!d->check) return PK_ACCEL_OK;
    for (uint64_t e = first; e < first + n; e++) {
        int rc = track(d, slots, i, buf, e, write);
        if (rc != PK_ACCEL_OK) return rc;
    }
    return PK_ACCEL_OK;
}

static int reset_tracking(pk_accel* d) {
    for (int b = 0; b < PK_ACCEL_BUFS; b++) {
        size_t n = pk_accel_depth(&d->cfg, b);
        if (!d->track[b]) d->track[b] = malloc(n * sizeof(sim_entry));
        if (!d->track[b]) return fail(d, PK_ACCEL_ERR_NOMEM, "run: out of host memory");
        memset(d->track[b], 0, n * sizeof(sim_entry));
    }
    return PK_ACCEL_OK;
}

/* ---- effects ----------------------------------------------------------------------------------
 */

static uint32_t le32(const unsigned char* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* One tile into `buf` at `t`: from DRAM when `src`, else padding. */
static void put_tile(pk_accel* d, int buf, uint64_t t, const unsigned char* src, int8_t pad) {
    uint64_t lanes = lanes_of(&d->cfg, buf);
    switch (buf) {
    case PK_ACCEL_BUF_UOP:
        d->uop[t] = src ? le32(src) : 0;
        break;
    case PK_ACCEL_BUF_ACC:
        for (uint64_t l = 0; l < lanes; l++)
            d->acc[t * lanes + l] = src ? to_i32(le32(src + 4 * l)) : 0;
        break;
    default: {
        int8_t* dst = (buf == PK_ACCEL_BUF_INP ? d->inp : d->wgt) + t * lanes;
        if (src)
            memcpy(dst, src, lanes);
        else
            memset(dst, buf == PK_ACCEL_BUF_INP ? (unsigned char)pad : 0, lanes);
    }
    }
}

static unsigned char* dma_extent(pk_accel* d, uint32_t i, const pk_accel_insn* in, uint64_t tile) {
    uint64_t bytes = in->y_size && in->x_size
                         ? ((uint64_t)(in->y_size - 1) * in->x_stride + in->x_size) * tile
                         : 0;
    /* a DMA of padding only touches no DRAM: any address will do, nothing is read there */
    unsigned char* host = bytes ? dram(d, (uint64_t)in->dram_base, bytes) : (unsigned char*)d;
    if (!host)
        fail(d, PK_ACCEL_ERR_INSN,
             "instruction %u (%s): field dram_base=0x%08llx: its %llu bytes of DMA lie outside "
             "every device buffer",
             i, pk_accel_op_name(in->opcode), (unsigned long long)in->dram_base,
             (unsigned long long)bytes);
    return host;
}

static int exec_load(pk_accel* d, const sim_slot* slots, uint32_t i, pk_accel_counters* cnt) {
    const pk_accel_insn* in = &slots[i].in;
    int buf = (int)in->buffer;
    uint64_t tile = pk_accel_dram_tile(&d->cfg, buf, 0);
    unsigned char* host = dma_extent(d, i, in, tile);
    if (!host) return PK_ACCEL_ERR_INSN;
    uint64_t rows = (uint64_t)(in->y_pad_0 + in->y_size + in->y_pad_1);
    uint64_t cols = (uint64_t)(in->x_pad_0 + in->x_size + in->x_pad_1);
    int rc = track_range(d, slots, i, buf, (uint64_t)in->sram_base, rows * cols, 1);
    if (rc != PK_ACCEL_OK) return rc;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            int inside = r >= (uint64_t)in->y_pad_0 && r < (uint64_t)(in->y_pad_0 + in->y_size) &&
                         c >= (uint64_t)in->x_pad_0 && c < (uint64_t)(in->x_pad_0 + in->x_size);
            const unsigned char* src =
                inside ? host + ((r - in->y_pad_0) * in->x_stride + (c - in->x_pad_0)) * tile
                       : NULL;
            put_tile(d, buf, in->sram_base + r * cols + c, src, (int8_t)in->pad_value);
        }
    cnt->load_bytes[buf] += dram_bytes(&d->cfg, in);
    return PK_ACCEL_OK;
}

static int exec_store(pk_accel* d, const sim_slot* slots, uint32_t i, pk_accel_counters* cnt) {
    const pk_accel_insn* in = &slots[i].in;
    uint64_t lanes = lanes_of(&d->cfg, PK_ACCEL_BUF_ACC);
    unsigned char* host = dma_extent(d, i, in, lanes);
    if (!host) return PK_ACCEL_ERR_INSN;
    uint64_t n = (uint64_t)in->y_size * in->x_size;
    int rc = track_range(d, slots, i, PK_ACCEL_BUF_ACC, (uint64_t)in->sram_base, n, 0);
    if (rc != PK_ACCEL_OK) return rc;
    for (uint64_t r = 0; r < (uint64_t)in->y_size; r++)
        for (uint64_t c = 0; c < (uint64_t)in->x_size; c++) {
            const int32_t* src = d->acc + (in->sram_base + r * in->x_size + c) * lanes;
            unsigned char* dst = host + (r * in->x_stride + c) * lanes;
            for (uint64_t l = 0; l < lanes; l++)
                dst[l] = (unsigned char)((uint32_t)src[l] & 0xffu);
        }
    cnt->store_bytes += dram_bytes(&d->cfg, in);
    return PK_ACCEL_OK;
}

/* The largest index a micro-op field reaches over the loops. */
static uint64_t reach(uint32_t base, int64_t f_out, int64_t f_in, const pk_accel_insn* in) {
    return base + (uint64_t)(in->iter_out - 1) * (uint64_t)f_out +
           (uint64_t)(in->iter_in - 1) * (uint64_t)f_in;
}

/* Every index the loops reach from micro-ops uop_bgn .. uop_end lies inside its buffer. */
static int check_reach(pk_accel* d, const sim_slot* slots, uint32_t i) {
    const pk_accel_insn* in = &slots[i].in;
    const pk_accel_config* c = &d->cfg;
    int gemm = in->opcode == PK_ACCEL_OP_GEMM;
    int reads_src = !in->reset && (gemm || !in->use_imm);
    if (!in->iter_out || !in->iter_in) return PK_ACCEL_OK;
    for (int64_t u = in->uop_bgn; u < in->uop_end; u++) {
        pk_accel_uop op = pk_accel_decode_uop(d->uop[u]);
        uint64_t a = reach(op.acc, in->dst_factor_out, in->dst_factor_in, in);
        uint64_t x = reach(op.inp, in->src_factor_out, in->src_factor_in, in);
        uint64_t w = gemm ? reach(op.wgt, in->wgt_factor_out, in->wgt_factor_in, in) : 0;
        const char* field = a >= c->acc_depth                                        ? "acc"
                            : reads_src && x >= (gemm ? c->inp_depth : c->acc_depth) ? "inp"
                            : gemm && !in->reset && w >= c->wgt_depth                ? "wgt"
                                                                                     : NULL;
        if (field)
            return fail(d, PK_ACCEL_ERR_INSN,
                        "instruction %u (%s): micro-op %lld's %s index reaches %llu over the "
                        "loops, past its buffer",
                        i, pk_accel_op_name(in->opcode), (long long)u, field,
                        (unsigned long long)(field[0] == 'a'   ? a
                                             : field[0] == 'i' ? x
                                                               : w));
    }
    return PK_ACCEL_OK;
}

static void gemm_tile(pk_accel* d, uint64_t a, uint64_t x, uint64_t w) {
    const pk_accel_config* c = &d->cfg;
    int32_t* acc = d->acc + a * c->batch * c->block_out;
    const int8_t* inp = d->inp + x * c->batch * c->block_in;
    const int8_t* wgt = d->wgt + w * c->block_out * c->block_in;
    for (uint32_t b = 0; b < c->batch; b++)
        for (uint32_t o = 0; o < c->block_out; o++) {
            /* |int8 * int8| <= 2^14 and block_in <= 4096: the sum fits int32 */
            int32_t sum = 0;
            const int8_t* xr = inp + b * c->block_in;
            const int8_t* wr = wgt + o * c->block_in;
            for (uint32_t k = 0; k < c->block_in; k++)
                sum += (int32_t)xr[k] * (int32_t)wr[k];
            int32_t* dst = &acc[b * c->block_out + o];
            *dst = to_i32((uint32_t)*dst + (uint32_t)sum);
        }
}

static void alu_tile(pk_accel* d, const pk_accel_insn* in, uint64_t a, uint64_t s) {
    uint64_t lanes = lanes_of(&d->cfg, PK_ACCEL_BUF_ACC);
    int32_t* dst = d->acc + a * lanes;
    const int32_t* src = d->acc + s * lanes;
    for (uint64_t l = 0; l < lanes; l++)
        dst[l] = alu_apply(in->alu_op, dst[l], in->use_imm ? (int32_t)in->imm : src[l]);
}

/* One iteration's accesses in checking mode. */
static int track_iter(pk_accel* d, const sim_slot* slots, uint32_t i, uint64_t a, uint64_t x,
                      uint64_t w, int64_t u) {
    const pk_accel_insn* in = &slots[i].in;
    int gemm = in->opcode == PK_ACCEL_OP_GEMM, rc = track(d, slots, i, PK_ACCEL_BUF_UOP, u, 0);
    if (rc == PK_ACCEL_OK && !in->reset && gemm) rc = track(d, slots, i, PK_ACCEL_BUF_INP, x, 0);
    if (rc == PK_ACCEL_OK && !in->reset && gemm) rc = track(d, slots, i, PK_ACCEL_BUF_WGT, w, 0);
    if (rc == PK_ACCEL_OK && !in->reset && !gemm && !in->use_imm)
        rc = track(d, slots, i, PK_ACCEL_BUF_ACC, x, 0);
    if (rc == PK_ACCEL_OK) rc = track(d, slots, i, PK_ACCEL_BUF_ACC, a, 1);
    return rc;
}

/* GEMM and ALU: the two loop levels over micro-ops uop_bgn .. uop_end. */
static int exec_loop(pk_accel* d, const sim_slot* slots, uint32_t i, pk_accel_counters* cnt) {
    const pk_accel_insn* in = &slots[i].in;
    int gemm = in->opcode == PK_ACCEL_OP_GEMM;
    uint64_t lanes = lanes_of(&d->cfg, PK_ACCEL_BUF_ACC);
    int rc = check_reach(d, slots, i);
    if (rc != PK_ACCEL_OK) return rc;
    for (int64_t i0 = 0; i0 < in->iter_out; i0++)
        for (int64_t i1 = 0; i1 < in->iter_in; i1++)
            for (int64_t u = in->uop_bgn; u < in->uop_end; u++) {
                pk_accel_uop op = pk_accel_decode_uop(d->uop[u]);
                uint64_t a = op.acc + i0 * in->dst_factor_out + i1 * in->dst_factor_in;
                uint64_t x = op.inp + i0 * in->src_factor_out + i1 * in->src_factor_in;
                uint64_t w = op.wgt + i0 * in->wgt_factor_out + i1 * in->wgt_factor_in;
                if (d->check && (rc = track_iter(d, slots, i, a, x, w, u)) != PK_ACCEL_OK)
                    return rc;
                if (in->reset)
                    memset(d->acc + a * lanes, 0, lanes * sizeof *d->acc);
                else if (gemm)
                    gemm_tile(d, a, x, w);
                else
                    alu_tile(d, in, a, x);
            }
    uint64_t iters = loop_iters(in);
    if (gemm)
        cnt->gemm_cycles += iters;
    else
        cnt->alu_cycles += iters;
    if (gemm && !in->reset) cnt->macs += iters * d->cfg.batch * d->cfg.block_in * d->cfg.block_out;
    return PK_ACCEL_OK;
}

static int exec_finish(pk_accel* d, const sim_slot* slots, uint32_t i, pk_accel_counters* cnt) {
    (void)d, (void)slots, (void)i, (void)cnt;
    return PK_ACCEL_OK;
}

typedef int (*sim_exec)(pk_accel*, const sim_slot*, uint32_t, pk_accel_counters*);
static const sim_exec EXEC[PK_ACCEL_OPS] = {exec_load, exec_store, exec_loop, exec_loop,
                                            exec_finish};

/* Applies the instructions in order of start cycle, ties by program order: each module's
 * starts increase, so this merges the three module orders. */
static int run_effects(pk_accel* d, const sim_slot* slots, uint32_t count, pk_accel_counters* cnt) {
    uint32_t next[PK_ACCEL_MODULES] = {0};
    uint32_t* order[PK_ACCEL_MODULES];
    uint32_t n[PK_ACCEL_MODULES] = {0};
    int rc = PK_ACCEL_OK;
    for (int m = 0; m < PK_ACCEL_MODULES; m++)
        order[m] = malloc(count * sizeof(uint32_t));
    if (!order[0] || !order[1] || !order[2])
        rc = fail(d, PK_ACCEL_ERR_NOMEM, "run: out of host memory");
    for (uint32_t i = 0; i < count && rc == PK_ACCEL_OK; i++)
        order[slots[i].module][n[slots[i].module]++] = i;
    for (uint32_t done = 0; done < count && rc == PK_ACCEL_OK; done++) {
        int best = -1;
        for (int m = 0; m < PK_ACCEL_MODULES; m++) {
            if (next[m] == n[m]) continue;
            const sim_slot *s = &slots[order[m][next[m]]], *b;
            b = best < 0 ? NULL : &slots[order[best][next[best]]];
            if (!b || s->start < b->start || (s->start == b->start && s < b)) best = m;
        }
        uint32_t i = order[best][next[best]++];
        rc = EXEC[slots[i].in.opcode](d, slots, i, cnt);
    }
    for (int m = 0; m < PK_ACCEL_MODULES; m++)
        free(order[m]);
    return rc;
}

/* ---- run ----------------------------------------------------------------------------------------
 */

static int decode_all(pk_accel* d, const unsigned char* raw, uint32_t count, sim_slot* slots) {
    char msg[200];
    for (uint32_t i = 0; i < count; i++) {
        pk_accel_insn* in = &slots[i].in;
        int rc = pk_accel_decode(raw + (size_t)i * PK_ACCEL_INSN_BYTES, in, msg, sizeof msg);
        if (rc == PK_ACCEL_OK) rc = pk_accel_check_insn(in, &d->cfg, msg, sizeof msg);
        if (rc == PK_ACCEL_OK && (in->opcode == PK_ACCEL_OP_FINISH) != (i == count - 1))
            rc = (snprintf(msg, sizeof msg, "%s",
                           in->opcode == PK_ACCEL_OP_FINISH ? "FINISH before the last instruction"
                                                            : "the last instruction is not FINISH"),
                  PK_ACCEL_ERR_INSN);
        if (rc != PK_ACCEL_OK)
            return fail(d, rc, "instruction %u (%s): %s", i, pk_accel_op_name(in->opcode), msg);
        slots[i].module = pk_accel_module_of(in);
    }
    return PK_ACCEL_OK;
}

/* Checking mode: every instruction must be ordered before FINISH, or the host could read
 * results a module is still writing. */
static int check_finish(pk_accel* d, const sim_slot* slots, uint32_t count) {
    const sim_slot* fin = &slots[count - 1];
    for (uint32_t i = count; i-- > 0;) {
        const sim_slot* s = &slots[i];
        if (s->module != fin->module && s->seq > fin->vc[s->module])
            return fail(d, PK_ACCEL_ERR_RACE,
                        "race: instruction %u (%s, %s module) is not ordered before FINISH "
                        "(instruction %u): the run could end before it does",
                        i, pk_accel_op_name(s->in.opcode), MODULE_NAMES[s->module], count - 1);
    }
    return PK_ACCEL_OK;
}

static int run_slots(pk_accel* d, const unsigned char* raw, uint32_t count, uint32_t timeout_ms,
                     sim_slot* slots, pk_accel_counters* cnt) {
    int rc = decode_all(d, raw, count, slots);
    if (rc == PK_ACCEL_OK) rc = run_timing(d, slots, count, cnt);
    if (rc != PK_ACCEL_OK) return rc;
    for (uint32_t i = 0; i < count; i++) {
        if (slots[i].end > cnt->cycles) cnt->cycles = slots[i].end;
        cnt->insns[slots[i].in.opcode]++;
    }
    double ms = (double)cnt->cycles / (d->cfg.clock_mhz * 1e3);
    if (timeout_ms && ms > timeout_ms)
        return fail(d, PK_ACCEL_ERR_TIMEOUT,
                    "run: %llu cycles (%.3f ms) exceed the timeout of %u ms",
                    (unsigned long long)cnt->cycles, ms, timeout_ms);
    if (d->check && (rc = reset_tracking(d)) != PK_ACCEL_OK) return rc;
    rc = run_effects(d, slots, count, cnt);
    if (rc == PK_ACCEL_OK && d->check) rc = check_finish(d, slots, count);
    return rc;
}

int pk_accel_run(pk_accel* d, const pk_accel_buf* insns, uint32_t count, uint32_t timeout_ms,
                 pk_accel_counters* counters) {
    pk_accel_counters cnt;
    memset(&cnt, 0, sizeof cnt);
    if (!insns || !find_alloc(d, insns))
        return fail(d, PK_ACCEL_ERR_ARG, "run: the instructions are not in a device buffer");
    if (count == 0)
        return fail(d, PK_ACCEL_ERR_INSN, "run: no instructions (the last must be FINISH)");
    if ((uint64_t)count * PK_ACCEL_INSN_BYTES > insns->size)
        return fail(d, PK_ACCEL_ERR_ARG, "run: %u instructions overrun a buffer of %zu bytes",
                    count, insns->size);
    sim_slot* slots = calloc(count, sizeof *slots);
    if (!slots) return fail(d, PK_ACCEL_ERR_NOMEM, "run: out of host memory");
    int rc = run_slots(d, insns->host, count, timeout_ms, slots, &cnt);
    free(slots);
    if (rc == PK_ACCEL_OK) {
        d->err[0] = 0;
        if (counters) *counters = cnt;
    }
    return rc;
}
