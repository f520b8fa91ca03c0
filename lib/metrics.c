#include "metrics.h"

#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys of a line, in the order the writer puts them. The parser knows exactly these; any
 * other key is accepted and ignored. */
enum {
    MK_PREFIX, MK_MODE, MK_BYTES, MK_RANKS, MK_BLOCKING, MK_WRITE, MK_AGREE, MK_MERGE, MK_COMMIT,
    MK_GBPS, MK_SINCE, MK_SAVED, MK_TIMESTAMP,
    MK_SLOWEST, /* MK_SLOWEST + k: phase k's slowest rank */
    MK_MEDIAN = MK_SLOWEST + CKPT__METRICS_PHASES, MK_COUNT
};
static const char *const metrics_keys[MK_COUNT] = {
    "prefix", "mode", "bytes", "ranks", "blocking_s", "write_s", "agree_s", "merge_s",
    "commit_s", "gbps", "since_prev_s", "training_time_saved_s", "timestamp",
    "blocking_slowest_rank", "write_slowest_rank", "agree_slowest_rank", "merge_slowest_rank",
    "commit_slowest_rank", "write_median_s"};

const char *const ckpt__metrics_phase_names[CKPT__METRICS_PHASES] = {"blocking", "write", "agree",
                                                                     "merge", "commit"};

