/* The OpenCL backend (built with PK_OPENCL): one device, one context and in-order queue, the
 * bundle's program (kernels/program.cl, compiled once and cached on disk as a binary), one
 * cl_kernel per graph node with its arguments set once, and two device buffers mirroring the
 * host `memory` region and params.bin at the same offsets. */
#if (defined(__unix__) || defined(__APPLE__)) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "pk_graph.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__APPLE__)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif
#if defined(_POSIX_C_SOURCE)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

typedef struct {
    cl_device_id device;
    cl_context ctx;
    cl_command_queue queue;
    cl_program program;
    cl_kernel* kernels; /* per node; NULL for cpu and non-kernel nodes */
    cl_mem memory, params;
} cl_state;

static const char* cl_error_name(cl_int err) {
    static const struct {
        cl_int code;
        const char* name;
    } names[] = {
        {CL_DEVICE_NOT_FOUND, "CL_DEVICE_NOT_FOUND"},
        {CL_DEVICE_NOT_AVAILABLE, "CL_DEVICE_NOT_AVAILABLE"},
        {CL_COMPILER_NOT_AVAILABLE, "CL_COMPILER_NOT_AVAILABLE"},
        {CL_MEM_OBJECT_ALLOCATION_FAILURE, "CL_MEM_OBJECT_ALLOCATION_FAILURE"},
        {CL_OUT_OF_RESOURCES, "CL_OUT_OF_RESOURCES"},
        {CL_OUT_OF_HOST_MEMORY, "CL_OUT_OF_HOST_MEMORY"},
        {CL_PROFILING_INFO_NOT_AVAILABLE, "CL_PROFILING_INFO_NOT_AVAILABLE"},
        {CL_BUILD_PROGRAM_FAILURE, "CL_BUILD_PROGRAM_FAILURE"},
        {CL_MISALIGNED_SUB_BUFFER_OFFSET, "CL_MISALIGNED_SUB_BUFFER_OFFSET"},
        {CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
         "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST"},
        {CL_INVALID_VALUE, "CL_INVALID_VALUE"},
        {CL_INVALID_DEVICE_TYPE, "CL_INVALID_DEVICE_TYPE"},
        {CL_INVALID_PLATFORM, "CL_INVALID_PLATFORM"},
        {CL_INVALID_DEVICE, "CL_INVALID_DEVICE"},
        {CL_INVALID_CONTEXT, "CL_INVALID_CONTEXT"},
        {CL_INVALID_QUEUE_PROPERTIES, "CL_INVALID_QUEUE_PROPERTIES"},
        {CL_INVALID_COMMAND_QUEUE, "CL_INVALID_COMMAND_QUEUE"},
        {CL_INVALID_MEM_OBJECT, "CL_INVALID_MEM_OBJECT"},
        {CL_INVALID_BINARY, "CL_INVALID_BINARY"},
        {CL_INVALID_BUILD_OPTIONS, "CL_INVALID_BUILD_OPTIONS"},
        {CL_INVALID_PROGRAM, "CL_INVALID_PROGRAM"},
        {CL_INVALID_PROGRAM_EXECUTABLE, "CL_INVALID_PROGRAM_EXECUTABLE"},
        {CL_INVALID_KERNEL_NAME, "CL_INVALID_KERNEL_NAME"},
        {CL_INVALID_KERNEL_DEFINITION, "CL_INVALID_KERNEL_DEFINITION"},
        {CL_INVALID_KERNEL, "CL_INVALID_KERNEL"},
        {CL_INVALID_ARG_INDEX, "CL_INVALID_ARG_INDEX"},
        {CL_INVALID_ARG_VALUE, "CL_INVALID_ARG_VALUE"},
        {CL_INVALID_ARG_SIZE, "CL_INVALID_ARG_SIZE"},
        {CL_INVALID_KERNEL_ARGS, "CL_INVALID_KERNEL_ARGS"},
        {CL_INVALID_WORK_DIMENSION, "CL_INVALID_WORK_DIMENSION"},
        {CL_INVALID_WORK_GROUP_SIZE, "CL_INVALID_WORK_GROUP_SIZE"},
        {CL_INVALID_WORK_ITEM_SIZE, "CL_INVALID_WORK_ITEM_SIZE"},
        {CL_INVALID_GLOBAL_OFFSET, "CL_INVALID_GLOBAL_OFFSET"},
        {CL_INVALID_EVENT_WAIT_LIST, "CL_INVALID_EVENT_WAIT_LIST"},
        {CL_INVALID_EVENT, "CL_INVALID_EVENT"},
        {CL_INVALID_OPERATION, "CL_INVALID_OPERATION"},
        {CL_INVALID_BUFFER_SIZE, "CL_INVALID_BUFFER_SIZE"},
        {CL_INVALID_GLOBAL_WORK_SIZE, "CL_INVALID_GLOBAL_WORK_SIZE"},
        {-1001, "CL_PLATFORM_NOT_FOUND_KHR"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].code == err) return names[i].name;
    return "CL error";
}

