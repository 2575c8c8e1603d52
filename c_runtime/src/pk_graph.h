/* pk_graph.h - the in-memory graph, shared by the loader (pk_graph.c) and the executor
 * (pk_exec.c). Internal: users only see the opaque pk_graph. */
#ifndef PK_GRAPH_H
#define PK_GRAPH_H

#include "pk_backend.h"
#include "pk_internal.h"

/* PK_NODE_IF and PK_NODE_LOOP are control-flow nodes: they run subgraphs, not a kernel. */
enum { PK_NODE_INPUT, PK_NODE_PARAM, PK_NODE_KERNEL, PK_NODE_IF, PK_NODE_LOOP };
#define PK_MAX_SUBGRAPH_DEPTH 16        /* control-flow nodes nested in subgraphs, at most */
#define PK_MAX_TRIPS ((int64_t)1 << 40) /* the largest max_trips a loop node may declare */
enum { PK_ST_INPUT, PK_ST_PARAM, PK_ST_OUTPUT, PK_ST_ARENA };

typedef struct {
    int32_t dtype;
    int32_t ndim;
    int64_t* shape; /* points into pk_graph.dims */
    size_t bytes;
    int32_t sid;  /* storage id */
    int32_t node; /* producing node */
} pk_entry;

typedef struct {
    int32_t op;
    char* name;
    char* func;
    pk_kernel_fn fn;
    int32_t device;               /* PK_DEV_* */
    const pk_cl_kernel_entry* cl; /* opencl nodes: the kernel and its launch */
    int32_t num_inputs, num_outputs;
    int32_t* inputs; /* entry ids */
    void** args;     /* input buffers then output buffers, as the kernel ABI wants */
    int32_t num_inplace;
    int32_t (*inplace)[2]; /* [output, input] positions written in place, by output */
    char* ops;             /* fused op names separated by spaces; NULL when not given */
    double flops, bytes;   /* of one call; -1 when not given */
    /* Control-flow nodes: their subgraphs (an if's then and else branches, a loop's body),
     * each a graph of its own with its own memory; a loop's carried values and bound. */
    struct pk_graph** subs;
    int32_t num_subs, num_carried;
    int64_t max_trips;
} pk_node;

typedef struct {
    int32_t kind;
    size_t bytes;
    size_t offset; /* arena: offset in the arena; input/output: offset in `memory` */
    char* param;   /* param: tensor name */
    unsigned char* ptr;
} pk_storage;

struct pk_graph {
    int32_t num_nodes, num_entries, num_storage;
    pk_node* nodes;
    int32_t* row_ptr;
    pk_entry* entries;
    int64_t* dims; /* all entry shapes, back to back */
    pk_storage* storage;
    size_t arena_bytes;
    size_t memory_bytes; /* arena + input and output storages, each 64-aligned */

    int32_t num_inputs, num_outputs;
    int32_t* input_entries;
    int32_t* output_entries;
    char** output_names;
    unsigned char* input_set;

    unsigned char* memory;
    int own_memory;
    void* own_params;            /* params buffer the graph frees, if any */
    const unsigned char* params; /* start of params.bin (param storages point into it) */

    /* With a device backend (NULL if every node runs on the CPU): per entry PK_ON_HOST |
     * PK_ON_DEVICE, the backend's state, and the copies made so far (tests count them). */
    const pk_backend* dev;
    unsigned char* valid;
    void* dev_state;
    char* device_name;
    int64_t copies;
    int program_from_cache;      /* the device program came from the on-disk binary cache */
    char* dir;                   /* the bundle directory (pk_graph_load_dir), else NULL */
    pk_accel_stats* accel_stats; /* accel backend: per node, its counters summed over runs */
};

/* Parses and validates graph.json into g (no params, no memory); pk_graph_free_parts undoes. */
pk_status pk_graph_parse(pk_graph* g, const char* json, size_t json_len);
/* Binds param storages to params.bin tensors, checking names, dtypes and shapes. */
pk_status pk_graph_bind_params(pk_graph* g, const void* params, size_t params_len);
/* Points every storage into memory, builds kernel argument arrays, checks aliasing. */
pk_status pk_graph_place(pk_graph* g, unsigned char* memory);
void pk_graph_free_parts(pk_graph* g);
/* Host <-> device copies made by runs of g so far (0 without a device backend). */
int64_t pk_graph_copy_count(const pk_graph* g);
/* The input position that output `out` of `node` is declared to overwrite, or -1. */
int32_t pk_node_inplace_input(const pk_node* node, int32_t out);
/* Runs g's nodes (a subgraph's too); its inputs must have been set. */
pk_status pk_graph_run_nodes(pk_graph* g, double (*clock_ms)(void), double* node_ms);

#endif
