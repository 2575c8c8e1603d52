/* The accelerator simulator on hand-assembled programs: GEMM loops against a C reference,
 * the ALU on int32 extremes, dependency tokens (a pipeline, a missing token, a deadlock),
 * fields refused by name, cycle counts worked out from the cycle model, device memory,
 * and random instruction streams that must fail cleanly (ASAN+UBSAN in ctest). */
#include <stdarg.h>
#include <stdlib.h>

#include "pk_accel.h"
#include "pk_accel_isa.h"
#include "test_util.h"

/* 1 x 4 x 4 core, small buffers; DMA 10 cycles + 4 bytes a cycle. */
static const pk_accel_config CFG = {1, 4, 4, 64, 64, 16, 64, 10, 100.0, 4.0};

typedef struct {
    uint8_t raw[64][PK_ACCEL_INSN_BYTES];
    uint32_t n;
} program;

/* Appends an instruction given as field name / value pairs ending with NULL. */
static void emit(program* p, int opcode, ...) {
    int n = 0;
    uint8_t* raw = p->raw[p->n++];
    const pk_accel_field* fields = pk_accel_layout(opcode, &n);
    va_list ap;
    memset(raw, 0, PK_ACCEL_INSN_BYTES);
    pk_accel_set_bits(raw, 0, 3, (uint64_t)opcode);
    va_start(ap, opcode);
    for (const char* name = va_arg(ap, const char*); name; name = va_arg(ap, const char*)) {
        int64_t v = va_arg(ap, int64_t);
        unsigned pos = 0;
        int k = 0;
        for (; k < n && strcmp(fields[k].name, name) != 0; k++)
            pos += fields[k].bits;
        CHECK_MSG(k < n, name);
        if (k < n) pk_accel_set_bits(raw, pos, fields[k].bits, (uint64_t)v);
    }
    va_end(ap);
}

#define V(x) ((int64_t)(x))

typedef struct {
    pk_accel* dev;
    pk_accel_buf mem, code; /* one DRAM buffer for data, one for the instructions */
    pk_accel_counters cnt;
} rig;

static void rig_open(rig* r, size_t mem_bytes, int check) {
    memset(r, 0, sizeof *r);
    CHECK(pk_accel_open(&CFG, NULL, &r->dev) == PK_ACCEL_OK);
    CHECK(pk_accel_set_check(r->dev, check) == PK_ACCEL_OK);
    CHECK(pk_accel_alloc(r->dev, mem_bytes, &r->mem) == PK_ACCEL_OK);
    CHECK(pk_accel_alloc(r->dev, sizeof(((program*)0)->raw), &r->code) == PK_ACCEL_OK);
}

static int rig_run(rig* r, const program* p) {
    memcpy(r->code.host, p->raw, p->n * PK_ACCEL_INSN_BYTES);
    return pk_accel_run(r->dev, &r->code, p->n, 0, &r->cnt);
}

static void rig_close(rig* r) {
    pk_accel_close(r->dev);
}

static uint32_t at(const rig* r, uint32_t offset) {
    return r->mem.phys + offset;
}

static void put_u32(unsigned char* p, uint32_t v) {
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

/* ---- GEMM ---------------------------------------------------------------------------------- */

enum { UOPS_AT = 0, INP_AT = 64, WGT_AT = 256, OUT_AT = 1024 };

static void test_gemm_loops_match_reference(void) {
    rig r;
    program p = {.n = 0};
    const uint32_t uops[2][3] = {{0, 0, 0}, {1, 2, 1}};
    int8_t *inp, *wgt;
    int32_t acc[8][4];
    rig_open(&r, 2048, 1);
    unsigned char* m = r.mem.host;
    inp = (int8_t*)(m + INP_AT);
    wgt = (int8_t*)(m + WGT_AT);
    for (int k = 0; k < 2; k++)
        put_u32(m + UOPS_AT + 4 * k, uops[k][0] | uops[k][1] << 11 | uops[k][2] << 22);
    for (int k = 0; k < 10 * 4; k++)
        inp[k] = (int8_t)(k * 37 % 256 - 128);
    for (int k = 0; k < 6 * 16; k++)
        wgt[k] = (int8_t)(k * 91 % 256 - 128);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(0), "dram_base", V(at(&r, UOPS_AT)), "y_size", V(1),
         "x_size", V(2), "x_stride", V(2), NULL);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(at(&r, INP_AT)), "y_size", V(1),
         "x_size", V(10), "x_stride", V(10), NULL);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(1), "dram_base", V(at(&r, WGT_AT)), "y_size", V(1),
         "x_size", V(6), "x_stride", V(6), "push_next", V(1), NULL);
    /* iter_out 2 x iter_in 2 x 2 micro-ops: acc 0..7, inp up to 2 + 4 + 3, wgt up to 1 + 2 + 2 */
