/* pk_scratch_alloc / pk_scratch_free / pk_scratch_release (src/pk_scratch.c): which kept
 * block comes back, which of more than 8 freed blocks are kept, release, and the limits.
 *
 * Blocks the library may hand out again (freed to the C library) are never compared by
 * address: malloc may return the same address. A block is told apart either while it is
 * still held (kept in a slot, or allocated) or by the size its header records: a block
 * freed and asked for again with a larger size comes back only if its header has that size.
 * Runs under ASAN+UBSAN in tests/test_c_runtime.py (overflows, use after free, leaks). */
#include "pk_kernel.h"
#include "test_util.h"

#include <stdlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

#define SLOTS 8 /* PK_SCRATCH_SLOTS */

/* Fills a block over its whole size with a pattern of the seed and checks it reads back. */
static int fill_and_check(void* p, size_t bytes, unsigned seed) {
    unsigned char* b = p;
    for (size_t i = 0; i < bytes; i++)
        b[i] = (unsigned char)(i * 31u + seed);
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != (unsigned char)(i * 31u + seed)) return 0;
    return 1;
}

static int aligned(const void* p) {
    return (uintptr_t)p % (2 * sizeof(void*)) == 0;
}

static void test_reuse_same_and_smaller(void) {
    char* p = pk_scratch_alloc(1000);
    CHECK(p != NULL);
    CHECK(aligned(p));
    CHECK(fill_and_check(p, 1000, 1));
    pk_scratch_free(p);
    char* q = pk_scratch_alloc(1000); /* same size: the kept block */
    CHECK(q == p);
    CHECK(fill_and_check(q, 1000, 2));
    pk_scratch_free(q);
    char* r = pk_scratch_alloc(10); /* smaller: still the kept block */
    CHECK(r == p);
    CHECK(fill_and_check(r, 10, 3));
    pk_scratch_free(r);
    /* It keeps its size (1000, not 10): it serves a 1000-byte request again. */
    char* s = pk_scratch_alloc(1000);
    CHECK(s == p);
    CHECK(fill_and_check(s, 1000, 4));
    pk_scratch_free(s);
    char* z = pk_scratch_alloc(0); /* zero bytes: the kept block, or a fresh one; freeable */
    CHECK(z != NULL);
    pk_scratch_free(z);
    pk_scratch_release();
}

static void test_larger_request_gets_fresh_block(void) {
    char* a = pk_scratch_alloc(1000);
    char* b = pk_scratch_alloc(3000);
    CHECK(a && b && a != b);
    pk_scratch_free(a);
    pk_scratch_free(b);
    /* Both kept: a request above both is a fresh block, distinct from the two held ones. */
    char* c = pk_scratch_alloc(3001);
    CHECK(c != NULL && c != a && c != b);
    CHECK(fill_and_check(c, 3001, 5));
    /* 2000 fits only b; 1000 then gets a, the smallest kept block large enough. */
    char* d = pk_scratch_alloc(2000);
    CHECK(d == b);
    char* e = pk_scratch_alloc(1000);
    CHECK(e == a);
    /* No kept block left: another 1000 is fresh. */
    char* f = pk_scratch_alloc(1000);
    CHECK(f != NULL && f != a && f != b && f != c);
    CHECK(fill_and_check(f, 1000, 6));
    pk_scratch_free(c);
    pk_scratch_free(d);
    pk_scratch_free(e);
    pk_scratch_free(f);
    pk_scratch_release();
}

static void test_smallest_fitting_block(void) {
    /* Kept blocks of 100, 300, 200 (freed in that order). */
    char* p100 = pk_scratch_alloc(100);
    char* p300 = pk_scratch_alloc(300);
    char* p200 = pk_scratch_alloc(200);
    pk_scratch_free(p100);
    pk_scratch_free(p300);
    pk_scratch_free(p200);
    char* a = pk_scratch_alloc(150);
    CHECK(a == p200);
    char* b = pk_scratch_alloc(150);
    CHECK(b == p300);
    char* c = pk_scratch_alloc(150); /* only 100 is kept: too small */
    CHECK(c != p100 && c != p200 && c != p300);
    char* d = pk_scratch_alloc(1);
    CHECK(d == p100);
    CHECK(fill_and_check(b, 300, 7)); /* the 300-byte block serves 150, and holds 300 */
    pk_scratch_free(a);
    pk_scratch_free(b);
    pk_scratch_free(c);
    pk_scratch_free(d);
    pk_scratch_release();
}

