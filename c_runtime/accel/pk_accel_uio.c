/* pk_accel_uio.c - the board driver for a PYNQ-style Linux image (docs/accel.md, "Board
 * driver").
 *
 * UNTESTED WITHOUT HARDWARE: written to the register map and allocator the doc defines;
 * the tests only build it (host and armv7) and check that a missing device is refused.
 *
 * Registers: the accelerator's AXI-lite register map exposed as a UIO device (map 0),
 * mmapped. Device memory: one u-dma-buf region (the u-dma-buf kernel module's
 * /dev/udmabuf0, its physical address and size read from sysfs), cut into buffers by a bump
 * allocator that starts over once every buffer has been freed. Cache maintenance goes
 * through u-dma-buf's sysfs sync interface (sync_offset, sync_size, sync_direction,
 * sync_for_device / sync_for_cpu). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "pk_accel.h"
#include "pk_accel_isa.h"

/* The register map (byte offsets, 32-bit registers). */
enum {
    REG_CONTROL = 0x00,    /* write 1: start at INSN_ADDR */
    REG_STATUS = 0x04,     /* bit 0: FINISH retired (cleared by a start) */
    REG_INSN_ADDR = 0x08,  /* physical address of the first instruction */
    REG_INSN_COUNT = 0x0c, /* instructions to fetch */
    REG_CYCLES_LO = 0x10,  /* cycles from start until FINISH retired, low word */
    REG_CYCLES_HI = 0x14,  /* high word */
    REG_MAP_BYTES = 0x1000
};
#define STATUS_DONE 1u
#define UDMABUF_DEFAULT "/dev/udmabuf0"
#define UIO_DEFAULT "/dev/uio0"
#define BUF_ALIGN 64u

struct pk_accel {
    pk_accel_config cfg;
    int uio_fd, mem_fd;
    volatile uint32_t* regs;
    unsigned char* mem;
    uint32_t mem_phys;
    size_t mem_size, mem_used, live;
    char sysfs[256]; /* the u-dma-buf's sysfs directory */
    char err[256];
};

static char open_error[256];

static int fail(pk_accel* d, int rc, const char* what, const char* path) {
    char* dst = d ? d->err : open_error;
    snprintf(dst, sizeof open_error, "%.80s %.120s: %.40s", what, path,
             errno ? strerror(errno) : "failed");
    return rc;
}

static int read_sysfs(const char* dir, const char* name, unsigned long long* out) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%llx", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

static int write_sysfs(const char* dir, const char* name, unsigned long long v) {
    char path[320];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "w");
    if (!f) return -1;
    int ok = fprintf(f, "%llu", v) > 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The u-dma-buf region: sysfs under /sys/class/u-dma-buf (newer) or /sys/class/udmabuf. */
static int open_memory(pk_accel* d) {
    const char* env = getenv("PK_ACCEL_UDMABUF");
    const char* dev = env && env[0] ? env : UDMABUF_DEFAULT;
    const char* name = strrchr(dev, '/') ? strrchr(dev, '/') + 1 : dev;
    const char* classes[] = {"/sys/class/u-dma-buf", "/sys/class/udmabuf"};
    unsigned long long phys = 0, size = 0;
    errno = 0;
    d->mem_fd = open(dev, O_RDWR | O_SYNC);
    if (d->mem_fd < 0) return fail(d, PK_ACCEL_ERR_DEVICE, "cannot open the u-dma-buf device", dev);
    for (size_t k = 0; k < 2 && !size; k++) {
        snprintf(d->sysfs, sizeof d->sysfs, "%s/%s", classes[k], name);
        if (read_sysfs(d->sysfs, "phys_addr", &phys) || read_sysfs(d->sysfs, "size", &size))
            size = 0;
    }
    if (!size || phys + size > 0x100000000ull)
        return fail(d, PK_ACCEL_ERR_DEVICE, "no 32-bit phys_addr and size in sysfs for", dev);
    d->mem = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, d->mem_fd, 0);
    if (d->mem == MAP_FAILED) {
        d->mem = NULL;
        return fail(d, PK_ACCEL_ERR_DEVICE, "cannot map", dev);
    }
    d->mem_phys = (uint32_t)phys;
    d->mem_size = (size_t)size;
    return PK_ACCEL_OK;
}

int pk_accel_open(const pk_accel_config* cfg, const char* driver_arg, pk_accel** out) {
    const char* uio = driver_arg && driver_arg[0] ? driver_arg : UIO_DEFAULT;
    *out = NULL;
    if (!cfg) return PK_ACCEL_ERR_ARG;
    pk_accel* d = calloc(1, sizeof *d);
    if (!d) return PK_ACCEL_ERR_NOMEM;
    d->cfg = *cfg;
    d->mem_fd = -1;
    errno = 0;
    d->uio_fd = open(uio, O_RDWR | O_SYNC);
    int rc = d->uio_fd < 0
                 ? fail(d, PK_ACCEL_ERR_DEVICE, "cannot open the accelerator's UIO device", uio)
                 : PK_ACCEL_OK;
    if (rc == PK_ACCEL_OK) {
        void* regs = mmap(NULL, REG_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, d->uio_fd, 0);
        rc = regs == MAP_FAILED ? fail(d, PK_ACCEL_ERR_DEVICE, "cannot map the registers of", uio)
                                : PK_ACCEL_OK;
        d->regs = regs == MAP_FAILED ? NULL : regs;
    }
    if (rc == PK_ACCEL_OK) rc = open_memory(d);
    if (rc != PK_ACCEL_OK) {
        memcpy(open_error, d->err, sizeof open_error);
        pk_accel_close(d);
        return rc;
    }
    *out = d;
    return PK_ACCEL_OK;
}

