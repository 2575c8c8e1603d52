/* A whole bundle: graph.json and params.bin as length-prefixed sections, the rest the
 * input data; loaded against the linked kernels (a real bundle's, see CMakeLists.txt) and
 * run. Whatever loads must run without a memory error: the load-time checks (signatures
 * included) are what make that so. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    size_t json_len, params_len;
    const uint8_t* json = fuzz_section(&data, &size, &json_len);
    const uint8_t* params = fuzz_section(&data, &size, &params_len);
    pk_graph* g;
    void* copy;
    if (fuzz_create((const char*)json, json_len, params, params_len, &copy, &g) == PK_OK)
        fuzz_run(g, data, size);
    pk_graph_destroy(g);
    free(copy);
    return 0;
}
