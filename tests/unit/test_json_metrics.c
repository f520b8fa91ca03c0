/* Unit test of lib/json.c (the JSON writer) and lib/metrics.c (lines of metrics.jsonl).
 *
 * The metrics writer must produce the bytes mpi/saver.c's write_metrics produced with its own
 * fprintf before it moved to lib/ (saver_line() below is a copy of that code): the same key order
 * and number formatting for every finite record, hostile prefixes included. The parser reads back
 * what the writer writes, and refuses truncated lines, NaN/inf, over-long numbers and hostile
 * bytes with the reasons `mpickpt stats` prints. */
#include "check.h"
#include "internal.h"
#include "json.h"
#include "metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

typedef struct memout {
    char *buf;
    size_t len;
    FILE *f;
} memout;

static void mem_open(memout *m)
{
    m->buf = NULL;
    m->len = 0;
    m->f = open_memstream(&m->buf, &m->len);
    if (!m->f) {
        perror("open_memstream");
        exit(2);
    }
}

/* Closes the stream; m->buf (malloc'd) holds what was written. */
static void mem_close(memout *m)
{
    fclose(m->f);
    m->f = NULL;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A double of any magnitude a duration or a rate may have, and some it should not. */
static double rng_double(void)
{
    static const double special[] = {0.0, -0.0, 1e-9, 4.9999995e-7, 5e-7, 0.5, 1.0, 2.5e-6,
                                     999999.9999995, 1e12, 123456789.123456789, -1e-9};
    uint64_t r = rng();
    if (r % 8 == 0)
        return special[(r >> 8) % CKPT__ARRAY_LEN(special)];
    double mant = (double)(rng() >> 11) / 9007199254740992.0; /* [0, 1) */
    int exp10 = (int)((r >> 8) % 22) - 9;                     /* 1e-9 .. 1e12 */
    return mant * pow(10.0, exp10);
}

/* ---- a copy of mpi/saver.c write_metrics (before the move to lib/metrics.c) ----------------- */

/* mx: blocking, write, agree, merge, commit; the rest as the saver has them. */
static void saver_line(FILE *f, const char *base, int async, uint64_t bytes, int size,
                       const double *mx, double since, double now)
{
    double busy = mx[1] + mx[2] + mx[3] + mx[4];
    fputs("{\"prefix\":", f);
    ckpt__json_write_string(f, base);
    fprintf(f,
            ",\"mode\":\"%s\",\"bytes\":%llu,\"ranks\":%d,\"blocking_s\":%.6f,"
            "\"write_s\":%.6f,\"agree_s\":%.6f,\"merge_s\":%.6f,\"commit_s\":%.6f,"
            "\"gbps\":%.4f,\"since_prev_s\":%.6f,\"training_time_saved_s\":%.6f,"
            "\"timestamp\":%.3f}\n",
            async ? "async" : "sync", (unsigned long long)bytes, size, mx[0],
            mx[1], mx[2], mx[3], mx[4], busy > 0 ? (double)bytes / busy / 1e9 : 0.0, since,
            async && busy > mx[0] ? busy - mx[0] : 0.0, now);
}

/* The record the saver fills for the same save. */
static ckpt__metrics_record saver_record(const char *base, int async, uint64_t bytes, int size,
                                         const double *mx, double since, double now)
{
    ckpt__metrics_record m = {base, async, bytes, (uint64_t)size, mx[0], mx[1], mx[2], mx[3],
                              mx[4], 0, since, 0, now, 0, {0, 0, 0, 0, 0}, 0, 0};
    double busy = ckpt__metrics_background_s(&m);
    m.gbps = ckpt__metrics_gbps(&m);
    m.training_time_saved_s = async && busy > mx[0] ? busy - mx[0] : 0.0;
    return m;
}

/* Writes m with ckpt__metrics_write_line; returns the malloc'd line. */
static char *write_line(const ckpt__metrics_record *m)
{
    memout o;
    mem_open(&o);
    CHECK_OK(ckpt__metrics_write_line(o.f, m));
    mem_close(&o);
    return o.buf;
}

/* Parses s (strlen bytes); expects CKPT_ECORRUPT with `reason` (NULL: any reason). */
static void expect_bad_n(const char *s, size_t len, const char *reason, int line)
{
    ckpt__metrics_record m;
    char why[128] = "";
    int rc = ckpt__metrics_parse_line(&m, s, len, why, sizeof why);
    CHECK_MSG(rc == CKPT_ECORRUPT, "line %d: parse of %.*s: %d (%s), expected CKPT_ECORRUPT",
              line, (int)len, s, rc, why);
    CHECK_MSG(m.prefix == NULL, "line %d: a refused line left a prefix", line);
    if (reason)
        CHECK_MSG(strcmp(why, reason) == 0, "line %d: reason '%s', expected '%s'", line, why,
                  reason);
    const ckpt_error *e = ckpt_error_last();
    CHECK_MSG(e && e->code == CKPT_ECORRUPT && strncmp(e->message, "metrics line: ", 14) == 0 &&
                  strcmp(e->message + 14, why) == 0,
              "line %d: ckpt_error_last() %s", line, e ? e->message : "(none)");
}
#define expect_bad(s, reason) expect_bad_n(s, strlen(s), reason, __LINE__)

static int near(double got, double want, int decimals)
{
    double tol = 0.5 * pow(10.0, -decimals) + fabs(want) * 4e-16;
    return fabs(got - want) <= tol * 1.0001;
}

/* ---- the JSON writer ------------------------------------------------------------------------ */

static void test_writer(void)
{
    memout o;
    mem_open(&o);
    ckpt__json_writer w;
    ckpt__json_init(&w, o.f);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, "a");
    ckpt__json_array_begin(&w);
    ckpt__json_int(&w, 1);
    ckpt__json_int(&w, INT64_MIN);
    ckpt__json_uint(&w, UINT64_MAX);
    ckpt__json_bool(&w, 1);
    ckpt__json_bool(&w, 0);
    ckpt__json_null(&w);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "b");
    ckpt__json_object_begin(&w);
    ckpt__json_object_end(&w);
    ckpt__json_key(&w, "c");
    ckpt__json_array_begin(&w);
    ckpt__json_array_begin(&w);
    ckpt__json_array_end(&w);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, "k\"ey");
    ckpt__json_string(&w, "v");
    ckpt__json_object_end(&w);
    ckpt__json_array_end(&w);
    ckpt__json_key(&w, "d");
    ckpt__json_array_begin(&w);
    ckpt__json_double(&w, 0.1, 9);
    ckpt__json_double(&w, -0.0, 9);
    ckpt__json_double(&w, NAN, 17);
    ckpt__json_double(&w, INFINITY, 17);
    ckpt__json_double(&w, -INFINITY, 17);
    ckpt__json_real(&w, 1.0);
    ckpt__json_real(&w, 0.1);
    ckpt__json_real(&w, 1e300);
    ckpt__json_real(&w, -0.0);
    ckpt__json_real(&w, NAN);
    ckpt__json_fixed(&w, 0.25, 6);
    ckpt__json_fixed(&w, -0.0, 6);
    ckpt__json_fixed(&w, 1763700000.25, 3);
    ckpt__json_fixed(&w, 0.00005, 4);
    ckpt__json_fixed(&w, -INFINITY, 6);
    ckpt__json_fixed(&w, NAN, 6);
    ckpt__json_array_end(&w);
    ckpt__json_object_end(&w);
    mem_close(&o);
    const char *want =
        "{\"a\":[1,-9223372036854775808,18446744073709551615,true,false,null],\"b\":{},"
        "\"c\":[[],{\"k\\\"ey\":\"v\"}],\"d\":[0.1,-0.0,\"NaN\",\"Infinity\",\"-Infinity\","
        "1.0,0.10000000000000001,1.0000000000000001e+300,-0.0,\"NaN\",0.250000,-0.000000,"
        "1763700000.250,0.0001,\"-Infinity\",\"NaN\"]}";
    CHECK_MSG(strcmp(o.buf, want) == 0, "writer:\n got  %s\n want %s", o.buf, want);
    free(o.buf);

    /* The escaper: quotes, backslashes, controls; UTF-8 (DEL, C1 included) kept; every byte of
     * an ill-formed sequence replaced on its own. */
    static const struct {
        const char *in, *out;
    } esc[] = {
        {"", "\"\""},
        {"\"\\/", "\"\\\"\\\\/\""},
        {"\x01\x1f\t\n\x7f", "\"\\u0001\\u001f\\u0009\\u000a\x7f\""},
        {"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc2\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc2\x80\""},
        {"a\xff" "b", "\"a\\ufffdb\""},
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                   /* overlong '/' */
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},        /* encoded surrogate */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* above U+10FFFF */
        {"\xe2\x82", "\"\\ufffd\\ufffd\""},                   /* truncated at the end */
        {"\xe2\x82" "A\xc3\xa9", "\"\\ufffd\\ufffdA\xc3\xa9\""}, /* good after bad */
    };
    for (size_t i = 0; i < CKPT__ARRAY_LEN(esc); i++) {
        mem_open(&o);
        ckpt__json_write_string(o.f, esc[i].in);
        mem_close(&o);
        CHECK_MSG(strcmp(o.buf, esc[i].out) == 0, "escape %zu: got %s, want %s", i, o.buf,
                  esc[i].out);
        free(o.buf);
    }
}