#define LOOPS                                                                                      \
    "iter_out", V(2), "iter_in", V(2), "dst_factor_out", V(4), "dst_factor_in", V(2),              \
        "src_factor_out", V(4), "src_factor_in", V(3), "wgt_factor_out", V(2), "wgt_factor_in",    \
        V(2)
    emit(&p, PK_ACCEL_OP_GEMM, "reset", V(1), "uop_bgn", V(0), "uop_end", V(2), LOOPS, NULL);
    emit(&p, PK_ACCEL_OP_GEMM, "pop_prev", V(1), "uop_bgn", V(0), "uop_end", V(2), LOOPS, NULL);
    emit(&p, PK_ACCEL_OP_GEMM, "push_next", V(1), "uop_bgn", V(1), "uop_end", V(2), LOOPS, NULL);
    emit(&p, PK_ACCEL_OP_STORE, "buffer", V(3), "dram_base", V(at(&r, OUT_AT)), "y_size", V(1),
         "x_size", V(8), "x_stride", V(8), "pop_prev", V(1), "push_prev", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, "pop_next", V(1), NULL);
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));

    memset(acc, 0, sizeof acc);
    for (int pass = 0; pass < 2; pass++)
        for (int i0 = 0; i0 < 2; i0++)
            for (int i1 = 0; i1 < 2; i1++)
                for (int u = pass; u < 2; u++) {
                    int a = (int)uops[u][0] + 4 * i0 + 2 * i1,
                        x = (int)uops[u][1] + 4 * i0 + 3 * i1;
                    int w = (int)uops[u][2] + 2 * i0 + 2 * i1;
                    for (int o = 0; o < 4; o++)
                        for (int i = 0; i < 4; i++)
                            acc[a][o] += inp[x * 4 + i] * wgt[w * 16 + o * 4 + i];
                }
    for (int t = 0; t < 8; t++)
        for (int o = 0; o < 4; o++)
            CHECK(((int8_t*)m)[OUT_AT + t * 4 + o] ==
                  (int8_t)(uint8_t)((uint32_t)acc[t][o] & 0xffu));
    CHECK(r.cnt.gemm_cycles == 8 + 8 + 4);
    CHECK(r.cnt.macs == 12 * 16);
    CHECK(r.cnt.insns[PK_ACCEL_OP_GEMM] == 3 && r.cnt.insns[PK_ACCEL_OP_LOAD] == 3);
    rig_close(&r);
}

/* ---- ALU ------------------------------------------------------------------------------------ */

/* op(a, b) lane by lane through the accelerator: acc tile 0 = a, tile 1 = b, the result read
 * back a byte at a time by four STOREs with SHR 8 between them. */
static void alu(int op, const int32_t a[4], const int32_t b[4], int32_t out[4]) {
    rig r;
    program p = {.n = 0};
    rig_open(&r, 256, 1);
    unsigned char* m = r.mem.host;
    put_u32(m, 0u | 1u << 11);
    for (int l = 0; l < 4; l++)
        put_u32(m + 16 + 4 * l, (uint32_t)a[l]), put_u32(m + 32 + 4 * l, (uint32_t)b[l]);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(0), "dram_base", V(at(&r, 0)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(3), "dram_base", V(at(&r, 16)), "y_size", V(1), "x_size",
         V(2), "x_stride", V(2), NULL);
    emit(&p, PK_ACCEL_OP_ALU, "alu_op", V(op), "uop_end", V(1), "iter_out", V(1), "iter_in", V(1),
         "push_next", V(1), NULL);
    for (int k = 0; k < 4; k++) {
        emit(&p, PK_ACCEL_OP_STORE, "buffer", V(3), "dram_base", V(at(&r, 64 + 4 * k)), "y_size",
             V(1), "x_size", V(1), "x_stride", V(1), "pop_prev", V(1), "push_prev", V(1), NULL);
        if (k < 3)
            emit(&p, PK_ACCEL_OP_ALU, "alu_op", V(PK_ACCEL_ALU_SHR), "use_imm", V(1), "imm", V(8),
                 "uop_end", V(1), "iter_out", V(1), "iter_in", V(1), "pop_next", V(1), "push_next",
                 V(1), NULL);
    }
    emit(&p, PK_ACCEL_OP_FINISH, "pop_next", V(1), NULL);
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));
    for (int l = 0; l < 4; l++) {
        uint32_t v = 0;
        for (int k = 0; k < 4; k++)
            v |= (uint32_t)m[64 + 4 * k + l] << (8 * k);
        out[l] = (int32_t)v;
    }
    rig_close(&r);
}

