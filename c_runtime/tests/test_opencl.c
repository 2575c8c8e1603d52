/* The OpenCL backend on whatever device the machine has (PoCL on a CPU will do): a graph
 * mixing cpu and opencl nodes gives the right numbers, copies happen only where the device
 * changes, the program binary is cached on disk and reused (a corrupt cache file is
 * ignored), a bad launch and a program that does not compile fail with PK_ERR_DEVICE and a
 * message naming the node, the CL error or the build log.
 * Built twice: test_opencl_bad_program defines PK_TEST_BAD_PROGRAM (a program with a syntax
 * error) and checks only that. */
#define _POSIX_C_SOURCE 200809L /* setenv, mkdtemp */

#include "pk_graph.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* ---- kernel tables: CPU relu, OpenCL add, scale and a launch no device accepts ---- */

static int32_t k_relu4(void* const* args) {
    const float* x = args[0];
    float* y = args[1];
    for (int i = 0; i < 4; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
    return 0;
}

const pk_kernel_entry pk_kernel_table[] = {
    {"k_relu4", k_relu4, "float32[4] float32[4]"},
    {0, 0, 0},
};
const int32_t pk_kernel_count = 1;

const char pk_cl_program_source[] =
    "__kernel void k_add4(__global float* a_base, const ulong a_off,\n"
    "                     __global float* b_base, const ulong b_off,\n"
    "                     __global float* y_base, const ulong y_off) {\n"
    "    __global float* restrict a = a_base + a_off;\n"
    "    __global float* restrict b = b_base + b_off;\n"
    "    __global float* restrict y = y_base + y_off;\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = a[i] + b[i];\n"
    "}\n"
    "__kernel void k_big(__global float* x_base, const ulong x_off,\n"
    "                    __global float* y_base, const ulong y_off) {\n"
    "    __global float* restrict x = x_base + x_off;\n"
    "    __global float* restrict y = y_base + y_off;\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < 4 && get_global_id(1) == 0 && get_global_id(2) == 0) y[i] = x[i];\n"
    "}\n"
    "__kernel void k_scale4(__global float* x_base, const ulong x_off,\n"
    "                       __global float* y_base, const ulong y_off) {\n"
    "    __global float* restrict x = x_base + x_off;\n"
    "    __global float* restrict y = y_base + y_off;\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = 2.0f * x[i];\n"
#ifdef PK_TEST_BAD_PROGRAM
    "    y[i] = undeclared_thing;\n"
#endif
    "}\n";

const pk_cl_kernel_entry pk_cl_kernel_table[] = {
    {"k_add4", "float32[4] float32[4] float32[4]", {4, 1, 1}, {0, 0, 0}},
    /* 64 * 64 * 2 work-items per group: more than any device allows (PoCL: 4096). */
    {"k_big", "float32[4] float32[4]", {64, 64, 2}, {64, 64, 2}},
    {"k_scale4", "float32[4] float32[4]", {4, 1, 1}, {2, 1, 1}},
    {0, 0, {0, 0, 0}, {0, 0, 0}},
};
const int32_t pk_cl_kernel_count = 3;

/* x, w; a = add(x, w) [cl]; b = scale(a) [cl]; c = relu(b) [cpu]; y = add(c, x) [cl].
 * Written with ' for readability. */
static const char graph_src[] =
    "{'format':'packager-graph','version':1,"
    "'nodes':[{'op':'input','name':'x','inputs':[]},"
    "{'op':'param','name':'w','inputs':[]},"
    "{'op':'kernel','name':'add1','func':'k_add4','device':'opencl','inputs':[[0,0],[1,0]]},"
    "{'op':'kernel','name':'scale','func':'k_scale4','device':'opencl','inputs':[[2,0]]},"
    "{'op':'kernel','name':'relu','func':'k_relu4','device':'cpu','inputs':[[3,0]]},"
    "{'op':'kernel','name':'add2','func':'k_add4','device':'opencl','inputs':[[4,0],[0,0]]}],"
    "'arg_nodes':[0,1],'node_row_ptr':[0,1,2,3,4,5,6],"
    "'heads':[[5,0]],'outputs':['y'],"
    "'attrs':{'shape':[[4],[4],[4],[4],[4],[4]],"
    "'dtype':['float32','float32','float32','float32','float32','float32'],"
    "'storage_id':[0,1,2,3,2,4]},"
    "'storage':[{'kind':'input','bytes':16},{'kind':'param','bytes':16,'param':'w'},"
    "{'kind':'arena','bytes':16,'offset':0},{'kind':'arena','bytes':16,'offset':64},"
    "{'kind':'output','bytes':16}],"
    "'arena_bytes':128}";

static const float w_data[4] = {0.5f, 0.5f, -10.0f, 0.5f};

static char* quoted(const char* src) {
    char* out = malloc(strlen(src) + 1);
    size_t i = 0;
    for (; src[i]; i++)
        out[i] = src[i] == '\'' ? '"' : src[i];
    out[i] = 0;
    return out;
}

/* params.bin with one tensor "w", float32, [4], data at offset 64. */
static unsigned char params[80]; /* the runtime copies it if misaligned */

static void put_le(unsigned char* p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void build_params(void) {
    memcpy(params, "PKPARAMS", 8);
    put_le(params + 8, 1, 4);
    put_le(params + 12, 1, 4);
    put_le(params + 16, sizeof params, 8);
    put_le(params + 24, 1, 2);
    params[26] = 'w';
    put_le(params + 27, 1, 1);  /* float32 */
    put_le(params + 28, 1, 1);  /* ndim */
    put_le(params + 29, 4, 8);  /* dim */
    put_le(params + 37, 64, 8); /* data offset */
    put_le(params + 45, 16, 8); /* bytes */
    memcpy(params + 64, w_data, sizeof w_data);
}

static pk_status create(const char* src, pk_graph** g) {
    char* json = quoted(src);
    pk_status s = pk_graph_create(json, strlen(json), params, sizeof params, NULL, 0, g);
    free(json);
    return s;
}

static char cache[256];

static char* cache_file(void) {
    static char path[512];
    char cmd[320];
    snprintf(cmd, sizeof cmd, "ls %s/*.bin 2>/dev/null", cache);
    FILE* p = popen(cmd, "r");
    path[0] = 0;
    if (p) {
        if (!fgets(path, sizeof path, p)) path[0] = 0;
        pclose(p);
    }
    path[strcspn(path, "\n")] = 0;
    return path;
}

#ifndef PK_TEST_BAD_PROGRAM
/* relu(2 (x + w)) + x for x = {1, -2, 3, -4}, w = {.5, .5, -10, .5}. */
static void check_run(pk_graph* g, const float* x, int64_t want_copies) {
    float y[4], want[4];
    int64_t before = pk_graph_copy_count(g);
    CHECK(pk_graph_set_input(g, 0, x, 16) == PK_OK);
    CHECK_MSG(pk_graph_run(g) == PK_OK, pk_last_error());
    CHECK(pk_graph_get_output(g, 0, y, sizeof y) == PK_OK);
    for (int i = 0; i < 4; i++) {
        float b = 2 * (x[i] + w_data[i]);
        want[i] = (b > 0 ? b : 0) + x[i];
        CHECK(y[i] == want[i]);
    }
    /* x up, b down (for relu), c up (for add2), y down; nothing more. */
    CHECK(pk_graph_copy_count(g) - before == want_copies);
}

static void test_mixed_graph(void) {
    static const float x1[4] = {1, -2, 3, -4}, x2[4] = {-1, 5, 0.25f, 8};
    pk_graph* g;
    CHECK_MSG(create(graph_src, &g) == PK_OK, pk_last_error());
    if (!g) return;
    CHECK(!strcmp(pk_graph_node_device(g, 2), "opencl"));
    CHECK(!strcmp(pk_graph_node_device(g, 4), "cpu"));
    CHECK(pk_graph_node_device(g, 0) == NULL);
    CHECK(pk_graph_device_name(g) && pk_graph_device_name(g)[0]);
    CHECK(g->program_from_cache == 0);
    check_run(g, x1, 4);
    check_run(g, x2, 4);
    /* Without a new input, x is still valid on the device: one copy fewer. */
    int64_t before = pk_graph_copy_count(g);
    CHECK(pk_graph_run(g) == PK_OK);
    CHECK(pk_graph_copy_count(g) - before == 3);
    /* Profiled: every kernel node gets a time. */
    double ms[6] = {0};
    CHECK(pk_graph_run_profiled(g, NULL, ms) == PK_ERR_ARG);
    pk_graph_destroy(g);
}

static double clock_ms(void) {
    static double t;
    return t += 1;
}

static void test_profiled(void) {
    static const float x[4] = {1, 2, 3, 4};
    double ms[6] = {0};
    pk_graph* g;
    CHECK_MSG(create(graph_src, &g) == PK_OK, pk_last_error());
    if (!g) return;
    CHECK(pk_graph_set_input(g, 0, x, 16) == PK_OK);
    CHECK_MSG(pk_graph_run_profiled(g, clock_ms, ms) == PK_OK, pk_last_error());
    for (int n = 2; n < 6; n++)
        CHECK(ms[n] > 0);
    CHECK(ms[0] == 0 && ms[1] == 0);
    pk_graph_destroy(g);
}

static void test_cache(void) {
    pk_graph* g;
    char* path = cache_file();
    CHECK_MSG(path[0], "no program binary in the cache");
    CHECK(create(graph_src, &g) == PK_OK);
    CHECK(g && g->program_from_cache == 1);
    pk_graph_destroy(g);
    /* A corrupt cache file of ours (our header, garbage after it) is ignored, rebuilt and
     * rewritten. */
    FILE* f = fopen(path, "wb");
    CHECK(f && fputs("packager-opencl-binary 1\nnot a program binary", f) >= 0);
    if (f) fclose(f);
    CHECK_MSG(create(graph_src, &g) == PK_OK, pk_last_error());
    CHECK(g && g->program_from_cache == 0);
    if (g) check_run(g, (const float[4]){1, 1, 1, 1}, 4);
    pk_graph_destroy(g);
    CHECK(create(graph_src, &g) == PK_OK);
    CHECK(g && g->program_from_cache == 1);
    pk_graph_destroy(g);
    /* A file someone else put there under the same name is used by nobody and left as it
     * was: the program is built from source. */
    static const char foreign[] = "not the packager's";
    f = fopen(path, "wb");
    CHECK(f && fputs(foreign, f) >= 0);
    if (f) fclose(f);
    CHECK_MSG(create(graph_src, &g) == PK_OK, pk_last_error());
    CHECK(g && g->program_from_cache == 0);
    if (g) check_run(g, (const float[4]){1, 1, 1, 1}, 4);
    pk_graph_destroy(g);
    char back[64] = "";
    f = fopen(path, "rb");
    CHECK(f && fread(back, 1, sizeof back - 1, f) == sizeof foreign - 1);
    if (f) fclose(f);
    CHECK_MSG(strcmp(back, foreign) == 0, back);
    remove(path);
}

static void test_bad_launch(void) {
    char src[sizeof graph_src + 16];
    pk_graph* g;
    static const float x[4] = {1, 2, 3, 4};
    CHECK(test_replace(graph_src, "'name':'scale','func':'k_scale4'",
                       "'name':'scale','func':'k_big'", src, sizeof src));
    CHECK_MSG(create(src, &g) == PK_OK, pk_last_error());
    if (!g) return;
    CHECK(pk_graph_set_input(g, 0, x, 16) == PK_OK);
    CHECK(pk_graph_run(g) == PK_ERR_DEVICE);
    const char* msg = pk_last_error();
    CHECK_MSG(strstr(msg, "node 3 'scale' (kernel k_big)"), msg);
    CHECK_MSG(strstr(msg, "CL_INVALID_WORK_GROUP_SIZE"), msg);
    CHECK_MSG(strstr(msg, "local 64x64x2"), msg);
    pk_graph_destroy(g);
}

static void test_lookup_errors(void) {
    char src[sizeof graph_src + 16];
    pk_graph* g;
    /* A CPU kernel is not an OpenCL kernel. */
    CHECK(test_replace(graph_src, "'func':'k_relu4','device':'cpu'",
                       "'func':'k_relu4','device':'opencl'", src, sizeof src));
    CHECK(create(src, &g) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(),
                     "nodes[4] 'relu': func 'k_relu4' is not in the OpenCL kernel table"),
              pk_last_error());
    CHECK(test_replace(graph_src, "'func':'k_scale4'", "'func':'k_add4'", src, sizeof src));
    CHECK(create(src, &g) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "func 'k_add4' takes 3 arguments"), pk_last_error());
    setenv("PACKAGER_OPENCL_DEVICE", "no such device name", 1);
    CHECK(create(graph_src, &g) == PK_ERR_DEVICE);
    CHECK_MSG(strstr(pk_last_error(), "PACKAGER_OPENCL_DEVICE='no such device name' matches no"),
              pk_last_error());
    unsetenv("PACKAGER_OPENCL_DEVICE");
}
#else
static void test_build_error(void) {
    pk_graph* g;
    CHECK(create(graph_src, &g) == PK_ERR_DEVICE);
    const char* msg = pk_last_error();
    CHECK_MSG(strstr(msg, "clBuildProgram failed with CL_BUILD_PROGRAM_FAILURE"), msg);
    CHECK_MSG(strstr(msg, "build log"), msg);
    CHECK_MSG(strstr(msg, "undeclared_thing"), msg);
    CHECK(cache_file()[0] == 0); /* nothing cached */
}
#endif

int main(void) {
    build_params();
    snprintf(cache, sizeof cache, "%s/pk_cl_cache_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CHECK(mkdtemp(cache) != NULL);
    setenv("PACKAGER_CL_CACHE_DIR", cache, 1);
    unsetenv("PACKAGER_OPENCL_DEVICE");
#ifndef PK_TEST_BAD_PROGRAM
    test_mixed_graph();
    test_profiled();
    test_cache();
    test_bad_launch();
    test_lookup_errors();
#else
    test_build_error();
#endif
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    CHECK(system(cmd) == 0);
    return test_report("test_opencl");
}