/* "OpenCL: CALL failed with CL_NAME (code) WHERE". */
static pk_status cl_fail(const char* call, cl_int err, const char* where) {
    return pk_fail(PK_ERR_DEVICE, "OpenCL: %s failed with %s (%d)%s%s", call, cl_error_name(err),
                   (int)err, where[0] ? " " : "", where);
}

/* ---- device choice ---- */

static void device_string(cl_device_id d, cl_device_info what, char* buf, size_t cap) {
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, cap - 1, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[cap - 1] = 0;
}

/* PACKAGER_OPENCL_DEVICE (a substring of the name) picks the device; otherwise the first
 * GPU, else the first device of any type. */
static pk_status choose_device(cl_device_id* out) {
    cl_platform_id platforms[16];
    cl_device_id all[256];
    cl_uint np = 0, nall = 0;
    cl_int err = clGetPlatformIDs(16, platforms, &np);
    if (err != CL_SUCCESS || np == 0)
        return pk_fail(PK_ERR_DEVICE,
                       "OpenCL: no platform found (%s): is an OpenCL driver (ICD) "
                       "installed?",
                       cl_error_name(err));
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 256 - nall, all + nall, &nd) !=
            CL_SUCCESS)
            continue;
        nall += nd < 256 - nall ? nd : 256 - nall;
    }
    if (nall == 0) return pk_fail(PK_ERR_DEVICE, "OpenCL: no device found on %u platform(s)", np);
    const char* want = getenv("PACKAGER_OPENCL_DEVICE");
    char name[256];
    for (cl_uint i = 0; want && want[0] && i < nall; i++) {
        device_string(all[i], CL_DEVICE_NAME, name, sizeof name);
        if (strstr(name, want)) return *out = all[i], PK_OK;
    }
    if (want && want[0]) {
        device_string(all[0], CL_DEVICE_NAME, name, sizeof name);
        return pk_fail(PK_ERR_DEVICE,
                       "OpenCL: PACKAGER_OPENCL_DEVICE='%.100s' matches no device (the first is "
                       "'%.100s')",
                       want, name);
    }
    for (cl_uint i = 0; i < nall; i++) {
        cl_device_type type = 0;
        clGetDeviceInfo(all[i], CL_DEVICE_TYPE, sizeof type, &type, NULL);
        if (type & CL_DEVICE_TYPE_GPU) return *out = all[i], PK_OK;
    }
    *out = all[0];
    return PK_OK;
}

/* ---- program and its binary cache ---- */

#define CACHE_MAGIC "packager-opencl-binary " /* every cache file starts so */

static uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The cache directory, created if missing; NULL when there is none to use. */
static char* cache_dir(void) {
    const char* env = getenv("PACKAGER_CL_CACHE_DIR");
    const char* xdg = getenv("XDG_CACHE_HOME");
    const char* home = getenv("HOME");
    const char* base = env && env[0] ? env : xdg && xdg[0] ? xdg : home && home[0] ? home : NULL;
    const char* tail = env && env[0]   ? ""
                       : xdg && xdg[0] ? "/packager/opencl"
                                       : "/.cache/packager/opencl";
    if (!base) return NULL;
    size_t len = strlen(base) + strlen(tail) + 1;
    char* dir = malloc(len);
    if (!dir) return NULL;
    snprintf(dir, len, "%s%s", base, tail);
#if defined(_POSIX_C_SOURCE)
    for (char* c = dir + 1;; c++) /* mkdir -p; failures show up when the file is written */
        if (*c == '/' || !*c) {
            char end = *c;
            *c = 0;
            mkdir(dir, 0755);
            *c = end;
            if (!end) break;
        }
#endif
    return dir;
}

/* The key names everything the binary depends on: platform, device, driver, source. */
static void cache_key(cl_device_id d, const char* source, char* key, size_t cap) {
    char platform_name[128] = "", device[128], driver[64];
    cl_platform_id platform;
    if (clGetDeviceInfo(d, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL) == CL_SUCCESS)
        clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof platform_name - 1, platform_name,
                          NULL);
    platform_name[sizeof platform_name - 1] = 0;
    device_string(d, CL_DEVICE_NAME, device, sizeof device);
    device_string(d, CL_DRIVER_VERSION, driver, sizeof driver);
    snprintf(key, cap, CACHE_MAGIC "1\n%s\n%s\n%s\n%016llx %zu\n", platform_name, device, driver,
             (unsigned long long)fnv1a(0xcbf29ce484222325ull, source, strlen(source)),
             strlen(source));
}

static char* cache_path(const char* key) {
    char* dir = cache_dir();
    if (!dir) return NULL;
    size_t len = strlen(dir) + 32;
    char* path = malloc(len);
    if (path)
        snprintf(path, len, "%s/%016llx.bin", dir,
                 (unsigned long long)fnv1a(0xcbf29ce484222325ull, key, strlen(key)));
    free(dir);
    return path;
}

static cl_int build(cl_program prog, cl_device_id d, const char* options) {
    return clBuildProgram(prog, 1, &d, options, NULL, NULL);
}

/* A program from the cache file (key, then the binary), or NULL when the file is missing,
 * foreign, corrupt or refused by the driver. */
static cl_program load_cached(cl_state* st, const char* path, const char* key,
                              const char* options) {
    void* data = NULL;
    size_t len = 0, klen = strlen(key);
    if (!path || pk_read_file(path, &data, &len) != PK_OK) return NULL;
    cl_program prog = NULL;
    if (len > klen && memcmp(data, key, klen) == 0) {
        const unsigned char* bin = (const unsigned char*)data + klen;
        size_t blen = len - klen;
        cl_int err, status;
        prog = clCreateProgramWithBinary(st->ctx, 1, &st->device, &blen, &bin, &status, &err);
        if (err != CL_SUCCESS || status != CL_SUCCESS ||
            build(prog, st->device, options) != CL_SUCCESS) {
            if (prog) clReleaseProgram(prog);
            prog = NULL;
        }
    }
    pk_aligned_free(data);
    pk_fail(PK_OK, "%s", ""); /* a missing cache file is no error */
    return prog;
}

/* Whether path may be (re)written: missing, or a cache file of ours (it starts with the
 * key's first line, whatever follows: stale or corrupt). A file someone else put there
 * under the same name is left alone. */
static int ours_or_missing(const char* path) {
    char head[sizeof CACHE_MAGIC - 1];
    FILE* f = fopen(path, "rb");
    if (!f) return errno == ENOENT;
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return n == sizeof head && memcmp(head, CACHE_MAGIC, sizeof head) == 0;
}

/* Writes key + binary to a temporary file of its own renamed over path (only when path is
 * missing or ours); failing is not an error. */
