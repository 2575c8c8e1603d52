/* pk_accel_isa.h - decoding and checking the accelerator's instructions (docs/accel.md,
 * "Instructions").
 *
 * The field tables mirror packager/accel/isa.py exactly: fields packed from bit 0 upward,
 * every kind starting with the opcode and the four dependency flags. Decoding is table
 * driven so that the tables are the only place the layout lives; tests/accel/
 * test_simulator.py encodes every field in Python and has this code decode it back.
 *
 * Header only (static inline), so that the simulator, the board driver and the runtime's
 * program-file checks share one definition without another library. */
#ifndef PK_ACCEL_ISA_H
#define PK_ACCEL_ISA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pk_accel.h"

enum {
    PK_ACCEL_OP_LOAD,
    PK_ACCEL_OP_STORE,
    PK_ACCEL_OP_GEMM,
    PK_ACCEL_OP_ALU,
    PK_ACCEL_OP_FINISH,
    PK_ACCEL_OPS
};
enum { PK_ACCEL_BUF_UOP, PK_ACCEL_BUF_WGT, PK_ACCEL_BUF_INP, PK_ACCEL_BUF_ACC, PK_ACCEL_BUFS };
enum {
    PK_ACCEL_ALU_MIN,
    PK_ACCEL_ALU_MAX,
    PK_ACCEL_ALU_ADD,
    PK_ACCEL_ALU_SHR,
    PK_ACCEL_ALU_MUL,
    PK_ACCEL_ALU_MULHI,
    PK_ACCEL_ALU_OPS
};

#define PK_ACCEL_INSN_BYTES 16
#define PK_ACCEL_UOP_BYTES 4
/* Cycles a GEMM or ALU instruction spends filling its pipeline (the cycle model). */
#define PK_ACCEL_PIPELINE_FILL 4

/* Every field of every kind; a kind leaves the fields it lacks at 0. */
typedef struct {
    int64_t opcode, pop_prev, pop_next, push_prev, push_next;
    int64_t buffer, sram_base, dram_base, y_size, x_size, x_stride;
    int64_t y_pad_0, y_pad_1, x_pad_0, x_pad_1, pad_value;
    int64_t reset, uop_bgn, uop_end, iter_out, iter_in;
    int64_t dst_factor_out, dst_factor_in, src_factor_out, src_factor_in;
    int64_t wgt_factor_out, wgt_factor_in, alu_op, use_imm, imm;
} pk_accel_insn;

typedef struct {
    uint32_t acc, inp, wgt;
} pk_accel_uop;

typedef struct {
    const char* name;
    unsigned bits;
    int is_signed;
    size_t offset; /* into pk_accel_insn */
} pk_accel_field;

#define PK_ACCEL_F(name, bits, sgn) {#name, bits, sgn, offsetof(pk_accel_insn, name)}
#define PK_ACCEL_HEAD                                                                              \
    PK_ACCEL_F(opcode, 3, 0), PK_ACCEL_F(pop_prev, 1, 0), PK_ACCEL_F(pop_next, 1, 0),              \
        PK_ACCEL_F(push_prev, 1, 0), PK_ACCEL_F(push_next, 1, 0)
#define PK_ACCEL_LOOP                                                                              \
    PK_ACCEL_HEAD, PK_ACCEL_F(reset, 1, 0), PK_ACCEL_F(uop_bgn, 13, 0),                            \
        PK_ACCEL_F(uop_end, 14, 0), PK_ACCEL_F(iter_out, 14, 0), PK_ACCEL_F(iter_in, 14, 0),       \
        PK_ACCEL_F(dst_factor_out, 11, 0), PK_ACCEL_F(dst_factor_in, 11, 0),                       \
        PK_ACCEL_F(src_factor_out, 11, 0), PK_ACCEL_F(src_factor_in, 11, 0)

