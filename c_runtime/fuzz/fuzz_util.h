/* Shared by the libFuzzer harnesses: input splitting and a capped graph load. */
#ifndef PK_FUZZ_UTIL_H
#define PK_FUZZ_UTIL_H

#include "pk_runtime.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Graphs asking for more tensor memory than this are skipped: a hostile graph.json may ask
 * for any amount (the runtime then reports PK_ERR_NOMEM), which is not a bug to find. */
#define FUZZ_MAX_MEMORY ((size_t)64 << 20)

/* Takes the next section: a 4-byte little-endian length, then that many bytes (clamped to
 * what is left). The bundle corpus (scripts/fuzz_seeds.py) is written in this layout. */
static inline const uint8_t* fuzz_section(const uint8_t** data, size_t* size, size_t* len) {
    uint32_t n = 0;
    for (int i = 0; i < 4 && *size; i++, (*data)++, (*size)--)
        n |= (uint32_t)**data << (8 * i);
    *len = n < *size ? n : *size;
    const uint8_t* at = *data;
    *data += *len;
    *size -= *len;
    return at;
}

/* pk_graph_create on a private 64-aligned copy of params (the graph points into it);
 * *params_copy must be freed after pk_graph_destroy. */
static inline pk_status fuzz_create(const char* json, size_t json_len, const uint8_t* params,
                                    size_t params_len, void** params_copy, pk_graph** g) {
    size_t need = 0;
    *g = NULL;
    *params_copy = NULL;
    pk_status s = pk_graph_memory_bytes(json, json_len, &need);
    if (s || need > FUZZ_MAX_MEMORY) return s ? s : PK_ERR_NOMEM;
    void* copy = aligned_alloc(64, (params_len + 63) / 64 * 64 + 64);
    if (!copy) return PK_ERR_NOMEM;
    if (params_len) memcpy(copy, params, params_len);
    s = pk_graph_create(json, json_len, copy, params_len, NULL, 0, g);
    *params_copy = copy;
    return s;
}

/* Sets every input from `bytes` (repeated, or zeros when empty), runs, reads the outputs. */
static inline void fuzz_run(pk_graph* g, const uint8_t* bytes, size_t len) {
    for (int32_t i = 0; i < pk_graph_num_inputs(g); i++) {
        pk_tensor_info info;
        pk_graph_input_info(g, i, &info);
        uint8_t* buf = calloc(info.bytes + 1, 1);
        if (!buf) return;
        for (size_t k = 0; len && k < info.bytes; k++)
            buf[k] = bytes[k % len];
        pk_graph_set_input(g, i, buf, info.bytes);
        free(buf);
    }
    if (pk_graph_run(g) != PK_OK) return;
    for (int32_t i = 0; i < pk_graph_num_outputs(g); i++) {
        pk_tensor_info info;
        pk_graph_output_info(g, i, &info);
        uint8_t* buf = malloc(info.bytes + 1);
        if (buf) pk_graph_get_output(g, i, buf, info.bytes);
        free(buf);
    }
}
#endif