static void test_alu_ops_on_extremes(void) {
    static const struct {
        int op;
        int32_t a[4], b[4], want[4];
    } cases[] = {
        {PK_ACCEL_ALU_MIN, {INT32_MIN, 5, -1, 0}, {0, INT32_MAX, -2, 0}, {INT32_MIN, 5, -2, 0}},
        {PK_ACCEL_ALU_MAX, {INT32_MIN, 5, -1, 0}, {0, INT32_MAX, -2, 0}, {0, INT32_MAX, -1, 0}},
        {PK_ACCEL_ALU_ADD,
         {INT32_MAX, INT32_MIN, -5, 7},
         {1, -1, 5, -9},
         {INT32_MIN, INT32_MAX, 0, -2}},
        {PK_ACCEL_ALU_SHR, {-7, -1, 1, 1000}, {1, 40, -31, -2}, {-4, -1, INT32_MIN, 4000}},
        {PK_ACCEL_ALU_SHR, {INT32_MIN, -8, 3, 5}, {INT32_MIN, 3, 31, 0}, {0, -1, 0, 5}},
        {PK_ACCEL_ALU_MUL,
         {65536, -1, INT32_MIN, 3},
         {65536, INT32_MIN, -1, -7},
         {0, INT32_MIN, INT32_MIN, -21}},
        {PK_ACCEL_ALU_MULHI,
         {INT32_MIN, INT32_MIN, -1, INT32_MAX},
         {INT32_MIN, INT32_MAX, 1, INT32_MAX},
         {1 << 30, -(1 << 30), -1, (1 << 30) - 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t out[4];
        alu(cases[c].op, cases[c].a, cases[c].b, out);
        for (int l = 0; l < 4; l++) {
            char what[64];
            snprintf(what, sizeof what, "case %zu lane %d: %d", c, l, (int)out[l]);
            CHECK_MSG(out[l] == cases[c].want[l], what);
        }
    }
}

/* ---- DMA: padding, strides, narrowing ------------------------------------------------------ */

static void test_padded_strided_load_and_narrowing_store(void) {
    rig r;
    program p = {.n = 0};
    rig_open(&r, 1024, 1);
    unsigned char* m = r.mem.host;
    int32_t wide[4] = {300, -129, 127, INT32_MIN + 5};
    /* micro-ops t -> (acc t, inp t) for the identity GEMM that copies inp into acc */
    for (uint32_t t = 0; t < 12; t++)
        put_u32(m + 4 * t, t | t << 11);
    for (int k = 0; k < 4; k++)
        m[64 + 5 * k] = 1; /* identity wgt */
    for (int k = 0; k < 4 * 8; k++)
        m[128 + k] = (unsigned char)(k + 1); /* 2 rows of 4 tiles */
    for (int k = 0; k < 4; k++)
        put_u32(m + 256 + 4 * k, (uint32_t)wide[k]);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(0), "dram_base", V(at(&r, 0)), "y_size", V(1), "x_size",
         V(12), "x_stride", V(12), NULL);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(1), "dram_base", V(at(&r, 64)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL);
    /* tiles 1..2 of both rows (rows 4 tiles apart) in a 3 x 4 region: one pad row below, one
     * pad tile either side, pad value -3 */
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(at(&r, 128 + 4)), "y_size", V(2),
         "x_size", V(2), "x_stride", V(4), "y_pad_1", V(1), "x_pad_0", V(1), "x_pad_1", V(1),
         "pad_value", V(-3), "push_next", V(1), NULL);
    emit(&p, PK_ACCEL_OP_GEMM, "reset", V(1), "pop_prev", V(1), "uop_end", V(12), "iter_out", V(1),
         "iter_in", V(1), NULL);
    emit(&p, PK_ACCEL_OP_GEMM, "uop_end", V(12), "iter_out", V(1), "iter_in", V(1), NULL);
    /* acc tile 12: wide values, padded with zero tiles (pad_value ignored off inp) */
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(3), "sram_base", V(12), "dram_base", V(at(&r, 256)),
         "y_size", V(1), "x_size", V(1), "x_stride", V(1), "x_pad_1", V(1), "pad_value", V(9),
         "push_next", V(1), NULL);
    /* 14 tiles out, every other 4-byte slot of DRAM: x_stride 2 over rows of one tile */
    emit(&p, PK_ACCEL_OP_STORE, "buffer", V(3), "dram_base", V(at(&r, 512)), "y_size", V(14),
         "x_size", V(1), "x_stride", V(2), "pop_prev", V(1), "push_prev", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, "pop_next", V(1), NULL);
    memset(m + 512, 0x55, 14 * 8);
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));
    for (int t = 0; t < 12; t++) {
        int row = t / 4, col = t % 4, inside = row < 2 && col >= 1 && col <= 2;
        for (int l = 0; l < 4; l++) {
            int8_t want = inside ? (int8_t)(1 + (row * 4 + col) * 4 + l) : -3;
            CHECK((int8_t)m[512 + 8 * t + l] == want);
            CHECK(m[512 + 8 * t + 4 + l] == 0x55); /* the stride's gap is untouched */
        }
    }
    for (int l = 0; l < 4; l++) {
        CHECK((int8_t)m[512 + 8 * 12 + l] == (int8_t)(uint8_t)((uint32_t)wide[l] & 0xffu));
        CHECK(m[512 + 8 * 13 + l] == 0);
    }
    /* wgt 10 + 16 / 4; inp 10 + 2 x 2 x 4 bytes / 4 + 1 pad row */
    CHECK(r.cnt.busy[PK_ACCEL_LOAD_MOD] == 14 + 15);
    CHECK(r.cnt.load_bytes[PK_ACCEL_BUF_INP] == 16 && r.cnt.load_bytes[PK_ACCEL_BUF_ACC] == 16);
    CHECK(r.cnt.store_bytes == 14 * 4);
    rig_close(&r);
}