double ckpt__metrics_phase_s(const ckpt__metrics_record *m, int k)
{
    switch (k) {
    case 0: return m->blocking_s;
    case 1: return m->write_s;
    case 2: return m->agree_s;
    case 3: return m->merge_s;
    default: return m->commit_s;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

double ckpt__metrics_median(double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
/* Every line must have these; the others default (gbps is then computed). */
#define MK_REQUIRED                                                                         \
    (1u << MK_PREFIX | 1u << MK_MODE | 1u << MK_BYTES | 1u << MK_BLOCKING | 1u << MK_WRITE | \
     1u << MK_AGREE | 1u << MK_MERGE | 1u << MK_COMMIT)

/* The reason that makes the parser return CKPT_ENOMEM (compared by address). */
static const char reason_oom[] = "out of memory";

double ckpt__metrics_background_s(const ckpt__metrics_record *m)
{
    return m->write_s + m->agree_s + m->merge_s + m->commit_s;
}

double ckpt__metrics_gbps(const ckpt__metrics_record *m)
{
    double busy = ckpt__metrics_background_s(m);
    return busy > 0 ? (double)m->bytes / busy / 1e9 : 0.0;
}

/* ---------------------------------------------------------------------------------------- */
/* Writer                                                                                     */

int ckpt__metrics_write_line(FILE *out, const ckpt__metrics_record *m)
{
    /* Decimals of the floating-point keys (MK_BLOCKING .. MK_TIMESTAMP), in key order. */
    const double reals[] = {m->blocking_s, m->write_s, m->agree_s, m->merge_s, m->commit_s,
                            m->gbps, m->since_prev_s, m->training_time_saved_s, m->timestamp};
    enum { NREALS = sizeof reals / sizeof reals[0] };
    static const int decimals[] = {6, 6, 6, 6, 6, 4, 6, 6, 3};
    ckpt__json_writer w;
    ckpt__json_init(&w, out);
    ckpt__json_object_begin(&w);
    ckpt__json_key(&w, metrics_keys[MK_PREFIX]);
    ckpt__json_string(&w, m->prefix ? m->prefix : "");
    ckpt__json_key(&w, metrics_keys[MK_MODE]);
    ckpt__json_string(&w, m->async ? "async" : "sync");
    ckpt__json_key(&w, metrics_keys[MK_BYTES]);
    ckpt__json_uint(&w, m->bytes);
    ckpt__json_key(&w, metrics_keys[MK_RANKS]);
    ckpt__json_uint(&w, m->ranks);
    for (int k = MK_BLOCKING; k < MK_BLOCKING + NREALS; k++) {
        ckpt__json_key(&w, metrics_keys[k]);
        ckpt__json_fixed(&w, reals[k - MK_BLOCKING], decimals[k - MK_BLOCKING]);
    }
    for (int k = 0; m->have_slowest && k < CKPT__METRICS_PHASES; k++)
        if (m->slowest_rank[k] >= 0) {
            ckpt__json_key(&w, metrics_keys[MK_SLOWEST + k]);
            ckpt__json_uint(&w, (uint64_t)m->slowest_rank[k]);
        }
    if (m->have_write_median) {
        ckpt__json_key(&w, metrics_keys[MK_MEDIAN]);
        ckpt__json_fixed(&w, m->write_median_s, 6);
    }
    ckpt__json_object_end(&w);
    fputc('\n', out);
    return ferror(out) ? ckpt__error(CKPT_EIO, "cannot write a metrics line") : CKPT_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Parser: a strict reader of one flat JSON object                                            */

/* A JSON value of a flat object: a string (decoded, malloc'd), a number, or a literal. */
typedef struct metrics_value {
    enum { MV_STRING, MV_NUMBER, MV_LITERAL } type;
    char *str;
    double num;
    int is_uint; /* the number is a plain non-negative integer, exact in u */
    uint64_t u;
} metrics_value;

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

int ckpt__metrics_line_blank(const char *line, size_t len)
{
    return skip_ws(line, line + len) == line + len;
}

static int hex4(const char *p, const char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* A JSON string at *pp (at its opening quote) into a malloc'd, NUL-terminated copy with the
 * escapes decoded (\uXXXX, surrogate pairs included, to UTF-8). Advances *pp past the closing
 * quote. Returns 0, or -1 with a reason in *why (out of memory is a reason too). */
static int parse_string(const char **pp, const char *end, char **out, const char **why)
{
    const char *p = *pp + 1, *q = p;
    /* The decoded string is never longer than its source: room for the source up to the closing
     * quote, not for the rest of the line (a line of many strings would otherwise allocate, and
     * under a sanitizer touch, a quadratic number of bytes). */
    while (q < end && *q != '"')
        q += *q == '\\' && q + 1 < end ? 2 : 1;
    char *s = malloc((size_t)(q - p) + 1), *o = s;
    if (!s) {
        *why = reason_oom;
        return -1;
    }
    for (;;) {
        if (p >= end) {
            *why = "unterminated string";
            goto bad;
        }
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            break;
        if (c < 0x20) {
            *why = "control character in a string";
            goto bad;
        }
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (p >= end) {
            *why = "unterminated string";
            goto bad;
        }
        c = (unsigned char)*p++;
        switch (c) {
        case '"': case '\\': case '/': *o++ = (char)c; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(p, end, &cp) != 0)
                goto bad_escape;
            p += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                goto bad_escape;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) != 0 ||
                    lo < 0xdc00 || lo > 0xdfff)
                    goto bad_escape;
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0) {
                *why = "NUL character in a string";
                goto bad;
            }
            /* at most 4 output bytes for at least 6 input bytes */
            if (cp < 0x80) {
                *o++ = (char)cp;
            } else if (cp < 0x800) {
                *o++ = (char)(0xc0 | cp >> 6);
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else if (cp < 0x10000) {
                *o++ = (char)(0xe0 | cp >> 12);
                *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            } else {
                *o++ = (char)(0xf0 | cp >> 18);
                *o++ = (char)(0x80 | (cp >> 12 & 0x3f));
                *o++ = (char)(0x80 | (cp >> 6 & 0x3f));
                *o++ = (char)(0x80 | (cp & 0x3f));
            }
            break;
        }
        default:
            goto bad_escape;
        }
    }
    *o = '\0';
    *out = s;
    *pp = p;
    return 0;
bad_escape:
    *why = "bad escape in a string";
bad:
    free(s);
    return -1;
}

/* A JSON number (strict grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), finite. */
static int parse_number(const char **pp, const char *end, metrics_value *v, const char **why)
{
    const char *p = *pp, *start = p;
    int integer = 1;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0') {
        p++;
    } else if (p < end && *p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    } else {
        goto bad;
    }
    if (p < end && *p == '.') {
        integer = 0;
        if (++p >= end || *p < '0' || *p > '9')
            goto bad;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        integer = 0;
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            goto bad;
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    char buf[128];
    size_t n = (size_t)(p - start);
    if (n >= sizeof buf) {
        *why = "over-long number";
        return -1;
    }
    memcpy(buf, start, n);
    buf[n] = '\0';
    v->type = MV_NUMBER;
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) {
        *why = "number out of range";
        return -1;
    }
    v->is_uint = 0;
    if (integer && buf[0] != '-') {
        errno = 0;
        unsigned long long u = strtoull(buf, NULL, 10);
        v->is_uint = errno == 0;
        v->u = (uint64_t)u;
    }
    *pp = p;
    return 0;
bad:
    *why = "bad number";
    return -1;
}

