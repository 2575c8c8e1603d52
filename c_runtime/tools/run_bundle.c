/* run_bundle: run a packaged model on .npy inputs (or generated ones), time it, or check it
 * against its selftest.
 * Exit codes: 0 ok, 1 internal error, 2 bad usage/input/bundle, 3 selftest mismatch. */
#define _POSIX_C_SOURCE 200809L

#include "pk_internal.h"
#include "pk_npy.h"
#include "pk_runtime.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { EXIT_INTERNAL = 1, EXIT_BAD_INPUT = 2, EXIT_MISMATCH = 3 };

static const char usage_text[] =
    "usage: run_bundle BUNDLE_DIR [--input NAME=FILE.npy]... [--fill random|zeros] [--seed N]\n"
    "                  [--output-dir DIR] [--top K]\n"
    "                  [--repeat N [--profile] [--profile-json FILE]]\n"
    "                  [--selftest [--rtol R] [--atol A]]\n"
    "\n"
    "Loads BUNDLE_DIR/graph.json and BUNDLE_DIR/params.bin, runs the model once and prints\n"
    "one line per output: 'output I 'NAME': DTYPE[SHAPE] min X max Y mean Z' (NaNs are left\n"
    "out of min, max and mean and counted as 'nan N').\n"
    "\n"
    "  --input NAME=FILE   value of model input NAME, a little-endian .npy (C or Fortran order)\n"
    "                      whose dtype and shape must match the input exactly; given once\n"
    "  --fill random|zeros how inputs without --input are filled (stderr names each one):\n"
    "                      random (default): floats uniform in [-1, 1), integers in [0, 10),\n"
    "                      bools 0 or 1, the same on every machine for one --seed; zeros\n"
    "  --seed N            seed of --fill random, an integer in [0, 2^64) (default 0)\n"
    "  --top K             for each output with one dimension other than 1 (a vector of\n"
    "                      scores), also print its K largest elements as INDEX=VALUE\n"
    "  --output-dir DIR    write each output to DIR/<name>.npy (DIR is created; characters of\n"
    "                      the name outside [A-Za-z0-9._-] become '_')\n"
    "  --repeat N          after the first (warm-up) run, time N more runs; the last line of\n"
    "                      stdout is {\"median_ms\": x, \"min_ms\": y, \"mean_ms\": z, \"repeat\": "
    "N}\n"
    "  --profile           with --repeat: before that line, print a table of the kernels,\n"
    "                      slowest first: the ops fused into each, its calls per run, the\n"
    "                      sum of their median times, its share of all kernels' time, its\n"
    "                      rate (GFLOP/s when it does at least a flop per byte it moves,\n"
    "                      else GB/s; '-' for a bundle whose graph.json has no counts) and\n"
    "                      its device (cpu, opencl, accel); then a total line, and per accel\n"
    "                      kernel a line of what the accelerator did in one run\n"
    "  --profile-json FILE with --repeat: --profile, and write the profile as JSON to FILE\n"
    "                      (whole, through a temporary file beside it; docs/bundle-format.md)\n"
    "  --selftest          take inputs from BUNDLE_DIR/selftest/input_<i>.npy and compare the\n"
    "                      outputs with selftest/output_<i>.npy: floats pass when\n"
    "                      |got - want| <= atol + rtol * |want| (NaN equals NaN), other dtypes\n"
    "                      must be equal; prints the max errors per output, then\n"
    "                      'selftest: PASS' or 'selftest: FAIL'\n"
    "  --rtol R, --atol A  tolerances for --selftest (default: selftest/tolerance.json, else\n"
    "                      rtol 1e-3, atol 1e-5)\n"
    "  --help              this text\n"
    "\n"
    "Exit status: 0 success, 1 internal error (e.g. out of memory), 2 bad usage, bad input,\n"
    "bad bundle or a kernel rejecting its data, 3 selftest mismatch.\n";

typedef struct {
    const char* bundle;
    const char** inputs; /* "NAME=FILE" */
    int num_inputs;
    const char* output_dir;
    long repeat;
    int profile;
    const char* profile_json;
    int selftest;
    double rtol, atol;
    int have_rtol, have_atol;
    int fill_zeros, have_fill;
    uint64_t seed;
    int have_seed;
    long top;
} options;

