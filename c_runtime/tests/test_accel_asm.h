/* A small assembler for the accelerator's tests: instructions field by field (positions from
 * packager/accel/isa.py), programs, and kernels/program.accel as program.py writes it. */
#ifndef PK_TEST_ACCEL_ASM_H
#define PK_TEST_ACCEL_ASM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char b[16];
} asm_insn;

static inline void asm_put(unsigned char* w, int pos, int bits, int64_t value) {
    for (int i = 0; i < bits; i++, pos++)
        w[pos / 8] = (unsigned char)((w[pos / 8] & ~(1u << (pos % 8))) |
                                     ((unsigned)((uint64_t)value >> i & 1u) << (pos % 8)));
}

/* opcode and the dependency flags: pop_prev, pop_next, push_prev, push_next as bits 0..3. */
static inline asm_insn asm_head(int opcode, int deps) {
    asm_insn in;
    memset(&in, 0, sizeof in);
    asm_put(in.b, 0, 3, opcode);
    asm_put(in.b, 3, 4, deps);
    return in;
}

/* LOAD (opcode 0) or STORE (1): buffer, sram_base, dram_base, y_size, x_size, x_stride. */
static inline asm_insn asm_mem(int opcode, int deps, int buffer, int sram, uint32_t dram, int ys,
                               int xs, int stride) {
    asm_insn in = asm_head(opcode, deps);
    asm_put(in.b, 7, 3, buffer);
    asm_put(in.b, 10, 13, sram);
    asm_put(in.b, 23, 32, dram);
    asm_put(in.b, 55, 16, ys);
    asm_put(in.b, 71, 16, xs);
    asm_put(in.b, 87, 16, stride);
    return in;
}

/* GEMM (2): reset, uop_bgn, uop_end, iter_out, iter_in; factors dst, src, wgt (out, in). */
static inline asm_insn asm_gemm(int deps, int reset, int bgn, int end, int it_out, int it_in,
                                const int f[6]) {
    static const int pos[6] = {63, 74, 85, 96, 107, 117}, bits[6] = {11, 11, 11, 11, 10, 10};
    asm_insn in = asm_head(2, deps);
    asm_put(in.b, 7, 1, reset);
    asm_put(in.b, 8, 13, bgn);
    asm_put(in.b, 21, 14, end);
    asm_put(in.b, 35, 14, it_out);
    asm_put(in.b, 49, 14, it_in);
    for (int k = 0; k < 6; k++)
        asm_put(in.b, pos[k], bits[k], f[k]);
    return in;
}

static inline uint32_t asm_uop(int acc, int inp, int wgt) {
    return (uint32_t)acc | (uint32_t)inp << 11 | (uint32_t)wgt << 22;
}

typedef struct {
    const char* name;
    uint32_t n_args, n_insns, n_uops, n_relocs;
    const asm_insn* insns;
    const uint32_t* uops;
    const int32_t (*relocs)[2]; /* insn, region */
} asm_prog;

static inline void asm_u32(unsigned char* p, uint64_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The default config block (program.py's AccelConfig()). */
static inline void asm_config(unsigned char* p) {
    const uint32_t u[8] = {1, 16, 16, 8192, 2048, 1024, 2048, 64};
    const double d[2] = {100.0, 8.0};
    for (int k = 0; k < 8; k++)
        asm_u32(p + 4 * k, u[k]);
    memcpy(p + 32, d, sizeof d); /* the tests run on little-endian hosts */
}

/* The bytes of a program file (malloc'ed; *len its size). */
static inline unsigned char* asm_file(const asm_prog* progs, int count, size_t* len) {
    size_t off = (64 + 96 * (size_t)count + 15) / 16 * 16, total = off;
    for (int k = 0; k < count; k++)
        total +=
            (progs[k].n_insns * 16u + progs[k].n_uops * 4u + progs[k].n_relocs * 8u + 15) / 16 * 16;
    unsigned char* f = calloc(1, total);
    memcpy(f, "PKACCEL1", 8);
    asm_u32(f + 8, 1);
    asm_u32(f + 12, (uint32_t)count);
    asm_config(f + 16);
    for (int k = 0; k < count; k++) {
        const asm_prog* p = &progs[k];
        unsigned char* e = f + 64 + 96 * k;
        strncpy((char*)e, p->name, 63);
        asm_u32(e + 64, p->n_args);
        asm_u32(e + 68, p->n_insns);
        asm_u32(e + 72, p->n_uops);
        asm_u32(e + 76, p->n_relocs);
        asm_u32(e + 80, off);
        unsigned char* d = f + off;
        memcpy(d, p->insns, 16u * p->n_insns);
        d += 16u * p->n_insns;
        for (uint32_t u = 0; u < p->n_uops; u++, d += 4)
            asm_u32(d, p->uops[u]);
        for (uint32_t r = 0; r < p->n_relocs; r++, d += 8) {
            asm_u32(d, (uint32_t)p->relocs[r][0]);
            asm_u32(d + 4, (uint32_t)p->relocs[r][1]);
        }
        off += (p->n_insns * 16u + p->n_uops * 4u + p->n_relocs * 8u + 15) / 16 * 16;
    }
    *len = total;
    return f;
}

/* A 1 x 16 x 16 GEMM: y[16] int8 = low bytes of W[16x16] . x[16] (arguments x, W, y).
 * 0 LOAD uop, 1 LOAD inp, 2 LOAD wgt, 3 GEMM reset, 4 GEMM, 5 STORE acc, 6 FINISH; the
 * tokens follow docs/accel.md: the loads push to compute, compute to store, and FINISH waits
 * for the store. */
static const int asm_no_factors[6] = {0, 0, 0, 0, 0, 0};
static const uint32_t asm_gemm_uops[1] = {0};
static const int32_t asm_gemm_relocs[4][2] = {{0, -1}, {1, 0}, {2, 1}, {5, 2}};

static inline void asm_gemm_insns(asm_insn out[7]) {
    out[0] = asm_mem(0, 0, 0, 0, 0, 1, 1, 1); /* uops (compute) */
    out[1] = asm_mem(0, 0, 2, 0, 0, 1, 1, 1); /* inp (load) */
    out[2] = asm_mem(0, 8, 1, 0, 0, 1, 1, 1); /* wgt (load), push_next */
    out[3] = asm_gemm(0, 1, 0, 1, 1, 1, asm_no_factors);
    out[4] = asm_gemm(1 | 8, 0, 0, 1, 1, 1, asm_no_factors); /* pop_prev, push_next */
    out[5] = asm_mem(1, 1 | 4, 3, 0, 0, 1, 1, 1);            /* STORE, pop_prev, push_prev */
    out[6] = asm_head(4, 2);                                 /* FINISH after the store: pop_next */
}

#endif
