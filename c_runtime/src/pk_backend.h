/* pk_backend.h - where kernel nodes run. The executor (pk_exec.c) walks the nodes and hands
 * each to its node's backend; a graph uses the CPU and at most one device backend. The
 * device backend keeps mirrors of the host `memory` region and of params.bin at the same
 * offsets, so an entry is copied between host and device by its offset and size alone. */
#ifndef PK_BACKEND_H
#define PK_BACKEND_H

#include "pk_internal.h"

enum { PK_DEV_CPU, PK_DEV_OPENCL, PK_DEV_ACCEL, PK_DEV_COUNT };

typedef struct {
    const char* name; /* as graph.json's node "device" */
    /* Per graph, after its host memory is placed: device choice, program, one kernel per node
     * with its arguments set once. release undoes whatever init did (also a failed init). */
    pk_status (*init)(pk_graph* g);
    void (*release)(pk_graph* g);
    /* Device mirrors of the host memory and of params.bin (params uploaded once). */
    pk_status (*alloc)(pk_graph* g);
    void (*free)(pk_graph* g);
    /* Host -> device and device -> host copies of entry e's bytes. */
    pk_status (*copy_in)(pk_graph* g, int32_t e);
    pk_status (*copy_out)(pk_graph* g, int32_t e);
    /* Runs kernel node n; with device_ms, waits and adds the node's device time to it. */
    pk_status (*run)(pk_graph* g, int32_t n, double* device_ms);
    pk_status (*sync)(pk_graph* g); /* waits for everything queued */
} pk_backend;

extern const pk_backend pk_cpu_backend;
#ifdef PK_OPENCL
extern const pk_backend pk_opencl_backend;
#endif
#ifdef PK_ACCEL
extern const pk_backend pk_accel_backend; /* backends/pk_accel.c: kernels/program.accel */
#endif

/* Where an entry's current value is: on the host, on the device, or both. */
enum { PK_ON_HOST = 1, PK_ON_DEVICE = 2 };

#endif
