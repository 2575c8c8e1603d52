/* graph.json: the parser and every load-time check, against the linked kernel table, with
 * a fixed params.bin of no tensors (graphs with param nodes fail at binding, after all the
 * graph checks); graphs that load are run on zero inputs. */
#include "fuzz_util.h"

static const uint8_t no_params[24] = {'P', 'K', 'P', 'A', 'R', 'A', 'M', 'S', 1, 0, 0, 0,
                                      0,   0,   0,   0,   24,  0,   0,   0,   0, 0, 0, 0};

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pk_graph* g;
    void* params;
    if (fuzz_create((const char*)data, size, no_params, sizeof no_params, &params, &g) == PK_OK)
        fuzz_run(g, NULL, 0);
    pk_graph_destroy(g);
    free(params);
    return 0;
}
