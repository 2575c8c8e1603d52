/* JSON reader tests: accepted and rejected texts, integer limits, string decoding, lookups. */
#include "pk_internal.h"
#include "test_util.h"

#include <stdlib.h>

static const char* const valid[] = {
    "{}",
    "[]",
    " 0 ",
    "-0",
    "1.5e-3",
    "\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\\u00e9\"",
    "true",
    "false",
    "null",
    "[1,[2,[3,{}]],{\"a\":[]}]",
    "{\"a\":1,\"b\":{\"c\":[true,null]}}",
};

static const char* const invalid[] = {
    "",      "{",   "[1,]",   "{\"a\"}",    "{\"a\":}", "[01]",    "1.",        "-",
    ".5",    "1e",  "tru",    "nul",        "\"abc",    "\"\\x\"", "\"\\u12\"", "[1 2]",
    "{1:2}", "[]]", "\"\t\"", "{\"a\":1,}", "[-]",      "+1",      "'a'",       "[1}",
};

static void test_accept_reject(void) {
    pj_doc d;
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
        CHECK_MSG(pj_parse(&d, valid[i], strlen(valid[i]), "t") == PK_OK, valid[i]);
        pj_free(&d);
    }
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        CHECK_MSG(pj_parse(&d, invalid[i], strlen(invalid[i]), "t") == PK_ERR_FORMAT, invalid[i]);
        CHECK(d.toks == NULL);
    }
}

static void test_values(void) {
    const char* text = "{\"big\": 9223372036854775807, \"over\": 9223372036854775808,"
                       " \"min\": -9223372036854775808, \"f\": 2.5, \"e\": 1e2,"
                       " \"s\": \"caf\\u00e9 \\ud83d\\ude00 \\ud800\", \"k\\u0041\": 3}";
    pj_doc d;
    int64_t v;
    double x;
    CHECK(pj_parse(&d, text, strlen(text), "t") == PK_OK);
    CHECK(pj_int(&d, pj_get(&d, 0, "big"), &v) && v == INT64_MAX);
    CHECK(!pj_int(&d, pj_get(&d, 0, "over"), &v));
    CHECK(pj_int(&d, pj_get(&d, 0, "min"), &v) && v == INT64_MIN);
    CHECK(!pj_int(&d, pj_get(&d, 0, "f"), &v) && !pj_int(&d, pj_get(&d, 0, "e"), &v));
    CHECK(pj_double(&d, pj_get(&d, 0, "f"), &x) && x == 2.5);
    CHECK(pj_get(&d, 0, "missing") == -1 && pj_get(&d, 1, "big") == -1);
    char* s = pj_strdup(&d, pj_get(&d, 0, "s"));
    CHECK(s && !strcmp(s, "caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbd"));
    free(s);
    CHECK(pj_int(&d, pj_get(&d, 0, "kA"), &v) && v == 3); /* keys are compared decoded */
    CHECK(pj_strdup(&d, pj_get(&d, 0, "big")) == NULL);
    pj_free(&d);
}

static void test_depth(void) {
    char text[2 * PK_MAX_JSON_DEPTH + 8];
    pj_doc d;
    for (int depth = PK_MAX_JSON_DEPTH; depth <= PK_MAX_JSON_DEPTH + 1; depth++) {
        for (int i = 0; i < depth; i++)
            text[i] = '[', text[2 * depth - 1 - i] = ']';
        pk_status s = pj_parse(&d, text, (size_t)(2 * depth), "t");
        CHECK(s == (depth <= PK_MAX_JSON_DEPTH ? PK_OK : PK_ERR_FORMAT));
        pj_free(&d);
    }
}

int main(void) {
    test_accept_reject();
    test_values();
    test_depth();
    return test_report("test_json");
}
