/* Aligned allocation without posix_memalign/aligned_alloc (not in C99): over-allocate and
 * keep the original pointer just before the aligned block; blocks of 2 MiB or more on huge
 * pages where the system has them (pk_huge_map, pk_scratch.c). Reading files: on POSIX
 * systems only regular files (a FIFO would block, a directory has no size). */
#if (defined(__unix__) || defined(__APPLE__)) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "pk_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(_POSIX_C_SOURCE)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#define PK_POSIX_FILES 1
#endif

void* pk_aligned_alloc(size_t bytes) {
    void* huge = pk_huge_map(bytes); /* zeroed, as a fresh mapping is */
    if (huge) return huge;
    size_t head = 2 * sizeof(uintptr_t); /* pk_huge_tag's two words */
    size_t total = bytes + PK_ALIGN + head;
    if (total < bytes) return NULL;
    unsigned char* raw = calloc(1, total);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + head) + PK_ALIGN - 1) & ~(uintptr_t)(PK_ALIGN - 1);
    pk_huge_tag((void*)p, raw, 0);
    return (void*)p;
}

void pk_aligned_free(void* p) {
    if (!p || pk_huge_unmap(p)) return;
    uintptr_t raw;
    memcpy(&raw, (unsigned char*)p - 2 * sizeof raw, sizeof raw);
    free((void*)raw);
}

const char* pk_short_path(const char* path) {
    size_t n = strlen(path);
    return n > 200 ? path + n - 200 : path;
}

#if PK_POSIX_FILES
static pk_status not_regular(const char* path, mode_t mode) {
    return pk_fail(PK_ERR_IO, "%s: not a regular file (a %s)", pk_short_path(path),
                   S_ISDIR(mode)    ? "directory"
                   : S_ISFIFO(mode) ? "FIFO"
                   : S_ISSOCK(mode) ? "socket"
                                    : "device");
}

pk_status pk_check_regular_file(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0)
        return pk_fail(PK_ERR_IO, "%s: cannot open (%s)", pk_short_path(path), strerror(errno));
    return S_ISREG(st.st_mode) ? PK_OK : not_regular(path, st.st_mode);
}

/* Opened non-blocking, so a FIFO swapped in after a stat cannot hang us; fstat decides. */
pk_status pk_read_file(const char* path, void** data, size_t* len) {
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return pk_fail(PK_ERR_IO, "%s: cannot open (%s)", pk_short_path(path), strerror(errno));
    pk_status s = PK_OK;
    if (fstat(fd, &st) != 0)
        s = pk_fail(PK_ERR_IO, "%s: cannot stat (%s)", pk_short_path(path), strerror(errno));
    else if (!S_ISREG(st.st_mode))
        s = not_regular(path, st.st_mode);
    else if (st.st_size < 0 || (uint64_t)st.st_size >= SIZE_MAX / 2)
        s = pk_fail(PK_ERR_IO, "%s: file too large", pk_short_path(path));
    if (s) {
        close(fd);
        return s;
    }
    size_t size = (size_t)st.st_size, got = 0;
    unsigned char* buf = pk_aligned_alloc(size + 1);
    if (!buf) {
        close(fd);
        return pk_fail(PK_ERR_NOMEM, "%s: cannot allocate %zu bytes", pk_short_path(path), size);
    }
    while (got < size) {
        ssize_t n = read(fd, buf + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got != size) {
        pk_aligned_free(buf);
        return pk_fail(PK_ERR_IO, "%s: short read (%zu of %zu bytes)", pk_short_path(path), got,
                       size);
    }
    buf[size] = 0;
    *data = buf;
    *len = size;
    return PK_OK;
}
#else
pk_status pk_check_regular_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return pk_fail(PK_ERR_IO, "%s: cannot open", pk_short_path(path));
    fclose(f);
    return PK_OK;
}

pk_status pk_read_file(const char* path, void** data, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return pk_fail(PK_ERR_IO, "%s: cannot open", pk_short_path(path));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return pk_fail(PK_ERR_IO, "%s: cannot determine size", pk_short_path(path));
    }
    unsigned char* buf = pk_aligned_alloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return pk_fail(PK_ERR_NOMEM, "%s: cannot allocate %ld bytes", pk_short_path(path), size);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        pk_aligned_free(buf);
        return pk_fail(PK_ERR_IO, "%s: short read (%zu of %ld bytes)", pk_short_path(path), got,
                       size);
    }
    buf[size] = 0;
    *data = buf;
    *len = (size_t)size;
    return PK_OK;
}
#endif
