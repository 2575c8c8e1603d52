/* Control-flow nodes: an if runs the branch its condition picks, a loop carries its values,
 * stacks its scan outputs, stops on its condition and never passes max_trips; every listed
 * corruption of their subgraphs is refused at load with a message naming the node (this
 * file runs under ASAN+UBSAN in tests/test_c_runtime.py). */
#include "pk_runtime.h"
#include "test_util.h"

#include <stdlib.h>

/* Written with ' (quote() makes them "). A branch: y = KERNEL(x[, w]) on inputs x and w. */
#define BRANCH(KERNEL, INPUTS)                                                                     \
    "{'nodes':[{'op':'input','name':'x','inputs':[]},{'op':'input','name':'w','inputs':[]},"       \
    "{'op':'kernel','name':'k','func':'" KERNEL "','inputs':" INPUTS ",'num_outputs':1}],"         \
    "'arg_nodes':[0,1],'node_row_ptr':[0,1,2,3],'heads':[[2,0]],'outputs':['y'],"                  \
    "'attrs':{'shape':[[4],[4],[4]],'dtype':['float32','float32','float32'],"                      \
    "'storage_id':[0,1,2]},'storage':[{'kind':'input','bytes':16},{'kind':'input','bytes':16},"    \
    "{'kind':'output','bytes':16}],'arena_bytes':0}"

/* y = c ? x + w : relu(x). */
static const char if_src[] =
    "{'format':'packager-graph','version':1,"
    "'nodes':[{'op':'input','name':'c','inputs':[]},{'op':'input','name':'x','inputs':[]},"
    "{'op':'param','name':'w','inputs':[]},"
    "{'op':'if','name':'sel','inputs':[[0,0],[1,0],[2,0]],'num_outputs':1,'branches':[" BRANCH(
        "k_add4",
        "[[0,0],[1,0]]") "," BRANCH("k_relu4",
                                    "[[0,0]]") "]}],"
                                               "'arg_nodes':[0,1,2],'node_row_ptr':[0,1,2,3,4],'"
                                               "heads':[[3,0]],'outputs':['y'],"
                                               "'attrs':{'shape':[[],[4],[4],[4]],'dtype':['bool','"
                                               "float32','float32','float32'],"
                                               "'storage_id':[0,1,2,3]},"
                                               "'storage':[{'kind':'input','bytes':1},{'kind':'"
                                               "input','bytes':16},"
                                               "{'kind':'param','bytes':16,'param':'w'},{'kind':'"
                                               "output','bytes':16}],'arena_bytes':0}";

/* acc = x; for i < M while go: acc += w; go = acc[0] < 10; scan[i] = relu(acc). */
static const char loop_src[] =
    "{'format':'packager-graph','version':1,"
    "'nodes':[{'op':'input','name':'M','inputs':[]},{'op':'input','name':'go','inputs':[]},"
    "{'op':'input','name':'x','inputs':[]},{'op':'param','name':'w','inputs':[]},"
    "{'op':'loop','name':'acc','inputs':[[0,0],[1,0],[2,0],[3,0]],'num_outputs':2,"
    "'num_carried':1,'max_trips':3,'body':"
    "{'nodes':[{'op':'input','name':'i','inputs':[]},{'op':'input','name':'cond','inputs':[]},"
    "{'op':'input','name':'a','inputs':[]},{'op':'input','name':'w','inputs':[]},"
    "{'op':'kernel','name':'add','func':'k_add4','inputs':[[2,0],[3,0]],'num_outputs':1},"
    "{'op':'kernel','name':'less','func':'k_less4','inputs':[[4,0]],'num_outputs':1},"
    "{'op':'kernel','name':'relu','func':'k_relu4','inputs':[[4,0]],'num_outputs':1}],"
    "'arg_nodes':[0,1,2,3],'node_row_ptr':[0,1,2,3,4,5,6,7],'heads':[[5,0],[4,0],[6,0]],"
    "'outputs':['c','a2','s'],'attrs':{'shape':[[],[],[4],[4],[4],[],[4]],"
    "'dtype':['int64','bool','float32','float32','float32','bool','float32'],"
    "'storage_id':[0,1,2,3,4,5,6]},'storage':[{'kind':'input','bytes':8},"
    "{'kind':'input','bytes':1},{'kind':'input','bytes':16},{'kind':'input','bytes':16},"
    "{'kind':'output','bytes':16},{'kind':'output','bytes':1},{'kind':'output','bytes':16}],"
    "'arena_bytes':0}}],"
    "'arg_nodes':[0,1,2,3],'node_row_ptr':[0,1,2,3,4,6],'heads':[[4,0],[4,1]],"
    "'outputs':['acc','scan'],'attrs':{'shape':[[],[],[4],[4],[4],[3,4]],"
    "'dtype':['int64','bool','float32','float32','float32','float32'],"
    "'storage_id':[0,1,2,3,4,5]},"
    "'storage':[{'kind':'input','bytes':8},{'kind':'input','bytes':1},"
    "{'kind':'input','bytes':16},{'kind':'param','bytes':16,'param':'w'},"
    "{'kind':'output','bytes':16},{'kind':'output','bytes':48}],'arena_bytes':0}";