/* ---- metrics: the saver's bytes ------------------------------------------------------------- */

static const char *const prefixes[] = {
    "ckpt-1",
    "run/ckpt-12",
    "",
    "we\"ird\\ \x01\x1f\x7f tab\there",
    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
    "bad \xff\xfe \xc0\xaf \xed\xa0\x80 \xe2\x82",
    "/abs/path with spaces/ckpt-999999999999999",
};

static void test_saver_bytes(void)
{
    for (int iter = 0; iter < 10000; iter++) {
        const char *base = prefixes[iter % CKPT__ARRAY_LEN(prefixes)];
        int async = (int)(rng() & 1);
        uint64_t bytes = rng() >> (rng() % 64);
        int size = (int)(rng() % 100000) + 1;
        double mx[5];
        for (int k = 0; k < 5; k++)
            mx[k] = rng_double();
        double since = iter % 7 == 0 ? 0.0 : rng_double();
        double now = 1.7e9 + (double)(rng() % 100000000) / 1000.0 + rng_double();

        memout o;
        mem_open(&o);
        saver_line(o.f, base, async, bytes, size, mx, since, now);
        mem_close(&o);
        ckpt__metrics_record m = saver_record(base, async, bytes, size, mx, since, now);
        char *got = write_line(&m);
        CHECK_MSG(strcmp(got, o.buf) == 0, "iteration %d:\n saver  %s lib    %s", iter, o.buf,
                  got);
        free(got);
        free(o.buf);
    }
}

