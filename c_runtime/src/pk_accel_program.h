/* pk_accel_program.h - kernels/program.accel, the accelerator's programs (docs/accel.md,
 * "Programs"): parsed and checked whole before anything runs, then each program checked
 * against the node that calls it. Needs nothing of the driver, so every build has it. */
#ifndef PK_ACCEL_PROGRAM_H
#define PK_ACCEL_PROGRAM_H

#include "pk_internal.h"

#define PK_ACCEL_FILE "kernels/program.accel"
#define PK_ACCEL_NAME_BYTES 64
#define PK_ACCEL_INSN_BYTES 16
#define PK_ACCEL_UOP_BYTES 4
#define PK_ACCEL_UOPS (-1)           /* a relocation's region: the program's micro-ops */
#define PK_ACCEL_NO_REGION INT32_MIN /* an instruction without a relocation */

enum { PK_ACCEL_LOAD, PK_ACCEL_STORE, PK_ACCEL_GEMM, PK_ACCEL_ALU, PK_ACCEL_FINISH };

/* The config block: what the programs were compiled for (as pk_accel_config). */
typedef struct {
    uint32_t batch, block_in, block_out;
    uint32_t uop_depth, inp_depth, wgt_depth, acc_depth;
    uint32_t dma_latency_cycles;
    double clock_mhz, dma_bytes_per_cycle;
} pk_accel_file_config;

typedef struct {
    char name[PK_ACCEL_NAME_BYTES];
    uint32_t n_args, n_insns, n_uops, n_relocs;
    const unsigned char* insns; /* into the file's bytes */
    const unsigned char* uops;
    /* Per instruction: the region its dram_base is relative to (an argument, PK_ACCEL_UOPS
     * or PK_ACCEL_NO_REGION) and the end of its DMA there (bytes from the region's start). */
    int32_t* region;
    uint64_t* extent;
} pk_accel_prog;

typedef struct {
    pk_accel_file_config cfg;
    int32_t count;
    pk_accel_prog* progs;
} pk_accel_file;

/* Parses and checks a whole program file (`data` must outlive `out`); PK_ERR_FORMAT with a
 * message naming the program and instruction at fault. pk_accel_file_free undoes. */
pk_status pk_accel_file_parse(const void* data, size_t len, pk_accel_file* out);
void pk_accel_file_free(pk_accel_file* f);
/* The program named `name`, or -1. */
int32_t pk_accel_file_find(const pk_accel_file* f, const char* name);
/* Checks program p against the node calling it: as many arguments, and every DMA inside
 * its argument's bytes (arg_bytes[k]). `node` names the node in messages. */
pk_status pk_accel_check_args(const pk_accel_file* f, int32_t p, const size_t* arg_bytes,
                              int32_t nargs, const char* node);

/* An instruction's opcode and its dram_base field (LOAD and STORE), read and rewritten. */
uint32_t pk_accel_insn_opcode(const unsigned char* insn);
uint32_t pk_accel_insn_dram_base(const unsigned char* insn);
void pk_accel_insn_set_dram_base(unsigned char* insn, uint32_t value);

#endif
