/* The accelerator simulator on arbitrary instruction streams: the input's first byte picks
 * checking mode and relocation, the rest are instructions (device memory, micro-ops and
 * data, is the input repeated) whose LOAD/STORE dram_base is taken relative to that memory so that
 * DMAs reach it; a FINISH is appended. Every run must end with a code, never a crash. */
#include <stdint.h>
#include <string.h>

#include "pk_accel.h"
#include "pk_accel_isa.h"

enum { MEM_BYTES = 1024, MAX_INSNS = 256 };
/* GEMM's and ALU's iter_out (iter_in follows): after the head (7), reset, uop_bgn, uop_end */
enum { ITER_OUT_POS = 7 + 1 + 13 + 14 };

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const pk_accel_config cfg = {1, 4, 4, 64, 64, 16, 64, 10, 100.0, 4.0};
    pk_accel* dev;
    pk_accel_buf mem, code;
    if (size < 1 || pk_accel_open(&cfg, NULL, &dev) != PK_ACCEL_OK) return 0;
    size_t n = (size - 1) / PK_ACCEL_INSN_BYTES;
    if (n > MAX_INSNS - 1) n = MAX_INSNS - 1;
    if (pk_accel_alloc(dev, MEM_BYTES, &mem) == PK_ACCEL_OK &&
        pk_accel_alloc(dev, (n + 1) * PK_ACCEL_INSN_BYTES, &code) == PK_ACCEL_OK) {
        uint8_t* insns = code.host;
        pk_accel_set_check(dev, data[0] & 1);
        for (size_t k = 0; k < MEM_BYTES; k++)
            ((uint8_t*)mem.host)[k] = data[k % size];
        memcpy(insns, data + 1, n * PK_ACCEL_INSN_BYTES);
        for (size_t i = 0; i < n; i++) {
            uint8_t* raw = insns + i * PK_ACCEL_INSN_BYTES;
            /* loops of up to 2^14 x 2^14 iterations are valid but would only slow the search */
            if (pk_accel_bits(raw, 0, 3) == PK_ACCEL_OP_GEMM ||
                pk_accel_bits(raw, 0, 3) == PK_ACCEL_OP_ALU) {
                pk_accel_set_bits(raw, ITER_OUT_POS + 4, 10, 0);
                pk_accel_set_bits(raw, ITER_OUT_POS + 14 + 4, 10, 0);
            }
            if (pk_accel_bits(raw, 0, 3) <= PK_ACCEL_OP_STORE && (data[0] & 2)) {
                uint64_t off = pk_accel_bits(raw, PK_ACCEL_DRAM_BASE_POS, 32) % MEM_BYTES;
                pk_accel_set_bits(raw, PK_ACCEL_DRAM_BASE_POS, 32, mem.phys + off);
            }
        }
        memset(insns + n * PK_ACCEL_INSN_BYTES, 0, PK_ACCEL_INSN_BYTES);
        insns[n * PK_ACCEL_INSN_BYTES] = (uint8_t)(PK_ACCEL_OP_FINISH | (data[0] & 0x78));
        int rc = pk_accel_run(dev, &code, (uint32_t)n + 1, 0, NULL);
        if (rc > 0 || rc < PK_ACCEL_ERR_DEVICE || (rc && !pk_accel_last_error(dev)[0]))
            __builtin_trap();
    }
    pk_accel_close(dev);
    return 0;
}
