/* params.bin: the table reader, then binding to a fixed graph of one float32[4] param "w"
 * (the test kernels' k_relu4 signature, so it also runs when linked with them). */
#include "fuzz_util.h"

static const char graph[] =
    "{\"format\":\"packager-graph\",\"version\":1,"
    "\"nodes\":[{\"op\":\"param\",\"name\":\"w\",\"inputs\":[]}],"
    "\"arg_nodes\":[0],\"node_row_ptr\":[0,1],\"heads\":[[0,0]],\"outputs\":[\"w\"],"
    "\"attrs\":{\"shape\":[[4]],\"dtype\":[\"float32\"],\"storage_id\":[0]},"
    "\"storage\":[{\"kind\":\"param\",\"bytes\":16,\"param\":\"w\"}],\"arena_bytes\":0}";

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    pk_graph* g;
    void* params;
    if (fuzz_create(graph, sizeof graph - 1, data, size, &params, &g) == PK_OK) fuzz_run(g, 0, 0);
    pk_graph_destroy(g);
    free(params);
    return 0;
}
