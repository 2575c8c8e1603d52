/* Graph loader and executor tests: a valid graph runs and gives the right numbers; every
 * listed corruption of graph.json or params.bin is rejected with a message; truncated and
 * bit-flipped files never crash (this file runs under ASAN+UBSAN in tests/test_c_runtime.py). */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include "pk_runtime.h"
#include "test_util.h"

#include <stdlib.h>

/* Written with ' for readability; quote() turns them into ". Nodes: x, w, add(x, w) -> a,
 * relu(a) -> b, add(b, w) -> c (reuses a's arena storage), relu(c) -> y (output storage). */
static const char graph_src[] =
    "{'format':'packager-graph','version':1,"
    "'nodes':[{'op':'input','name':'x','inputs':[]},"
    "{'op':'param','name':'w','inputs':[]},"
    "{'op':'kernel','name':'add1','func':'k_add4','inputs':[[0,0],[1,0]],'num_outputs':1},"
    "{'op':'kernel','name':'relu1','func':'k_relu4','inputs':[[2,0]],'num_outputs':1},"
    "{'op':'kernel','name':'add2','func':'k_add4','inputs':[[3,0],[1,0]],'num_outputs':1},"
    "{'op':'kernel','name':'relu2','func':'k_relu4','inputs':[[4,0]],'num_outputs':1}],"
    "'arg_nodes':[0,1],'node_row_ptr':[0,1,2,3,4,5,6],"
    "'heads':[[5,0],[4,0]],'outputs':['y','z:0'],"
    "'attrs':{'shape':[[4],[4],[4],[4],[4],[4]],"
    "'dtype':['float32','float32','float32','float32','float32','float32'],"
    "'storage_id':[0,1,2,3,2,4]},"
    "'storage':[{'kind':'input','bytes':16},{'kind':'param','bytes':16,'param':'w'},"
    "{'kind':'arena','bytes':16,'offset':0},{'kind':'arena','bytes':16,'offset':64},"
    "{'kind':'output','bytes':16}],"
    "'arena_bytes':128}";

/* The same computation in place: relu1 and add2 write over their dying first input, so a,
 * b and c share one arena storage (exactly aliased) and the arena holds one tensor. */
static const char inplace_src[] =
    "{'format':'packager-graph','version':1,"
    "'nodes':[{'op':'input','name':'x','inputs':[]},"
    "{'op':'param','name':'w','inputs':[]},"
    "{'op':'kernel','name':'add1','func':'k_add4','inputs':[[0,0],[1,0]],'num_outputs':1},"
    "{'op':'kernel','name':'relu1','func':'k_relu4','inputs':[[2,0]],'num_outputs':1,"
    "'inplace':[[0,0]]},"
    "{'op':'kernel','name':'add2','func':'k_add4','inputs':[[3,0],[1,0]],'num_outputs':1,"
    "'inplace':[[0,0]]},"
    "{'op':'kernel','name':'relu2','func':'k_relu4','inputs':[[4,0]],'num_outputs':1}],"
    "'arg_nodes':[0,1],'node_row_ptr':[0,1,2,3,4,5,6],"
    "'heads':[[5,0],[4,0]],'outputs':['y','z:0'],"
    "'attrs':{'shape':[[4],[4],[4],[4],[4],[4]],"
    "'dtype':['float32','float32','float32','float32','float32','float32'],"
    "'storage_id':[0,1,2,2,2,3]},"
    "'storage':[{'kind':'input','bytes':16},{'kind':'param','bytes':16,'param':'w'},"
    "{'kind':'arena','bytes':16,'offset':0},{'kind':'output','bytes':16}],"
    "'arena_bytes':64}";

static char graph_json[sizeof graph_src];
static char inplace_json[sizeof inplace_src];
static const float w_data[4] = {0.5f, 0.5f, -10.0f, 0.5f};
static const float x_data[4] = {1, -2, 3, -4};
static const float y_want[4] = {2, 0.5f, 0, 0.5f};
static const float z_want[4] = {2, 0.5f, -10, 0.5f};

