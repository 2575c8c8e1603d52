/* .npy reader/writer tests: round trips, headers as numpy writes them, rejections with
 * messages, and truncated / bit-flipped images that must fail cleanly (ASAN+UBSAN). */
#include "pk_internal.h"
#include "pk_npy.h"
#include "test_util.h"

#include <stdlib.h>

/* Builds an .npy image from a header text (padded as numpy does) and `bytes` data bytes. */
static size_t make_npy(unsigned char* out, int version, const char* header, size_t bytes) {
    size_t pre = version == 1 ? 10 : 12, n = strlen(header);
    size_t total = (pre + n + 1 + 63) / 64 * 64, hlen = total - pre;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)version;
    out[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        out[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(out + pre, header, n);
    memset(out + pre + n, ' ', hlen - n - 1);
    out[total - 1] = '\n';
    for (size_t i = 0; i < bytes; i++)
        out[total + i] = (unsigned char)i;
    return total + bytes;
}

typedef struct {
    int version;
    const char* header;
    size_t bytes;
    pk_dtype dtype;
    int32_t ndim;
    int64_t dim0;
} good_case;

static const good_case good[] = {
    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, PK_FLOAT32, 2, 2},
    {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", 40, PK_FLOAT64, 1, 5},
    {1, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8, PK_INT64, 0, 0},
    {1, "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 7), }", 0, PK_INT32, 2, 0},
    {1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,), }", 3, PK_INT8, 1, 3},
    {1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}", 3, PK_UINT8, 1, 3},
    {2, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", 2, PK_BOOL, 1, 2},
    {3, "{\"descr\": \"<u2\", \"fortran_order\": False, \"shape\": (1,)}", 2, PK_UINT16, 1, 1},
    {1, "{'shape': (1, 1), 'fortran_order': False, 'descr': '<u8'}", 8, PK_UINT64, 2, 1},
};

typedef struct {
    const char* header;
    size_t bytes;
    const char* message;
} bad_case;

static const bad_case bad[] = {
    {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8, "value for 'fortran_order'"},
    {"{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, "big-endian"},
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, "unsupported npy dtype"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9, "data has 9 bytes"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 7, "data has 7 bytes"},
    {"{'descr': '<f4', 'shape': (2,), }", 8, "lacks"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, "bad npy header value"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8,
     "bad npy header value"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 8,
     "too large"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, "unknown npy header"},
    {"['descr']", 8, "not a dict"},
};

static void test_parse_cases(void) {
    unsigned char buf[512];
    pk_npy a;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        size_t len = make_npy(buf, good[i].version, good[i].header, good[i].bytes);
        pk_status s = pk_npy_parse(buf, len, "good", &a);
        CHECK_MSG(s == PK_OK, pk_last_error());
        CHECK_MSG(a.dtype == good[i].dtype && a.ndim == good[i].ndim && a.bytes == good[i].bytes,
                  good[i].header);
        CHECK(a.ndim == 0 || a.shape[0] == good[i].dim0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t len = make_npy(buf, 1, bad[i].header, bad[i].bytes);
        pk_status s = pk_npy_parse(buf, len, "bad", &a);
        int okay = s == PK_ERR_FORMAT && strstr(pk_last_error(), bad[i].message);
        CHECK_MSG(okay, pk_last_error());
    }
    CHECK(pk_npy_parse("\x93NUMPY\x04\x00", 10, "v4", &a) == PK_ERR_FORMAT);
    CHECK(pk_npy_parse("hello", 5, "x", &a) == PK_ERR_FORMAT);
}

static void test_round_trip(void) {
    const char* path = "test_npy_round_trip.npy";
    int64_t shape[3] = {2, 1, 3};
    double data[6] = {1, -2, 3.5, 0, 1e300, -0.0};
    CHECK(pk_npy_save(path, PK_FLOAT64, 3, shape, data, sizeof data) == PK_OK);
    pk_npy a;
    void* buf;
    CHECK(pk_npy_load(path, &a, &buf) == PK_OK);
    CHECK(a.dtype == PK_FLOAT64 && a.ndim == 3 && a.shape[0] == 2 && a.shape[2] == 3);
    CHECK(a.bytes == sizeof data && memcmp(a.data, data, sizeof data) == 0);
    CHECK(((uintptr_t)a.data % 64) == 0); /* header padded to 64 as numpy does */
    pk_npy_free(buf);
    int64_t none = 0;
    CHECK(pk_npy_save(path, PK_BOOL, 0, &none, "\x01", 1) == PK_OK);
    CHECK(pk_npy_load(path, &a, &buf) == PK_OK && a.ndim == 0 && a.dtype == PK_BOOL);
    pk_npy_free(buf);
    remove(path);
    CHECK(pk_npy_load("does/not/exist.npy", &a, &buf) == PK_ERR_IO);
}

static void test_fuzz(void) {
    unsigned char ref[256], buf[256];
    size_t len = make_npy(ref, 1, good[0].header, good[0].bytes);
    pk_npy a;
    for (size_t n = 0; n < len; n++) {
        unsigned char* copy = malloc(n + 1); /* exact size: ASAN sees reads past n */
        memcpy(copy, ref, n);
        CHECK(pk_npy_parse(copy, n, "truncated", &a) == PK_ERR_FORMAT);
        free(copy);
    }
    test_rng = 777;
    int accepted = 0;
    for (int iter = 0; iter < 50000; iter++) {
        memcpy(buf, ref, len);
        for (int k = 1 + (int)(test_rand() % 4); k > 0; k--)
            buf[test_rand() % len] ^= (unsigned char)(1u << (test_rand() % 8));
        unsigned char* copy = malloc(len);
        memcpy(copy, buf, len);
        if (pk_npy_parse(copy, len, "flipped", &a) == PK_OK) {
            accepted++;
            CHECK((const unsigned char*)a.data + a.bytes == copy + len);
        }
        free(copy);
    }
    printf("npy fuzz: %d/50000 flipped images accepted\n", accepted);
}

int main(void) {
    test_parse_cases();
    test_round_trip();
    test_fuzz();
    return test_report("test_npy");
}
