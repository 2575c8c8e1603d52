/* kernels/program.accel: parsing and checking (docs/accel.md, "Programs"). Everything a
 * program could do to memory outside its regions is refused here, before the driver sees it:
 * the simulator checks again, the board would not. */
#include "pk_accel_program.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PF PK_ACCEL_FILE
#define HEAD_BYTES 16
#define CONFIG_BYTES 48
#define TABLE_AT (HEAD_BYTES + CONFIG_BYTES)
#define ENTRY_BYTES 96
#define RELOC_BYTES 8
#define MAX_ARGS 4096 /* far above any node; keeps counts small in messages and arrays */

/* Fields of a LOAD or STORE (bit position, width), from isa.py's MEMORY table. */
enum { F_OPCODE, F_BUFFER, F_DRAM_BASE, F_Y_SIZE, F_X_SIZE, F_X_STRIDE, F_Y_PAD_0, F_PADS };
static const struct {
    int pos, bits;
} fields[] = {{0, 3}, {7, 3}, {23, 32}, {55, 16}, {71, 16}, {87, 16}, {103, 16}};

static uint32_t get_bits(const unsigned char* w, int pos, int bits) {
    uint32_t v = 0;
    for (int i = 0; i < bits; i++)
        v |= (uint32_t)((w[(pos + i) / 8] >> ((pos + i) % 8)) & 1) << i;
    return v;
}

static uint32_t field(const unsigned char* insn, int f) {
    return get_bits(insn, fields[f].pos, fields[f].bits);
}

uint32_t pk_accel_insn_opcode(const unsigned char* insn) {
    return field(insn, F_OPCODE);
}

uint32_t pk_accel_insn_dram_base(const unsigned char* insn) {
    return field(insn, F_DRAM_BASE);
}

void pk_accel_insn_set_dram_base(unsigned char* insn, uint32_t value) {
    for (int i = 0; i < 32; i++) {
        int bit = fields[F_DRAM_BASE].pos + i;
        insn[bit / 8] = (unsigned char)((insn[bit / 8] & ~(1u << (bit % 8))) |
                                        (((value >> i) & 1u) << (bit % 8)));
    }
}