static int parse_value(const char **pp, const char *end, metrics_value *v, const char **why)
{
    static const char *const literals[] = {"true", "false", "null"};
    const char *p = *pp;
    v->str = NULL;
    if (p >= end) {
        *why = "truncated line (no value)";
        return -1;
    }
    if (*p == '"') {
        v->type = MV_STRING;
        return parse_string(pp, end, &v->str, why);
    }
    if (*p == '-' || (*p >= '0' && *p <= '9'))
        return parse_number(pp, end, v, why);
    for (size_t i = 0; i < CKPT__ARRAY_LEN(literals); i++) {
        size_t n = strlen(literals[i]);
        if ((size_t)(end - p) >= n && memcmp(p, literals[i], n) == 0) {
            v->type = MV_LITERAL;
            *pp = p + n;
            return 0;
        }
    }
    *why = *p == '{' || *p == '[' ? "nested value (the format is flat)" :
                                    "expected a string or a number";
    return -1;
}

/* Stores a known key's value into m; returns 0 or -1 with a reason (about the value). */
static int store(ckpt__metrics_record *m, int key, metrics_value *v, const char **why)
{
    if (key == MK_PREFIX || key == MK_MODE) {
        if (v->type != MV_STRING) {
            *why = "not a string";
            return -1;
        }
        if (key == MK_MODE) {
            if (strcmp(v->str, "sync") != 0 && strcmp(v->str, "async") != 0) {
                *why = "neither \"sync\" nor \"async\"";
                return -1;
            }
            m->async = v->str[0] == 'a';
            return 0;
        }
        m->prefix = v->str;
        v->str = NULL;
        return 0;
    }
    if (v->type != MV_NUMBER) {
        *why = "not a number";
        return -1;
    }
    if (key >= MK_SLOWEST && key < MK_SLOWEST + CKPT__METRICS_PHASES) {
        if (!v->is_uint || v->u > INT32_MAX) {
            *why = "not a rank (an integer in 0..2147483647)";
            return -1;
        }
        m->slowest_rank[key - MK_SLOWEST] = (int)v->u;
        m->have_slowest = 1;
        return 0;
    }
    if (key == MK_BYTES || key == MK_RANKS) {
        if (!v->is_uint) {
            *why = "not a non-negative integer";
            return -1;
        }
        if (key == MK_BYTES)
            m->bytes = v->u;
        else
            m->ranks = v->u;
        return 0;
    }
    if (v->num < 0 && key != MK_TIMESTAMP) {
        *why = "negative";
        return -1;
    }
    switch (key) {
    case MK_BLOCKING: m->blocking_s = v->num; break;
    case MK_WRITE: m->write_s = v->num; break;
    case MK_AGREE: m->agree_s = v->num; break;
    case MK_MERGE: m->merge_s = v->num; break;
    case MK_COMMIT: m->commit_s = v->num; break;
    case MK_GBPS: m->gbps = v->num; break;
    case MK_SINCE: m->since_prev_s = v->num; break;
    case MK_SAVED: m->training_time_saved_s = v->num; break;
    case MK_TIMESTAMP: m->timestamp = v->num; break;
    case MK_MEDIAN:
        m->write_median_s = v->num;
        m->have_write_median = 1;
        break;
    default: break;
    }
    return 0;
}