/* Frees nine blocks of 1..9 KiB in the order given by `order` (sizes in KiB), then takes
 * 1-byte blocks: the kept ones come back smallest first, and must be the eight largest. */
static void nine_freed(const int order[9], const char* what) {
    char* blocks[10] = {0}; /* by size in KiB */
    for (int k = 0; k < 9; k++) {
        int kib = order[k];
        blocks[kib] = pk_scratch_alloc((size_t)kib * 1024);
        CHECK_MSG(blocks[kib] != NULL, what);
        CHECK_MSG(fill_and_check(blocks[kib], (size_t)kib * 1024, (unsigned)kib), what);
    }
    for (int k = 0; k < 9; k++)
        pk_scratch_free(blocks[order[k]]);
    char* got[SLOTS + 1];
    for (int k = 0; k < SLOTS; k++) {
        got[k] = pk_scratch_alloc(1);
        CHECK_MSG(got[k] == blocks[k + 2], what); /* 2 KiB, 3 KiB, ... 9 KiB */
    }
    /* The ninth is fresh: none of the eight blocks held now. */
    got[SLOTS] = pk_scratch_alloc(1);
    CHECK_MSG(got[SLOTS] != NULL, what);
    for (int k = 0; k < SLOTS; k++)
        CHECK_MSG(got[SLOTS] != got[k], what);
    for (int k = 0; k <= SLOTS; k++)
        pk_scratch_free(got[k]);
    pk_scratch_release();
}

static void test_nine_freed_keeps_the_largest(void) {
    const int smallest_first[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};        /* 9 KiB evicts 1 KiB */
    const int smallest_last[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};         /* 1 KiB is not kept */
    const int smallest_middle[9] = {5, 9, 2, 7, 1, 8, 3, 6, 4};       /* 4 KiB evicts 1 KiB */
    const int smallest_in_last_slot[9] = {2, 3, 4, 5, 6, 7, 8, 1, 9}; /* not the first smaller */
    nine_freed(smallest_first, "smallest first");
    nine_freed(smallest_last, "smallest last");
    nine_freed(smallest_middle, "smallest in the middle");
    nine_freed(smallest_in_last_slot, "smallest in the last slot");
}

static void test_full_slots_evict_smallest(void) {
    /* Eight kept blocks of 2..9 KiB; a freed 10 KiB block evicts the 2 KiB one; a freed
     * 1 KiB block is not kept (every kept block is larger). */
    char* blocks[11] = {0};
    for (int kib = 1; kib <= 10; kib++)
        blocks[kib] = pk_scratch_alloc((size_t)kib * 1024);
    for (int kib = 2; kib <= 9; kib++)
        pk_scratch_free(blocks[kib]);
    pk_scratch_free(blocks[10]);
    pk_scratch_free(blocks[1]);
    for (int k = 0; k < SLOTS; k++) {
        char* p = pk_scratch_alloc(1024);
        CHECK(p == blocks[k + 3]); /* 3 KiB .. 10 KiB */
        blocks[k + 3] = p;
    }
    for (int kib = 3; kib <= 10; kib++)
        pk_scratch_free(blocks[kib]);
    pk_scratch_release();
}

