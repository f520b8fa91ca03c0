/* Unit test of the JSON reader (lib/json_read.c, lib/json.h "Reading"): what Python's json
 * module writes reads back (escapes, surrogate pairs, big integers as written, NaN/Infinity,
 * \u0000 in strings), writing a read value gives the same JSON; hostile input is refused with a
 * message naming the byte (nesting deeper than 64, bytes that are not UTF-8, control characters,
 * bad escapes and numbers, trailing bytes, truncation at every length), and random mutations of
 * valid documents never crash or leak (run under ASan by the sanitizer build). */
#include "check.h"
#include "internal.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ckpt__json_doc *parse(const char *s, size_t len, int *rc, char *err, size_t errsize)
{
    ckpt__json_doc *d = NULL;
    *rc = ckpt__json_parse(&d, s, len, err, errsize);
    return d;
}

/* Writes v back (python: NaN tokens) into a malloc'd string. */
static char *write_back(const ckpt__jv *v, int python)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ckpt__json_writer w;
    ckpt__json_init(&w, f);
    ckpt__json_value(&w, v, python);
    fclose(f);
    return buf;
}

/* Parses s, which must succeed, and checks that writing it back gives `want`. */
static void roundtrip(const char *s, const char *want)
{
    char err[256];
    int rc;
    ckpt__json_doc *d = parse(s, strlen(s), &rc, err, sizeof err);
    CHECK_MSG(rc == CKPT_OK && d, "parse of %s failed: %s", s, err);
    if (!d)
        return;
    char *got = write_back(ckpt__json_doc_root(d), 1);
    CHECK_MSG(strcmp(got, want) == 0, "%s wrote back as %s, expected %s", s, got, want);
    free(got);
    ckpt__json_doc_free(d);
}

/* s (len bytes) must be refused, with a message holding `needle`. */
static void refused(const char *s, size_t len, const char *needle)
{
    char err[256];
    int rc;
    ckpt__json_doc *d = parse(s, len, &rc, err, sizeof err);
    CHECK_MSG(rc == CKPT_ECORRUPT && !d, "'%.*s' was accepted (rc %d)", (int)(len > 60 ? 60 : len),
              s, rc);
    CHECK_MSG(strstr(err, needle) != NULL, "'%.*s': message '%s' lacks '%s'",
              (int)(len > 60 ? 60 : len), s, err, needle);
    ckpt__json_doc_free(d);
}

static void test_values(void)
{
    /* what Python's json.dumps writes, sort_keys and default separators */
    roundtrip("{\"mpickpt_json\": 1, \"per_rank\": {\"r\": 3}, \"replicated\": {\"a\": null, "
              "\"b\": true, \"c\": false, \"d\": -0.0, \"e\": 1e+300, \"f\": NaN, \"g\": "
              "Infinity, \"h\": -Infinity, \"i\": 123456789012345678901234567890}}",
              "{\"mpickpt_json\":1,\"per_rank\":{\"r\":3},\"replicated\":{\"a\":null,\"b\":true,"
              "\"c\":false,\"d\":-0.0,\"e\":1e+300,\"f\":NaN,\"g\":Infinity,\"h\":-Infinity,"
              "\"i\":123456789012345678901234567890}}");
    /* escapes, ensure_ascii's \u forms, a surrogate pair, a lone surrogate (U+FFFD) */
    roundtrip("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20ac\", \"\\ud83d\\ude00\", "
              "\"\\ud800x\", \"\\udc00\", \"\\ud800\\u0041\"]",
              "[\"\\\"\\\\/\\u0008\\u000c\\u000a\\u000d\\u0009\",\"\xc3\xa9\xe2\x82\xac\","
              "\"\xf0\x9f\x98\x80\",\"\xef\xbf\xbdx\",\"\xef\xbf\xbd\",\"\xef\xbf\xbd" "A\"]");
    roundtrip("  [ ]  ", "[]");
    roundtrip("{}", "{}");
    roundtrip("0", "0");
    roundtrip("-12.5e-3", "-12.5e-3");
    roundtrip("\"\xc3\xa9\"", "\"\xc3\xa9\"");
    /* a NUL inside a string and a name is kept (length), written back as \u0000 */
    char err[256];
    int rc;
    const char *nul = "{\"a\\u0000b\": \"x\\u0000y\"}";
    ckpt__json_doc *d = parse(nul, strlen(nul), &rc, err, sizeof err);
    CHECK_OK(rc);
    if (d) {
        const ckpt__jv *root = ckpt__json_doc_root(d);
        CHECK(root->n == 1 && root->key_lens[0] == 3 && root->items[0].len == 3);
        CHECK(memcmp(root->items[0].text, "x\0y", 3) == 0);
        char *got = write_back(root, 0);
        CHECK_MSG(strcmp(got, "{\"a\\u0000b\":\"x\\u0000y\"}") == 0, "got %s", got);
        free(got);
        ckpt__json_doc_free(d);
    }
    /* repeated names: the last one, as Python */
    const char *dup = "{\"k\": 1, \"k\": 2}";
    d = parse(dup, strlen(dup), &rc, err, sizeof err);
    CHECK_OK(rc);
    if (d) {
        const ckpt__jv *k = ckpt__jv_get(ckpt__json_doc_root(d), "k");
        CHECK(k && k->kind == CKPT__JV_NUMBER && strcmp(k->text, "2") == 0 && k->is_int);
        CHECK(ckpt__jv_get(ckpt__json_doc_root(d), "z") == NULL);
        ckpt__json_doc_free(d);
    }
    /* the strict output: NaN and infinities as strings */
    d = parse("[NaN,-Infinity,1.5]", 19, &rc, err, sizeof err);
    CHECK_OK(rc);
    if (d) {
        char *got = write_back(ckpt__json_doc_root(d), 0);
        CHECK_MSG(strcmp(got, "[\"NaN\",\"-Infinity\",1.5]") == 0, "got %s", got);
        free(got);
        ckpt__json_doc_free(d);
    }
}

