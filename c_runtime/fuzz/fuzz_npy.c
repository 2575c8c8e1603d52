/* .npy: the header parser; a parsed array's data is read whole, as run_bundle would. */
#include "pk_npy.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pk_npy a;
    if (pk_npy_parse(data, size, "fuzz.npy", &a) != PK_OK) return 0;
    unsigned char* copy = malloc(a.bytes + 1);
    if (copy) memcpy(copy, a.data, a.bytes);
    free(copy);
    return 0;
}