int ckpt__metrics_parse_line(ckpt__metrics_record *out, const char *line, size_t len,
                             char *reason, size_t reason_size)
{
    char msg[128]; /* the reason, whatever reason_size is */
    const char *p = line, *end = line + len;
    const char *why = NULL;
    unsigned seen = 0;
    memset(out, 0, sizeof *out);
    out->gbps = out->since_prev_s = out->timestamp = out->write_median_s = NAN;
    for (int k = 0; k < CKPT__METRICS_PHASES; k++)
        out->slowest_rank[k] = -1;
    if (memchr(line, '\0', len)) {
        why = "NUL byte in the line";
        goto bad;
    }
    p = skip_ws(p, end);
    if (p >= end || *p != '{') {
        why = "not a JSON object";
        goto bad;
    }
    p = skip_ws(p + 1, end);
    int first = 1;
    while (p < end && *p != '}') {
        if (!first) {
            if (*p != ',') {
                why = "expected ',' or '}'";
                goto bad;
            }
            p = skip_ws(p + 1, end);
        }
        first = 0;
        char *key = NULL;
        metrics_value v;
        if (p >= end || *p != '"') {
            why = p >= end ? "truncated line (no closing '}')" : "expected a key";
            goto bad;
        }
        if (parse_string(&p, end, &key, &why) != 0)
            goto bad;
        p = skip_ws(p, end);
        if (p >= end || *p != ':') {
            free(key);
            why = p >= end ? "truncated line (no value)" : "expected ':'";
            goto bad;
        }
        p = skip_ws(p + 1, end);
        if (parse_value(&p, end, &v, &why) != 0) {
            free(key);
            goto bad;
        }
        int k = 0;
        while (k < MK_COUNT && strcmp(metrics_keys[k], key) != 0)
            k++;
        free(key);
        int rc = 0;
        if (k < MK_COUNT) {
            if (seen & 1u << k) {
                snprintf(msg, sizeof msg, "\"%s\" appears twice", metrics_keys[k]);
                rc = -1;
            } else {
                seen |= 1u << k;
                if ((rc = store(out, k, &v, &why)) != 0)
                    snprintf(msg, sizeof msg, "\"%s\" is %s", metrics_keys[k], why);
            }
        }
        free(v.str);
        if (rc != 0)
            goto out;
        p = skip_ws(p, end);
    }
    if (p >= end) {
        why = "truncated line (no closing '}')";
        goto bad;
    }
    if (skip_ws(p + 1, end) != end) {
        why = "text after the object";
        goto bad;
    }
    if ((seen & MK_REQUIRED) != MK_REQUIRED) {
        int k = 0;
        while (seen & 1u << k || !(MK_REQUIRED & 1u << k))
            k++;
        snprintf(msg, sizeof msg, "missing \"%s\"", metrics_keys[k]);
        goto out;
    }
    if (isnan(out->gbps))
        out->gbps = ckpt__metrics_gbps(out);
    return CKPT_OK;
bad:
    snprintf(msg, sizeof msg, "%s", why);
out:
    ckpt__metrics_record_clear(out);
    if (reason_size > 0)
        snprintf(reason, reason_size, "%s", msg);
    if (why == reason_oom)
        return ckpt__error(CKPT_ENOMEM, "%s", reason_oom);
    return ckpt__error(CKPT_ECORRUPT, "metrics line: %s", msg);
}

void ckpt__metrics_record_clear(ckpt__metrics_record *m)
{
    if (!m)
        return;
    free((void *)m->prefix);
    m->prefix = NULL;
}

int ckpt__metrics_read_line(FILE *f, char *buf, size_t *len)
{
    size_t n = 0;
    int c = EOF;
    /* getc_unlocked under one lock: a byte at a time at memory speed, and no line-sized buffer
     * such as getline() grows to whatever one line holds */
    flockfile(f);
    while ((c = getc_unlocked(f)) != EOF) {
        if (n < CKPT__METRICS_MAX_LINE)
            buf[n] = (char)c;
        if (n < SIZE_MAX)
            n++;
        if (c == '\n')
            break;
    }
    int err = ferror_unlocked(f);
    funlockfile(f);
    *len = n;
    if (err)
        return -1;
    if (n == 0)
        return CKPT__LINE_EOF;
    return n >= CKPT__METRICS_MAX_LINE ? CKPT__LINE_TOO_LONG : CKPT__LINE_OK;
}