static uint32_t u32_at(const unsigned char* p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64_at(const unsigned char* p) {
    return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32;
}

static double f64_at(const unsigned char* p) {
    uint64_t bits = u64_at(p);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* The config block: a GEMM core and depths the fields can address, a positive clock and
 * DMA rate. */
static pk_status parse_config(const unsigned char* p, pk_accel_file_config* c) {
    uint32_t* u[] = {&c->batch,     &c->block_in,  &c->block_out, &c->uop_depth,
                     &c->inp_depth, &c->wgt_depth, &c->acc_depth, &c->dma_latency_cycles};
    static const char* const names[] = {"batch",     "block_in",  "block_out", "uop_depth",
                                        "inp_depth", "wgt_depth", "acc_depth"};
    for (int k = 0; k < 8; k++)
        *u[k] = u32_at(p + 4 * k);
    for (int k = 0; k < 7; k++)
        if (*u[k] == 0 || *u[k] > (k < 3 ? 256u : 65536u))
            return pk_fail(PK_ERR_FORMAT, PF ": config %s is %u, expected 1 .. %u", names[k],
                           (unsigned)*u[k], k < 3 ? 256u : 65536u);
    c->clock_mhz = f64_at(p + 32);
    c->dma_bytes_per_cycle = f64_at(p + 40);
    if (!(c->clock_mhz > 0) || !isfinite(c->clock_mhz) || !(c->dma_bytes_per_cycle > 0) ||
        !isfinite(c->dma_bytes_per_cycle))
        return pk_fail(PK_ERR_FORMAT,
                       PF ": config clock_mhz %g and dma_bytes_per_cycle %g must be finite and > 0",
                       c->clock_mhz, c->dma_bytes_per_cycle);
    return PK_OK;
}

/* Bytes of one DRAM tile a LOAD into `buffer` reads or a STORE writes; 0 for no buffer. */
static uint64_t tile_bytes(const pk_accel_file_config* c, uint32_t opcode, uint32_t buffer) {
    uint64_t acc = (uint64_t)c->batch * c->block_out;
    const uint64_t load[] = {PK_ACCEL_UOP_BYTES, (uint64_t)c->block_out * c->block_in,
                             (uint64_t)c->batch * c->block_in, acc * 4};
    if (opcode == PK_ACCEL_STORE) return buffer == 3 ? acc : 0; /* narrowed int8 acc tiles */
    return buffer < 4 ? load[buffer] : 0;
}

static const char* const opnames[] = {"LOAD", "STORE", "GEMM", "ALU", "FINISH"};

/* Each instruction's opcode, each memory instruction's buffer and DMA extent (relative to
 * dram_base, its offset in the region), and FINISH last. */
static pk_status check_insns(const pk_accel_file_config* c, pk_accel_prog* p, int32_t k) {
    for (uint32_t i = 0; i < p->n_insns; i++) {
        const unsigned char* w = p->insns + (size_t)i * PK_ACCEL_INSN_BYTES;
        uint32_t op = field(w, F_OPCODE);
        p->region[i] = PK_ACCEL_NO_REGION;
        if (op > PK_ACCEL_FINISH)
            return pk_fail(PK_ERR_FORMAT, PF ": program %d '%s' instruction %u: opcode %u", (int)k,
                           p->name, (unsigned)i, (unsigned)op);
        if ((op == PK_ACCEL_FINISH) != (i + 1 == p->n_insns))
            return pk_fail(PK_ERR_FORMAT,
                           PF ": program %d '%s' instruction %u: %s; FINISH must be the last "
                              "instruction and only that",
                           (int)k, p->name, (unsigned)i, opnames[op]);
        if (op > PK_ACCEL_STORE) continue;
        uint64_t tile = tile_bytes(c, op, field(w, F_BUFFER));
        if (!tile)
            return pk_fail(PK_ERR_FORMAT, PF ": program %d '%s' instruction %u: %s of buffer %u",
                           (int)k, p->name, (unsigned)i, opnames[op], (unsigned)field(w, F_BUFFER));
        uint64_t rows = field(w, F_Y_SIZE), cols = field(w, F_X_SIZE);
        uint64_t span = rows && cols ? ((rows - 1) * field(w, F_X_STRIDE) + cols) * tile : 0;
        p->extent[i] = span ? field(w, F_DRAM_BASE) + span : 0;
    }
    return PK_OK;
}

/* One relocation per LOAD and STORE, none elsewhere; regions are arguments or the micro-ops,
 * whose DMAs are checked here (arguments: pk_accel_check_args, per node). */
static pk_status check_relocs(pk_accel_prog* p, int32_t k, const unsigned char* r) {
    for (uint32_t j = 0; j < p->n_relocs; j++, r += RELOC_BYTES) {
        uint32_t i = u32_at(r);
        int32_t region = (int32_t)u32_at(r + 4);
        const char* bad = i >= p->n_insns ? "no such"
                          : pk_accel_insn_opcode(p->insns + (size_t)i * 16) > PK_ACCEL_STORE
                              ? "not a LOAD "
                                "or STORE"
                          : p->region[i] != PK_ACCEL_NO_REGION ? "relocated twice"
                          : region < PK_ACCEL_UOPS || region >= (int32_t)p->n_args ? "bad region"
                                                                                   : NULL;
        if (bad)
            return pk_fail(PK_ERR_FORMAT,
                           PF ": program %d '%s' relocation %u: instruction %u region %d: %s (the "
                              "program has %u instructions, %u arguments)",
                           (int)k, p->name, (unsigned)j, (unsigned)i, (int)region, bad,
                           (unsigned)p->n_insns, (unsigned)p->n_args);
        p->region[i] = region;
    }
    for (uint32_t i = 0; i < p->n_insns; i++) {
        uint32_t op = pk_accel_insn_opcode(p->insns + (size_t)i * PK_ACCEL_INSN_BYTES);
        uint64_t uop_bytes = (uint64_t)p->n_uops * PK_ACCEL_UOP_BYTES;
        if (op <= PK_ACCEL_STORE && p->region[i] == PK_ACCEL_NO_REGION)
            return pk_fail(PK_ERR_FORMAT,
                           PF ": program %d '%s' instruction %u: %s has no relocation", (int)k,
                           p->name, (unsigned)i, opnames[op]);
        if (p->region[i] == PK_ACCEL_UOPS && p->extent[i] > uop_bytes)
            return pk_fail(PK_ERR_FORMAT,
                           PF ": program %d '%s' instruction %u: %s reaches byte %llu of the "
                              "micro-ops, which have %llu",
                           (int)k, p->name, (unsigned)i, opnames[op],
                           (unsigned long long)p->extent[i], (unsigned long long)uop_bytes);
    }
    return PK_OK;
}

/* Table entry k: a NUL-terminated unique name, a 16-aligned offset and data inside the file. */
static pk_status parse_entry(const unsigned char* base, size_t len, pk_accel_file* f, int32_t k) {
    const unsigned char* e = base + TABLE_AT + (size_t)k * ENTRY_BYTES;
    pk_accel_prog* p = &f->progs[k];
    if (!memchr(e, 0, PK_ACCEL_NAME_BYTES) || !e[0])
        return pk_fail(PK_ERR_FORMAT, PF ": program %d: the name is empty or not NUL-terminated",
                       (int)k);
    memcpy(p->name, e, PK_ACCEL_NAME_BYTES);
    p->n_args = u32_at(e + 64), p->n_insns = u32_at(e + 68);
    p->n_uops = u32_at(e + 72), p->n_relocs = u32_at(e + 76);
    uint64_t off = u64_at(e + 80);
    for (int32_t j = 0; j < k; j++)
        if (!strcmp(f->progs[j].name, p->name))
            return pk_fail(PK_ERR_FORMAT, PF ": programs %d and %d are both named '%s'", (int)j,
                           (int)k, p->name);
    uint64_t bytes = (uint64_t)p->n_insns * PK_ACCEL_INSN_BYTES +
                     (uint64_t)p->n_uops * PK_ACCEL_UOP_BYTES + (uint64_t)p->n_relocs * RELOC_BYTES;
    if (p->n_args > MAX_ARGS || p->n_insns == 0 || off % 16 || off > len || bytes > len - off)
        return pk_fail(PK_ERR_FORMAT,
                       PF ": program %d '%s': %u arguments, %u instructions, %u micro-ops and %u "
                          "relocations at offset %llu do not fit the file's %zu bytes (or the "
                          "offset is not 16-aligned)",
                       (int)k, p->name, (unsigned)p->n_args, (unsigned)p->n_insns,
                       (unsigned)p->n_uops, (unsigned)p->n_relocs, (unsigned long long)off, len);
    p->insns = base + off;
    p->uops = p->insns + (size_t)p->n_insns * PK_ACCEL_INSN_BYTES;
    p->region = malloc((size_t)p->n_insns * sizeof *p->region);
    p->extent = calloc((size_t)p->n_insns, sizeof *p->extent);
    if (!p->region || !p->extent) return pk_fail(PK_ERR_NOMEM, PF ": out of memory");
    pk_status s = check_insns(&f->cfg, p, k);
    return s ? s : check_relocs(p, k, p->uops + (size_t)p->n_uops * PK_ACCEL_UOP_BYTES);
}

pk_status pk_accel_file_parse(const void* data, size_t len, pk_accel_file* out) {
    const unsigned char* b = data;
    memset(out, 0, sizeof *out);
    if (len < TABLE_AT)
        return pk_fail(PK_ERR_FORMAT, PF ": %zu bytes, shorter than its %d-byte header", len,
                       TABLE_AT);
    if (memcmp(b, "PKACCEL1", 8) != 0 || u32_at(b + 8) != 1)
        return pk_fail(PK_ERR_FORMAT, PF ": not a program file (magic PKACCEL1, version 1)");
    uint32_t count = u32_at(b + 12);
    if ((uint64_t)count * ENTRY_BYTES > len - TABLE_AT)
        return pk_fail(PK_ERR_FORMAT, PF ": a table of %u programs does not fit its %zu bytes",
                       (unsigned)count, len);
    pk_status s = parse_config(b + HEAD_BYTES, &out->cfg);
    if (s) return s;
    if (!(out->progs = calloc((size_t)count + 1, sizeof *out->progs)))
        return pk_fail(PK_ERR_NOMEM, PF ": out of memory");
    out->count = (int32_t)count;
    for (int32_t k = 0; k < out->count && !s; k++)
        s = parse_entry(b, len, out, k);
    if (s) pk_accel_file_free(out);
    return s;
}

void pk_accel_file_free(pk_accel_file* f) {
    for (int32_t k = 0; f->progs && k < f->count; k++) {
        free(f->progs[k].region);
        free(f->progs[k].extent);
    }
    free(f->progs);
    memset(f, 0, sizeof *f);
}

int32_t pk_accel_file_find(const pk_accel_file* f, const char* name) {
    for (int32_t k = 0; k < f->count; k++)
        if (!strcmp(f->progs[k].name, name)) return k;
    return -1;
}

pk_status pk_accel_check_args(const pk_accel_file* f, int32_t k, const size_t* arg_bytes,
                              int32_t nargs, const char* node) {
    const pk_accel_prog* p = &f->progs[k];
    if ((uint32_t)nargs != p->n_args)
        return pk_fail(PK_ERR_FORMAT, PF ": program '%s' takes %u arguments, %s passes %d", p->name,
                       (unsigned)p->n_args, node, (int)nargs);
    for (uint32_t i = 0; i < p->n_insns; i++) {
        int32_t r = p->region[i];
        if (r < 0 || p->extent[i] <= arg_bytes[r]) continue;
        return pk_fail(PK_ERR_FORMAT,
                       PF ": program '%s' instruction %u: %s reaches byte %llu of argument %d, "
                          "which has %zu bytes (%s)",
                       p->name, (unsigned)i, opnames[pk_accel_insn_opcode(p->insns + 16 * i)],
                       (unsigned long long)p->extent[i], (int)r, arg_bytes[r], node);
    }
    return PK_OK;
}