/* ---- tokens and the cycle model -------------------------------------------------------------- */

/* LOAD wgt, LOAD inp (-> compute), LOAD uop, GEMM reset, GEMM (<- load, -> store), STORE
 * (<- compute, -> compute), FINISH (<- store). */
static void pipeline(rig* r, program* p, int token) {
    unsigned char* m = r->mem.host;
    memset(p, 0, sizeof *p);
    put_u32(m, 0);
    for (int k = 0; k < 4; k++)
        m[16 + 5 * k] = 1; /* identity wgt at 16 */
    for (int k = 0; k < 4; k++)
        m[32 + k] = (unsigned char)(k + 1); /* inp at 32 */
    emit(p, PK_ACCEL_OP_LOAD, "buffer", V(1), "dram_base", V(at(r, 16)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL);
    emit(p, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(at(r, 32)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), "push_next", V(token), NULL);
    emit(p, PK_ACCEL_OP_LOAD, "buffer", V(0), "dram_base", V(at(r, 0)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL);
    emit(p, PK_ACCEL_OP_GEMM, "reset", V(1), "uop_end", V(1), "iter_out", V(1), "iter_in", V(1),
         NULL);
    emit(p, PK_ACCEL_OP_GEMM, "pop_prev", V(token), "push_next", V(1), "uop_end", V(1), "iter_out",
         V(1), "iter_in", V(1), NULL);
    emit(p, PK_ACCEL_OP_STORE, "buffer", V(3), "dram_base", V(at(r, 48)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), "pop_prev", V(1), "push_prev", V(1), NULL);
    emit(p, PK_ACCEL_OP_FINISH, "pop_next", V(1), NULL);
}

static void test_pipeline_cycles_are_the_sum_of_the_model(void) {
    rig r;
    program p;
    rig_open(&r, 256, 1);
    pipeline(&r, &p, 1);
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));
    CHECK(memcmp((unsigned char*)r.mem.host + 48, (unsigned char*)r.mem.host + 32, 4) == 0);
    /* load: wgt 10 + 16/4 = [0, 14), inp 10 + 1 = [14, 25); compute: uop [0, 11), reset
     * [11, 16), GEMM waits for 25: [25, 30); store [30, 41): 10 + 1; FINISH [41, 42) */
    CHECK(r.cnt.cycles == 42);
    CHECK(r.cnt.busy[PK_ACCEL_LOAD_MOD] == 25 && r.cnt.busy[PK_ACCEL_STORE_MOD] == 11);
    CHECK(r.cnt.busy[PK_ACCEL_COMPUTE_MOD] == 11 + 5 + 5 + 1);
    CHECK(r.cnt.stall[PK_ACCEL_COMPUTE_MOD] == 9 + 11 && r.cnt.stall[PK_ACCEL_STORE_MOD] == 30);
    CHECK(r.cnt.load_bytes[PK_ACCEL_BUF_WGT] == 16 && r.cnt.store_bytes == 4);
    rig_close(&r);
}