/* The fields of opcode `op` in bit order (NULL for an unknown opcode). */
static inline const pk_accel_field* pk_accel_layout(int64_t op, int* n) {
    static const pk_accel_field memory[] = {PK_ACCEL_HEAD,
                                            PK_ACCEL_F(buffer, 3, 0),
                                            PK_ACCEL_F(sram_base, 13, 0),
                                            PK_ACCEL_F(dram_base, 32, 0),
                                            PK_ACCEL_F(y_size, 16, 0),
                                            PK_ACCEL_F(x_size, 16, 0),
                                            PK_ACCEL_F(x_stride, 16, 0),
                                            PK_ACCEL_F(y_pad_0, 4, 0),
                                            PK_ACCEL_F(y_pad_1, 4, 0),
                                            PK_ACCEL_F(x_pad_0, 4, 0),
                                            PK_ACCEL_F(x_pad_1, 4, 0),
                                            PK_ACCEL_F(pad_value, 8, 1)};
    static const pk_accel_field gemm[] = {PK_ACCEL_LOOP, PK_ACCEL_F(wgt_factor_out, 10, 0),
                                          PK_ACCEL_F(wgt_factor_in, 10, 0)};
    static const pk_accel_field alu[] = {PK_ACCEL_LOOP, PK_ACCEL_F(alu_op, 3, 0),
                                         PK_ACCEL_F(use_imm, 1, 0), PK_ACCEL_F(imm, 16, 1)};
    static const pk_accel_field head[] = {PK_ACCEL_HEAD};
    static const struct {
        const pk_accel_field* fields;
        int n;
    } kinds[PK_ACCEL_OPS] = {{memory, (int)(sizeof memory / sizeof memory[0])},
                             {memory, (int)(sizeof memory / sizeof memory[0])},
                             {gemm, (int)(sizeof gemm / sizeof gemm[0])},
                             {alu, (int)(sizeof alu / sizeof alu[0])},
                             {head, (int)(sizeof head / sizeof head[0])}};
    if (op < 0 || op >= PK_ACCEL_OPS) return NULL;
    *n = kinds[op].n;
    return kinds[op].fields;
}

static inline const char* pk_accel_op_name(int64_t op) {
    static const char* const names[PK_ACCEL_OPS] = {"LOAD", "STORE", "GEMM", "ALU", "FINISH"};
    return op >= 0 && op < PK_ACCEL_OPS ? names[op] : "?";
}

static inline const char* pk_accel_buf_name(int64_t buf) {
    static const char* const names[PK_ACCEL_BUFS] = {"uop", "wgt", "inp", "acc"};
    return buf >= 0 && buf < PK_ACCEL_BUFS ? names[buf] : "?";
}

/* `bits` bits of the little-endian bit string `raw` from bit `pos`. */
static inline uint64_t pk_accel_bits(const uint8_t* raw, unsigned pos, unsigned bits) {
    uint64_t v = 0;
    for (unsigned k = 0; k < bits; k++) {
        unsigned at = pos + k;
        v |= (uint64_t)((raw[at >> 3] >> (at & 7)) & 1u) << k;
    }
    return v;
}

static inline void pk_accel_set_bits(uint8_t* raw, unsigned pos, unsigned bits, uint64_t v) {
    for (unsigned k = 0; k < bits; k++) {
        unsigned at = pos + k;
        uint8_t mask = (uint8_t)(1u << (at & 7));
        raw[at >> 3] = (uint8_t)((v >> k) & 1u ? raw[at >> 3] | mask : raw[at >> 3] & ~mask);
    }
}

static inline int64_t pk_accel_field_value(const uint8_t* raw, unsigned pos,
                                           const pk_accel_field* f) {
    uint64_t v = pk_accel_bits(raw, pos, f->bits);
    /* two's complement by arithmetic on int64, not by a conversion of a large uint64 */
    if (f->is_signed && (v >> (f->bits - 1)) & 1u) return (int64_t)v - ((int64_t)1 << f->bits);
    return (int64_t)v;
}