/* ---- metrics: write, then parse ------------------------------------------------------------- */

static void test_round_trip(void)
{
    static const char replaced[] = "bad \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
                                   "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd";
    for (int iter = 0; iter < 2000; iter++) {
        const char *base = prefixes[iter % CKPT__ARRAY_LEN(prefixes)];
        ckpt__metrics_record m = {base, (int)(rng() & 1), rng(), rng() % 5000 + 1, 0, 0, 0,
                                  0, 0, 0, 0, 0, 0, 0, {0, 0, 0, 0, 0}, 0, 0};
        double *t[] = {&m.blocking_s, &m.write_s, &m.agree_s, &m.merge_s, &m.commit_s,
                       &m.since_prev_s, &m.training_time_saved_s};
        for (size_t k = 0; k < CKPT__ARRAY_LEN(t); k++)
            *t[k] = fabs(rng_double());
        m.gbps = ckpt__metrics_gbps(&m);
        m.timestamp = 1.7e9 + rng_double();
        char *line = write_line(&m);
        size_t len = strlen(line);
        CHECK(len > 0 && line[len - 1] == '\n' && memchr(line, '\n', len) == line + len - 1);
        CHECK_EQ_INT(ckpt__metrics_line_blank(line, len), 0);

        ckpt__metrics_record r;
        char why[128] = "";
        int rc = ckpt__metrics_parse_line(&r, line, len, why, sizeof why);
        CHECK_MSG(rc == CKPT_OK, "parse of %s: %s", line, why);
        if (rc == CKPT_OK) {
            const char *want = strstr(base, "bad ") == base ? replaced : base;
            CHECK_MSG(strcmp(r.prefix, want) == 0, "prefix %s, expected %s", r.prefix, want);
            CHECK_EQ_INT(r.async, m.async);
            CHECK_MSG(r.bytes == m.bytes, "bytes %" PRIu64 " != %" PRIu64, r.bytes, m.bytes);
            CHECK_MSG(r.ranks == m.ranks, "ranks %" PRIu64 " != %" PRIu64, r.ranks, m.ranks);
            const double got[] = {r.blocking_s, r.write_s, r.agree_s, r.merge_s, r.commit_s,
                                  r.since_prev_s, r.training_time_saved_s};
            for (size_t k = 0; k < CKPT__ARRAY_LEN(got); k++)
                CHECK_MSG(near(got[k], *t[k], 6), "time %zu: %.17g != %.17g in %s", k, got[k],
                          *t[k], line);
            CHECK_MSG(near(r.gbps, m.gbps, 4), "gbps %.17g != %.17g", r.gbps, m.gbps);
            CHECK_MSG(near(r.timestamp, m.timestamp, 3), "timestamp %.17g != %.17g",
                      r.timestamp, m.timestamp);
        }
        ckpt__metrics_record_clear(&r);
        CHECK(r.prefix == NULL);

        /* Truncated: no proper prefix of the object is a line (a crash mid-append). */
        for (size_t cut = 0; iter % 10 == 0 && cut + 1 < len; cut++) {
            rc = ckpt__metrics_parse_line(&r, line, cut, why, sizeof why);
            CHECK_MSG(rc == CKPT_ECORRUPT && r.prefix == NULL,
                      "prefix of %zu bytes of %s accepted (%d)", cut, line, rc);
        }
        /* CRLF and surrounding blanks are fine; the newline is optional. */
        if (iter % 50 == 0) {
            char *crlf = malloc(len + 4);
            memcpy(crlf + 2, line, len - 1);
            memcpy(crlf, " \t", 2);
            memcpy(crlf + 2 + len - 1, "\r\n", 2);
            CHECK_OK(ckpt__metrics_parse_line(&r, crlf, len + 3, why, sizeof why));
            ckpt__metrics_record_clear(&r);
            CHECK_OK(ckpt__metrics_parse_line(&r, line, len - 1, why, sizeof why));
            ckpt__metrics_record_clear(&r);
            free(crlf);
        }
        free(line);
    }
    ckpt__metrics_record_clear(NULL);
}