static void save_cached(cl_program prog, const char* path, const char* key) {
    size_t blen = 0;
    if (!path || !ours_or_missing(path) ||
        clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof blen, &blen, NULL) || !blen)
        return;
    unsigned char* bin = malloc(blen);
    size_t tlen = strlen(path) + 32;
    char* tmp = malloc(tlen);
    if (bin && tmp &&
        clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
#if defined(_POSIX_C_SOURCE)
        snprintf(tmp, tlen, "%s.%ld.tmp", path, (long)getpid());
#else
        snprintf(tmp, tlen, "%s.tmp", path);
#endif
#if defined(_POSIX_C_SOURCE)
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644); /* never an existing file */
        FILE* f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (fd >= 0 && !f) close(fd);
#else
        FILE* f = fopen(tmp, "wb");
#endif
        int ok =
            f && fwrite(key, 1, strlen(key), f) == strlen(key) && fwrite(bin, 1, blen, f) == blen;
        if (f && fclose(f) != 0) ok = 0;
        if (f && (!ok || rename(tmp, path) != 0)) remove(tmp);
    }
    free(bin);
    free(tmp);
}

/* "-cl-std=CL1.2" when the device's OpenCL C is at least 1.2 ("OpenCL C 1.2 ..."). */
static const char* build_options(cl_device_id d) {
    char version[128];
    int major = 0, minor = 0;
    device_string(d, CL_DEVICE_OPENCL_C_VERSION, version, sizeof version);
    if (sscanf(version, "OpenCL C %d.%d", &major, &minor) == 2 &&
        (major > 1 || (major == 1 && minor >= 2)))
        return "-cl-std=CL1.2";
    return "";
}

static pk_status build_program(pk_graph* g, cl_state* st) {
    char key[512], log[640];
    const char* options = build_options(st->device);
    cache_key(st->device, pk_cl_program_source, key, sizeof key);
    char* path = cache_path(key);
    st->program = load_cached(st, path, key, options);
    g->program_from_cache = st->program != NULL;
    if (st->program) {
        free(path);
        return PK_OK;
    }
    const char* src = pk_cl_program_source;
    cl_int err;
    st->program = clCreateProgramWithSource(st->ctx, 1, &src, NULL, &err);
    if (err != CL_SUCCESS) {
        free(path);
        return cl_fail("clCreateProgramWithSource", err, "");
    }
    if ((err = build(st->program, st->device, options)) != CL_SUCCESS) {
        free(path);
        log[0] = 0;
        clGetProgramBuildInfo(st->program, st->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log,
                              NULL);
        log[sizeof log - 1] = 0;
        return pk_fail(PK_ERR_DEVICE,
                       "OpenCL: clBuildProgram failed with %s (%d) on '%.100s'; build log "
                       "(truncated):\n%s",
                       cl_error_name(err), (int)err, g->device_name, log);
    }
    save_cached(st->program, path, key);
    free(path);
    return PK_OK;
}

/* ---- the backend ---- */