/* params.bin with one tensor: "w", float32, [4], data at 64. */
#define PARAMS_LEN 80
static unsigned char params[PARAMS_LEN];

static void put_le(unsigned char* p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void build_params(unsigned char* p) {
    memset(p, 0, PARAMS_LEN);
    memcpy(p, "PKPARAMS", 8);
    put_le(p + 8, 1, 4);
    put_le(p + 12, 1, 4);
    put_le(p + 16, PARAMS_LEN, 8);
    put_le(p + 24, 1, 2);       /* name length */
    p[26] = 'w';                /* name */
    p[27] = 1;                  /* dtype float32 */
    p[28] = 1;                  /* ndim */
    put_le(p + 29, 4, 8);       /* dims[0] */
    put_le(p + 37, 64, 8);      /* data offset */
    put_le(p + 45, 16, 8);      /* data size */
    memcpy(p + 64, w_data, 16); /* host is little-endian (the runtime checks) */
}

/* A 64-aligned copy of `len` bytes of src, owned by the caller (free(*raw)). */
static void* aligned_copy(const void* src, size_t len, void** raw) {
    *raw = malloc(len + 64);
    unsigned char* p = (unsigned char*)(((uintptr_t)*raw + 63) & ~(uintptr_t)63);
    memcpy(p, src, len);
    return p;
}

static pk_status create(const char* json, size_t json_len, const void* par, size_t par_len,
                        pk_graph** g) {
    void* raw;
    void* p = aligned_copy(par, par_len, &raw);
    pk_status s = pk_graph_create(json, json_len, p, par_len, NULL, 0, g);
    /* Load only: the graph points into params, which are freed below. */
    if (s == PK_OK) pk_graph_destroy(*g);
    *g = NULL;
    free(raw);
    return s;
}

static void check_outputs(pk_graph* g) {
    float y[4], z[4];
    CHECK(pk_graph_get_output(g, 0, y, sizeof y) == PK_OK);
    CHECK(pk_graph_get_output(g, 1, z, sizeof z) == PK_OK);
    CHECK(memcmp(y, y_want, sizeof y) == 0);
    CHECK(memcmp(z, z_want, sizeof z) == 0);
}

/* The in-place graph loads and gives the same numbers with a quarter of the memory. */
static void test_inplace(void) {
    size_t need = 0, need_plain = 0;
    CHECK(pk_graph_memory_bytes(inplace_json, strlen(inplace_json), &need) == PK_OK);
    CHECK(pk_graph_memory_bytes(graph_json, strlen(graph_json), &need_plain) == PK_OK);
    CHECK(need == 64 + 64 + 64 && need_plain == 128 + 64 + 64);
    pk_graph* g = NULL;
    void* raw;
    void* p = aligned_copy(params, PARAMS_LEN, &raw);
    pk_status s = pk_graph_create(inplace_json, strlen(inplace_json), p, PARAMS_LEN, NULL, 0, &g);
    CHECK_MSG(s == PK_OK, pk_last_error());
    if (s == PK_OK) {
        CHECK(pk_graph_set_input(g, 0, x_data, 16) == PK_OK && pk_graph_run(g) == PK_OK);
        check_outputs(g);
        CHECK(pk_graph_run(g) == PK_OK);
        check_outputs(g);
        pk_graph_destroy(g);
    }
    free(raw);
}

static void test_valid(void) {
    pk_graph* g = NULL;
    void* raw;
    void* p = aligned_copy(params, PARAMS_LEN, &raw);
    pk_status s = pk_graph_create(graph_json, strlen(graph_json), p, PARAMS_LEN, NULL, 0, &g);
    CHECK_MSG(s == PK_OK, pk_last_error());
    if (s) return;
    pk_tensor_info info;
    CHECK(pk_graph_num_inputs(g) == 1 && pk_graph_num_outputs(g) == 2);
    CHECK(pk_graph_input_info(g, 0, &info) == PK_OK);
    CHECK(info.dtype == PK_FLOAT32 && info.ndim == 1 && info.shape[0] == 4 && info.bytes == 16);
    CHECK(!strcmp(info.name, "x"));
    CHECK(pk_graph_output_info(g, 1, &info) == PK_OK && !strcmp(info.name, "z:0"));
    CHECK(pk_graph_input_index(g, "x") == 0 && pk_graph_input_index(g, "nope") == -1);
    CHECK(pk_graph_output_index(g, "z:0") == 1);
    CHECK(pk_graph_input_info(g, 1, &info) == PK_ERR_ARG);
    CHECK(pk_graph_output_info(g, -1, &info) == PK_ERR_ARG);
    CHECK(pk_graph_run(g) == PK_ERR_ARG && strstr(pk_last_error(), "'x' was never set"));
    CHECK(pk_graph_set_input(g, 0, x_data, 12) == PK_ERR_ARG);
    CHECK(pk_graph_set_input(g, 0, x_data, 16) == PK_OK);
    CHECK(pk_graph_run(g) == PK_OK);
    check_outputs(g);
    CHECK(pk_graph_run(g) == PK_OK); /* runs are repeatable */
    check_outputs(g);
    float small[2];
    CHECK(pk_graph_get_output(g, 0, small, sizeof small) == PK_ERR_ARG);
    pk_graph_destroy(g);
    free(raw);
}

/* Caller-provided memory and a misaligned params buffer (copied by the runtime). */
static void test_memory_and_alignment(void) {
    size_t need = 0;
    CHECK(pk_graph_memory_bytes(graph_json, strlen(graph_json), &need) == PK_OK);
    CHECK(need == 128 + 64 + 64); /* arena + input + output */
    void *raw_mem, *raw_par;
    raw_mem = calloc(1, need + 128);
    unsigned char* mem = (unsigned char*)(((uintptr_t)raw_mem + 63) & ~(uintptr_t)63);
    raw_par = calloc(1, PARAMS_LEN + 128);
    unsigned char* par = (unsigned char*)(((uintptr_t)raw_par + 63) & ~(uintptr_t)63);
    memcpy(par + 1, params, PARAMS_LEN);
    pk_graph* g;
    CHECK(pk_graph_create(graph_json, strlen(graph_json), par + 1, PARAMS_LEN, mem, need - 1, &g) ==
          PK_ERR_ARG);
    CHECK(pk_graph_create(graph_json, strlen(graph_json), par + 1, PARAMS_LEN, mem + 1, need, &g) ==
          PK_ERR_ARG);
    pk_status s =
        pk_graph_create(graph_json, strlen(graph_json), par + 1, PARAMS_LEN, mem, need, &g);
    CHECK_MSG(s == PK_OK, pk_last_error());
    if (s == PK_OK) {
        memset(par, 0xFF, PARAMS_LEN + 1); /* the runtime must have taken its own copy */
        CHECK(pk_graph_set_input(g, 0, x_data, 16) == PK_OK && pk_graph_run(g) == PK_OK);
        check_outputs(g);
        pk_graph_destroy(g);
    }
    free(raw_mem);
    free(raw_par);
}

static void test_kernel_failure(void) {
    char json[sizeof graph_json + 64];
    CHECK(test_replace(graph_json, "\"k_relu4\"", "\"k_check4\"", json, sizeof json));
    void* raw;
    void* p = aligned_copy(params, PARAMS_LEN, &raw);
    pk_graph* g;
    const float bad[4] = {-5, 0, 0, 0};
    CHECK(pk_graph_create(json, strlen(json), p, PARAMS_LEN, NULL, 0, &g) == PK_OK);
    CHECK(pk_graph_set_input(g, 0, bad, 16) == PK_OK);
    CHECK(pk_graph_run(g) == PK_ERR_KERNEL && strstr(pk_last_error(), "relu1") &&
          strstr(pk_last_error(), "code 7"));
    CHECK(pk_graph_set_input(g, 0, x_data, 16) == PK_OK && pk_graph_run(g) == PK_OK);
    pk_graph_destroy(g);
    free(raw);
}

typedef struct {
    const char *from, *to, *message;
} mutation;

/* Each mutation (written with ') must be rejected with a message containing `message`. */
static const mutation graph_mutations[] = {
    {"[[3,0],[1,0]]", "[[5,0],[1,0]]", "nodes[4].inputs[0]: node index"},
    {"[[3,0],[1,0]]", "[[3,1],[1,0]]", "node 3 has no output 1"},
    {"[[3,0],[1,0]]", "[[3,0],[1]]", "expected [node, output]"},
    {"[0,1,2,3,2,4]", "[0,1,2,3,2,9]", "is not below 5 storages"},
    {"[0,1,2,3,2,4]", "[0,1,2,3,2,0]", "does not fit"},
    {"[0,1,2,3,2,4]", "[0,1,2,3,2,4,4]", "attrs.storage_id: has 7 elements"},
    {"[0,1,2,3,2,4]", "[0,1,2,2,2,4]", "overlaps"},
    {"'offset':64", "'offset':128", "past arena_bytes"},
    {"'offset':64", "'offset':32", "misaligned"},
    {"'offset':64", "'offset':-64", "out of range"},
    {"'bytes':16,'offset':64", "'bytes':8,'offset':64", "entry 3 needs 16 bytes"},
    {"'arena_bytes':128", "'arena_bytes':64", "past arena_bytes"},
    {"'shape':[[4]", "'shape':[[-4]", "attrs.shape[0][0]"},
    {"'shape':[[4]", "'shape':[[4611686018427387904,4]", "attrs.shape[0]: size overflows"},
    {"'shape':[[4]", "'shape':[[4.5]", "non-negative integer"},
    {"'shape':[[4]", "'shape':[[99999999999999999999]", "non-negative integer"},
    {"'shape':[[4]",
     "'shape':[[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,4]",
     "at most 32"},
    /* Kernel signatures: every argument as the function was generated for. */
    {"['float32','float32'", "['float32','int32'",
     "nodes[2] 'add1': func 'k_add4' argument 1 (input 1): expected float32[4], got int32[4]"},
    {"'name':'add1','func':'k_add4'", "'name':'add1','func':'k_relu4'",
     "nodes[2] 'add1': func 'k_relu4' takes 2 arguments, the node passes 3 (2 inputs, 1 "
     "outputs)"},
    {"'name':'relu1','func':'k_relu4'", "'name':'relu1','func':'k_add4'",
     "nodes[3] 'relu1': func 'k_add4' takes 3 arguments, the node passes 2"},
    {"'shape':[[4],[4],[4],[4],[4],[4]]", "'shape':[[4],[4],[4],[4],[4],[3]]",
     "nodes[5] 'relu2': func 'k_relu4' argument 1 (output 0): expected float32[4], got "
     "float32[3]"},
    {"'shape':[[4],[4],[4],[4],[4],[4]]", "'shape':[[4],[4],[4],[4],[4],[2,2]]",
     "argument 1 (output 0): expected float32[4], got float32[2,2]"},
    {"'shape':[[4],[4],[4],[4],[4],[4]]", "'shape':[[4],[4],[4],[4],[4],[]]",
     "expected float32[4], got float32[]"},
    {"'dtype':['float32','float32','float32','float32','float32','float32']",
     "'dtype':['float32','float32','float32','float32','float32','uint32']",
     "argument 1 (output 0): expected float32[4], got uint32[4]"},
    {"['float32','float32'", "['float32','float33'", "attrs.dtype[1]: unknown dtype"},
    {"'func':'k_relu4'", "'func':'k_nope'", "func 'k_nope' is not in the kernel table"},
    {"'name':'relu1','func'", "'name':'relu1','device':'gpu','func'",
     "graph.json: nodes[3] 'relu1': device must be \"cpu\", \"opencl\" or \"accel\""},
    {"'name':'relu1','func'", "'name':'relu1','device':7,'func'",
     "graph.json: nodes[3] 'relu1': device must be"},
#ifdef PK_OPENCL
    {"'name':'relu1','func'", "'name':'relu1','device':'opencl','func'",
     "nodes[3] 'relu1': func 'k_relu4' is not in the OpenCL kernel table"},
#else
    {"'name':'relu1','func'", "'name':'relu1','device':'opencl','func'",
     "graph.json: nodes[3] 'relu1' runs on opencl, but this runtime was built without OpenCL "
     "(PK_OPENCL)"},
#endif
#ifndef PK_ACCEL
    {"'name':'relu1','func'", "'name':'relu1','device':'accel','func'",
     "graph.json: nodes[3] 'relu1' runs on accel, but this runtime was built without the "
     "accelerator (PK_ACCEL)"},
#endif
    {"'heads':[[5,0],[4,0]]", "'heads':[[5,0],[2,0]]", "head 1 reads entry 2"},
    {"'heads':[[5,0],[4,0]]", "'heads':[[5,0],[6,0]]", "heads[1]: node index"},
    {"'outputs':['y','z:0']", "'outputs':['y']", "outputs: has 1 elements, expected 2"},
    {"'outputs':['y','z:0']", "'outputs':['y','y']", "share name 'y'"},
    {"'outputs':['y','z:0']", "'outputs':['y','']", "outputs[1] is empty"},
    {"[0,1,2,3,4,5,6]", "[0,1,2,3,4,5,7]", "node_row_ptr[6]"},
    {"[0,1,2,3,4,5,6]", "[0,1,2,3,4,5]", "node_row_ptr: has 6 elements"},
    {"'arg_nodes':[0,1]", "'arg_nodes':[0]", "arg_nodes"},
    {"'arg_nodes':[0,1]", "'arg_nodes':[1,0]", "arg_nodes[0]"},
    {"'version':1", "'version':2", "version is not 1"},
    {"'format':'packager-graph'", "'format':'other'", "format"},
    {"'op':'input'", "'op':'weird'", "nodes[0].op"},
    {"'op':'input','name':'x','inputs':[]", "'op':'input','name':'x','inputs':[[0,0]]",
     "take no inputs"},
    {"'name':'relu2','func':'k_relu4','inputs':[[4,0]],'num_outputs':1",
     "'name':'relu2','func':'k_relu4','inputs':[[4,0]],'num_outputs':2", "node_row_ptr[6]"},
    {"'num_outputs':1", "'num_outputs':0", "num_outputs: 0 is out of range"},
    {"'param':'w'", "'param':'v'", "param storages must name"},
    {"{'kind':'input','bytes':16}", "{'kind':'output','bytes':16}", "does not fit"},
    {"{'kind':'input','bytes':16}", "{'kind':'input','bytes':-1}", "storage.bytes[0]"},
    {"{'kind':'input','bytes':16}", "{'kind':'input'}", "storage[0]: missing field 'bytes'"},
    {"'name':'w'", "'name':7", "nodes[1].name: expected string, got number"},
    {"'nodes':[", "'nodes':{'a':1},'x':[", "nodes: expected array, got object"},
    {"'arena_bytes':128}", "'arena_bytes':128", "unexpected end"},
    {"'arena_bytes':128}", "'arena_bytes':128}}", "trailing characters"},
    {"'arena_bytes':128}", "'arena_bytes':128,}", "expected a string key"},
    {"'version':1", "'version':01", "expected ',' or '}'"},
    {"'name':'x'", "'name':'x\x01'", "control character"},
    {"'name':'x'", "'name':'x\\u0000'", "\\u0000"},
    {"'name':'x'", "'name':'x\\q'", "bad escape"},
    {"[0,1,2,3,2,4]", "[0,1,2,3,3,4]", "entry 4 (node 4 'add2') overlaps entry 3"},
    {"'num_outputs':1}],", "'num_outputs':1,'inplace':[[0,0]]}],",
     "nodes[5].inplace[0]: output 0 may only overwrite"},
};

/* Forged in-place declarations and overlaps of the in-place graph: each must be refused. */
static const mutation inplace_mutations[] = {
    {",'inplace':[[0,0]]}", "}", "entry 3 (node 3 'relu1') overlaps entry 2"},
    {",'inplace':[[0,0]]},{'op':'kernel','name':'relu2'", "},{'op':'kernel','name':'relu2'",
     "entry 4 (node 4 'add2') overlaps entry 3"},
    {"'inplace':[[0,0]]", "'inplace':[[0,1]]", "nodes[3].inplace[0]: expected [output, input]"},
    {"'inplace':[[0,0]]", "'inplace':[[1,0]]", "nodes[3].inplace[0]: expected [output, input]"},
    {"'inplace':[[0,0]]", "'inplace':[[0,0],[0,0]]", "nodes[3].inplace[1]: expected"},
    {"'inplace':[[0,0]]", "'inplace':[[0]]", "nodes[3].inplace[0]: expected"},
    {"'inplace':[[0,0]]", "'inplace':{}", "nodes[3].inplace: expected an array"},
    {"'op':'input','name':'x','inputs':[]", "'op':'input','name':'x','inputs':[],'inplace':[]",
     "nodes[0].inplace: expected an array (kernels only)"},
    {"'inputs':[[3,0],[1,0]],'num_outputs':1,'inplace':[[0,0]]",
     "'inputs':[[3,0],[1,0]],'num_outputs':1,'inplace':[[0,1]]",
     "nodes[4].inplace[0]: output 0 may only overwrite input 1"},
    {"'shape':[[4],[4],[4],[4]", "'shape':[[4],[4],[4],[2]", "nodes[3].inplace[0]: output 0"},
    {"[0,1,2,2,2,3]", "[0,1,2,2,3,3]", "used by several entries"},
    {"[[3,0],[1,0]]", "[[2,0],[1,0]]", "node 4 reads entry 2, but its storage 2 was overwritten"},
    {"[[3,0],[1,0]]", "[[3,0],[3,0]]", "argument 2 overlaps argument 1"},
    {"'heads':[[5,0],[4,0]]", "'heads':[[5,0],[3,0]]", "head 1 reads entry 3"},
};

static void check_mutations(const char* json, const mutation* mutations, size_t count) {
    void* raw;
    void* p = aligned_copy(params, PARAMS_LEN, &raw);
    for (size_t i = 0; i < count; i++) {
        const mutation* m = &mutations[i];
        char src[4096], from[256], to[512];
        quote(m->from, from);
        quote(m->to, to);
        int ok = test_replace(json, from, to, src, sizeof src);
        CHECK_MSG(ok, m->from);
        pk_graph* g = NULL;
        pk_status s = pk_graph_create(src, strlen(src), p, PARAMS_LEN, NULL, 0, &g);
        int good = s == PK_ERR_FORMAT && g == NULL && strstr(pk_last_error(), m->message);
        if (!good)
            fprintf(stderr, "mutation %d %s -> %s: status %s, message '%s', want '%s'\n", (int)i,
                    m->from, m->to, pk_status_name(s), pk_last_error(), m->message);
        CHECK(good);
        pk_graph_destroy(g);
    }
    free(raw);
}

static void test_graph_mutations(void) {
    check_mutations(graph_json, graph_mutations, sizeof graph_mutations / sizeof *graph_mutations);
    check_mutations(inplace_json, inplace_mutations,
                    sizeof inplace_mutations / sizeof *inplace_mutations);
}

/* Deep nesting must be refused by the depth limit, not by the stack. */
static void test_json_depth(void) {
    char* deep = malloc(200001);
    for (int i = 0; i < 100000; i++)
        deep[i] = '[', deep[200000 - 1 - i] = ']';
    deep[200000] = 0;
    pk_graph* g;
    CHECK(pk_graph_create(deep, 200000, params, PARAMS_LEN, NULL, 0, &g) == PK_ERR_FORMAT);
    CHECK(strstr(pk_last_error(), "nesting too deep"));
    free(deep);
}

typedef struct {
    size_t at; /* byte offset in params.bin */
    uint64_t value;
    int width;
    const char* message;
} params_mutation;

static const params_mutation params_mutations[] = {
    {0, 'X', 1, "bad magic"},
    {8, 2, 4, "version 2"},
    {12, 1000, 4, "does not fit"},
    {12, 0, 4, "no tensor 'w'"},
    {16, 81, 8, "header says 81 bytes"},
    {24, 60000, 2, "truncated in name"},
    {26, 'v', 1, "no tensor 'w'"},
    {27, 99, 1, "unknown dtype code 99"},
    {27, 5, 1, "has dtype int32"},
    {28, 40, 1, "ndim 40 over limit"},
    {28, 0, 1, "data size 64, shape needs 4"},
    {29, 5, 8, "data size 16, shape needs 20"},
    {29, (uint64_t)1 << 62, 8, "negative dim or size overflow"},
    {29, (uint64_t)-1, 8, "negative dim"},
    {37, 65, 8, "misaligned"},
    {37, 128, 8, "past the end"},
    {37, 0, 8, "overlaps the table"},
    {45, 12, 8, "data size 12"},
};

static void test_params_mutations(void) {
    unsigned char p[PARAMS_LEN];
    for (size_t i = 0; i < sizeof params_mutations / sizeof params_mutations[0]; i++) {
        const params_mutation* m = &params_mutations[i];
        memcpy(p, params, PARAMS_LEN);
        put_le(p + m->at, m->value, m->width);
        pk_graph* g;
        pk_status s = create(graph_json, strlen(graph_json), p, PARAMS_LEN, &g);
        int good = s == PK_ERR_FORMAT && strstr(pk_last_error(), m->message);
        if (!good)
            fprintf(stderr, "params mutation %d: status %s, message '%s', want '%s'\n", (int)i,
                    pk_status_name(s), pk_last_error(), m->message);
        CHECK(good);
    }
}

/* Runs whatever loads: corrupted graphs that still validate must run without UB. */
static int try_graph(const char* json, size_t json_len, const unsigned char* par, size_t par_len) {
    void* raw;
    void* p = aligned_copy(par, par_len, &raw);
    pk_graph* g = NULL;
    pk_status s = pk_graph_create(json, json_len, p, par_len, NULL, 0, &g);
    if (s == PK_OK) {
        for (int32_t i = 0; i < pk_graph_num_inputs(g); i++) {
            pk_tensor_info info;
            pk_graph_input_info(g, i, &info);
            void* zeros = calloc(1, info.bytes + 1);
            pk_graph_set_input(g, i, zeros, info.bytes);
            free(zeros);
        }
        pk_graph_run(g);
        pk_graph_destroy(g);
    } else {
        CHECK(g == NULL && pk_last_error()[0] != 0);
    }
    free(raw);
    return s == PK_OK;
}

static void truncate_json(const char* json) {
    size_t n = strlen(json);
    for (size_t len = 0; len < n; len++) {
        char* copy = malloc(len + 1); /* exact size: ASAN catches any read past len */
        memcpy(copy, json, len);
        CHECK(!try_graph(copy, len, params, PARAMS_LEN));
        free(copy);
    }
}

static void test_truncation(void) {
    size_t n = strlen(graph_json);
    truncate_json(graph_json);
    truncate_json(inplace_json);
    for (size_t len = 0; len < PARAMS_LEN; len++)
        CHECK(!try_graph(graph_json, n, params, len));
}

/* Flips 1 to 3 bits of `src` `iters` times; returns how many variants still loaded. */
static int flip_json(const char* src, int iters) {
    size_t n = strlen(src);
    char* json = malloc(n);
    int loaded = 0;
    for (int iter = 0; iter < iters; iter++) {
        memcpy(json, src, n);
        for (int k = 1 + (int)(test_rand() % 3); k > 0; k--)
            json[test_rand() % n] ^= (char)(1u << (test_rand() % 8));
        loaded += try_graph(json, n, params, PARAMS_LEN);
    }
    free(json);
    return loaded;
}

static void test_bit_flips(void) {
    unsigned char par[PARAMS_LEN];
    int loaded_par = 0;
    test_rng = 12345;
    int loaded_json = flip_json(graph_json, 20000);
    int loaded_inplace = flip_json(inplace_json, 10000);
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(par, params, PARAMS_LEN);
        for (int k = 1 + (int)(test_rand() % 3); k > 0; k--)
            par[test_rand() % PARAMS_LEN] ^= (unsigned char)(1u << (test_rand() % 8));
        loaded_par += try_graph(graph_json, strlen(graph_json), par, PARAMS_LEN);
    }
    printf("bit flips: %d/20000 graph.json, %d/10000 in-place graph.json and %d/20000 "
           "params.bin variants still loaded\n",
           loaded_json, loaded_inplace, loaded_par);
}

