"""The OpenCL timing driver: one C program, run on the board, that times many candidate
OpenCL kernels of a task on the board's OpenCL device.

It speaks the CPU driver's protocol (driver.py: ``driver MIN_SECONDS SAMPLES POS...``,
``S id`` before a candidate, ``R id ok t1 t2 ...`` or ``R id ERROR`` after), so the same
runners (measure.py, local or over SSH) run it. Each candidate is an OpenCL C translation
unit of its own, built when its turn comes: one that does not build is a
``compile_error``, one whose launch fails (CL_OUT_OF_RESOURCES, an invalid work-group)
a ``runtime_error``, and the others are checked against the default schedule's output
(``wrong_answer``). A sample is the wall time of launches until the queue is finished,
per launch; the device is picked as the runtime picks it (``PACKAGER_OPENCL_DEVICE``, a
part of its name, else the first GPU, else the first device).
"""

from __future__ import annotations

from ..codegen.opencl import codegen_opencl, launch_of
from ..te.ir import PrimFunc
from .driver import _DTYPE_CODE, HELPERS, _elem_bytes

_MAIN = r"""
static cl_context ctx;
static cl_command_queue queue;
static cl_device_id dev;
static cl_mem bufs[NARGS];
static void *host[NARGS];

static int pick_device(void) {
    cl_platform_id plats[16];
    cl_uint np = 0, p, n, d, pass;
    const char *want = getenv("PACKAGER_OPENCL_DEVICE");
    char name[256];
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) return 0;
    for (pass = 0; pass < 2; ++pass) {
        for (p = 0; p < np; ++p) {
            cl_device_id devs[16];
            cl_device_type type = pass == 0 ? CL_DEVICE_TYPE_GPU : CL_DEVICE_TYPE_ALL;
            if (clGetDeviceIDs(plats[p], type, 16, devs, &n) != CL_SUCCESS) continue;
            for (d = 0; d < n && d < 16; ++d) {
                clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof name, name, NULL);
                if (!want || strstr(name, want)) { dev = devs[d]; return 1; }
            }
        }
    }
    return 0;
}

/* The kernel of one source, its arguments set; 0 when it does not build. */
static cl_kernel build(const char *src, const char *fn) {
    cl_int err;
    cl_uint a;
    cl_ulong off = 0;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    cl_kernel k;
    if (err != CL_SUCCESS) return 0;
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(prog);
        return 0;
    }
    k = clCreateKernel(prog, fn, &err);
    clReleaseProgram(prog); /* the kernel keeps it */
    if (err != CL_SUCCESS) return 0;
    for (a = 0; a < NARGS; ++a) {
        clSetKernelArg(k, 2 * a, sizeof(cl_mem), &bufs[a]);
        clSetKernelArg(k, 2 * a + 1, sizeof(cl_ulong), &off);
    }
    return k;
}

static int launch(cl_kernel k, int c, int times) {
    int n;
    for (n = 0; n < times; ++n)
        if (clEnqueueNDRangeKernel(queue, k, 3, NULL, GLOBAL[c], LOCAL[c], 0, NULL, NULL))
            return 0;
    return clFinish(queue) == CL_SUCCESS;
}

static int read_outputs(void **to) {
    int i;
    for (i = NIN; i < NARGS; ++i)
        if (clEnqueueReadBuffer(queue, bufs[i], CL_TRUE, 0, BYTES[i], to[i], 0, NULL, NULL))
            return 0;
    return 1;
}

static void poison_outputs(void) {
    int i;
    for (i = NIN; i < NARGS; ++i) {
        memset(host[i], 0xff, BYTES[i]); /* NaN: what a candidate leaves unwritten fails */
        clEnqueueWriteBuffer(queue, bufs[i], CL_TRUE, 0, BYTES[i], host[i], 0, NULL, NULL);
    }
}

int main(int argc, char **argv) {
    double min_s = argc > 1 ? atof(argv[1]) : 0.05;
    int samples = argc > 2 ? atoi(argv[2]) : 5, a, i, r;
    void *ref[NARGS], *got[NARGS];
    cl_int err;
    cl_kernel k;
    if (!pick_device()) { printf("E no OpenCL device\n"); return 3; }
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    if (err != CL_SUCCESS) { printf("E clCreateContext %d\n", err); return 3; }
    queue = clCreateCommandQueue(ctx, dev, 0, &err);
    if (err != CL_SUCCESS) { printf("E clCreateCommandQueue %d\n", err); return 3; }
    for (i = 0; i < NARGS; ++i) {
        host[i] = malloc(BYTES[i] + 4);
        ref[i] = malloc(BYTES[i] + 4);
        got[i] = malloc(BYTES[i] + 4);
        fill(host[i], DT[i], BYTES[i]);
        bufs[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, BYTES[i] + 4,
                                 host[i], &err);
        if (err != CL_SUCCESS) { printf("E clCreateBuffer %d\n", err); return 3; }
    }
    k = build(SOURCES[0], NAMES[0]);
    if (!k || !launch(k, 0, 1) || !read_outputs(ref)) { printf("E reference failed\n"); return 3; }
    clReleaseKernel(k);
    for (a = 3; a < argc; ++a) {
        int c = atoi(argv[a]) + 1, ok = 1, number;
        double t0, one;
        printf("S %d\n", IDS[c]);
        fflush(stdout);
        poison_outputs();
        k = build(SOURCES[c], NAMES[c]);
        if (!k) { printf("R %d compile_error\n", IDS[c]); fflush(stdout); continue; }
        t0 = now();
        /* the checked launch is also the warm-up and the calibration */
        if (!launch(k, c, 1) || !read_outputs(got)) {
            printf("R %d runtime_error\n", IDS[c]);
            fflush(stdout);
            clReleaseKernel(k);
            continue;
        }
        one = now() - t0;
        for (i = NIN; i < NARGS; ++i) ok = ok && same(got[i], ref[i], DT[i], BYTES[i]);
        if (!ok) {
            printf("R %d wrong_answer\n", IDS[c]);
        } else {
            number = (int)(min_s / samples / (one > 1e-9 ? one : 1e-9)) + 1;
            printf("R %d ok", IDS[c]);
            for (r = 0; r < samples; ++r) {
                t0 = now();
                launch(k, c, number);
                printf(" %.9e", (now() - t0) / number);
            }
            printf("\n");
        }
        fflush(stdout);
        clReleaseKernel(k);
    }
    return 0;
}
"""