static int fail(int code, const char* fmt, const char* a, const char* b) {
    fprintf(stderr, "run_bundle: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return code;
}

/* A malloc'ed string: paths are built to their length, so no path is too long for us (the
 * system may still refuse one: ENAMETOOLONG is reported like any other error). */
static char* str_printf(const char* fmt, ...) PK_PRINTF(1, 2);
static char* str_printf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char* out = n < 0 ? NULL : malloc((size_t)n + 1);
    if (out) {
        va_start(ap, fmt);
        vsnprintf(out, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return out;
}

static int status_exit(pk_status s) {
    return s == PK_ERR_NOMEM ? EXIT_INTERNAL : EXIT_BAD_INPUT;
}

static int parse_number(const char* s, double* out) {
    char* end;
    errno = 0;
    *out = strtod(s, &end);
    return *s && !*end && !errno && isfinite(*out) && *out >= 0;
}

/* A decimal integer in [lo, hi] (no sign, no spaces). */
static int parse_integer(const char* s, unsigned long long lo, unsigned long long hi,
                         unsigned long long* out) {
    char* end;
    if (*s < '0' || *s > '9') return 0;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return !*end && !errno && *out >= lo && *out <= hi;
}

/* --fill, --seed, --top: -2 when A is one of them and V is valid, -1 when A is none of
 * them, else an exit code. */
static int parse_fill_option(const char* a, const char* v, options* o) {
    unsigned long long n;
    if (!strcmp(a, "--fill")) {
        if (strcmp(v, "random") && strcmp(v, "zeros"))
            return fail(EXIT_BAD_INPUT, "--fill wants 'random' or 'zeros', got '%s'%s", v, "");
        o->fill_zeros = !strcmp(v, "zeros"), o->have_fill = 1;
    } else if (!strcmp(a, "--seed")) {
        if (!parse_integer(v, 0, UINT64_MAX, &n))
            return fail(EXIT_BAD_INPUT, "--seed wants an integer in [0, 2^64), got '%s'%s", v, "");
        o->seed = n, o->have_seed = 1;
    } else if (!strcmp(a, "--top")) {
        if (!parse_integer(v, 1, 1000000000, &n))
            return fail(EXIT_BAD_INPUT, "--top wants an integer >= 1, got '%s'%s", v, "");
        o->top = (long)n;
    } else {
        return -1;
    }
    return -2;
}

/* Returns -1 on success, else an exit code. */
static int parse_args(int argc, char** argv, options* o) {
    o->inputs = calloc((size_t)argc, sizeof *o->inputs);
    if (!o->inputs) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(a, "--selftest")) {
            o->selftest = 1;
        } else if (!strcmp(a, "--profile")) {
            o->profile = 1;
        } else if (!strcmp(a, "--input") || !strcmp(a, "--output-dir") || !strcmp(a, "--repeat") ||
                   !strcmp(a, "--rtol") || !strcmp(a, "--atol") || !strcmp(a, "--fill") ||
                   !strcmp(a, "--seed") || !strcmp(a, "--top") || !strcmp(a, "--profile-json")) {
            if (!v) return fail(EXIT_BAD_INPUT, "%s needs a value%s (see --help)", a, "");
            i++;
            int rc = parse_fill_option(a, v, o);
            if (rc >= 0) return rc;
            if (rc == -2) {
                /* a --fill, --seed or --top value, taken */
            } else if (!strcmp(a, "--input")) {
                if (!strchr(v, '='))
                    return fail(EXIT_BAD_INPUT, "--input wants NAME=FILE, got '%s'%s", v, "");
                o->inputs[o->num_inputs++] = v;
            } else if (!strcmp(a, "--output-dir")) {
                o->output_dir = v;
            } else if (!strcmp(a, "--profile-json")) {
                if (!*v)
                    return fail(EXIT_BAD_INPUT, "--profile-json wants a file name%s%s", "", "");
                o->profile_json = v, o->profile = 1;
            } else if (!parse_number(v, &d)) {
                return fail(EXIT_BAD_INPUT, "%s wants a non-negative number, got '%s'", a, v);
            } else if (!strcmp(a, "--repeat")) {
                if (d != floor(d) || d < 1 || d > 1e9)
                    return fail(EXIT_BAD_INPUT, "--repeat wants an integer >= 1, got '%s'%s", v,
                                "");
                o->repeat = (long)d;
            } else if (!strcmp(a, "--rtol")) {
                o->rtol = d, o->have_rtol = 1;
            } else {
                o->atol = d, o->have_atol = 1;
            }
        } else if (a[0] == '-' || o->bundle) {
            return fail(EXIT_BAD_INPUT, "unexpected argument '%s'%s (see --help)", a, "");
        } else {
            o->bundle = a;
        }
    }
    if (!o->bundle) return fail(EXIT_BAD_INPUT, "missing BUNDLE_DIR%s%s (see --help)", "", "");
    if (o->profile && !o->repeat)
        return fail(EXIT_BAD_INPUT, "%s needs --repeat N%s",
                    o->profile_json ? "--profile-json" : "--profile", "");
    if (o->selftest && (o->num_inputs || o->have_fill || o->have_seed))
        return fail(EXIT_BAD_INPUT,
                    "--selftest takes its inputs from selftest/%s%s (no --input, "
                    "--fill or --seed)",
                    "", "");
    return -1;
}

