/* pk_accel.h - the accelerator driver API (docs/accel.md, "Driver API").
 *
 * One API, two implementations chosen at build time: pk_accel_sim.c, the behavioural
 * simulator with its cycle model, and pk_accel_uio.c, the Linux driver for a board (UIO
 * registers and a contiguous-memory allocator, as PYNQ images provide; untested without
 * hardware). The runtime's accel backend (src/backends/pk_accel.c) uses only this header.
 *
 * Device memory is a set of physically contiguous buffers, each with a host mapping and a
 * 32-bit physical address; instructions address DRAM by physical byte address. Functions
 * return PK_ACCEL_OK or a negative code; pk_accel_last_error() says why in words. */
#ifndef PK_ACCEL_H
#define PK_ACCEL_H

#include <stddef.h>
#include <stdint.h>

enum {
    PK_ACCEL_OK = 0,
    PK_ACCEL_ERR_ARG = -1,   /* a bad argument or configuration */
    PK_ACCEL_ERR_NOMEM = -2, /* no device memory left */
    PK_ACCEL_ERR_INSN = -3, /* a malformed instruction: field out of range, index past a buffer, DMA
                               outside device memory */
    PK_ACCEL_ERR_DEADLOCK = -4, /* a module waits on a token no instruction will push */
    PK_ACCEL_ERR_RACE = -5,     /* checking mode: a buffer entry read or overwritten while another
                                   module still uses it */
    PK_ACCEL_ERR_TIMEOUT = -6,
    PK_ACCEL_ERR_DEVICE = -7 /* the board driver: opening or mapping the device failed */
};

typedef struct {
    uint32_t batch, block_in, block_out; /* GEMM core: batch x block_in x block_out */
    uint32_t uop_depth, inp_depth, wgt_depth, acc_depth; /* buffer depths in tiles (entries) */
    uint32_t dma_latency_cycles;                         /* cycle model: fixed cost of each DMA */
    double clock_mhz;                                    /* cycle model: cycles -> time */
    double dma_bytes_per_cycle;                          /* cycle model: DMA bandwidth */
} pk_accel_config;

typedef struct {
    void* host;    /* the host's view of the buffer */
    uint32_t phys; /* its physical address as instructions use it */
    size_t size;
} pk_accel_buf;

enum { PK_ACCEL_LOAD_MOD, PK_ACCEL_COMPUTE_MOD, PK_ACCEL_STORE_MOD, PK_ACCEL_MODULES };

/* What one run did (the simulator fills every field; the board driver only cycles, from
 * its counter register, and insns). */
typedef struct {
    uint64_t cycles;                  /* from start until FINISH retired */
    uint64_t insns[5];                /* by opcode: LOAD, STORE, GEMM, ALU, FINISH */
    uint64_t load_bytes[4];           /* DRAM bytes loaded into uop, wgt, inp, acc */
    uint64_t store_bytes;             /* DRAM bytes stored */
    uint64_t busy[PK_ACCEL_MODULES];  /* cycles each module spent executing */
    uint64_t stall[PK_ACCEL_MODULES]; /* cycles each module spent waiting on a token */
    uint64_t gemm_cycles;             /* GEMM micro-op iterations (one per cycle) */
    uint64_t alu_cycles;              /* ALU micro-op iterations */
    uint64_t macs;                    /* multiply-accumulates done by GEMM */
} pk_accel_counters;

typedef struct pk_accel pk_accel;

/* Opens the device. `driver_arg`: the simulator ignores it; the board driver takes the UIO
 * device path (NULL: /dev/uio0). Checking mode (simulator): races are errors, on when the
 * environment variable PK_ACCEL_CHECK is 1. */
int pk_accel_open(const pk_accel_config* cfg, const char* driver_arg, pk_accel** out);
void pk_accel_close(pk_accel* dev);
/* Checking mode on (1) or off (0), overriding PK_ACCEL_CHECK; the board driver has none and
 * refuses to turn it on (PK_ACCEL_ERR_ARG). */
int pk_accel_set_check(pk_accel* dev, int on);

/* A physically contiguous buffer of `size` bytes (64-byte aligned physical address). */
int pk_accel_alloc(pk_accel* dev, size_t size, pk_accel_buf* out);
void pk_accel_free(pk_accel* dev, pk_accel_buf* buf);
/* Cache maintenance after the host wrote, or before it reads, bytes of a buffer. */
int pk_accel_flush(pk_accel* dev, const pk_accel_buf* buf, size_t offset, size_t size);
int pk_accel_invalidate(pk_accel* dev, const pk_accel_buf* buf, size_t offset, size_t size);

/* Runs `count` instructions at `insns` (16 bytes each, already relocated to physical
 * addresses; the last must be FINISH), waits until FINISH or `timeout_ms`, and fills
 * `counters` when not NULL. */
int pk_accel_run(pk_accel* dev, const pk_accel_buf* insns, uint32_t count, uint32_t timeout_ms,
                 pk_accel_counters* counters);

/* Why the last call on `dev` failed; with NULL, why the last pk_accel_open failed. */
const char* pk_accel_last_error(const pk_accel* dev);

#endif
