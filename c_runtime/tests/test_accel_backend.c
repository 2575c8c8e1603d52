/* The accel backend on the simulator (built with PK_ACCEL=sim): hand-made bundle directories
 * whose accel node runs a hand-assembled GEMM program through pk_exec, giving the right
 * numbers and counters, and whose malformed programs are refused at load with messages naming
 * the program, node and instruction. POSIX only (mkdtemp); runs under ASAN+UBSAN. */
#define _POSIX_C_SOURCE 200809L

#include "pk_graph.h"
#include "test_accel_asm.h"
#include "test_util.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/pk_test_accel_XXXXXX";

static char* in_dir(const char* name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void write_file(const char* name, const void* data, size_t len) {
    FILE* f = fopen(in_dir(name), "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

static int8_t W[16][16], X[16];

/* params.bin with one tensor, W: int8[16,16] (docs/bundle-format.md, params.bin). */
static void write_params(void) {
    unsigned char p[320];
    memset(p, 0, sizeof p);
    memcpy(p, "PKPARAMS", 8);
    asm_u32(p + 8, 1);
    asm_u32(p + 12, 1);
    asm_u32(p + 16, sizeof p);
    unsigned char* r = p + 24;
    r[0] = 1, r[2] = 'W', r[3] = 3, r[4] = 2; /* name length 1, "W", int8, ndim 2 */
    r[5] = 16, r[13] = 16;                    /* dims */
    r[21] = 64, r[29] = 0, asm_u32(r + 29, 256);
    memcpy(p + 64, W, sizeof W);
    write_file("params.bin", p, sizeof p);
}

/* x: int8[1, xn] input, W param, node 2 'fc' on accel calling `func`, y: int8[1,16]. */
static void write_graph(const char* func, int xn) {
    char json[2048], q[2048];
    snprintf(json, sizeof json,
             "{'format': 'packager-graph', 'version': 1, 'nodes': ["
             "{'op': 'input', 'name': 'x', 'inputs': []},"
             "{'op': 'param', 'name': 'W', 'inputs': []},"
             "{'op': 'kernel', 'name': 'fc', 'func': '%s', 'device': 'accel',"
             " 'inputs': [[0, 0], [1, 0]], 'num_outputs': 1}],"
             "'arg_nodes': [0, 1], 'node_row_ptr': [0, 1, 2, 3], 'heads': [[2, 0]],"
             "'outputs': ['y'], 'attrs': {'shape': [[1, %d], [16, 16], [1, 16]],"
             "'dtype': ['int8', 'int8', 'int8'], 'storage_id': [0, 1, 2]},"
             "'storage': [{'kind': 'input', 'bytes': %d},"
             "{'kind': 'param', 'bytes': 256, 'param': 'W'}, {'kind': 'output', 'bytes': 16}],"
             "'arena_bytes': 0}",
             func, xn, xn);
    quote(json, q);
    write_file("graph.json", q, strlen(q));
}

static void write_program(const asm_prog* p) {
    size_t len;
    unsigned char* bytes = asm_file(p, 1, &len);
    write_file("kernels/program.accel", bytes, len);
    free(bytes);
}

typedef struct {
    asm_insn insns[7];
    int32_t relocs[4][2];
    asm_prog prog;
} gemm_prog;

static void gemm_init(gemm_prog* g) {
    asm_gemm_insns(g->insns);
    memcpy(g->relocs, asm_gemm_relocs, sizeof g->relocs);
    g->prog = (asm_prog){
        "k_0_accel_dense", 3, 7, 1, 4, g->insns, asm_gemm_uops, (const int32_t (*)[2])g->relocs};
}

static double fake_ms;
static double fake_clock(void) {
    return fake_ms;
}

static void test_gemm_runs(void) {
    gemm_prog p;
    gemm_init(&p);
    write_graph("k_0_accel_dense", 16);
    write_program(&p.prog);
    pk_graph* g = NULL;
    CHECK_MSG(pk_graph_load_dir(dir, &g) == PK_OK, pk_last_error());
    if (!g) return;
    CHECK(!strcmp(pk_graph_node_device(g, 2), "accel") && !strcmp(pk_graph_device_name(g), "sim"));
    int8_t y[16], want[16];
    for (int o = 0; o < 16; o++) {
        int32_t acc = 0;
        for (int i = 0; i < 16; i++)
            acc += (int32_t)X[i] * W[o][i];
        want[o] = (int8_t)(uint8_t)(uint32_t)acc; /* STORE keeps the low byte */
    }
    CHECK(pk_graph_set_input(g, 0, X, 16) == PK_OK);
    CHECK_MSG(pk_graph_run(g) == PK_OK, pk_last_error());
    CHECK(pk_graph_get_output(g, 0, y, 16) == PK_OK);
    CHECK(memcmp(y, want, 16) == 0);
    /* a second run on other data: the input is copied again, the output read again */
    X[3] = 127;
    for (int o = 0; o < 16; o++)
        want[o] = (int8_t)(uint8_t)(uint32_t)((int32_t)want[o] + (127 - (3 - 8)) * W[o][3]);
    CHECK(pk_graph_set_input(g, 0, X, 16) == PK_OK);
    double node_ms[3] = {0, 0, 0};
    CHECK_MSG(pk_graph_run_profiled(g, fake_clock, node_ms) == PK_OK, pk_last_error());
    CHECK(pk_graph_get_output(g, 0, y, 16) == PK_OK);
    CHECK(memcmp(y, want, 16) == 0);
    pk_accel_stats st;
    CHECK(!pk_graph_node_accel_stats(g, 0, &st) && pk_graph_node_accel_stats(g, 2, &st));
    CHECK(st.runs == 2 && st.insns == 14 && st.macs == 2 * 256 && st.gemm_cycles == 4);
    CHECK(st.load_bytes == 2 * (4 + 16 + 256) && st.store_bytes == 2 * 16);
    CHECK(st.cycles > 0 && st.busy[0] > 0 && st.busy[1] > 0 && st.busy[2] > 0);
    /* the device time is the run's cycles at the file's 100 MHz clock */
    CHECK(node_ms[2] > 0 && node_ms[2] * 1e5 > st.cycles / 2.0 - 1 &&
          node_ms[2] * 1e5 < st.cycles / 2.0 + 1);
    pk_graph_destroy(g);
}

static void expect_load_error(pk_status want, const char* message) {
    pk_graph* g = NULL;
    CHECK(pk_graph_load_dir(dir, &g) == want && !g);
    CHECK_MSG(strstr(pk_last_error(), message), pk_last_error());
}

static void test_bad_programs(void) {
    gemm_prog p;
    gemm_init(&p);
    write_graph("k_missing", 16);
    write_program(&p.prog);
    expect_load_error(PK_ERR_FORMAT, "kernels/program.accel: no program 'k_missing' for graph.json "
                                     "nodes[2] 'fc' (device accel)");
    write_graph("k_0_accel_dense", 8); /* the inp LOAD reads 16 bytes of x */
    expect_load_error(PK_ERR_FORMAT, "kernels/program.accel: program 'k_0_accel_dense' instruction "
                                     "1: LOAD reaches byte 16 of argument 0, which has 8 bytes "
                                     "(graph.json nodes[2] 'fc')");
    write_graph("k_0_accel_dense", 16);
    p.prog.n_args = 4;
    write_program(&p.prog);
    expect_load_error(PK_ERR_FORMAT, "program 'k_0_accel_dense' takes 4 arguments, graph.json "
                                     "nodes[2] 'fc' passes 3");
    gemm_init(&p);
    p.relocs[3][1] = 3; /* the STORE past the last argument */
    write_program(&p.prog);
    expect_load_error(PK_ERR_FORMAT, "relocation 3: instruction 5 region 3: bad region");
    write_file("kernels/program.accel", "PKACCEL2", 8);
    expect_load_error(PK_ERR_FORMAT, "kernels/program.accel: 8 bytes, shorter than its 64-byte "
                                     "header");
    unlink(in_dir("kernels/program.accel"));
    expect_load_error(PK_ERR_IO, "kernels/program.accel: cannot open");

    /* in memory there is no bundle directory to find the programs in */
    void *json = NULL, *params = NULL;
    size_t jlen, plen;
    pk_graph* g = NULL;
    CHECK(pk_read_file(in_dir("graph.json"), &json, &jlen) == PK_OK);
    CHECK(pk_read_file(in_dir("params.bin"), &params, &plen) == PK_OK);
    CHECK(pk_graph_create(json, jlen, params, plen, NULL, 0, &g) == PK_ERR_ARG && !g);
    CHECK_MSG(strstr(pk_last_error(), "kernels run on accel, whose programs are the bundle's "
                                      "kernels/program.accel: load the bundle with "
                                      "pk_graph_load_dir"),
              pk_last_error());
    pk_aligned_free(json);
    pk_aligned_free(params);
}

int main(void) {
    for (int i = 0; i < 16; i++) {
        X[i] = (int8_t)(i - 8);
        for (int o = 0; o < 16; o++)
            W[o][i] = (int8_t)((o * 37 + i * 101) % 255 - 127); /* large: the sums wrap int8 */
    }
    if (!mkdtemp(dir)) return 1;
    CHECK(mkdir(in_dir("kernels"), 0700) == 0);
    write_params();
    test_gemm_runs();
    test_bad_programs();
    unlink(in_dir("graph.json"));
    unlink(in_dir("params.bin"));
    unlink(in_dir("kernels/program.accel"));
    rmdir(in_dir("kernels"));
    rmdir(dir);
    return test_report("test_accel_backend");
}