static void test_null_free_is_noop(void) {
    pk_scratch_free(NULL); /* nothing kept */
    char* p = pk_scratch_alloc(500);
    pk_scratch_free(p);
    for (int k = 0; k < 2 * SLOTS; k++)
        pk_scratch_free(NULL); /* must not take or fill a slot */
    char* q = pk_scratch_alloc(500);
    CHECK(q == p);
    /* Nothing else is kept: a 1-byte request is a fresh 1-byte block, kept once freed, that
     * a 2-byte request cannot get. */
    char* one = pk_scratch_alloc(1);
    CHECK(one != NULL && one != q);
    pk_scratch_free(one);
    char* two = pk_scratch_alloc(2);
    CHECK(two != NULL && two != one);
    pk_scratch_free(two);
    /* All slots full of blocks: a NULL free evicts nothing. */
    char* held[SLOTS];
    held[0] = q;
    for (int k = 1; k < SLOTS; k++)
        held[k] = pk_scratch_alloc(500);
    for (int k = 0; k < SLOTS; k++)
        pk_scratch_free(held[k]);
    pk_scratch_free(NULL);
    char* got[SLOTS]; /* the eight kept blocks, each once */
    for (int k = 0; k < SLOTS; k++) {
        got[k] = pk_scratch_alloc(500);
        int found = 0;
        for (int m = 0; m < SLOTS; m++)
            found += got[k] == held[m];
        CHECK(found == 1);
        for (int m = 0; m < k; m++)
            CHECK(got[k] != got[m]);
    }
    for (int k = 0; k < SLOTS; k++)
        pk_scratch_free(got[k]);
    pk_scratch_release();
}

static void test_release_empties_the_slots(void) {
    char* p = pk_scratch_alloc(4096);
    uintptr_t p_addr = (uintptr_t)p;
    pk_scratch_free(p);
    pk_scratch_release();
    /* Had the 4 KiB block stayed kept, this would be it, and would keep its 4 KiB size. */
    char* q = pk_scratch_alloc(16);
    CHECK(q != NULL);
    CHECK(fill_and_check(q, 16, 8));
    if (TEST_ASAN) CHECK((uintptr_t)q != p_addr); /* ASAN does not reuse freed memory soon */
    pk_scratch_free(q);
    /* q is kept now: a fresh block has a 16-byte header, so a 4 KiB request cannot get it. */
    char* r = pk_scratch_alloc(4096);
    CHECK(r != NULL && r != q);
    CHECK(fill_and_check(r, 4096, 9));
    pk_scratch_free(r);
    /* Release all eight slots, then the same check for each. */
    char* held[SLOTS];
    for (int k = 0; k < SLOTS; k++)
        held[k] = pk_scratch_alloc(8192);
    for (int k = 0; k < SLOTS; k++)
        pk_scratch_free(held[k]);
    pk_scratch_release();
    char* small[SLOTS];
    for (int k = 0; k < SLOTS; k++)
        small[k] = pk_scratch_alloc(8);
    for (int k = 0; k < SLOTS; k++)
        pk_scratch_free(small[k]);
    for (int k = 0; k < SLOTS; k++) {
        char* big = pk_scratch_alloc(8192);
        for (int m = 0; m < SLOTS; m++)
            CHECK(big != small[m]);
        held[k] = big;
    }
    for (int k = 0; k < SLOTS; k++)
        pk_scratch_free(held[k]);
    pk_scratch_release();
    pk_scratch_release(); /* twice: nothing to free */
}

static void test_large_and_huge(void) {
    /* A block as large as a Winograd conv's temporaries, written end to end. */
    size_t big = (size_t)5 << 20;
    char* p = pk_scratch_alloc(big);
    CHECK(p != NULL);
    if (p) {
        CHECK(aligned(p));
        CHECK(fill_and_check(p, big, 10));
#if defined(__linux__)
        /* its own mapping, 64 bytes past a 2 MiB boundary (advised as huge pages) */
        CHECK(((uintptr_t)p - 64) % ((size_t)2 << 20) == 0);
#endif
    }
    pk_scratch_free(p);
    /* Sizes whose header would overflow size_t: NULL, without touching the kept block. */
    CHECK(pk_scratch_alloc(SIZE_MAX) == NULL);
    CHECK(pk_scratch_alloc(SIZE_MAX - 63) == NULL);
    char* q = pk_scratch_alloc(big);
    CHECK(q == p);
    pk_scratch_free(q);
    pk_scratch_release();
}

int main(void) {
    pk_scratch_release(); /* nothing kept yet: a no-op */
    test_reuse_same_and_smaller();
    test_larger_request_gets_fresh_block();
    test_smallest_fitting_block();
    test_nine_freed_keeps_the_largest();
    test_full_slots_evict_smallest();
    test_null_free_is_noop();
    test_release_empties_the_slots();
    test_large_and_huge();
    return test_report("test_scratch");
}