/* A malformed PACKAGER_NUM_THREADS or PACKAGER_PIN_CORES, or a core the machine does not
 * have, fails graph creation with a message naming the variable and the value. */
static void test_thread_env(void) {
    static const struct {
        const char *var, *value, *message;
    } bad[] = {
        {"PACKAGER_NUM_THREADS", "abc", "PACKAGER_NUM_THREADS='abc': expected a number of threads"},
        {"PACKAGER_NUM_THREADS", "0", "PACKAGER_NUM_THREADS='0'"},
        {"PACKAGER_NUM_THREADS", "-2", "PACKAGER_NUM_THREADS='-2'"},
        {"PACKAGER_NUM_THREADS", "4x", "PACKAGER_NUM_THREADS='4x'"},
        {"PACKAGER_PIN_CORES", "1,,2", "PACKAGER_PIN_CORES='1,,2': expected a comma-separated"},
        {"PACKAGER_PIN_CORES", "0,", "PACKAGER_PIN_CORES='0,'"},
        {"PACKAGER_PIN_CORES", "x", "PACKAGER_PIN_CORES='x'"},
        {"PACKAGER_PIN_CORES", "99999", "PACKAGER_PIN_CORES='99999': core 99999 is not on this"},
    };
    pk_graph* g = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].var, bad[i].value, 1);
        CHECK_MSG(create(graph_json, strlen(graph_json), params, PARAMS_LEN, &g) == PK_ERR_ARG,
                  bad[i].value);
        CHECK_MSG(strstr(pk_last_error(), bad[i].message), pk_last_error());
        unsetenv(bad[i].var);
    }
    /* Good values and empty ones (taken as unset) load. */
    setenv("PACKAGER_NUM_THREADS", "3", 1);
    setenv("PACKAGER_PIN_CORES", "0", 1);
    CHECK_MSG(create(graph_json, strlen(graph_json), params, PARAMS_LEN, &g) == PK_OK,
              pk_last_error());
    setenv("PACKAGER_NUM_THREADS", "", 1);
    setenv("PACKAGER_PIN_CORES", "", 1);
    CHECK_MSG(create(graph_json, strlen(graph_json), params, PARAMS_LEN, &g) == PK_OK,
              pk_last_error());
    unsetenv("PACKAGER_NUM_THREADS");
    unsetenv("PACKAGER_PIN_CORES");
}

int main(void) {
    quote(graph_src, graph_json);
    quote(inplace_src, inplace_json);
    build_params(params);
    test_valid();
    test_thread_env();
    test_inplace();
    test_memory_and_alignment();
    test_kernel_failure();
    test_graph_mutations();
    test_json_depth();
    test_params_mutations();
    test_truncation();
    test_bit_flips();
    return test_report("test_graph");
}
