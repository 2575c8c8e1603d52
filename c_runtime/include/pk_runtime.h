/* pk_runtime.h - load and run a packaged model graph (see docs/bundle-format.md).
 *
 * Typical use:
 *   pk_graph* g;
 *   if (pk_graph_load_dir("bundle", &g) != PK_OK) { puts(pk_last_error()); ... }
 *   pk_graph_set_input(g, 0, data, nbytes);
 *   pk_graph_run(g);
 *   pk_graph_get_output(g, 0, out, out_nbytes);
 *   pk_graph_destroy(g);
 *
 * Every function that returns pk_status leaves a message naming the file, field and index
 * at fault in pk_last_error() when it fails. A graph is not thread-safe; use one per thread.
 */
#ifndef PK_RUNTIME_H
#define PK_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pk_graph pk_graph;

typedef enum {
    PK_OK = 0,
    PK_ERR_IO,     /* a file could not be read */
    PK_ERR_FORMAT, /* graph.json or params.bin is malformed or inconsistent */
    PK_ERR_NOMEM,  /* an allocation failed */
    PK_ERR_ARG,    /* a bad argument: index out of range, size mismatch, unset input */
    PK_ERR_KERNEL, /* a kernel returned non-zero */
    PK_ERR_DEVICE  /* no OpenCL device, or an OpenCL call failed */
} pk_status;

/* Values equal the params.bin dtype codes. */
typedef enum {
    PK_FLOAT32 = 1,
    PK_FLOAT64,
    PK_INT8,
    PK_INT16,
    PK_INT32,
    PK_INT64,
    PK_UINT8,
    PK_UINT16,
    PK_UINT32,
    PK_UINT64,
    PK_BOOL
} pk_dtype;

#define PK_MAX_NDIM 32

/* Pointers stay valid until pk_graph_destroy. */
typedef struct {
    pk_dtype dtype;
    int32_t ndim;
    const int64_t* shape;
    size_t bytes;
    const char* name;
} pk_tensor_info;

/* Builds a graph from graph.json text and params.bin bytes.
 * params must stay alive until pk_graph_destroy; it should be 64-byte aligned, otherwise the
 * runtime copies it once into an aligned buffer of its own.
 * memory: caller-provided buffer for the tensor data (arena, inputs, outputs), 64-byte
 * aligned, of at least pk_graph_memory_bytes; NULL lets the runtime allocate it. Graph
 * metadata is always allocated with malloc. */
pk_status pk_graph_create(const char* json, size_t json_len, const void* params, size_t params_len,
                          void* memory, size_t memory_len, pk_graph** out);

/* Bytes of `memory` that pk_graph_create needs for this graph.json. */
pk_status pk_graph_memory_bytes(const char* json, size_t json_len, size_t* out);

/* Reads BUNDLE_DIR/graph.json and BUNDLE_DIR/params.bin; the graph owns all buffers. */
pk_status pk_graph_load_dir(const char* bundle_dir, pk_graph** out);

void pk_graph_destroy(pk_graph* g);

/* Inputs are the graph's `input` nodes in node order; outputs are its heads in order. */
int32_t pk_graph_num_inputs(const pk_graph* g);
int32_t pk_graph_num_outputs(const pk_graph* g);
pk_status pk_graph_input_info(const pk_graph* g, int32_t i, pk_tensor_info* out);
pk_status pk_graph_output_info(const pk_graph* g, int32_t i, pk_tensor_info* out);
int32_t pk_graph_input_index(const pk_graph* g, const char* name);  /* -1 if none */
int32_t pk_graph_output_index(const pk_graph* g, const char* name); /* -1 if none */

/* Copies `bytes` bytes (must equal the input's size) into input i. Inputs keep their value
 * across runs; running before every input was set once is PK_ERR_ARG. */
pk_status pk_graph_set_input(pk_graph* g, int32_t i, const void* data, size_t bytes);
pk_status pk_graph_run(pk_graph* g);
/* Like pk_graph_run, and adds each node's time (clock_ms: milliseconds from any origin, e.g. a
 * monotonic clock) to node_ms[n], an array of pk_graph_num_nodes entries. */
pk_status pk_graph_run_profiled(pk_graph* g, double (*clock_ms)(void), double* node_ms);
/* Nodes in execution order: names, and for kernel nodes the generated function ("(if)" or
 * "(loop)" for a control-flow node, timed with its subgraphs; NULL for inputs and params). */
int32_t pk_graph_num_nodes(const pk_graph* g);
const char* pk_graph_node_name(const pk_graph* g, int32_t n);
const char* pk_graph_node_func(const pk_graph* g, int32_t n);
/* Where kernel node n runs: "cpu", "opencl" or "accel" (control flow: "cpu"; NULL for other nodes).
 */
const char* pk_graph_node_device(const pk_graph* g, int32_t n);
/* What graph.json says of kernel node n (old bundles say nothing): the op names fused into
 * it, separated by spaces (else NULL); the flops and bytes of one call (else -1). */
const char* pk_graph_node_ops(const pk_graph* g, int32_t n);
double pk_graph_node_flops(const pk_graph* g, int32_t n);
double pk_graph_node_bytes(const pk_graph* g, int32_t n);
/* The OpenCL device's name, the accelerator's driver ("sim" or "uio"), or NULL when the
 * graph runs everything on the CPU. */
const char* pk_graph_device_name(const pk_graph* g);

/* What the accelerator did for kernel node n, summed over the graph's runs so far
 * (docs/accel.md, "Simulator and cycle model"; the board driver fills only cycles and
 * insns). Modules: 0 load, 1 compute, 2 store. */
typedef struct {
    uint64_t runs;
    uint64_t cycles;
    uint64_t insns;
    uint64_t busy[3], stall[3];
    uint64_t gemm_cycles, alu_cycles, macs;
    uint64_t load_bytes, store_bytes; /* DRAM bytes loaded into all buffers, and stored */
} pk_accel_stats;
/* 1 and *out filled when node n runs on the accelerator, else 0. */
int pk_graph_node_accel_stats(const pk_graph* g, int32_t n, pk_accel_stats* out);
/* Copies output i (bytes must equal its size) into dst. */
pk_status pk_graph_get_output(const pk_graph* g, int32_t i, void* dst, size_t bytes);

/* Message of the last failure in this process (not thread-safe); "" if none. */
const char* pk_last_error(void);
/* Names of statuses and dtypes ("float32"); "?" for an unknown value. */
const char* pk_status_name(pk_status s);
const char* pk_dtype_name(pk_dtype d);

#ifdef __cplusplus
}
#endif
#endif