static pk_status cl_init(pk_graph* g) {
    cl_state* st = calloc(1, sizeof *st);
    char name[256];
    cl_int err;
    if (!st || !(st->kernels = calloc((size_t)g->num_nodes + 1, sizeof *st->kernels))) {
        free(st);
        return pk_fail(PK_ERR_NOMEM, "out of memory");
    }
    g->dev_state = st;
    pk_status s = choose_device(&st->device);
    if (s) return s;
    device_string(st->device, CL_DEVICE_NAME, name, sizeof name);
    if (!(g->device_name = malloc(strlen(name) + 1))) return pk_fail(PK_ERR_NOMEM, "out of memory");
    strcpy(g->device_name, name);
    st->ctx = clCreateContext(NULL, 1, &st->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return cl_fail("clCreateContext", err, "");
    st->queue = clCreateCommandQueue(st->ctx, st->device, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS) return cl_fail("clCreateCommandQueue", err, "");
    if ((s = build_program(g, st))) return s;
    for (int32_t n = 0; n < g->num_nodes; n++) {
        const pk_node* node = &g->nodes[n];
        if (node->op != PK_NODE_KERNEL || node->device != PK_DEV_OPENCL) continue;
        st->kernels[n] = clCreateKernel(st->program, node->func, &err);
        if (err != CL_SUCCESS) {
            char where[200];
            snprintf(where, sizeof where, "for node %d '%.64s' (kernel %.64s)", (int)n, node->name,
                     node->func);
            return cl_fail("clCreateKernel", err, where);
        }
    }
    return PK_OK;
}

static void cl_release(pk_graph* g) {
    cl_state* st = g->dev_state;
    if (!st) return;
    for (int32_t n = 0; n < g->num_nodes; n++)
        if (st->kernels[n]) clReleaseKernel(st->kernels[n]);
    if (st->program) clReleaseProgram(st->program);
    if (st->queue) clReleaseCommandQueue(st->queue);
    if (st->ctx) clReleaseContext(st->ctx);
    free(st->kernels);
    free(st);
    g->dev_state = NULL;
}

/* Where entry e lives: the buffer and the byte offset in it (same as on the host). */
static cl_mem entry_buffer(const pk_graph* g, int32_t e, size_t* offset) {
    const cl_state* st = g->dev_state;
    const pk_storage* s = &g->storage[g->entries[e].sid];
    int param = s->kind == PK_ST_PARAM;
    *offset = (size_t)(s->ptr - (param ? g->params : g->memory));
    return param ? st->params : st->memory;
}

static int reads_params(const pk_graph* g) {
    for (int32_t n = 0; n < g->num_nodes; n++)
        for (int32_t k = 0; g->nodes[n].device == PK_DEV_OPENCL && k < g->nodes[n].num_inputs; k++)
            if (g->storage[g->entries[g->nodes[n].inputs[k]].sid].kind == PK_ST_PARAM) return 1;
    return 0;
}

static size_t params_bytes(const pk_graph* g) {
    size_t end = 1; /* a zero-sized cl_mem is invalid */
    for (int32_t i = 0; i < g->num_storage; i++) {
        const pk_storage* s = &g->storage[i];
        if (s->kind == PK_ST_PARAM && (size_t)(s->ptr - g->params) + s->bytes > end)
            end = (size_t)(s->ptr - g->params) + s->bytes;
    }
    return end;
}

/* Sets kernel argument k of node n: its buffer (2k) and element offset in it (2k + 1). */
static cl_int set_arg(pk_graph* g, int32_t n, int32_t k, int32_t e) {
    const cl_state* st = g->dev_state;
    size_t offset;
    cl_mem buf = entry_buffer(g, e, &offset);
    const pk_dtype_desc* d = pk_dtype_by_code(g->entries[e].dtype);
    cl_ulong elems = (cl_ulong)(offset / d->size);
    cl_int err = clSetKernelArg(st->kernels[n], (cl_uint)(2 * k), sizeof buf, &buf);
    return err ? err : clSetKernelArg(st->kernels[n], (cl_uint)(2 * k + 1), sizeof elems, &elems);
}

static pk_status cl_alloc(pk_graph* g) {
    cl_state* st = g->dev_state;
    cl_int err;
    size_t mem = g->memory_bytes ? g->memory_bytes : 1;
    st->memory = clCreateBuffer(st->ctx, CL_MEM_READ_WRITE, mem, NULL, &err);
    if (err != CL_SUCCESS) return cl_fail("clCreateBuffer", err, "(tensor memory)");
    int upload = reads_params(g); /* params.bin goes to the device once, if a kernel reads it */
    size_t pbytes = upload ? params_bytes(g) : 1;
    st->params = clCreateBuffer(st->ctx, CL_MEM_READ_ONLY, pbytes, NULL, &err);
    if (err != CL_SUCCESS) return cl_fail("clCreateBuffer", err, "(params)");
    if (upload) {
        err = clEnqueueWriteBuffer(st->queue, st->params, CL_TRUE, 0, pbytes, g->params, 0, NULL,
                                   NULL);
        if (err != CL_SUCCESS) return cl_fail("clEnqueueWriteBuffer", err, "(params)");
    }
    for (int32_t n = 0; n < g->num_nodes; n++) {
        const pk_node* node = &g->nodes[n];
        if (!st->kernels[n]) continue;
        for (int32_t k = 0; k < node->num_inputs + node->num_outputs && !err; k++)
            err = set_arg(g, n, k,
                          k < node->num_inputs ? node->inputs[k]
                                               : g->row_ptr[n] + k - node->num_inputs);
        if (err != CL_SUCCESS) {
            char where[200];
            snprintf(where, sizeof where, "for node %d '%.64s' (kernel %.64s)", (int)n, node->name,
                     node->func);
            return cl_fail("clSetKernelArg", err, where);
        }
    }
    return PK_OK;
}

static void cl_free(pk_graph* g) {
    cl_state* st = g->dev_state;
    if (!st) return;
    if (st->memory) clReleaseMemObject(st->memory);
    if (st->params) clReleaseMemObject(st->params);
    st->memory = st->params = NULL;
}

/* Copies are blocking: the host memory may be reused by the next CPU node right after. */
static pk_status cl_copy(pk_graph* g, int32_t e, int to_device) {
    const cl_state* st = g->dev_state;
    size_t offset, bytes = g->entries[e].bytes;
    cl_mem buf = entry_buffer(g, e, &offset);
    unsigned char* host = g->storage[g->entries[e].sid].ptr;
    if (!bytes) return PK_OK;
    cl_int err =
        to_device
            ? clEnqueueWriteBuffer(st->queue, buf, CL_TRUE, offset, bytes, host, 0, NULL, NULL)
            : clEnqueueReadBuffer(st->queue, buf, CL_TRUE, offset, bytes, host, 0, NULL, NULL);
    if (err == CL_SUCCESS) return PK_OK;
    char where[200];
    snprintf(where, sizeof where, "copying entry %d (%zu bytes at %zu, node '%.64s')", (int)e,
             bytes, offset, g->nodes[g->entries[e].node].name);
    return cl_fail(to_device ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", err, where);
}

static pk_status cl_copy_in(pk_graph* g, int32_t e) {
    return cl_copy(g, e, 1);
}

static pk_status cl_copy_out(pk_graph* g, int32_t e) {
    return cl_copy(g, e, 0);
}

static pk_status cl_run(pk_graph* g, int32_t n, double* device_ms) {
    const cl_state* st = g->dev_state;
    const pk_node* node = &g->nodes[n];
    const pk_cl_kernel_entry* k = node->cl;
    size_t global[3], local[3];
    int driver_local = !k->local[0] && !k->local[1] && !k->local[2];
    for (int d = 0; d < 3; d++)
        global[d] = k->global[d], local[d] = k->local[d];
    cl_event ev = NULL;
    cl_int err =
        clEnqueueNDRangeKernel(st->queue, st->kernels[n], 3, NULL, global,
                               driver_local ? NULL : local, 0, NULL, device_ms ? &ev : NULL);
    if (err == CL_SUCCESS && ev) {
        cl_ulong t0 = 0, t1 = 0;
        err = clWaitForEvents(1, &ev);
        if (err == CL_SUCCESS)
            err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
        if (err == CL_SUCCESS)
            err = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        *device_ms += (double)(t1 - t0) * 1e-6;
        clReleaseEvent(ev);
    }
    if (err == CL_SUCCESS) return PK_OK;
    return pk_fail(PK_ERR_DEVICE,
                   "run: node %d '%.64s' (kernel %.64s): clEnqueueNDRangeKernel failed with %s "
                   "(%d), global %ux%ux%u, local %ux%ux%u%s",
                   (int)n, node->name, node->func, cl_error_name(err), (int)err, k->global[0],
                   k->global[1], k->global[2], k->local[0], k->local[1], k->local[2],
                   driver_local ? " (driver's choice)" : "");
}

static pk_status cl_sync(pk_graph* g) {
    const cl_state* st = g->dev_state;
    cl_int err = clFinish(st->queue);
    return err == CL_SUCCESS ? PK_OK : cl_fail("clFinish", err, "");
}

const pk_backend pk_opencl_backend = {"opencl",   cl_init,     cl_release, cl_alloc, cl_free,
                                      cl_copy_in, cl_copy_out, cl_run,     cl_sync};