/* NaN and infinities are written as strings (valid JSON), which the parser refuses. */
static void test_nonfinite(void)
{
    static const double bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    static const char *const text[] = {"\"NaN\"", "\"NaN\"", "\"Infinity\"", "\"-Infinity\""};
    static const char *const keys[] = {"blocking_s", "write_s", "agree_s", "merge_s",
                                       "commit_s", "gbps", "since_prev_s",
                                       "training_time_saved_s", "timestamp"};
    for (size_t b = 0; b < CKPT__ARRAY_LEN(bad); b++) {
        for (size_t k = 0; k < CKPT__ARRAY_LEN(keys); k++) {
            ckpt__metrics_record m = {"p", 0, 1, 1, 0.1, 0.1, 0.1, 0.1, 0.1, 1, 0, 0, 1.7e9, 0, {0, 0, 0, 0, 0}, 0, 0};
            double *f[] = {&m.blocking_s, &m.write_s, &m.agree_s, &m.merge_s, &m.commit_s,
                           &m.gbps, &m.since_prev_s, &m.training_time_saved_s, &m.timestamp};
            *f[k] = bad[b];
            char *line = write_line(&m);
            char want[64], reason[80];
            snprintf(want, sizeof want, "\"%s\":%s", keys[k], text[b]);
            CHECK_MSG(strstr(line, want) != NULL, "%s not in %s", want, line);
            snprintf(reason, sizeof reason, "\"%s\" is not a number", keys[k]);
            expect_bad_n(line, strlen(line), reason, __LINE__);
            free(line);
        }
    }
}