/* Decodes 16 bytes. Fails (PK_ACCEL_ERR_INSN, with `msg`) on an unknown opcode or on bits set
 * past the kind's last field. */
static inline int pk_accel_decode(const uint8_t* raw, pk_accel_insn* out, char* msg, size_t len) {
    int n = 0;
    unsigned pos = 0;
    int64_t op = (int64_t)pk_accel_bits(raw, 0, 3);
    const pk_accel_field* fields = pk_accel_layout(op, &n);
    *out = (pk_accel_insn){0};
    if (!fields) {
        out->opcode = op;
        snprintf(msg, len, "field opcode=%d: not an opcode", (int)op);
        return PK_ACCEL_ERR_INSN;
    }
    for (int k = 0; k < n; k++) {
        *(int64_t*)(void*)((char*)out + fields[k].offset) =
            pk_accel_field_value(raw, pos, &fields[k]);
        pos += fields[k].bits;
    }
    for (unsigned at = pos; at < 8 * PK_ACCEL_INSN_BYTES; at++) {
        if (pk_accel_bits(raw, at, 1)) {
            snprintf(msg, len, "bit %u is set past the last field of %s (bit %u)", at,
                     pk_accel_op_name(op), pos);
            return PK_ACCEL_ERR_INSN;
        }
    }
    return PK_ACCEL_OK;
}

static inline pk_accel_uop pk_accel_decode_uop(uint32_t word) {
    pk_accel_uop u = {word & 0x7ffu, (word >> 11) & 0x7ffu, (word >> 22) & 0x3ffu};
    return u;
}

/* Bit position of dram_base in LOAD and STORE (relocations rewrite it). */
#define PK_ACCEL_DRAM_BASE_POS 23

/* Which module runs an instruction: LOAD into inp or wgt on load, LOAD into uop or acc and
 * GEMM, ALU, FINISH on compute, STORE on store. */
static inline int pk_accel_module_of(const pk_accel_insn* in) {
    if (in->opcode == PK_ACCEL_OP_STORE) return PK_ACCEL_STORE_MOD;
    if (in->opcode == PK_ACCEL_OP_LOAD &&
        (in->buffer == PK_ACCEL_BUF_INP || in->buffer == PK_ACCEL_BUF_WGT))
        return PK_ACCEL_LOAD_MOD;
    return PK_ACCEL_COMPUTE_MOD;
}

static inline uint32_t pk_accel_depth(const pk_accel_config* cfg, int64_t buf) {
    const uint32_t depths[PK_ACCEL_BUFS] = {cfg->uop_depth, cfg->wgt_depth, cfg->inp_depth,
                                            cfg->acc_depth};
    return depths[buf];
}

/* Bytes of one tile of `buf` in DRAM (acc: int32 lanes when loaded, int8 when stored). */
static inline uint64_t pk_accel_dram_tile(const pk_accel_config* cfg, int64_t buf, int store) {
    const uint64_t tiles[PK_ACCEL_BUFS] = {
        PK_ACCEL_UOP_BYTES, (uint64_t)cfg->block_out * cfg->block_in,
        (uint64_t)cfg->batch * cfg->block_in, (uint64_t)cfg->batch * cfg->block_out * 4u};
    return buf == PK_ACCEL_BUF_ACC && store ? (uint64_t)cfg->batch * cfg->block_out : tiles[buf];
}

#define PK_ACCEL_BAD(...) (snprintf(msg, len, __VA_ARGS__), PK_ACCEL_ERR_INSN)

static inline int pk_accel_check_flags(const pk_accel_insn* in, char* msg, size_t len) {
    int module = pk_accel_module_of(in);
    if (module == PK_ACCEL_LOAD_MOD && (in->pop_prev || in->push_prev))
        return PK_ACCEL_BAD("field %s=1: the load module has no previous module",
                            in->pop_prev ? "pop_prev" : "push_prev");
    if (module == PK_ACCEL_STORE_MOD && (in->pop_next || in->push_next))
        return PK_ACCEL_BAD("field %s=1: the store module has no next module",
                            in->pop_next ? "pop_next" : "push_next");
    return PK_ACCEL_OK;
}

