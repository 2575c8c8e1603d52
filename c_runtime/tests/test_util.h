/* Minimal test helpers: CHECK records a failure and continues, so one run reports all. */
#ifndef PK_TEST_UTIL_H
#define PK_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int test_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, msg)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond, msg);     \
            test_failures++;                                                                       \
        }                                                                                          \
    } while (0)

/* Deterministic xorshift so fuzz cases are reproducible from the seed. */
static uint64_t test_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t test_rand(void) {
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return test_rng;
}

/* Replaces the first occurrence of `from` in src by `to`; returns 0 if absent. */
static inline int test_replace(const char* src, const char* from, const char* to, char* out,
                               size_t cap) {
    const char* at = strstr(src, from);
    if (!at) return 0;
    int n = snprintf(out, cap, "%.*s%s%s", (int)(at - src), src, to, at + strlen(from));
    return n > 0 && (size_t)n < cap;
}

static inline int test_report(const char* name) {
    if (test_failures)
        fprintf(stderr, "%s: %d failure(s)\n", name, test_failures);
    else
        printf("%s: all passed\n", name);
    return test_failures != 0;
}

/* JSON written with ' for readability, turned into " (dst at least as long as src). */
static inline void quote(const char* src, char* dst) {
    for (; *src; src++, dst++)
        *dst = *src == '\'' ? '"' : *src;
    *dst = 0;
}

#endif