static char if_json[sizeof if_src];
static char loop_json[sizeof loop_src];
static const float w_data[4] = {0.5f, 0.5f, -10.0f, 0.5f};
static const float x_data[4] = {1, -2, 3, -4};

/* params.bin with one tensor: "w", float32, [4], data at 64. */
#define PARAMS_LEN 80
static unsigned char params_buf[PARAMS_LEN + 64];
static unsigned char* params;

static void put_le(unsigned char* p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void build_params(void) {
    params = (unsigned char*)(((uintptr_t)params_buf + 63) & ~(uintptr_t)63);
    memset(params, 0, PARAMS_LEN);
    memcpy(params, "PKPARAMS", 8);
    put_le(params + 8, 1, 4);
    put_le(params + 12, 1, 4);
    put_le(params + 16, PARAMS_LEN, 8);
    put_le(params + 24, 1, 2);
    params[26] = 'w';
    params[27] = 1;
    params[28] = 1;
    put_le(params + 29, 4, 8);
    put_le(params + 37, 64, 8);
    put_le(params + 45, 16, 8);
    memcpy(params + 64, w_data, 16);
}

static pk_graph* load(const char* json) {
    pk_graph* g = NULL;
    pk_status s = pk_graph_create(json, strlen(json), params, PARAMS_LEN, NULL, 0, &g);
    CHECK_MSG(s == PK_OK, pk_last_error());
    return g;
}

static void test_if(void) {
    pk_graph* g = load(if_json);
    if (!g) return;
    float y[4];
    /* profiles see the node (its subgraphs' kernels timed with it) */
    CHECK(!strcmp(pk_graph_node_func(g, 3), "(if)") && !strcmp(pk_graph_node_device(g, 3), "cpu"));
    CHECK(pk_graph_node_flops(g, 3) < 0 && pk_graph_node_func(g, 0) == NULL);
    for (unsigned char c = 0; c < 2; c++) {
        CHECK(pk_graph_set_input(g, 0, &c, 1) == PK_OK);
        CHECK(pk_graph_set_input(g, 1, x_data, 16) == PK_OK);
        CHECK_MSG(pk_graph_run(g) == PK_OK, pk_last_error());
        CHECK(pk_graph_get_output(g, 0, y, sizeof y) == PK_OK);
        for (int i = 0; i < 4; i++)
            CHECK(y[i] == (c ? x_data[i] + w_data[i] : (x_data[i] > 0 ? x_data[i] : 0)));
    }
    pk_graph_destroy(g);
}

/* Runs the loop with trip count m, condition go and x[0] = x0; returns the status. */
static pk_status run_loop(pk_graph* g, int64_t m, unsigned char go, float x0, float* acc,
                          float* scan) {
    float x[4];
    memcpy(x, x_data, sizeof x);
    x[0] = x0;
    CHECK(pk_graph_set_input(g, 0, &m, 8) == PK_OK && pk_graph_set_input(g, 1, &go, 1) == PK_OK);
    CHECK(pk_graph_set_input(g, 2, x, 16) == PK_OK);
    pk_status s = pk_graph_run(g);
    if (s == PK_OK) {
        CHECK(pk_graph_get_output(g, 0, acc, 16) == PK_OK);
        CHECK(pk_graph_get_output(g, 1, scan, 48) == PK_OK);
    }
    return s;
}

static void test_loop(void) {
    pk_graph* g = load(loop_json);
    if (!g) return;
    float acc[4], scan[12];
    CHECK_MSG(run_loop(g, 3, 1, 1, acc, scan) == PK_OK, pk_last_error());
    for (int i = 0; i < 4; i++) {
        CHECK(acc[i] == x_data[i] + 3 * w_data[i] || (i == 0 && acc[0] == 1 + 3 * w_data[0]));
        for (int k = 0; k < 3; k++) {
            float v = (i ? x_data[i] : 1) + (float)(k + 1) * w_data[i];
            CHECK(scan[k * 4 + i] == (v > 0 ? v : 0));
        }
    }
    /* a trip count past max_trips with the condition still true: stopped, not run on */
    CHECK(run_loop(g, 5, 1, 1, acc, scan) == PK_ERR_KERNEL &&
          strstr(pk_last_error(), "node 4 'acc': the loop did not end within 3 iterations"));
    /* the body's condition ends it after 2 iterations: fewer than its scan outputs hold */
    CHECK(run_loop(g, 3, 1, 9, acc, scan) == PK_ERR_KERNEL &&
          strstr(pk_last_error(), "the loop ran 2 iterations, but its scan outputs hold 3"));
    CHECK(run_loop(g, 3, 0, 1, acc, scan) == PK_ERR_KERNEL &&
          strstr(pk_last_error(), "the loop ran 0 iterations"));
    CHECK(run_loop(g, 3, 1, 1, acc, scan) == PK_OK); /* and it still runs */
    pk_graph_destroy(g);
}

typedef struct {
    const char *from, *to, *message;
} mutation;

static const mutation if_mutations[] = {
    {"'dtype':['bool'", "'dtype':['uint8'",
     "nodes[3] 'sel': the condition (input 0) must be one bool"},
    {"'shape':[[],[4],[4],[4]]", "'shape':[[],[4],[4],[2,2]]",
     "nodes[3] 'sel' branches[0]: output 0 is float32[4], the node's output is float32[2,2]"},
    {"'func':'k_relu4'", "'func':'k_nope'",
     "graph.json: nodes[3] 'sel' branches[1]: nodes[2] 'k': func 'k_nope' is not in the kernel "
     "table"},
    {"'inputs':[[0,0],[1,0],[2,0]]", "'inputs':[[0,0],[1,0]]",
     "nodes[3] 'sel' branches[0]: has 2 inputs and 1 outputs, the node binds 1 and 1"},
    {"'branches':[", "'branches':[{},", "nodes[3].branches: has 3 elements, expected 2"},
    {"'branches':[", "'bronches':[", "nodes[3]: missing field 'branches'"},
    {"'inputs':[[0,0]],'num_outputs':1}", "'inputs':[[5,0]],'num_outputs':1}",
     "nodes[3] 'sel' branches[1]: nodes[2].inputs[0]: node index must be an integer in [0, 2)"},
#ifdef PK_OPENCL
    {"'func':'k_relu4'", "'device':'opencl','func':'k_relu4'",
     "branches[1]: nodes[2] 'k': nodes inside a subgraph run on the cpu"},
#else
    {"'func':'k_relu4'", "'device':'opencl','func':'k_relu4'",
     "branches[1]: nodes[2] 'k' runs on opencl, but this runtime was built without OpenCL"},
#endif
    {"'op':'if'", "'op':'iff'", "nodes[3].op: must be input, param, kernel, if or loop"},
};

static const mutation loop_mutations[] = {
    {"'max_trips':3", "'max_trips':-1", "nodes[4].max_trips: expected an integer in [0, "},
    {"'max_trips':3", "'max_trips':2",
     "nodes[4] 'acc' body: output 2 is float32[4], the node's scan output (max_trips of them) "
     "is float32[3,4]"},
    {"'num_carried':1", "'num_carried':3", "nodes[4].num_carried: expected an integer in [0, 2]"},
    {"'num_carried':1", "'num_carried':2",
     "nodes[4] 'acc' body: output 2 is float32[4], the node's output is float32[3,4]"},
    {"'max_trips':3,'body'", "'max_trips':3,'bodies'", "nodes[4]: missing field 'body'"},
    {"'dtype':['int64','bool','float32','float32','float32','float32']",
     "'dtype':['uint64','bool','float32','float32','float32','float32']",
     "nodes[4] 'acc': a loop's inputs are one int64 (trip count), one bool"},
    {"'heads':[[5,0],[4,0],[6,0]]", "'heads':[[4,0],[5,0],[6,0]]",
     "nodes[4] 'acc' body: output 0 (the condition) must be one bool"},
    {"'heads':[[5,0],[4,0],[6,0]]", "'heads':[[5,0],[4,0]]",
     "nodes[4] 'acc' body: outputs: has 3 elements, expected 2"},
    {"'outputs':['c','a2','s']", "'outputs':['c','a2']",
     "nodes[4] 'acc' body: outputs: has 2 elements, expected 3"},
    {"'storage_id':[0,1,2,3,4,5,6]", "'storage_id':[0,1,2,3,4,5,9]",
     "nodes[4] 'acc' body: attrs.storage_id[6]: 9 is not below 7 storages"},
};

static void check_mutations(const char* json, const mutation* mutations, size_t count) {
    for (size_t i = 0; i < count; i++) {
        const mutation* m = &mutations[i];
        char src[8192], from[256], to[512];
        quote(m->from, from);
        quote(m->to, to);
        CHECK_MSG(test_replace(json, from, to, src, sizeof src), m->from);
        pk_graph* g = NULL;
        pk_status s = pk_graph_create(src, strlen(src), params, PARAMS_LEN, NULL, 0, &g);
        int good = s == PK_ERR_FORMAT && g == NULL && strstr(pk_last_error(), m->message);
        if (!good)
            fprintf(stderr, "mutation %d %s -> %s: status %s, message '%s', want '%s'\n", (int)i,
                    m->from, m->to, pk_status_name(s), pk_last_error(), m->message);
        CHECK(good);
        pk_graph_destroy(g);
    }
}

/* Loops nested deeper than the runtime allows are refused by name, never by the stack. */
static void test_depth(void) {
    static const char head[] =
        "{'nodes':[{'op':'input','name':'m','inputs':[]},{'op':'input','name':'c','inputs':[]},"
        "{'op':'loop','name':'l','inputs':[[0,0],[1,0]],'num_outputs':0,'num_carried':0,"
        "'max_trips':1,'body':";
    static const char tail[] =
        "}],'arg_nodes':[0,1],'node_row_ptr':[0,1,2,2],'heads':[[1,0]],'outputs':['c'],"
        "'attrs':{'shape':[[],[]],'dtype':['int64','bool'],'storage_id':[0,1]},"
        "'storage':[{'kind':'input','bytes':8},{'kind':'input','bytes':1}],'arena_bytes':0}";
    enum { LEVELS = 17 }; /* 18 loops: the 17th nested one is too deep */
    size_t cap = (LEVELS + 1) * (sizeof head + sizeof tail) + 1024;
    char* src = malloc(cap);
    char* json = malloc(cap);
    strcpy(src, "{'format':'packager-graph','version':1,'nodes':[{'op':'input','name':'m',"
                "'inputs':[]},{'op':'input','name':'c','inputs':[]},{'op':'loop','name':'l',"
                "'inputs':[[0,0],[1,0]],'num_outputs':0,'num_carried':0,'max_trips':1,'body':");
    for (int i = 0; i < LEVELS; i++)
        strcat(src, head);
    strcat(src, "{'nodes':[{'op':'input','name':'i','inputs':[]},{'op':'input','name':'c',"
                "'inputs':[]}],'arg_nodes':[0,1],'node_row_ptr':[0,1,2],'heads':[[1,0]],"
                "'outputs':['c'],'attrs':{'shape':[[],[]],'dtype':['int64','bool'],"
                "'storage_id':[0,1]},'storage':[{'kind':'input','bytes':8},"
                "{'kind':'input','bytes':1}],'arena_bytes':0}");
    for (int i = 0; i < LEVELS + 1; i++)
        strcat(src, tail);
    quote(src, json);
    pk_graph* g = NULL;
    pk_status s = pk_graph_create(json, strlen(json), params, PARAMS_LEN, NULL, 0, &g);
    CHECK_MSG(s == PK_ERR_FORMAT && strstr(pk_last_error(), "nested more than 16 deep"),
              pk_last_error());
    pk_graph_destroy(g);
    free(src);
    free(json);
}

/* Truncations and byte flips of both graphs: refused or run, never a crash. */
static void test_corruptions(void) {
    const char* srcs[] = {if_json, loop_json};
    for (int k = 0; k < 2; k++) {
        size_t len = strlen(srcs[k]);
        char* buf = malloc(len + 1);
        for (size_t cut = 0; cut < len; cut += 7) {
            pk_graph* g = NULL;
            if (pk_graph_create(srcs[k], cut, params, PARAMS_LEN, NULL, 0, &g) == PK_OK)
                pk_graph_destroy(g);
        }
        for (int i = 0; i < 2000; i++) {
            memcpy(buf, srcs[k], len + 1);
            buf[test_rand() % len] = (char)(test_rand() & 0x7f);
            pk_graph* g = NULL;
            if (pk_graph_create(buf, len, params, PARAMS_LEN, NULL, 0, &g) == PK_OK)
                pk_graph_destroy(g);
        }
        free(buf);
    }
}

int main(void) {
    quote(if_src, if_json);
    quote(loop_src, loop_json);
    build_params();
    test_if();
    test_loop();
    check_mutations(if_json, if_mutations, sizeof if_mutations / sizeof *if_mutations);
    check_mutations(loop_json, loop_mutations, sizeof loop_mutations / sizeof *loop_mutations);
    test_depth();
    test_corruptions();
    return test_report("test_control");
}