static inline int pk_accel_check_memory(const pk_accel_insn* in, const pk_accel_config* cfg,
                                        char* msg, size_t len) {
    if (in->buffer >= PK_ACCEL_BUFS)
        return PK_ACCEL_BAD("field buffer=%d: not a buffer", (int)in->buffer);
    if (in->opcode == PK_ACCEL_OP_STORE) {
        const char* names[5] = {"y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1", "pad_value"};
        const int64_t vals[5] = {in->y_pad_0, in->y_pad_1, in->x_pad_0, in->x_pad_1, in->pad_value};
        if (in->buffer != PK_ACCEL_BUF_ACC)
            return PK_ACCEL_BAD("field buffer=%d: STORE writes back only acc (3)", (int)in->buffer);
        for (int k = 0; k < 5; k++)
            if (vals[k])
                return PK_ACCEL_BAD("field %s=%d: STORE has no padding", names[k], (int)vals[k]);
    }
    uint64_t rows = (uint64_t)(in->y_pad_0 + in->y_size + in->y_pad_1);
    uint64_t cols = (uint64_t)(in->x_pad_0 + in->x_size + in->x_pad_1);
    uint64_t depth = pk_accel_depth(cfg, in->buffer);
    if ((uint64_t)in->sram_base + rows * cols > depth)
        return PK_ACCEL_BAD("field sram_base=%d: %d + %llu rows x %llu tiles runs past the %s "
                            "buffer's depth %llu",
                            (int)in->sram_base, (int)in->sram_base, (unsigned long long)rows,
                            (unsigned long long)cols, pk_accel_buf_name(in->buffer),
                            (unsigned long long)depth);
    return PK_ACCEL_OK;
}

static inline int pk_accel_check_loop(const pk_accel_insn* in, const pk_accel_config* cfg,
                                      char* msg, size_t len) {
    if (in->uop_end > cfg->uop_depth)
        return PK_ACCEL_BAD("field uop_end=%d: past the uop buffer's depth %u", (int)in->uop_end,
                            cfg->uop_depth);
    if (in->uop_bgn > in->uop_end)
        return PK_ACCEL_BAD("field uop_bgn=%d: after uop_end=%d", (int)in->uop_bgn,
                            (int)in->uop_end);
    if (in->opcode == PK_ACCEL_OP_ALU && in->alu_op >= PK_ACCEL_ALU_OPS)
        return PK_ACCEL_BAD("field alu_op=%d: not an ALU operation", (int)in->alu_op);
    return PK_ACCEL_OK;
}

/* Checks a decoded instruction's fields against the machine: flags naming a missing
 * neighbour, a bad buffer, pads on a STORE, a buffer region past its depth, a micro-op
 * range past the uop buffer, an unknown ALU op. Indices that depend on micro-op contents
 * are checked when the instruction runs. `msg` names the field. */
static inline int pk_accel_check_insn(const pk_accel_insn* in, const pk_accel_config* cfg,
                                      char* msg, size_t len) {
    int rc = pk_accel_check_flags(in, msg, len);
    if (rc != PK_ACCEL_OK) return rc;
    if (in->opcode == PK_ACCEL_OP_LOAD || in->opcode == PK_ACCEL_OP_STORE)
        return pk_accel_check_memory(in, cfg, msg, len);
    if (in->opcode == PK_ACCEL_OP_GEMM || in->opcode == PK_ACCEL_OP_ALU)
        return pk_accel_check_loop(in, cfg, msg, len);
    return PK_ACCEL_OK;
}

#undef PK_ACCEL_BAD

#endif