/* "float32[1, 3, 8, 8]" into buf. */
static const char* describe(char* buf, size_t cap, pk_dtype dt, int32_t ndim,
                            const int64_t* shape) {
    int n = snprintf(buf, cap, "%s[", pk_dtype_name(dt));
    for (int32_t i = 0; i < ndim && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
    return buf;
}

static int same_type(const pk_tensor_info* t, const pk_npy* a) {
    if (t->dtype != a->dtype || t->ndim != a->ndim) return 0;
    for (int32_t i = 0; i < t->ndim; i++)
        if (t->shape[i] != a->shape[i]) return 0;
    return 1;
}

/* Loads FILE into graph input i after checking dtype and shape. */
static int set_input_file(pk_graph* g, int32_t i, const char* path) {
    pk_tensor_info info;
    pk_npy a;
    void* buf;
    char want[512], got[512];
    pk_graph_input_info(g, i, &info);
    pk_status s = pk_npy_load(path, &a, &buf);
    if (s) return fail(status_exit(s), "input '%s': %s", info.name, pk_last_error());
    if (!same_type(&info, &a)) {
        fprintf(stderr, "run_bundle: input '%s' (%s): expected %s, got %s\n", info.name, path,
                describe(want, sizeof want, info.dtype, info.ndim, info.shape),
                describe(got, sizeof got, a.dtype, a.ndim, a.shape));
        pk_npy_free(buf);
        return EXIT_BAD_INPUT;
    }
    s = pk_graph_set_input(g, i, a.data, a.bytes);
    pk_npy_free(buf);
    return s ? fail(EXIT_INTERNAL, "%s%s", pk_last_error(), "") : -1;
}

/* splitmix64: a small generator that gives the same numbers on every machine. */
static uint64_t next_random(uint64_t* state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Element k of a filled input: floats in [-1, 1) (24 random bits, exact in float32),
 * integers in [0, 10) (valid as small indices or ids), bools 0 or 1. */
static void put_random(void* p, pk_dtype dt, size_t k, uint64_t r) {
    double f = (double)(r >> 40) / 8388608.0 - 1.0;
    int small = (int)((r >> 32) % 10);
    switch (dt) {
    case PK_FLOAT32:
        ((float*)p)[k] = (float)f;
        break;
    case PK_FLOAT64:
        ((double*)p)[k] = f;
        break;
    case PK_INT8:
        ((int8_t*)p)[k] = (int8_t)small;
        break;
    case PK_INT16:
        ((int16_t*)p)[k] = (int16_t)small;
        break;
    case PK_INT32:
        ((int32_t*)p)[k] = small;
        break;
    case PK_INT64:
        ((int64_t*)p)[k] = small;
        break;
    case PK_UINT8:
        ((uint8_t*)p)[k] = (uint8_t)small;
        break;
    case PK_UINT16:
        ((uint16_t*)p)[k] = (uint16_t)small;
        break;
    case PK_UINT32:
        ((uint32_t*)p)[k] = (uint32_t)small;
        break;
    case PK_UINT64:
        ((uint64_t*)p)[k] = (uint64_t)small;
        break;
    case PK_BOOL:
        ((uint8_t*)p)[k] = (uint8_t)(r >> 63);
        break;
    }
}

/* Fills graph input i (one that has no --input) with zeros or random values. Each input has
 * its own stream, from the seed and its index: giving a file for one input leaves the values
 * of the others as they were. */
static int fill_input(pk_graph* g, int32_t i, const options* o) {
    pk_tensor_info info;
    char what[512];
    pk_graph_input_info(g, i, &info);
    size_t esize = pk_dtype_by_code((int32_t)info.dtype)->size, n = info.bytes / esize;
    void* data = calloc(info.bytes + 1, 1);
    if (!data) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    uint64_t state = o->seed ^ ((uint64_t)i * 0xD1B54A32D192ED03ull);
    for (size_t k = 0; !o->fill_zeros && k < n; k++)
        put_random(data, info.dtype, k, next_random(&state));
    describe(what, sizeof what, info.dtype, info.ndim, info.shape);
    if (o->fill_zeros)
        fprintf(stderr, "run_bundle: input '%s' %s: no --input, filled with zeros\n", info.name,
                what);
    else
        fprintf(stderr,
                "run_bundle: input '%s' %s: no --input, filled with random values (seed %llu)\n",
                info.name, what, (unsigned long long)o->seed);
    pk_status s = pk_graph_set_input(g, i, data, info.bytes);
    free(data);
    return s ? fail(EXIT_INTERNAL, "%s%s", pk_last_error(), "") : -1;
}

static int set_inputs(pk_graph* g, const options* o) {
    int32_t n = pk_graph_num_inputs(g);
    char* given = calloc((size_t)n + 1, 1);
    int rc = -1;
    if (!given) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    for (int32_t i = 0; i < (o->selftest ? n : o->num_inputs) && rc < 0; i++) {
        int32_t k = i;
        char *path, *name = NULL;
        if (o->selftest) {
            path = str_printf("%s/selftest/input_%d.npy", o->bundle, (int)i);
        } else {
            const char* eq = strchr(o->inputs[i], '=');
            name = str_printf("%.*s", (int)(eq - o->inputs[i]), o->inputs[i]);
            path = str_printf("%s", eq + 1);
            k = name ? pk_graph_input_index(g, name) : 0;
            if (name && k < 0)
                rc = fail(EXIT_BAD_INPUT, "the model has no input '%s'%s", name, "");
            else if (name && given[k])
                rc = fail(EXIT_BAD_INPUT, "--input %s given twice%s", name, "");
        }
        if (!path || (!o->selftest && !name)) rc = fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
        if (rc < 0) rc = set_input_file(g, k, path);
        if (rc < 0) given[k] = 1;
        free(path);
        free(name);
    }
    for (int32_t i = 0; i < n && rc < 0; i++) {
        pk_tensor_info info;
        pk_graph_input_info(g, i, &info);
        if (!given[i]) rc = fill_input(g, i, o);
    }
    free(given);
    return rc;
}

/* mkdir -p; returns 0 or an errno value. */
static int make_dirs(const char* dir) {
    char* path = str_printf("%s", dir);
    if (!path) return ENOMEM;
    int err = 0;
    for (char* p = path + 1; !err && p[-1]; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) err = errno;
        *p = c;
    }
    free(path);
    struct stat st;
    if (!err && stat(dir, &st) != 0) err = errno;
    if (!err && !S_ISDIR(st.st_mode)) err = ENOTDIR;
    return err;
}

/* Fetches output i into a malloc'ed buffer (at least 1 byte, so 0-byte outputs work). */
static void* fetch_output(pk_graph* g, int32_t i, pk_tensor_info* info) {
    pk_graph_output_info(g, i, info);
    void* data = malloc(info->bytes + 1);
    if (data && pk_graph_get_output(g, i, data, info->bytes) != PK_OK) {
        free(data);
        data = NULL;
    }
    return data;
}

/* Where output `name` goes: DIR/<name>.npy, characters outside [A-Za-z0-9._-] as '_'. */
static char* output_path(const char* dir, const char* name) {
    char* path = str_printf("%s/%s.npy", dir, name);
    for (char* c = path ? path + strlen(dir) + 1 : NULL; c && c[4]; c++)
        if (!((strchr("._-", *c) && *c) || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9')))
            *c = '_';
    return path;
}

/* A directory or file that cannot be created is the caller's doing: exit 2. */
static int write_outputs(pk_graph* g, const char* dir) {
    int err = make_dirs(dir);
    if (err) return fail(EXIT_BAD_INPUT, "cannot create directory '%s': %s", dir, strerror(err));
    for (int32_t i = 0; i < pk_graph_num_outputs(g); i++) {
        pk_tensor_info info;
        void* data = fetch_output(g, i, &info);
        char* path = data ? output_path(dir, info.name) : NULL;
        if (!path) {
            free(data);
            return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
        }
        pk_status s = pk_npy_save(path, info.dtype, info.ndim, info.shape, data, info.bytes);
        free(data);
        free(path);
        if (s) return fail(EXIT_BAD_INPUT, "%s%s", pk_last_error(), "");
    }
    return -1;
}

static double element(const void* p, pk_dtype dt, size_t i) {
    switch (dt) {
    case PK_FLOAT32:
        return ((const float*)p)[i];
    case PK_FLOAT64:
        return ((const double*)p)[i];
    case PK_INT8:
        return ((const int8_t*)p)[i];
    case PK_INT16:
        return ((const int16_t*)p)[i];
    case PK_INT32:
        return ((const int32_t*)p)[i];
    case PK_INT64:
        return (double)((const int64_t*)p)[i];
    case PK_UINT8:
    case PK_BOOL:
        return ((const uint8_t*)p)[i];
    case PK_UINT16:
        return ((const uint16_t*)p)[i];
    case PK_UINT32:
        return ((const uint32_t*)p)[i];
    case PK_UINT64:
        return (double)((const uint64_t*)p)[i];
    }
    return 0;
}

/* Integers exactly (up to 2^53), floats to 6 significant digits. */
static void print_value(pk_dtype dt, double v) {
    printf(pk_dtype_by_code((int32_t)dt)->is_float || isnan(v) ? "%.6g" : "%.17g", v);
}

/* The one dimension other than 1, or -1 when the output is not a vector of scores. */
static int vector_dim(const pk_tensor_info* info) {
    int dim = -1;
    for (int32_t d = 0; d < info->ndim; d++) {
        if (info->shape[d] == 1) continue;
        if (dim >= 0) return -1;
        dim = (int)d;
    }
    return dim;
}

/* Prints the k largest elements as INDEX=VALUE, largest first (ties: lower index first; NaN
 * below every number). Selection by repeated scans: k is small. */
static int print_top(const pk_tensor_info* info, const void* data, size_t n, long k) {
    char* taken = calloc(n + 1, 1);
    if (!taken) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    printf(" top %ld:", k);
    for (long j = 0; j < k && (size_t)j < n; j++) {
        size_t best = n;
        for (size_t e = 0; e < n; e++) {
            if (taken[e]) continue;
            double x = element(data, info->dtype, e);
            double b = best < n ? element(data, info->dtype, best) : 0;
            if (best == n || (!isnan(x) && (isnan(b) || x > b))) best = e;
        }
        taken[best] = 1;
        printf(" %zu=", best);
        print_value(info->dtype, element(data, info->dtype, best));
    }
    free(taken);
    return -1;
}

/* One line per output: dtype, shape, min, max, mean (NaNs left out and counted), and the
 * top-k elements of a vector of scores when asked. */
static int print_summary(pk_graph* g, long top) {
    for (int32_t i = 0; i < pk_graph_num_outputs(g); i++) {
        pk_tensor_info info;
        char what[512];
        void* data = fetch_output(g, i, &info);
        if (!data) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
        size_t n = info.bytes / pk_dtype_by_code((int32_t)info.dtype)->size, nans = 0;
        double lo = NAN, hi = NAN, sum = 0;
        for (size_t e = 0; e < n; e++) {
            double x = element(data, info.dtype, e);
            if (isnan(x)) {
                nans++;
                continue;
            }
            lo = isnan(lo) || x < lo ? x : lo;
            hi = isnan(hi) || x > hi ? x : hi;
            sum += x;
        }
        printf("output %d '%s': %s min ", (int)i, info.name,
               describe(what, sizeof what, info.dtype, info.ndim, info.shape));
        print_value(info.dtype, lo);
        printf(" max ");
        print_value(info.dtype, hi);
        printf(" mean %.6g", n > nans ? sum / (double)(n - nans) : NAN);
        if (nans) printf(" nan %zu", nans);
        int rc = top && vector_dim(&info) >= 0 && n ? print_top(&info, data, n, top) : -1;
        printf("\n");
        free(data);
        if (rc >= 0) return rc;
    }
    return -1;
}

/* Compares one output with its reference; prints a line; returns 1 if it passes. */
static int compare_output(int32_t i, const pk_tensor_info* info, const void* got,
                          const pk_npy* want, double rtol, double atol) {
    char a[512], b[512];
    if (!same_type(info, want)) {
        printf("output %d '%s': expected %s, got %s: FAIL\n", (int)i, info->name,
               describe(a, sizeof a, want->dtype, want->ndim, want->shape),
               describe(b, sizeof b, info->dtype, info->ndim, info->shape));
        return 0;
    }
    size_t esize = pk_dtype_by_code((int32_t)info->dtype)->size, n = info->bytes / esize, bad = 0;
    int is_float = pk_dtype_by_code((int32_t)info->dtype)->is_float;
    double max_abs = 0, max_rel = 0;
    for (size_t k = 0; k < n; k++) {
        double x = element(got, info->dtype, k), y = element(want->data, info->dtype, k);
        if ((isnan(x) && isnan(y)) || x == y) continue;
        double d = fabs(x - y), rel = y != 0 ? d / fabs(y) : (d > 0 ? INFINITY : 0);
        if (isnan(d)) d = rel = INFINITY;
        max_abs = d > max_abs ? d : max_abs;
        max_rel = rel > max_rel ? rel : max_rel;
        if (is_float ? !(d <= atol + rtol * fabs(y))
                     : memcmp((const char*)got + k * esize, (const char*)want->data + k * esize,
                              esize) != 0)
            bad++;
    }
    printf("output %d '%s': max_abs_err %.6g max_rel_err %.6g mismatches %zu/%zu: %s\n", (int)i,
           info->name, max_abs, max_rel, bad, n, bad ? "FAIL" : "ok");
    return bad == 0;
}

#define MAX_TOLERANCE 1e6

/* One optional field of tolerance.json: a finite number in [0, MAX_TOLERANCE]. */
static int tolerance_field(const pj_doc* d, const char* key, double* out) {
    int32_t t = pj_get(d, 0, key);
    double v;
    if (t < 0) return -1;
    if (!pj_double(d, t, &v) || !isfinite(v) || v < 0 || v > MAX_TOLERANCE) {
        fprintf(stderr, "run_bundle: %s: %s: expected a finite number in [0, %g], got %.*s\n",
                d->what, key, MAX_TOLERANCE,
                (int)(d->toks[t].len + 2 * (d->toks[t].type == PJ_STR)),
                d->src + d->toks[t].start - (d->toks[t].type == PJ_STR));
        return EXIT_BAD_INPUT;
    }
    *out = v;
    return -1;
}

/* selftest/tolerance.json when there is one, then --rtol/--atol. Returns -1 or an exit code. */
static int read_tolerance(const options* o, double* rtol, double* atol) {
    char* path = str_printf("%s/selftest/tolerance.json", o->bundle);
    void* buf = NULL;
    size_t len;
    pj_doc d;
    struct stat st;
    int rc = -1;
    if (!path) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    if (stat(path, &st) == 0 || errno != ENOENT) {
        pk_status s = pk_read_file(path, &buf, &len);
        if (!s) s = pj_parse(&d, buf, len, path);
        if (s) {
            rc = fail(status_exit(s), "%s%s", pk_last_error(), "");
        } else {
            if (d.toks[0].type != PJ_OBJ)
                rc = fail(EXIT_BAD_INPUT, "%s: expected an object {\"rtol\": r, \"atol\": a}%s",
                          path, "");
            if (rc < 0) rc = tolerance_field(&d, "rtol", rtol);
            if (rc < 0) rc = tolerance_field(&d, "atol", atol);
            pj_free(&d);
        }
        pk_aligned_free(buf);
    }
    free(path);
    if (o->have_rtol) *rtol = o->rtol;
    if (o->have_atol) *atol = o->atol;
    return rc;
}

static int selftest(pk_graph* g, const options* o) {
    double rtol = 1e-3, atol = 1e-5;
    int pass = 1;
    int rc = read_tolerance(o, &rtol, &atol);
    if (rc >= 0) return rc;
    printf("selftest: rtol %g atol %g\n", rtol, atol);
    for (int32_t i = 0; i < pk_graph_num_outputs(g); i++) {
        pk_tensor_info info;
        pk_npy want;
        void* buf;
        char* path = str_printf("%s/selftest/output_%d.npy", o->bundle, (int)i);
        if (!path) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
        pk_status s = pk_npy_load(path, &want, &buf);
        free(path);
        if (s) return fail(status_exit(s), "%s%s", pk_last_error(), "");
        void* got = fetch_output(g, i, &info);
        if (!got) {
            pk_npy_free(buf);
            return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
        }
        pass &= compare_output(i, &info, got, &want, rtol, atol);
        free(got);
        pk_npy_free(buf);
    }
    printf("selftest: %s\n", pass ? "PASS" : "FAIL");
    return pass ? -1 : EXIT_MISMATCH;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double median_of(double* t, long n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* ---- the per-kernel profile (--profile, --profile-json) ---- */

/* One generated function: the nodes that call it, summed. flops and bytes are per run, -1
 * when graph.json does not give them for every call (a bundle from before they existed). */
typedef struct {
    const char* func;
    const char* device;
    const char* ops; /* space-separated, or NULL */
    int32_t calls, first_node;
    double ms, flops, bytes;
    int on_accel;
    pk_accel_stats accel; /* accel kernels: one run of all its calls */
} kernel_row;

/* Adds one run's share of node n's accelerator counters (summed over its runs) to `to`. */
static int add_accel_run(const pk_graph* g, int32_t n, pk_accel_stats* to) {
    pk_accel_stats s;
    if (!pk_graph_node_accel_stats(g, n, &s) || !s.runs) return 0;
    uint64_t* t = (uint64_t*)to;
    const uint64_t* v = (const uint64_t*)&s;
    for (size_t k = 1; k < sizeof s / sizeof(uint64_t); k++) /* all but runs */
        t[k] += v[k] / s.runs;
    to->runs = 1;
    return 1;
}

static double add_known(double sum, double v) {
    return sum < 0 || v < 0 ? -1 : sum + v;
}

/* Kernel rows from the per-node times (node_ms: repeat rows, then one scratch row), slowest
 * first; returns how many, or -1 when out of memory. */
static int32_t kernel_rows(const pk_graph* g, double* node_ms, long repeat, kernel_row** out) {
    int32_t nodes = pk_graph_num_nodes(g), count = 0;
    double* col = node_ms + (size_t)repeat * (size_t)nodes;
    kernel_row* rows = calloc((size_t)nodes + 1, sizeof *rows);
    if (!rows) return -1;
    for (int32_t n = 0; n < nodes; n++) {
        const char* func = pk_graph_node_func(g, n);
        if (!func) continue;
        int32_t k = 0;
        while (k < count && strcmp(rows[k].func, func) != 0)
            k++;
        if (k == count) {
            memset(&rows[count], 0, sizeof rows[count]);
            rows[count].func = func, rows[count].device = pk_graph_node_device(g, n);
            rows[count].ops = pk_graph_node_ops(g, n), rows[count++].first_node = n;
        }
        for (long r = 0; r < repeat; r++)
            col[r] = node_ms[(size_t)r * (size_t)nodes + (size_t)n];
        rows[k].calls++;
        rows[k].ms += median_of(col, repeat);
        rows[k].flops = add_known(rows[k].flops, pk_graph_node_flops(g, n));
        rows[k].bytes = add_known(rows[k].bytes, pk_graph_node_bytes(g, n));
        rows[k].on_accel |= add_accel_run(g, n, &rows[k].accel);
    }
    for (int32_t i = 1; i < count; i++) /* insertion sort: stable, slowest first */
        for (int32_t j = i; j > 0 && rows[j].ms > rows[j - 1].ms; j--) {
            kernel_row t = rows[j];
            rows[j] = rows[j - 1], rows[j - 1] = t;
        }
    *out = rows;
    return count;
}

static double rate(double amount, double ms) {
    return amount > 0 && ms > 0 ? amount / (ms * 1e6) : -1; /* per ms -> G per s */
}

/* A kernel doing at least one flop per byte it moves is rated in GFLOP/s (convolutions,
 * matrix products); the rest in GB/s (pooling, elementwise, layout, reductions), where a
 * flop rate would say little. "-" when graph.json gives neither count. */
static void format_rate(char* buf, size_t cap, double flops, double bytes, double ms) {
    int compute = flops > 0 && (bytes <= 0 || flops >= bytes);
    double r = compute ? rate(flops, ms) : rate(bytes, ms);
    if (r < 0)
        snprintf(buf, cap, "%13s", "-");
    else
        snprintf(buf, cap, "%8.2f %-6s", r, compute ? "GFLOP/s" : "GB/s");
}

/* "conv2d_nchwc+add+relu", cut to `width` characters with "..." at the end. */
static void format_ops(char* buf, size_t width, const char* ops) {
    size_t n = 0;
    for (const char* c = ops ? ops : "-"; *c && n < width; c++)
        buf[n++] = *c == ' ' ? '+' : *c;
    buf[n] = 0;
    if (ops && strlen(ops) > width) memcpy(buf + width - 3, "...", 4);
}

#define OPS_WIDTH 28

static void print_profile_table(const kernel_row* rows, int32_t count) {
    int width = 6;
    double total = 0, flops = 0;
    int32_t calls = 0;
    for (int32_t k = 0; k < count; k++) {
        int len = (int)strlen(rows[k].func);
        width = len > width ? len : width;
        total += rows[k].ms;
        flops = add_known(flops, rows[k].flops);
        calls += rows[k].calls;
    }
    printf("%-*s  %-*s  %5s  %9s  %7s  %14s  %s\n", width, "kernel", OPS_WIDTH, "ops fused",
           "calls", "median ms", "% total", "rate", "device");
    for (int32_t k = 0; k < count; k++) {
        char ops[OPS_WIDTH + 1], r[64];
        format_ops(ops, OPS_WIDTH, rows[k].ops);
        format_rate(r, sizeof r, rows[k].flops, rows[k].bytes, rows[k].ms);
        printf("%-*s  %-*s  %5d  %9.4f  %6.1f%%  %14s  %s\n", width, rows[k].func, OPS_WIDTH, ops,
               (int)rows[k].calls, rows[k].ms, total > 0 ? 100 * rows[k].ms / total : 0, r,
               rows[k].device);
    }
    char r[64], label[32];
    format_rate(r, sizeof r, flops, 0, total);
    snprintf(label, sizeof label, "total (%d kernels)", (int)count);
    printf("%-*s  %-*s  %5d  %9.4f  %6.1f%%", width, label, OPS_WIDTH, "", (int)calls, total,
           100.0);
    printf(flops > 0 ? "  %14s\n" : "\n", r); /* the rate of every flop, when known */
    for (int32_t k = 0; k < count; k++) {
        const pk_accel_stats* a = &rows[k].accel;
        if (!rows[k].on_accel) continue;
        printf("accel %s: %llu cycles, gemm %.1f%%, busy/stall load %llu/%llu compute %llu/%llu "
               "store %llu/%llu, %llu bytes loaded, %llu stored\n",
               rows[k].func, (unsigned long long)a->cycles,
               a->cycles ? 100.0 * (double)a->gemm_cycles / (double)a->cycles : 0,
               (unsigned long long)a->busy[0], (unsigned long long)a->stall[0],
               (unsigned long long)a->busy[1], (unsigned long long)a->stall[1],
               (unsigned long long)a->busy[2], (unsigned long long)a->stall[2],
               (unsigned long long)a->load_bytes, (unsigned long long)a->store_bytes);
    }
}

/* An accel kernel's counters for one run, as the profile JSON's "accel" object. */
static void json_accel(FILE* f, const pk_accel_stats* a) {
    static const char* const modules[3] = {"load", "compute", "store"};
    fprintf(f,
            ", \"accel\": {\"cycles\": %llu, \"insns\": %llu, \"gemm_cycles\": %llu, "
            "\"alu_cycles\": %llu, \"macs\": %llu, \"gemm_utilisation\": %.6f, "
            "\"load_bytes\": %llu, \"store_bytes\": %llu",
            (unsigned long long)a->cycles, (unsigned long long)a->insns,
            (unsigned long long)a->gemm_cycles, (unsigned long long)a->alu_cycles,
            (unsigned long long)a->macs, a->cycles ? (double)a->gemm_cycles / (double)a->cycles : 0,
            (unsigned long long)a->load_bytes, (unsigned long long)a->store_bytes);
    for (int m = 0; m < 3; m++)
        fprintf(f, ", \"%s_busy\": %llu, \"%s_stall\": %llu", modules[m],
                (unsigned long long)a->busy[m], modules[m], (unsigned long long)a->stall[m]);
    fputc('}', f);
}

/* The first n bytes of s (all of it when n < 0) as a JSON string. */
static void json_string_n(FILE* f, const char* s, long n) {
    fputc('"', f);
    for (long k = 0; s && s[k] && (n < 0 || k < n); k++) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_string(FILE* f, const char* s) {
    json_string_n(f, s, -1);
}

/* A number, or null for an unknown (negative) one. */
static void json_number(FILE* f, double v) {
    if (v < 0)
        fputs("null", f);
    else
        fprintf(f, "%.9g", v);
}

/* manifest.json's model (its file's stem) and board names, "" when it does not say. */
static void manifest_names(const char* bundle, char* model, char* board, size_t cap) {
    char* path = str_printf("%s/manifest.json", bundle);
    void* buf = NULL;
    size_t len;
    pj_doc d;
    model[0] = board[0] = 0;
    if (path && !pk_read_file(path, &buf, &len) && !pj_parse(&d, buf, len, path)) {
        char* file = pj_strdup(&d, pj_get(&d, pj_get(&d, 0, "model"), "file"));
        char* name = pj_strdup(&d, pj_get(&d, pj_get(&d, 0, "board"), "name"));
        const char* base = file && strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
        const char* dot = base ? strrchr(base, '.') : NULL;
        if (base) snprintf(model, cap, "%.*s", (int)(dot && dot > base ? dot - base : 200), base);
        if (name) snprintf(board, cap, "%s", name);
        free(file);
        free(name);
        pj_free(&d);
    }
    pk_aligned_free(buf);
    free(path);
}

typedef struct {
    double median, min, mean;
    long repeat;
} timing;

static void write_profile_json(FILE* f, const pk_graph* g, const char* bundle, const timing* t,
                               const kernel_row* rows, int32_t count) {
    char model[256], board[256];
    double total = 0;
    for (int32_t k = 0; k < count; k++)
        total += rows[k].ms;
    manifest_names(bundle, model, board, sizeof model);
    fputs("{\"version\": 1, \"bundle\": ", f);
    json_string(f, bundle);
    fputs(", \"model\": ", f);
    json_string(f, model);
    fputs(", \"board\": ", f);
    json_string(f, board);
    fprintf(f, ", \"threads\": %d, \"repeat\": %ld, \"device\": ", pk_parallel_threads(),
            t->repeat);
    json_string(f, pk_graph_device_name(g) ? pk_graph_device_name(g) : "cpu");
    fprintf(f, ",\n \"total\": {\"median_ms\": %.6f, \"min_ms\": %.6f, \"mean_ms\": %.6f},\n",
            t->median, t->min, t->mean);
    fputs(" \"kernels\": [", f);
    for (int32_t k = 0; k < count; k++) {
        const kernel_row* row = &rows[k];
        fprintf(f, "%s\n  {\"func\": ", k ? "," : "");
        json_string(f, row->func);
        fputs(", \"device\": ", f);
        json_string(f, row->device);
        fputs(", \"ops\": [", f);
        for (const char *o = row->ops, *e; o && *o; o = *e ? e + 1 : e) {
            e = strchr(o, ' ') ? strchr(o, ' ') : o + strlen(o);
            fputs(o == row->ops ? "" : ", ", f);
            json_string_n(f, o, (long)(e - o));
        }
        fputs("], \"nodes\": [", f);
        for (int32_t n = row->first_node, seen = 0; seen < row->calls; n++) {
            if (!pk_graph_node_func(g, n) || strcmp(pk_graph_node_func(g, n), row->func)) continue;
            fputs(seen++ ? ", " : "", f);
            json_string(f, pk_graph_node_name(g, n));
        }
        fprintf(f, "], \"calls\": %d, \"median_ms\": %.6f, \"share\": %.6f, \"flops\": ",
                (int)row->calls, row->ms, total > 0 ? row->ms / total : 0);
        json_number(f, row->flops);
        fputs(", \"bytes\": ", f);
        json_number(f, row->bytes);
        fputs(", \"gflops\": ", f);
        json_number(f, rate(row->flops, row->ms));
        fputs(", \"gbps\": ", f);
        json_number(f, rate(row->bytes, row->ms));
        if (row->on_accel) json_accel(f, &row->accel);
        fputc('}', f);
    }
    fputs("\n ]}\n", f);
}

/* --profile-json's file: a temporary beside it, created before the runs (a path that cannot
 * be written fails at once, not after the timing) and renamed over it once written whole. */
typedef struct {
    char* tmp;
    FILE* f;
} json_out;

static int open_json_out(const char* path, json_out* out) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return fail(EXIT_BAD_INPUT, "--profile-json %s: is a directory%s", path, "");
    out->tmp = str_printf("%s.tmp-XXXXXX", path);
    if (!out->tmp) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    int fd = mkstemp(out->tmp);
    if (fd < 0 || !(out->f = fdopen(fd, "w"))) {
        int err = errno;
        if (fd >= 0) close(fd), unlink(out->tmp);
        free(out->tmp);
        out->tmp = NULL;
        return fail(EXIT_BAD_INPUT, "--profile-json %s: cannot write: %s", path, strerror(err));
    }
    fchmod(fd, 0644); /* as a file the user creates, not mkstemp's 0600 */
    return -1;
}

/* Renames the temporary into place (commit), or removes it. Returns -1 or an exit code. */
static int close_json_out(json_out* out, const char* path, int commit) {
    if (!out->tmp) return -1;
    int ok = !ferror(out->f) && fflush(out->f) == 0 && fsync(fileno(out->f)) == 0;
    int err = errno;
    ok = fclose(out->f) == 0 && ok;
    if (commit && ok && rename(out->tmp, path) != 0) ok = 0, err = errno;
    if (!commit || !ok) unlink(out->tmp);
    free(out->tmp);
    out->tmp = NULL;
    if (commit && !ok)
        return fail(EXIT_BAD_INPUT, "--profile-json %s: cannot write: %s", path, strerror(err));
    return -1;
}

static int report_profile(const pk_graph* g, const options* o, double* node_ms, const timing* t,
                          json_out* out) {
    kernel_row* rows;
    int32_t count = kernel_rows(g, node_ms, o->repeat, &rows);
    if (count < 0) return fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    print_profile_table(rows, count);
    if (out->tmp) write_profile_json(out->f, g, o->bundle, t, rows, count);
    free(rows);
    return close_json_out(out, o->profile_json, 1);
}

static int time_runs(pk_graph* g, const options* o, json_out* out) {
    long repeat = o->repeat;
    size_t nodes = (size_t)pk_graph_num_nodes(g);
    double *t = malloc((size_t)repeat * sizeof *t), sum = 0;
    /* repeat rows of per-node times, plus one scratch row for the medians */
    double* node_ms = o->profile ? calloc((size_t)repeat * (nodes + 1), sizeof *t) : NULL;
    int rc = -1;
    if (!t || (o->profile && !node_ms)) rc = fail(EXIT_INTERNAL, "out of memory%s%s", "", "");
    for (long i = 0; i < repeat && rc < 0; i++) {
        double start = now_ms();
        pk_status s = o->profile ? pk_graph_run_profiled(g, now_ms, node_ms + (size_t)i * nodes)
                                 : pk_graph_run(g);
        t[i] = now_ms() - start;
        sum += t[i];
        if (s) rc = fail(status_exit(s), "%s%s", pk_last_error(), "");
    }
    if (rc < 0) {
        timing tm = {0, 0, sum / (double)repeat, repeat};
        tm.median = median_of(t, repeat), tm.min = t[0];
        if (o->profile) rc = report_profile(g, o, node_ms, &tm, out);
        printf("{\"median_ms\": %.6f, \"min_ms\": %.6f, \"mean_ms\": %.6f, \"repeat\": %ld}\n",
               tm.median, tm.min, tm.mean, repeat);
    }
    free(t);
    free(node_ms);
    return rc;
}

static int uses_accel(const pk_graph* g) {
    for (int32_t n = 0; n < pk_graph_num_nodes(g); n++)
        if (pk_graph_node_device(g, n) && !strcmp(pk_graph_node_device(g, n), "accel")) return 1;
    return 0;
}

static int run(const options* o) {
    pk_graph* g;
    json_out out = {0};
    int rc = o->profile_json ? open_json_out(o->profile_json, &out) : -1;
    if (rc >= 0) return rc;
    pk_status s = pk_graph_load_dir(o->bundle, &g);
    if (s) {
        close_json_out(&out, o->profile_json, 0);
        return fail(status_exit(s), "cannot load bundle '%s': %s", o->bundle, pk_last_error());
    }
    if (pk_graph_device_name(g))
        fprintf(stderr, uses_accel(g) ? "accel: %s\n" : "opencl device: %s\n",
                pk_graph_device_name(g));
    rc = set_inputs(g, o);
    if (rc < 0 && (s = pk_graph_run(g)) != PK_OK)
        rc = fail(s == PK_ERR_KERNEL ? EXIT_BAD_INPUT : EXIT_INTERNAL, "%s%s", pk_last_error(), "");
    if (rc < 0 && o->output_dir) rc = write_outputs(g, o->output_dir);
    if (rc < 0 && !o->selftest) rc = print_summary(g, o->top);
    int mismatch = 0;
    if (rc < 0 && o->selftest) {
        rc = selftest(g, o);
        if (rc == EXIT_MISMATCH) mismatch = 1, rc = -1;
    }
    if (rc < 0 && o->repeat > 0) rc = time_runs(g, o, &out);
    close_json_out(&out, o->profile_json, 0); /* not written: any failure above */
    pk_graph_destroy(g);
    fflush(stdout);
    return rc >= 0 ? rc : mismatch ? EXIT_MISMATCH : 0;
}

int main(int argc, char** argv) {
    options o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc < 0) rc = run(&o);
    free(o.inputs);
    return rc;
}
