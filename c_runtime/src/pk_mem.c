/* Aligned allocation without posix_memalign/aligned_alloc (not in C99): over-allocate and
 * keep the original pointer just before the aligned block. */
#include "pk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void* pk_aligned_alloc(size_t bytes) {
    size_t total = bytes + PK_ALIGN + sizeof(void*);
    if (total < bytes) return NULL;
    unsigned char* raw = calloc(1, total);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)(raw + sizeof(void*)) + PK_ALIGN - 1) & ~(uintptr_t)(PK_ALIGN - 1);
    memcpy((unsigned char*)p - sizeof(void*), &raw, sizeof raw);
    return (void*)p;
}

void pk_aligned_free(void* p) {
    if (!p) return;
    void* raw;
    memcpy(&raw, (unsigned char*)p - sizeof(void*), sizeof raw);
    free(raw);
}

pk_status pk_read_file(const char* path, void** data, size_t* len) {
    FILE* f = fopen(path, "rb");
    if (!f) return pk_fail(PK_ERR_IO, "%s: cannot open", path);
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return pk_fail(PK_ERR_IO, "%s: cannot determine size", path);
    }
    unsigned char* buf = pk_aligned_alloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return pk_fail(PK_ERR_NOMEM, "%s: cannot allocate %ld bytes", path, size);
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    if (got != (size_t)size) {
        pk_aligned_free(buf);
        return pk_fail(PK_ERR_IO, "%s: short read (%zu of %ld bytes)", path, got, size);
    }
    buf[size] = 0;
    *data = buf;
    *len = (size_t)size;
    return PK_OK;
}
