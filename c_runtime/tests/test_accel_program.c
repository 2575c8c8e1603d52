/* kernels/program.accel: a good file parses to what was written; every malformed one is
 * PK_ERR_FORMAT with a message naming the program and instruction, never a crash (runs under
 * ASAN+UBSAN). Needs no driver: every build runs it. */
#include "pk_accel_program.h"
#include "test_accel_asm.h"
#include "test_util.h"

#include <stdlib.h>

typedef struct {
    asm_insn insns[7];
    int32_t relocs[4][2];
    asm_prog prog;
} gemm_prog;

static void gemm_init(gemm_prog* g) {
    asm_gemm_insns(g->insns);
    memcpy(g->relocs, asm_gemm_relocs, sizeof g->relocs);
    g->prog = (asm_prog){
        "k_0_accel_dense", 3, 7, 1, 4, g->insns, asm_gemm_uops, (const int32_t (*)[2])g->relocs};
}

/* Parses the file of one program; returns the status, leaves the message in pk_last_error. */
static pk_status parse_one(const asm_prog* p, pk_accel_file* out) {
    size_t len;
    unsigned char* bytes = asm_file(p, 1, &len);
    pk_status s = pk_accel_file_parse(bytes, len, out);
    pk_accel_file_free(out);
    free(bytes);
    return s;
}

static void expect_error(const asm_prog* p, const char* message) {
    pk_accel_file f;
    CHECK(parse_one(p, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), message), pk_last_error());
}

static void test_good(void) {
    gemm_prog g;
    gemm_init(&g);
    asm_prog two[2] = {g.prog, g.prog};
    two[1].name = "k_1_other";
    size_t len;
    unsigned char* bytes = asm_file(two, 2, &len);
    pk_accel_file f;
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_OK);
    CHECK(f.count == 2 && f.cfg.block_in == 16 && f.cfg.acc_depth == 2048);
    CHECK(f.cfg.clock_mhz == 100.0 && f.cfg.dma_bytes_per_cycle == 8.0);
    CHECK(pk_accel_file_find(&f, "k_1_other") == 1 && pk_accel_file_find(&f, "k_2") == -1);
    const pk_accel_prog* p = &f.progs[0];
    CHECK(p->n_args == 3 && p->n_insns == 7 && p->n_uops == 1 && p->n_relocs == 4);
    /* uops: region -1; x: 16 bytes of argument 0; W: 256 of 1; y: 16 int8 of 2 */
    CHECK(p->region[0] == PK_ACCEL_UOPS && p->region[1] == 0 && p->region[2] == 1);
    CHECK(p->region[3] == PK_ACCEL_NO_REGION && p->region[5] == 2);
    CHECK(p->extent[0] == 4 && p->extent[1] == 16 && p->extent[2] == 256 && p->extent[5] == 16);
    size_t fits[3] = {16, 256, 16};
    CHECK(pk_accel_check_args(&f, 0, fits, 3, "node 1 'fc'") == PK_OK);
    CHECK(pk_accel_insn_opcode(p->insns + 16 * 6) == PK_ACCEL_FINISH);
    pk_accel_file_free(&f);
    free(bytes);
}

/* Every prefix of a good file is refused, and so is every file with a byte flipped or
 * replaced (many are still valid: those must parse to no crash). */
static void test_truncated_and_corrupt(void) {
    gemm_prog g;
    gemm_init(&g);
    size_t len;
    unsigned char* bytes = asm_file(&g.prog, 1, &len);
    pk_accel_file f;
    for (size_t n = 0; n < len - 16; n++) { /* the last 16 bytes are alignment padding */
        unsigned char* copy = malloc(n + 1);
        memcpy(copy, bytes, n);
        CHECK_MSG(pk_accel_file_parse(copy, n, &f) == PK_ERR_FORMAT, pk_last_error());
        pk_accel_file_free(&f);
        free(copy);
    }
    CHECK(pk_accel_file_parse(bytes, 40, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "kernels/program.accel: 40 bytes, shorter than its 64-byte "
                                      "header"),
              pk_last_error());
    CHECK(pk_accel_file_parse(bytes, 200, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "program 0 'k_0_accel_dense': 3 arguments, 7 instructions, "
                                      "1 micro-ops and 4 relocations at offset 160 do not fit "
                                      "the file's 200 bytes"),
              pk_last_error());
    for (int i = 0; i < 4000; i++) {
        unsigned char* copy = malloc(len);
        memcpy(copy, bytes, len);
        copy[test_rand() % len] ^= (unsigned char)(1u << test_rand() % 8);
        if (i % 2) copy[test_rand() % len] = (unsigned char)test_rand();
        pk_status s = pk_accel_file_parse(copy, len, &f);
        CHECK(s == PK_OK || s == PK_ERR_FORMAT);
        pk_accel_file_free(&f);
        free(copy);
    }
    bytes[3] = 'X';
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "not a program file (magic PKACCEL1, version 1)"),
              pk_last_error());
    free(bytes);
}

