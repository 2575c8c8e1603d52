/* Reading files: only regular files are read (a FIFO would block, a directory has no size),
 * paths of any length fail cleanly, and .npy data whose header length leaves it misaligned
 * is aligned for its dtype on load. POSIX only (mkfifo); runs under ASAN+UBSAN. */
#define _POSIX_C_SOURCE 200809L

#include "pk_internal.h"
#include "pk_npy.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/pk_test_files_XXXXXX";

static char* in_dir(const char* name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static void write_file(const char* path, const void* data, size_t len) {
    FILE* f = fopen(path, "wb");
    CHECK(f && fwrite(data, 1, len, f) == len);
    if (f) fclose(f);
}

/* A FIFO and a directory given where a file is wanted: refused before any read. */
static void test_not_regular(void) {
    pk_npy a;
    void* buf = NULL;
    size_t len;
    CHECK(mkfifo(in_dir("fifo.npy"), 0600) == 0);
    CHECK(mkdir(in_dir("dir.npy"), 0700) == 0);
    CHECK(pk_npy_load(in_dir("fifo.npy"), &a, &buf) == PK_ERR_IO && !buf);
    CHECK_MSG(strstr(pk_last_error(), "fifo.npy: not a regular file (a FIFO)"), pk_last_error());
    CHECK(pk_npy_load(in_dir("dir.npy"), &a, &buf) == PK_ERR_IO && !buf);
    CHECK_MSG(strstr(pk_last_error(), "dir.npy: not a regular file (a directory)"),
              pk_last_error());
    CHECK(pk_read_file(in_dir("fifo.npy"), &buf, &len) == PK_ERR_IO);
    CHECK(pk_check_regular_file(in_dir("dir.npy")) == PK_ERR_IO);
    CHECK(pk_check_regular_file(in_dir("missing")) == PK_ERR_IO);
    CHECK_MSG(strstr(pk_last_error(), "missing: cannot open"), pk_last_error());

    /* A bundle whose graph.json is a FIFO, then whose params.bin is a directory. */
    pk_graph* g = NULL;
    CHECK(mkdir(in_dir("bundle"), 0700) == 0);
    CHECK(mkfifo(in_dir("bundle/graph.json"), 0600) == 0);
    CHECK(pk_graph_load_dir(in_dir("bundle"), &g) == PK_ERR_IO && !g);
    CHECK_MSG(strstr(pk_last_error(), "graph.json: not a regular file (a FIFO)"), pk_last_error());
    unlink(in_dir("bundle/graph.json"));
    write_file(in_dir("bundle/graph.json"), "{}", 2);
    CHECK(mkdir(in_dir("bundle/params.bin"), 0700) == 0);
    CHECK(pk_graph_load_dir(in_dir("bundle"), &g) == PK_ERR_IO && !g);
    CHECK_MSG(strstr(pk_last_error(), "params.bin: not a regular file (a directory)"),
              pk_last_error());
    rmdir(in_dir("bundle/params.bin"));
    unlink(in_dir("bundle/graph.json"));
    rmdir(in_dir("bundle"));
    unlink(in_dir("fifo.npy"));
    rmdir(in_dir("dir.npy"));
}

/* Paths longer than PATH_MAX: a clean PK_ERR_IO naming the system's reason. */
static void test_long_paths(void) {
    size_t n = 5000;
    char* path = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        path[i] = i % 100 == 99 ? '/' : 'd';
    path[n] = 0;
    pk_graph* g = NULL;
    CHECK(pk_graph_load_dir(path, &g) == PK_ERR_IO && !g);
    CHECK_MSG(strstr(pk_last_error(), "File name too long"), pk_last_error());
    const int64_t shape[1] = {1};
    const float x = 1;
    CHECK(pk_npy_save(path, PK_FLOAT32, 1, shape, &x, sizeof x) == PK_ERR_IO);
    CHECK_MSG(strstr(pk_last_error(), "cannot create (File name too long)"), pk_last_error());
    free(path);
}

/* Header lengths 1 to 16 past numpy's padding put the data at every offset mod 16; the
 * loaded data must be 64-aligned and hold the same values. */
static void test_misaligned_npy(void) {
    const char header[] = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
    const double want[3] = {1.5, -2.25, 1e300};
    for (size_t extra = 0; extra < 16; extra++) {
        unsigned char img[256];
        size_t hlen = sizeof header - 1 + extra + 1;
        memcpy(img, "\x93NUMPY\x01\x00", 8);
        img[8] = (unsigned char)hlen, img[9] = 0;
        memcpy(img + 10, header, sizeof header - 1);
        memset(img + 10 + sizeof header - 1, ' ', extra);
        img[10 + hlen - 1] = '\n';
        memcpy(img + 10 + hlen, want, sizeof want);
        write_file(in_dir("x.npy"), img, 10 + hlen + sizeof want);
        pk_npy a;
        void* buf = NULL;
        CHECK_MSG(pk_npy_load(in_dir("x.npy"), &a, &buf) == PK_OK, pk_last_error());
        if (!buf) continue;
        CHECK((uintptr_t)a.data % 64 == 0 && a.bytes == sizeof want);
        const double* d = a.data; /* UBSAN checks this load's alignment */
        CHECK(d[0] == want[0] && d[1] == want[1] && d[2] == want[2]);
        pk_npy_free(buf);
    }
    unlink(in_dir("x.npy"));
}

/* A Fortran-order [2, 3, 2] array is loaded in C order: element (i, j, k) sits at
 * i + 2j + 6k in the file and at 6i + 2j + k once loaded. */
static void test_fortran_npy(void) {
    const char header[] = "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 2), }";
    int32_t file[12], want[12];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++)
                file[i + 2 * j + 6 * k] = want[6 * i + 2 * j + k] = 100 * i + 10 * j + k;
    unsigned char img[256];
    size_t hlen = 118; /* header, spaces and the newline: data at 128 */
    memcpy(img, "\x93NUMPY\x01\x00", 8);
    img[8] = (unsigned char)hlen, img[9] = 0;
    memset(img + 10, ' ', hlen);
    memcpy(img + 10, header, sizeof header - 1);
    img[10 + hlen - 1] = '\n';
    memcpy(img + 10 + hlen, file, sizeof file);
    write_file(in_dir("f.npy"), img, 10 + hlen + sizeof file);
    pk_npy a;
    void* buf = NULL;
    CHECK_MSG(pk_npy_load(in_dir("f.npy"), &a, &buf) == PK_OK, pk_last_error());
    if (buf) {
        CHECK(!a.fortran_order && a.ndim == 3 && a.bytes == sizeof want);
        CHECK((uintptr_t)a.data % 64 == 0 && memcmp(a.data, want, sizeof want) == 0);
        pk_npy_free(buf);
    }
    unlink(in_dir("f.npy"));
}