def c_string(text: str) -> str:
    """``text`` as a C string literal, one source line per literal line."""
    esc = text.replace("\\", "\\\\").replace('"', '\\"')
    return "\n".join(f'    "{line}\\n"' for line in esc.split("\n"))


def cl_driver_source(ref: PrimFunc, n_inputs: int, candidates: dict[int, PrimFunc]) -> str:
    """C source of the driver for the reference kernel and candidates {config index:
    lowered kernel}; position 0 is the reference, a candidate's POS counts from 0."""
    funcs = [ref, *candidates.values()]
    ids = [-1, *candidates]
    launches = [launch_of(f) for f in funcs]
    params = ref.params
    nbytes = [b.size * _elem_bytes(b.dtype) for b in params]
    codes = [str(_DTYPE_CODE.get(b.dtype, 2)) for b in params]

    def sizes(rows) -> str:
        return ", ".join("{" + ", ".join(f"{n}u" for n in row) + "}" for row in rows)

    names = ", ".join(f'"{f.name}"' for f in funcs)
    sources = ",\n".join(c_string(codegen_opencl(f)) for f in funcs)
    lines = [
        "#define _POSIX_C_SOURCE 199309L",
        "#define CL_TARGET_OPENCL_VERSION 120",
        "#include <CL/cl.h>",
        "#include <math.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        "#include <string.h>",
        "#include <time.h>",
        f"#define NARGS {len(params)}",
        f"#define NIN {n_inputs}",
        f"static const size_t BYTES[] = {{{', '.join(f'{n}u' for n in nbytes)}}};",
        f"static const int DT[] = {{{', '.join(codes)}}};",
        f"static const int IDS[] = {{{', '.join(map(str, ids))}}};",
        f"static const char *const NAMES[] = {{{names}}};",
        f"static const size_t GLOBAL[][3] = {{{sizes(x.global_size for x in launches)}}};",
        f"static const size_t LOCAL[][3] = {{{sizes(x.local_size for x in launches)}}};",
        f"static const char *const SOURCES[] = {{\n{sources}}};",
    ]
    return "\n".join(lines) + HELPERS + _MAIN