static void test_hostile(void)
{
    /* depth: 64 levels read, 65 refused (and 100000 without recursing that deep) */
    size_t deep = 100000;
    char *s = malloc(2 * deep + 1);
    for (int levels = 64; levels <= 65; levels++) {
        memset(s, '[', (size_t)levels);
        memset(s + levels, ']', (size_t)levels);
        char err[256];
        int rc;
        ckpt__json_doc *d = parse(s, 2 * (size_t)levels, &rc, err, sizeof err);
        if (levels == 64)
            CHECK_MSG(rc == CKPT_OK, "64 levels: %s", err);
        else
            CHECK_MSG(rc == CKPT_ECORRUPT && strstr(err, "deeper than 64"), "65 levels: %s", err);
        ckpt__json_doc_free(d);
    }
    memset(s, '[', deep);
    memset(s + deep, ']', deep);
    refused(s, 2 * deep, "deeper than 64");
    memset(s, '{', deep);
    refused(s, deep, "");
    free(s);

    refused("", 0, "found the end");
    refused("   ", 3, "found the end");
    refused("[1] x", 5, "trailing bytes");
    refused("{} {}", 5, "trailing bytes");
    refused("[1,]", 4, "unexpected ']'");
    refused("[1 2]", 5, "expected ','");
    refused("{\"a\" 1}", 7, "expected ':'");
    refused("{1: 2}", 6, "member name");
    refused("{\"a\": 1,}", 9, "member name");
    refused("\"abc", 4, "not closed");
    refused("\"a\\", 3, "backslash");
    refused("\"\\x41\"", 6, "unknown escape");
    refused("\"\\u12G4\"", 8, "hexadecimal");
    refused("\"\\u12\"", 6, "hexadecimal");
    refused("\"a\tb\"", 5, "control character 0x09");
    refused("\"a\nb\"", 5, "control character");
    refused("\"a\0b\"", 5, "control character 0x00");
    refused("[1]\0", 4, "trailing bytes");
    refused("01", 2, "trailing bytes");
    refused("-", 1, "digits");
    refused("1.", 2, "digits after '.'");
    refused("1e", 2, "exponent");
    refused(".5", 2, "unexpected '.'");
    refused("+1", 2, "unexpected '+'");
    refused("nan", 3, "unexpected 'n'");
    refused("NaNa", 4, "trailing bytes");
    refused("Inf", 3, "digits");
    refused("tru", 3, "unexpected 't'");
    refused("nul", 3, "unexpected 'n'");
    /* not UTF-8: a stray byte, an overlong form, an encoded surrogate, a truncated sequence */
    refused("\"\xff\"", 3, "not valid UTF-8");
    refused("\"\xc0\xaf\"", 4, "not valid UTF-8");
    refused("\"\xed\xa0\x80\"", 5, "not valid UTF-8");
    refused("[\"\xe2\x82\"]", 5, "at byte 2 of 5: not valid UTF-8");
    refused("\xef\xbb\xbf{}", 5, "unexpected byte 0xef"); /* a BOM is not JSON */

    /* every truncation of a valid document is refused, never read past its end */
    const char *doc = "{\"mpickpt_json\": 2, \"replicated\": {\"a\\u00e9\": [1.5e3, NaN, "
                      "\"\\ud83d\\ude00\", null, true]}, \"aliases\": {}}";
    size_t len = strlen(doc);
    for (size_t n = 0; n < len; n++) {
        char *copy = malloc(n ? n : 1); /* exact size: ASan sees a read past the end */
        memcpy(copy, doc, n);
        char err[256];
        int rc;
        ckpt__json_doc *d = parse(copy, n, &rc, err, sizeof err);
        CHECK_MSG(rc == CKPT_ECORRUPT && !d, "truncated at %zu: accepted", n);
        ckpt__json_doc_free(d);
        free(copy);
    }
    /* a small error buffer: cut, NUL-terminated */
    char small[8];
    int rc;
    ckpt__json_doc *d = parse("[", 1, &rc, small, sizeof small);
    CHECK(rc == CKPT_ECORRUPT && !d && strlen(small) == sizeof small - 1);
}