/* ---- metrics: hostile and odd lines ---------------------------------------------------------- */

#define REQ "\"mode\":\"sync\",\"bytes\":1,\"blocking_s\":0,\"write_s\":0,\"agree_s\":0," \
            "\"merge_s\":0,\"commit_s\":0"

static void test_hostile(void)
{
    ckpt__metrics_record r;
    char why[128];

    /* Huge numbers: the largest bytes; a time that prints long but under 128 characters; one
     * that does not fit (the writer writes it, the parser refuses it). */
    ckpt__metrics_record m = {"p", 1, UINT64_MAX, UINT64_MAX, 1e100, 1e-3, 0, 0, 1e-300, 0, 0, 0,
                              -1e15, 0, {0, 0, 0, 0, 0}, 0, 0};
    m.gbps = ckpt__metrics_gbps(&m);
    char *line = write_line(&m);
    CHECK_MSG(ckpt__metrics_parse_line(&r, line, strlen(line), why, sizeof why) == CKPT_OK,
              "%s: %s", line, why);
    CHECK(r.bytes == UINT64_MAX && r.ranks == UINT64_MAX && r.blocking_s == 1e100 &&
          r.write_s == 1e-3 && r.commit_s == 0 && r.timestamp == -1e15 && r.async == 1);
    ckpt__metrics_record_clear(&r);
    free(line);
    m.blocking_s = 1e200;
    line = write_line(&m);
    CHECK(strlen(line) > 200);
    expect_bad(line, "over-long number");
    free(line);

    /* The line as a whole */
    expect_bad("", "not a JSON object");
    expect_bad("   \n", "not a JSON object");
    expect_bad("hello", "not a JSON object");
    expect_bad("[1]", "not a JSON object");
    expect_bad("{", "truncated line (no closing '}')");
    expect_bad("{\"prefix\"", "truncated line (no value)");
    expect_bad("{\"prefix\":", "truncated line (no value)");
    expect_bad("{\"prefix\":\"p", "unterminated string");
    expect_bad("{\"prefix\":\"p\\", "unterminated string");
    expect_bad("{\"prefix\":\"p\",", "truncated line (no closing '}')");
    expect_bad("{\"prefix\":\"p\"," REQ "} x", "text after the object");
    expect_bad("{\"prefix\":\"p\"," REQ "}{}", "text after the object");
    expect_bad("{\"prefix\":\"p\" " REQ "}", "expected ',' or '}'");
    expect_bad("{\"prefix\":\"p\",," REQ "}", "expected a key");
    expect_bad("{prefix:\"p\"}", "expected a key");
    expect_bad("{\"prefix\" \"p\"}", "expected ':'");
    expect_bad_n("{\"prefix\":\"p\0\"," REQ "}", sizeof("{\"prefix\":\"p\0\"," REQ "}") - 1,
                 "NUL byte in the line", __LINE__);

    /* Values */
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":{\"a\":1}}", "nested value (the format is flat)");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":[1]}", "nested value (the format is flat)");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":nan}", "expected a string or a number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":inf}", "expected a string or a number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":-nan}", "bad number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":01}", "expected ',' or '}'");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":1.}", "bad number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":1e}", "bad number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":+1}", "expected a string or a number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":1e999}", "number out of range");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"x\":-1e999}", "number out of range");
    /* Strings */
    expect_bad("{\"prefix\":\"a\tb\"," REQ "}", "control character in a string");
    expect_bad("{\"prefix\":\"a\nb\"," REQ "}", "control character in a string");
    expect_bad("{\"prefix\":\"a\\u0000b\"," REQ "}", "NUL character in a string");
    expect_bad("{\"prefix\":\"\\ud800\"," REQ "}", "bad escape in a string");
    expect_bad("{\"prefix\":\"\\ud800\\u0041\"," REQ "}", "bad escape in a string");
    expect_bad("{\"prefix\":\"\\udc00\"," REQ "}", "bad escape in a string");
    expect_bad("{\"prefix\":\"\\u12\"," REQ "}", "bad escape in a string");
    expect_bad("{\"prefix\":\"\\x41\"," REQ "}", "bad escape in a string");
    expect_bad("{\"\\u0000\":1,\"prefix\":\"p\"," REQ "}", "NUL character in a string");
    /* Known keys */
    expect_bad("{\"prefix\":\"p\"," REQ ",\"bytes\":2}", "\"bytes\" appears twice");
    expect_bad("{\"prefix\":\"p\",\"mode\":\"fast\",\"bytes\":1,\"blocking_s\":0,\"write_s\":0,"
               "\"agree_s\":0,\"merge_s\":0,\"commit_s\":0}",
               "\"mode\" is neither \"sync\" nor \"async\"");
    expect_bad("{\"prefix\":1," REQ "}", "\"prefix\" is not a string");
    expect_bad("{\"prefix\":null," REQ "}", "\"prefix\" is not a string");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"gbps\":true}", "\"gbps\" is not a number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"since_prev_s\":\"1\"}",
               "\"since_prev_s\" is not a number");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"ranks\":-1}", "\"ranks\" is not a non-negative integer");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"ranks\":2.0}", "\"ranks\" is not a non-negative integer");
    expect_bad("{\"prefix\":\"p\",\"mode\":\"sync\",\"bytes\":18446744073709551616,"
               "\"blocking_s\":0,\"write_s\":0,\"agree_s\":0,\"merge_s\":0,\"commit_s\":0}",
               "\"bytes\" is not a non-negative integer");
    expect_bad("{\"prefix\":\"p\",\"mode\":\"sync\",\"bytes\":1e3,\"blocking_s\":0,\"write_s\":0,"
               "\"agree_s\":0,\"merge_s\":0,\"commit_s\":0}",
               "\"bytes\" is not a non-negative integer");
    expect_bad("{\"prefix\":\"p\"," REQ ",\"training_time_saved_s\":-0.5}",
               "\"training_time_saved_s\" is negative");
    expect_bad("{\"prefix\":\"p\",\"mode\":\"sync\",\"bytes\":1,\"blocking_s\":0,\"write_s\":0,"
               "\"agree_s\":0,\"merge_s\":0}",
               "missing \"commit_s\"");
    expect_bad("{}", "missing \"prefix\"");
    /* The reason is cut to the caller's buffer, and need not be asked for. */
    char small[8];
    CHECK_RC(ckpt__metrics_parse_line(&r, "{}", 2, small, sizeof small), CKPT_ECORRUPT);
    CHECK(strcmp(small, "missing") == 0);
    CHECK_RC(ckpt__metrics_parse_line(&r, "{}", 2, NULL, 0), CKPT_ECORRUPT);

    /* Accepted: any bytes but controls in strings (not checked for UTF-8), escapes decoded (in
     * keys too), surrogate pairs; unknown keys with literals; negative zero and a negative
     * timestamp; absent optional keys default (gbps computed). */
    const char *ok = "{\"\\u0070refix\":\"\xff\\u00e9\\ud83d\\ude00\\/\\\"\\b\\f\\n\\r\\t\","
                     "\"mode\":\"async\",\"bytes\":4000000000,\"blocking_s\":-0,"
                     "\"write_s\":1E0,\"agree_s\":0.5,\"merge_s\":0.25e0,\"commit_s\":0.25,"
                     "\"future\":true,\"other\":null,\"f\":false,\"timestamp\":-5}";
    CHECK_MSG(ckpt__metrics_parse_line(&r, ok, strlen(ok), why, sizeof why) == CKPT_OK, "%s",
              why);
    CHECK(r.prefix && strcmp(r.prefix, "\xff\xc3\xa9\xf0\x9f\x98\x80/\"\b\f\n\r\t") == 0);
    CHECK(r.async == 1 && r.bytes == 4000000000u && r.ranks == 0);
    CHECK(r.blocking_s == 0 && r.write_s == 1 && r.agree_s == 0.5 && r.merge_s == 0.25);
    CHECK_MSG(r.gbps == 2.0, "computed gbps %.17g", r.gbps);
    CHECK(isnan(r.since_prev_s) && r.training_time_saved_s == 0 && r.timestamp == -5);
    ckpt__metrics_record_clear(&r);

    /* Blank lines */
    CHECK_EQ_INT(ckpt__metrics_line_blank("", 0), 1);
    CHECK_EQ_INT(ckpt__metrics_line_blank(" \t\r\n", 4), 1);
    CHECK_EQ_INT(ckpt__metrics_line_blank(" x", 2), 0);
    CHECK_EQ_INT(ckpt__metrics_line_blank("\v", 1), 0);
}

