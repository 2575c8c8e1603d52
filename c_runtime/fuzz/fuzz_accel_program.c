/* kernels/program.accel: the whole-file parser, then every program checked against a fixed
 * node of three arguments (16, 256 and 16 bytes: the tests' GEMM), as the accel backend does
 * at load. Instructions are only decoded and bounded here; no device runs them. */
#include "pk_accel_program.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const size_t args[3] = {16, 256, 16};
    pk_accel_file f;
    if (pk_accel_file_parse(data, size, &f) != PK_OK) return 0;
    for (int32_t k = 0; k < f.count; k++) {
        if (pk_accel_file_find(&f, f.progs[k].name) != k) __builtin_trap();
        pk_accel_check_args(&f, k, args, 3, "node 0 'fuzz'");
    }
    pk_accel_file_free(&f);
    return 0;
}