/* Random mutations of valid documents: each parses or is refused with a message; none crashes
 * (deterministic: a fixed seed). */
static void test_mutations(void)
{
    static const char *const seeds[] = {
        "{\"mpickpt_json\": 1, \"per_rank\": {\"n\": -7}, \"replicated\": {\"lr\": 0.001, "
        "\"name\": \"r\\u00e9sum\\u00e9\", \"big\": 1e400, \"x\": [[], {}, [NaN]]}}",
        "{\"mpickpt_json\": 2, \"tree\": [\"d\", [[\"model\", [\"d\", [[0, [\"T\"]]]]]]], "
        "\"aliases\": {\"b\": {\"of\": \"a\", \"offset\": 0, \"shape\": [2], \"strides\": [1], "
        "\"dtype\": \"float32\", \"torch\": true}}}",
    };
    const char pool[] = "{}[]\",:\\u0123456789eE+-.ntrfalsNIa \xc3\xa9\xff\x80\x01";
    unsigned long long x = 88172645463325252ULL;
    size_t ok = 0, bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        const char *seed = seeds[iter % 2];
        size_t len = strlen(seed);
        char *buf = malloc(len + 8);
        memcpy(buf, seed, len);
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t at = (size_t)(x % (len ? len : 1));
            char c = pool[(x >> 32) % (sizeof pool - 1)];
            switch ((x >> 40) % 3) {
            case 0: buf[at] = c; break;                      /* replace */
            case 1: memmove(buf + at, buf + at + 1, len - at - 1); len--; break; /* delete */
            default:                                          /* insert */
                if (len < strlen(seed) + 7) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = c;
                    len++;
                }
            }
        }
        char *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        free(buf);
        char err[256];
        int rc;
        ckpt__json_doc *d = parse(exact, len, &rc, err, sizeof err);
        if (rc == CKPT_OK) {
            ok++;
            char *back = write_back(ckpt__json_doc_root(d), 1);
            /* what was written back reads again */
            ckpt__json_doc *d2 = parse(back, strlen(back), &rc, err, sizeof err);
            CHECK_MSG(rc == CKPT_OK, "written back '%s' does not read: %s", back, err);
            ckpt__json_doc_free(d2);
            free(back);
        } else {
            bad++;
            CHECK_MSG(rc == CKPT_ECORRUPT && strncmp(err, "invalid JSON at byte ", 21) == 0,
                      "mutation refused with rc %d '%s'", rc, err);
        }
        ckpt__json_doc_free(d);
        free(exact);
    }
    printf("mutations: %zu read, %zu refused\n", ok, bad);
    CHECK(ok > 0 && bad > 0);
}

int main(void)
{
    test_values();
    test_hostile();
    test_mutations();
    return CHECK_DONE();
}