static void test_independent_modules_overlap(void) {
    rig r;
    program p = {.n = 0};
    rig_open(&r, 256, 0);
    put_u32(r.mem.host, 0);
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(at(&r, 64)), "y_size", V(1), "x_size",
         V(8), "x_stride", V(8), NULL); /* load: [0, 18) */
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(0), "dram_base", V(at(&r, 0)), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL); /* compute: [0, 11) */
    emit(&p, PK_ACCEL_OP_ALU, "alu_op", V(PK_ACCEL_ALU_ADD), "use_imm", V(1), "imm", V(1),
         "uop_end", V(1), "iter_out", V(20), "iter_in", V(1), "dst_factor_out", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL); /* ALU [11, 35), FINISH [35, 36) */
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));
    CHECK(r.cnt.cycles == 36);
    CHECK(r.cnt.alu_cycles == 20);
    rig_close(&r);
}

static void test_missing_token_is_stale_data_and_a_race_in_check_mode(void) {
    rig r;
    program p, early = {.n = 0};
    static const unsigned char zeros[4] = {0};
    rig_open(&r, 256, 0);
    pipeline(&r, &p, 0);
    /* the load module first loads 16 inp tiles, [0, 26), then the wgt [26, 40); the GEMM,
     * waiting for nothing, runs at [16, 21) with the wgt buffer still zero */
    emit(&early, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(at(&r, 32)), "y_size", V(1),
         "x_size", V(16), "x_stride", V(16), NULL);
    memcpy(p.raw[1], p.raw[0], PK_ACCEL_INSN_BYTES);
    memcpy(p.raw[0], early.raw[0], PK_ACCEL_INSN_BYTES);
    CHECK_MSG(rig_run(&r, &p) == PK_ACCEL_OK, pk_accel_last_error(r.dev));
    CHECK(memcmp((unsigned char*)r.mem.host + 48, zeros, 4) == 0);
    CHECK(r.cnt.cycles == 40);
    CHECK(pk_accel_set_check(r.dev, 1) == PK_ACCEL_OK);
    CHECK(rig_run(&r, &p) == PK_ACCEL_ERR_RACE);
    CHECK_MSG(strstr(pk_accel_last_error(r.dev),
                     "race on inp[0]: instruction 4 (GEMM, compute module) reads it while "
                     "instruction 0 (LOAD, load module) may still write it") != NULL,
              pk_accel_last_error(r.dev));
    rig_close(&r);
}

static void test_pop_without_push_deadlocks(void) {
    rig r;
    program p = {.n = 0};
    rig_open(&r, 64, 0);
    /* the token from load is there; the one from store is not */
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "push_next", V(1), NULL);
    emit(&p, PK_ACCEL_OP_GEMM, "pop_prev", V(1), "pop_next", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    CHECK(rig_run(&r, &p) == PK_ACCEL_ERR_DEADLOCK);
    CHECK_MSG(strstr(pk_accel_last_error(r.dev),
                     "instruction 1 (GEMM) on the compute module waits for a token from the "
                     "store module") != NULL,
              pk_accel_last_error(r.dev));
    rig_close(&r);
}

/* ---- refusals
 * ------------------------------------------------------------------------------------ */

static void expect_insn_error(const program* p, const char* message) {
    rig r;
    rig_open(&r, 64, 0);
    CHECK(rig_run(&r, p) == PK_ACCEL_ERR_INSN);
    CHECK_MSG(strstr(pk_accel_last_error(r.dev), message) != NULL, pk_accel_last_error(r.dev));
    rig_close(&r);
}