void pk_accel_close(pk_accel* d) {
    if (!d) return;
    if (d->regs) munmap((void*)d->regs, REG_MAP_BYTES);
    if (d->mem) munmap(d->mem, d->mem_size);
    if (d->uio_fd >= 0) close(d->uio_fd);
    if (d->mem_fd >= 0) close(d->mem_fd);
    free(d);
}

int pk_accel_set_check(pk_accel* d, int on) {
    if (!on) return PK_ACCEL_OK;
    snprintf(d->err, sizeof d->err, "the board has no checking mode (the simulator's)");
    return PK_ACCEL_ERR_ARG;
}

const char* pk_accel_last_error(const pk_accel* d) {
    return d ? d->err : open_error;
}

int pk_accel_alloc(pk_accel* d, size_t size, pk_accel_buf* out) {
    size_t at = (d->mem_used + BUF_ALIGN - 1) / BUF_ALIGN * BUF_ALIGN;
    memset(out, 0, sizeof *out);
    if (size == 0 || at > d->mem_size || size > d->mem_size - at) {
        snprintf(d->err, sizeof d->err, "alloc: %zu bytes do not fit the %zu-byte u-dma-buf", size,
                 d->mem_size);
        return size ? PK_ACCEL_ERR_NOMEM : PK_ACCEL_ERR_ARG;
    }
    d->mem_used = at + size;
    d->live++;
    out->host = d->mem + at;
    out->phys = d->mem_phys + (uint32_t)at;
    out->size = size;
    return PK_ACCEL_OK;
}

void pk_accel_free(pk_accel* d, pk_accel_buf* buf) {
    if (!buf || !buf->host) return;
    /* bump allocation: space comes back once nothing is allocated */
    if (d->live && --d->live == 0) d->mem_used = 0;
    memset(buf, 0, sizeof *buf);
}

static int sync_range(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size,
                      int for_device) {
    if (!buf || offset > buf->size || size > buf->size - offset) {
        snprintf(d->err, sizeof d->err, "sync: range outside the buffer");
        return PK_ACCEL_ERR_ARG;
    }
    unsigned long long start = (unsigned long long)(buf->phys - d->mem_phys) + offset;
    /* u-dma-buf's sync_direction: 1 to the device, 2 from it */
    errno = 0;
    if (write_sysfs(d->sysfs, "sync_offset", start) || write_sysfs(d->sysfs, "sync_size", size) ||
        write_sysfs(d->sysfs, "sync_direction", for_device ? 1 : 2) ||
        write_sysfs(d->sysfs, for_device ? "sync_for_device" : "sync_for_cpu", 1))
        return fail(d, PK_ACCEL_ERR_DEVICE, "cache sync through", d->sysfs);
    return PK_ACCEL_OK;
}

int pk_accel_flush(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size) {
    return sync_range(d, buf, offset, size, 1);
}

int pk_accel_invalidate(pk_accel* d, const pk_accel_buf* buf, size_t offset, size_t size) {
    return sync_range(d, buf, offset, size, 0);
}

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

int pk_accel_run(pk_accel* d, const pk_accel_buf* insns, uint32_t count, uint32_t timeout_ms,
                 pk_accel_counters* counters) {
    if (!insns || count == 0 || (uint64_t)count * PK_ACCEL_INSN_BYTES > insns->size) {
        snprintf(d->err, sizeof d->err, "run: %u instructions do not fit their buffer", count);
        return PK_ACCEL_ERR_ARG;
    }
    int rc = pk_accel_flush(d, insns, 0, (size_t)count * PK_ACCEL_INSN_BYTES);
    if (rc != PK_ACCEL_OK) return rc;
    d->regs[REG_INSN_ADDR / 4] = insns->phys;
    d->regs[REG_INSN_COUNT / 4] = count;
    d->regs[REG_CONTROL / 4] = 1;
    for (uint64_t start = now_ms(); !(d->regs[REG_STATUS / 4] & STATUS_DONE);) {
        if (timeout_ms && now_ms() - start > timeout_ms) {
            snprintf(d->err, sizeof d->err, "run: FINISH not reached in %u ms", timeout_ms);
            return PK_ACCEL_ERR_TIMEOUT;
        }
    }
    if (counters) {
        memset(counters, 0, sizeof *counters);
        counters->cycles = (uint64_t)d->regs[REG_CYCLES_HI / 4] << 32 | d->regs[REG_CYCLES_LO / 4];
        for (uint32_t i = 0; i < count; i++) {
            unsigned op = ((const unsigned char*)insns->host)[(size_t)i * PK_ACCEL_INSN_BYTES] & 7u;
            if (op < PK_ACCEL_OPS) counters->insns[op]++;
        }
    }
    return PK_ACCEL_OK;
}
