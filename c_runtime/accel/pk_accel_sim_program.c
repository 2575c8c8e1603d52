/* pk_accel_sim_program.c - one program run on a fresh simulator, for the Python binding
 * (packager/accel/simulator.py) and the compiler's tests.
 *
 * Allocates one device buffer per kernel argument, one for the micro-ops and one for the
 * instructions, applies the relocations (dram_base += the region's physical address), runs,
 * and copies every argument back. Also exposes the field decoder so that Python can check
 * that both sides agree on the encoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_accel.h"
#include "pk_accel_isa.h"

/* Field `k` of the instruction at `raw` in bit order: its name and value; 0 past the last. */
int pk_accel_sim_decode_field(const uint8_t* raw, int k, const char** name, int64_t* value) {
    int n = 0;
    pk_accel_insn in;
    char msg[160];
    const pk_accel_field* fields = pk_accel_layout((int64_t)pk_accel_bits(raw, 0, 3), &n);
    if (!fields || k < 0 || k >= n || pk_accel_decode(raw, &in, msg, sizeof msg) != PK_ACCEL_OK)
        return 0;
    *name = fields[k].name;
    *value = *(const int64_t*)(const void*)((const char*)&in + fields[k].offset);
    return 1;
}

typedef struct {
    pk_accel* dev;
    pk_accel_buf* bufs; /* args, then micro-ops, then instructions */
    uint32_t n_bufs;
} sim_session;

static int relocate(uint8_t* insns, uint32_t n_insns, const int32_t* relocs, uint32_t n_relocs,
                    const sim_session* s, uint32_t n_args, char* err, size_t err_len) {
    for (uint32_t r = 0; r < n_relocs; r++) {
        uint32_t at = (uint32_t)relocs[2 * r];
        int32_t region = relocs[2 * r + 1];
        if (at >= n_insns || region < -1 || region >= (int32_t)n_args) {
            snprintf(err, err_len, "relocation %u: instruction %u / region %d out of range", r, at,
                     (int)region);
            return PK_ACCEL_ERR_ARG;
        }
        uint8_t* raw = insns + (size_t)at * PK_ACCEL_INSN_BYTES;
        uint64_t op = pk_accel_bits(raw, 0, 3);
        uint32_t phys = s->bufs[region < 0 ? n_args : (uint32_t)region].phys;
        uint64_t addr = pk_accel_bits(raw, PK_ACCEL_DRAM_BASE_POS, 32) + phys;
        if ((op != PK_ACCEL_OP_LOAD && op != PK_ACCEL_OP_STORE) || addr > UINT32_MAX) {
            snprintf(err, err_len,
                     "relocation %u: instruction %u is not a LOAD or STORE, or its "
                     "address overflows",
                     r, at);
            return PK_ACCEL_ERR_ARG;
        }
        pk_accel_set_bits(raw, PK_ACCEL_DRAM_BASE_POS, 32, addr);
    }
    return PK_ACCEL_OK;
}

static int alloc_all(sim_session* s, void* const* args, const size_t* sizes, uint32_t n_args,
                     const uint8_t* uops, uint32_t n_uops, const uint8_t* insns, uint32_t n_insns) {
    for (uint32_t k = 0; k < n_args + 2; k++) {
        const void* src = k < n_args ? args[k] : k == n_args ? (const void*)uops : insns;
        size_t size = k < n_args    ? sizes[k]
                      : k == n_args ? (size_t)n_uops * PK_ACCEL_UOP_BYTES
                                    : (size_t)n_insns * PK_ACCEL_INSN_BYTES;
        int rc = pk_accel_alloc(s->dev, size ? size : 1, &s->bufs[k]);
        if (rc != PK_ACCEL_OK) return rc;
        s->n_bufs = k + 1;
        if (size) memcpy(s->bufs[k].host, src, size);
    }
    return PK_ACCEL_OK;
}

int pk_accel_sim_program(const pk_accel_config* cfg, int check, const uint8_t* insns,
                         uint32_t n_insns, const uint8_t* uops, uint32_t n_uops,
                         const int32_t* relocs, uint32_t n_relocs, void* const* args,
                         const size_t* sizes, uint32_t n_args, pk_accel_counters* counters,
                         char* err, size_t err_len) {
    sim_session s = {NULL, calloc((size_t)n_args + 2, sizeof(pk_accel_buf)), 0};
    int rc = s.bufs ? pk_accel_open(cfg, NULL, &s.dev) : PK_ACCEL_ERR_NOMEM;
    snprintf(err, err_len, "%s", rc == PK_ACCEL_ERR_ARG ? "bad accelerator configuration" : "");
    if (rc == PK_ACCEL_OK) rc = pk_accel_set_check(s.dev, check);
    if (rc == PK_ACCEL_OK) rc = alloc_all(&s, args, sizes, n_args, uops, n_uops, insns, n_insns);
    if (rc == PK_ACCEL_OK)
        rc = relocate(s.bufs[n_args + 1].host, n_insns, relocs, n_relocs, &s, n_args, err, err_len);
    if (rc == PK_ACCEL_OK && !err[0])
        rc = pk_accel_run(s.dev, &s.bufs[n_args + 1], n_insns, 0, counters);
    if (rc != PK_ACCEL_OK && !err[0] && s.dev)
        snprintf(err, err_len, "%s", pk_accel_last_error(s.dev));
    for (uint32_t k = 0; rc == PK_ACCEL_OK && k < n_args; k++)
        memcpy(args[k], s.bufs[k].host, sizes[k]);
    pk_accel_close(s.dev);
    free(s.bufs);
    return rc;
}
