/* A kernel table whose pk_kernel_count was edited past its end: loading must stop at the
 * {0, 0, 0} sentinel and refuse the table, never read beyond it (runs under ASAN). The
 * other table defects (duplicate names, a count short of the table, no signature) are
 * covered by tests/test_c_runtime.py, which edits a real bundle's registry.c. */
#include "pk_kernel.h"
#include "pk_runtime.h"
#include "test_util.h"

static int32_t k_copy4(void* const* args) {
    memcpy(args[1], args[0], 16);
    return 0;
}

const pk_kernel_entry pk_kernel_table[] = {
    {"k_copy4", k_copy4, "float32[4] float32[4]"},
    {0, 0, 0},
};
const int32_t pk_kernel_count = 3;

static const char graph[] =
    "{\"format\":\"packager-graph\",\"version\":1,"
    "\"nodes\":[{\"op\":\"input\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"kernel\",\"name\":\"copy\",\"func\":\"k_copy4\",\"inputs\":[[0,0]]}],"
    "\"arg_nodes\":[0],\"node_row_ptr\":[0,1,2],\"heads\":[[1,0]],\"outputs\":[\"y\"],"
    "\"attrs\":{\"shape\":[[4],[4]],\"dtype\":[\"float32\",\"float32\"],"
    "\"storage_id\":[0,1]},"
    "\"storage\":[{\"kind\":\"input\",\"bytes\":16},{\"kind\":\"output\",\"bytes\":16}],"
    "\"arena_bytes\":0}";

/* params.bin with no tensors: the 24-byte header alone. */
static const unsigned char no_params[24] = {'P', 'K', 'P', 'A', 'R', 'A', 'M', 'S', 1, 0, 0, 0,
                                            0,   0,   0,   0,   24,  0,   0,   0,   0, 0, 0, 0};

int main(void) {
    pk_graph* g = NULL;
    size_t need = 0;
    pk_status s =
        pk_graph_create(graph, sizeof graph - 1, no_params, sizeof no_params, NULL, 0, &g);
    CHECK(s == PK_ERR_FORMAT && g == NULL);
    CHECK_MSG(strstr(pk_last_error(),
                     "kernel table: pk_kernel_count is 3, but the {0, 0, 0} sentinel is entry 1"),
              pk_last_error());
    CHECK(pk_graph_memory_bytes(graph, sizeof graph - 1, &need) == PK_ERR_FORMAT);
    return test_report("test_registry");
}

#ifdef PK_OPENCL /* a runtime with the OpenCL backend also needs the (here empty) OpenCL table */
const pk_cl_kernel_entry pk_cl_kernel_table[] = {{0, 0, {0, 0, 0}, {0, 0, 0}}};
const int32_t pk_cl_kernel_count = 0;
const char pk_cl_program_source[] = "";
#endif