static void test_bad_fields_are_named(void) {
    program p = {.n = 0};
    emit(&p, PK_ACCEL_OP_ALU, NULL);
    emit(&p, PK_ACCEL_OP_STORE, "buffer", V(3), "y_pad_0", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 1 (STORE): field y_pad_0=1: STORE has no padding");
    p.n = 0;
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "push_prev", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 0 (LOAD): field push_prev=1: the load module has no");
    p.n = 0;
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(3), "sram_base", V(60), "y_size", V(1), "x_size", V(2),
         "x_pad_1", V(3), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 0 (LOAD): field sram_base=60: 60 + 1 rows x 5 tiles runs "
                          "past the acc buffer's depth 64");
    p.n = 0;
    emit(&p, PK_ACCEL_OP_GEMM, "uop_end", V(65), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 0 (GEMM): field uop_end=65: past the uop buffer's depth 64");
    p.n = 0;
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 0 (FINISH): FINISH before the last instruction");
    p.n = 0;
    emit(&p, 6, NULL);
    expect_insn_error(&p, "instruction 0 (?): field opcode=6: not an opcode");
    p.n = 0;
    emit(&p, PK_ACCEL_OP_LOAD, "buffer", V(2), "dram_base", V(0x100), "y_size", V(1), "x_size",
         V(1), "x_stride", V(1), NULL);
    emit(&p, PK_ACCEL_OP_FINISH, NULL);
    expect_insn_error(&p, "instruction 0 (LOAD): field dram_base=0x00000100: its 4 bytes of DMA "
                          "lie outside every device buffer");
}

static void test_device_memory(void) {
    pk_accel* dev;
    pk_accel_buf a, b, c;
    CHECK(pk_accel_open(&CFG, NULL, &dev) == PK_ACCEL_OK);
    CHECK(pk_accel_alloc(dev, 100, &a) == PK_ACCEL_OK && pk_accel_alloc(dev, 1, &b) == PK_ACCEL_OK);
    CHECK(a.phys != 0 && a.phys % 64 == 0 && b.phys % 64 == 0 && b.phys >= a.phys + 100);
    pk_accel_free(dev, &a);
    CHECK(pk_accel_alloc(dev, 100, &c) == PK_ACCEL_OK && c.phys > b.phys);
    CHECK(pk_accel_flush(dev, &c, 50, 51) == PK_ACCEL_ERR_ARG);
    CHECK(pk_accel_invalidate(dev, &c, 0, 100) == PK_ACCEL_OK);
    CHECK(pk_accel_alloc(dev, (size_t)0xffffffffu, &a) == PK_ACCEL_ERR_NOMEM);
    pk_accel_close(dev);
    pk_accel_config bad = CFG;
    bad.block_in = 0;
    CHECK(pk_accel_open(&bad, NULL, &dev) == PK_ACCEL_ERR_ARG && dev == NULL);
}

/* Random instruction words (valid opcodes mostly, so the checks past decoding run too)
 * against random micro-ops and data: every run ends with a code, never a crash. */
static void test_random_streams_fail_cleanly(void) {
    rig r;
    program p;
    rig_open(&r, 4096, 0);
    for (int round = 0; round < 3000; round++) {
        unsigned char* m = r.mem.host;
        for (int k = 0; k < 4096; k++)
            m[k] = (unsigned char)test_rand();
        CHECK(pk_accel_set_check(r.dev, round & 1) == PK_ACCEL_OK);
        p.n = 1 + (uint32_t)(test_rand() % 12);
        for (uint32_t i = 0; i < p.n; i++) {
            for (int k = 0; k < PK_ACCEL_INSN_BYTES; k++)
                p.raw[i][k] = (uint8_t)test_rand();
            /* keep the fields small often enough to pass the checks and run */
            if (test_rand() % 2) memset(p.raw[i] + 4 + test_rand() % 8, 0, 8);
            if (test_rand() % 2)
                pk_accel_set_bits(p.raw[i], 23, 32, at(&r, (uint32_t)(test_rand() % 4096)));
            p.raw[i][0] = (uint8_t)((p.raw[i][0] & ~7u) | (uint8_t)(test_rand() % 4));
        }
        memset(p.raw[p.n - 1], 0, PK_ACCEL_INSN_BYTES);
        p.raw[p.n - 1][0] = (uint8_t)(PK_ACCEL_OP_FINISH | (test_rand() % 16) << 3);
        int rc = rig_run(&r, &p);
        CHECK(rc <= 0 && rc >= PK_ACCEL_ERR_DEVICE);
        CHECK(rc == PK_ACCEL_OK || pk_accel_last_error(r.dev)[0]);
    }
    rig_close(&r);
}

int main(void) {
    test_gemm_loops_match_reference();
    test_alu_ops_on_extremes();
    test_padded_strided_load_and_narrowing_store();
    test_pipeline_cycles_are_the_sum_of_the_model();
    test_independent_modules_overlap();
    test_missing_token_is_stale_data_and_a_race_in_check_mode();
    test_pop_without_push_deadlocks();
    test_bad_fields_are_named();
    test_device_memory();
    test_random_streams_fail_cleanly();
    return test_report("test_accel_sim");
}