/* Every single-byte change of a valid line either parses or is refused cleanly (no crash, no
 * leak: the sanitizer build runs this too). */
static void test_mutations(void)
{
    ckpt__metrics_record m = {"run/ckpt-\xc3\xa9", 1, 123456, 4, 0.5, 1, 0.25, 0.125, 0.0625,
                              0, 30, 0.9375, 1.7e9, 1, {3, 1, 0, 2, 0}, 1, 0.75};
    m.gbps = ckpt__metrics_gbps(&m);
    char *line = write_line(&m);
    size_t len = strlen(line);
    static const unsigned char bytes[] = {0, '"', '\\', '{', '}', ',', ':', '-', '.', 'e', '0',
                                          '9', 'n', 't', 'u', ' ', 0x1f, 0x7f, 0xff};
    int accepted = 0, refused = 0;
    for (size_t i = 0; i < len; i++) {
        for (size_t b = 0; b < sizeof bytes; b++) {
            char *copy = malloc(len);
            memcpy(copy, line, len);
            copy[i] = (char)bytes[b];
            ckpt__metrics_record r;
            char why[128];
            int rc = ckpt__metrics_parse_line(&r, copy, len, why, sizeof why);
            CHECK(rc == CKPT_OK || (rc == CKPT_ECORRUPT && r.prefix == NULL && why[0]));
            if (rc == CKPT_OK)
                accepted++;
            else
                refused++;
            ckpt__metrics_record_clear(&r);
            free(copy);
        }
    }
    CHECK(accepted > 0 && refused > 0);
    free(line);
}