/* Blocks of 2 MiB and more on their own mappings, 64 bytes past a 2 MiB boundary (Linux:
 * advised as huge pages); smaller ones from the heap. Both 64-aligned and zeroed, and a
 * file that large reads back whole into one. */
static void test_large_blocks(void) {
    size_t sizes[] = {100, ((size_t)2 << 20) - 1, (size_t)2 << 20, ((size_t)9 << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        unsigned char* p = pk_aligned_alloc(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK((uintptr_t)p % PK_ALIGN == 0);
        size_t nonzero = 0;
        for (size_t i = 0; i < n; i++)
            nonzero += p[i] != 0;
        CHECK(nonzero == 0);
#if defined(__linux__)
        if (n >= ((size_t)2 << 20)) CHECK(((uintptr_t)p - 64) % ((size_t)2 << 20) == 0);
#endif
        memset(p, 0xA5, n);
        pk_aligned_free(p);
    }
    size_t len = ((size_t)3 << 20) + 17;
    unsigned char* data = malloc(len);
    CHECK(data != NULL);
    if (!data) return;
    for (size_t i = 0; i < len; i++)
        data[i] = (unsigned char)(i * 7u + 1);
    write_file(in_dir("large.bin"), data, len);
    void* buf = NULL;
    size_t got = 0;
    CHECK(pk_read_file(in_dir("large.bin"), &buf, &got) == PK_OK);
    CHECK(got == len && buf && memcmp(buf, data, len) == 0);
    CHECK(buf && ((unsigned char*)buf)[len] == 0); /* the spare NUL */
    pk_aligned_free(buf);
    free(data);
    unlink(in_dir("large.bin"));
}

int main(void) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_not_regular();
    test_long_paths();
    test_misaligned_npy();
    test_fortran_npy();
    test_large_blocks();
    rmdir(dir);
    return test_report("test_files");
}