static void test_relocations(void) {
    gemm_prog g;
    gemm_init(&g);
    g.relocs[3][1] = 3; /* the STORE into argument 3 of 3 */
    expect_error(&g.prog, "program 0 'k_0_accel_dense' relocation 3: instruction 5 region 3: bad "
                          "region (the program has 7 instructions, 3 arguments)");
    g.relocs[3][1] = -2;
    expect_error(&g.prog, "relocation 3: instruction 5 region -2: bad region");
    gemm_init(&g);
    g.relocs[3][0] = 4; /* onto a GEMM */
    expect_error(&g.prog, "relocation 3: instruction 4 region 2: not a LOAD or STORE");
    g.relocs[3][0] = 1; /* twice on the inp LOAD; the STORE has none */
    expect_error(&g.prog, "relocation 3: instruction 1 region 2: relocated twice");
    g.relocs[3][0] = 9;
    expect_error(&g.prog, "relocation 3: instruction 9 region 2: no such");
    gemm_init(&g);
    g.prog.n_relocs = 3;
    expect_error(&g.prog, "program 0 'k_0_accel_dense' instruction 5: STORE has no relocation");
}

static void test_extents(void) {
    gemm_prog g;
    gemm_init(&g);
    size_t len;
    pk_accel_file f;
    /* the uop LOAD reads 2 micro-ops of 1 */
    g.insns[0] = asm_mem(0, 0, 0, 0, 0, 1, 2, 2);
    expect_error(&g.prog, "program 0 'k_0_accel_dense' instruction 0: LOAD reaches byte 8 of the "
                          "micro-ops, which have 4");
    /* y_size 2 with a stride of 3 inp tiles from byte 8: bytes [8, 8 + (3 + 1) * 16) */
    gemm_init(&g);
    g.insns[1] = asm_mem(0, 0, 2, 0, 8, 2, 1, 3);
    unsigned char* bytes = asm_file(&g.prog, 1, &len);
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_OK && f.progs[0].extent[1] == 72);
    size_t fits[3] = {72, 256, 16}, short_x[3] = {71, 256, 16}, short_y[3] = {72, 256, 15};
    CHECK(pk_accel_check_args(&f, 0, fits, 3, "node 1 'fc'") == PK_OK);
    CHECK(pk_accel_check_args(&f, 0, short_x, 3, "node 1 'fc'") == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "kernels/program.accel: program 'k_0_accel_dense' "
                                      "instruction 1: LOAD reaches byte 72 of argument 0, which "
                                      "has 71 bytes (node 1 'fc')"),
              pk_last_error());
    CHECK(pk_accel_check_args(&f, 0, short_y, 3, "node 1 'fc'") == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "instruction 5: STORE reaches byte 16 of argument 2, which "
                                      "has 15 bytes"),
              pk_last_error());
    CHECK(pk_accel_check_args(&f, 0, fits, 2, "node 1 'fc'") == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "program 'k_0_accel_dense' takes 3 arguments, node 1 'fc' "
                                      "passes 2"),
              pk_last_error());
    pk_accel_file_free(&f);
    free(bytes);
    /* a dram_base near 2^32 does not wrap around the check */
    g.insns[1] = asm_mem(0, 0, 2, 0, 0xFFFFFFF0u, 65535, 65535, 65535);
    bytes = asm_file(&g.prog, 1, &len);
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_OK);
    size_t huge[3] = {(size_t)1 << 32, 256, 16};
    CHECK(pk_accel_check_args(&f, 0, huge, 3, "node 1 'fc'") == PK_ERR_FORMAT);
    pk_accel_file_free(&f);
    free(bytes);
    gemm_init(&g);
    g.insns[5] = asm_mem(1, 1, 2, 0, 0, 1, 1, 1); /* a STORE from inp */
    expect_error(&g.prog, "instruction 5: STORE of buffer 2");
}

static void test_instructions(void) {
    gemm_prog g;
    gemm_init(&g);
    g.prog.n_insns = 6; /* no FINISH: the STORE is last */
    g.prog.n_relocs = 4;
    expect_error(&g.prog, "program 0 'k_0_accel_dense' instruction 5: STORE; FINISH must be the "
                          "last instruction and only that");
    gemm_init(&g);
    g.insns[3] = asm_head(4, 0); /* FINISH in the middle */
    expect_error(&g.prog, "instruction 3: FINISH; FINISH must be the last");
    g.insns[3] = asm_head(6, 0);
    expect_error(&g.prog, "program 0 'k_0_accel_dense' instruction 3: opcode 6");
    gemm_init(&g);
    g.prog.name = "";
    expect_error(&g.prog, "program 0: the name is empty or not NUL-terminated");
}

static void test_header(void) {
    gemm_prog g;
    gemm_init(&g);
    size_t len;
    pk_accel_file f;
    asm_prog two[2] = {g.prog, g.prog};
    unsigned char* bytes = asm_file(two, 2, &len);
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "programs 0 and 1 are both named 'k_0_accel_dense'"),
              pk_last_error());
    asm_u32(bytes + 12, 0x7FFFFFFF); /* count */
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "a table of 2147483647 programs does not fit"),
              pk_last_error());
    asm_u32(bytes + 12, 2);
    asm_u32(bytes + 16 + 4, 0); /* block_in */
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "config block_in is 0, expected 1 .. 256"), pk_last_error());
    asm_u32(bytes + 16 + 4, 16);
    memset(bytes + 16 + 32, 0, 8); /* clock_mhz 0 */
    CHECK(pk_accel_file_parse(bytes, len, &f) == PK_ERR_FORMAT);
    CHECK_MSG(strstr(pk_last_error(), "config clock_mhz 0 and dma_bytes_per_cycle 8 must be"),
              pk_last_error());
    free(bytes);
}

int main(void) {
    test_good();
    test_truncated_and_corrupt();
    test_relocations();
    test_extents();
    test_instructions();
    test_header();
    return test_report("test_accel_program");
}