/* The optional keys of issue 17: the slowest rank of each phase and the write phase's median,
 * written only when known, read back, refused when malformed; lines without them parse as
 * before. The MAXLOC encoding of the votes and the median. */
static void test_slowest(void)
{
    ckpt__metrics_record m = {"ckpt-2", 0, 4096, 4, 0.5, 0.25, 0.125, 0.0625, 0.03125,
                              0, 0, 0, 1.7e9, 1, {3, 2, -1, 0, 1}, 1, 0.2};
    m.gbps = ckpt__metrics_gbps(&m);
    char *line = write_line(&m);
    CHECK_MSG(strstr(line, "\"timestamp\":1700000000.000,\"blocking_slowest_rank\":3,"
                           "\"write_slowest_rank\":2,\"merge_slowest_rank\":0,"
                           "\"commit_slowest_rank\":1,\"write_median_s\":0.200000}\n") != NULL,
              "line: %s", line);
    ckpt__metrics_record r;
    char why[128];
    CHECK_OK(ckpt__metrics_parse_line(&r, line, strlen(line), why, sizeof why));
    CHECK_EQ_INT(r.have_slowest, 1);
    CHECK_EQ_INT(r.slowest_rank[0], 3);
    CHECK_EQ_INT(r.slowest_rank[1], 2);
    CHECK_EQ_INT(r.slowest_rank[2], -1);
    CHECK_EQ_INT(r.slowest_rank[3], 0);
    CHECK_EQ_INT(r.slowest_rank[4], 1);
    CHECK(r.have_write_median && r.write_median_s == 0.2);
    ckpt__metrics_record_clear(&r);
    free(line);
    const char *old = "{\"prefix\":\"p\",\"mode\":\"sync\",\"bytes\":1,\"blocking_s\":1,"
                      "\"write_s\":1,\"agree_s\":0,\"merge_s\":0,\"commit_s\":0}";
    CHECK_OK(ckpt__metrics_parse_line(&r, old, strlen(old), why, sizeof why));
    CHECK(!r.have_slowest && !r.have_write_median && r.slowest_rank[1] == -1 &&
          isnan(r.write_median_s));
    ckpt__metrics_record_clear(&r);
    static const char *const bad[] = {"\"write_slowest_rank\":-1", "\"write_slowest_rank\":1.5",
                                      "\"agree_slowest_rank\":2147483648",
                                      "\"write_median_s\":-0.5", "\"commit_slowest_rank\":\"0\""};
    for (size_t i = 0; i < CKPT__ARRAY_LEN(bad); i++) {
        char buf[512];
        snprintf(buf, sizeof buf, "{\"prefix\":\"p\",\"mode\":\"sync\",\"bytes\":1,"
                                  "\"blocking_s\":1,\"write_s\":1,\"agree_s\":0,\"merge_s\":0,"
                                  "\"commit_s\":0,%s}", bad[i]);
        CHECK_MSG(ckpt__metrics_parse_line(&r, buf, strlen(buf), why, sizeof why) ==
                      CKPT_ECORRUPT, "accepted %s", bad[i]);
    }

    /* MAXLOC in a MAX of doubles: the maximum decodes to the largest time and its rank */
    double t[] = {0.5, 2.25, 2.25 * (1 + 1e-12), 0.0, 1e-9, 7e5};
    int ranks[] = {0, 1, 2, 3, 4, (1 << 24) - 2};
    double best = 0;
    for (size_t i = 0; i < CKPT__ARRAY_LEN(t); i++) {
        double e = ckpt__maxloc_encode(t[i], ranks[i]), back;
        int rk;
        ckpt__maxloc_decode(e, &back, &rk);
        CHECK_MSG(rk == ranks[i] && fabs(back - t[i]) <= t[i] * 4e-9, "%g rank %d -> %g rank %d",
                  t[i], ranks[i], back, rk);
        if (i < 4)
            best = e > best ? e : best;
    }
    double bt;
    int br;
    ckpt__maxloc_decode(best, &bt, &br);
    /* 2.25 and 2.25(1 + 1e-12) are equal to the encoding's precision: the higher rank wins */
    CHECK_MSG(br == 2 && fabs(bt - 2.25) < 1e-8, "max: %g rank %d", bt, br);
    double neg, back;
    int rk;
    ckpt__maxloc_decode(ckpt__maxloc_encode(-1.0, 5), &back, &rk);
    CHECK(back == 0.0 && rk == 5);
    ckpt__maxloc_decode(ckpt__maxloc_encode(NAN, 1 << 24), &neg, &rk);
    CHECK(neg == 0.0 && rk == -1);

    double v[] = {5, 1, 4, 2, 3};
    CHECK(ckpt__metrics_median(v, 5) == 3);
    double w[] = {4, 1, 3, 2};
    CHECK(ckpt__metrics_median(w, 4) == 2.5);
    CHECK(isnan(ckpt__metrics_median(w, 0)));
}

int main(void)
{
    test_slowest();
    test_writer();
    test_saver_bytes();
    test_round_trip();
    test_nonfinite();
    test_hostile();
    test_mutations();
    return CHECK_DONE();
}
