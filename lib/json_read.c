/* The JSON reader (lib/json.h, "Reading"): one pass over the bytes, recursion bounded by
 * CKPT__JSON_READ_MAX_DEPTH, every value in one arena freed at once. Linear in the input: arrays
 * and objects grow by doubling in a scratch stack and are copied once into the arena. */
#include "json.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- the arena: blocks of at least 64 KiB, freed together ---- */

typedef struct block {
    struct block *next;
    size_t used, size;
    max_align_t data[]; /* aligned for any value */
} block;

struct ckpt__json_doc {
    block *blocks;
    ckpt__jv root;
};

static void *arena_alloc(ckpt__json_doc *d, size_t bytes)
{
    bytes = (bytes + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (bytes == 0)
        bytes = sizeof(max_align_t);
    block *b = d->blocks;
    if (!b || b->size - b->used < bytes) {
        size_t size = bytes > ((size_t)64 << 10) ? bytes : ((size_t)64 << 10);
        if (size > SIZE_MAX - sizeof(block))
            return NULL;
        block *nb = malloc(sizeof(block) + size);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->size = size;
        nb->next = d->blocks;
        d->blocks = nb;
        b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += bytes;
    return p;
}

void ckpt__json_doc_free(ckpt__json_doc *d)
{
    if (!d)
        return;
    for (block *b = d->blocks; b;) {
        block *next = b->next;
        free(b);
        b = next;
    }
    free(d);
}

const ckpt__jv *ckpt__json_doc_root(const ckpt__json_doc *d)
{
    return &d->root;
}

/* ---- the parser ---- */

typedef struct parser {
    ckpt__json_doc *doc;
    const unsigned char *s;
    size_t len, pos;
    char *err;
    size_t errsize;
    int failed;
    /* scratch: a string being decoded */
    char *buf;
    size_t buf_len, buf_cap;
} parser;

static int fail(parser *p, const char *fmt, ...) CKPT_PRINTF(2, 3);
static int fail(parser *p, const char *fmt, ...)
{
    if (!p->failed) {
        char what[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(p->err, p->errsize, "invalid JSON at byte %zu of %zu: %s", p->pos, p->len, what);
        p->failed = 1;
    }
    return -1;
}

static int oom(parser *p)
{
    if (!p->failed) {
        snprintf(p->err, p->errsize, "out of memory reading %zu bytes of JSON", p->len);
        p->failed = 1;
    }
    return -1;
}

static void skip_ws(parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int lit(parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return 0;
    p->pos += n;
    return 1;
}

static int buf_put(parser *p, const void *bytes, size_t n)
{
    if (p->buf_cap - p->buf_len < n + 1) {
        size_t cap = p->buf_cap ? p->buf_cap : 64;
        while (cap - p->buf_len < n + 1) {
            if (cap > SIZE_MAX / 2)
                return oom(p);
            cap *= 2;
        }
        char *nb = realloc(p->buf, cap);
        if (!nb)
            return oom(p);
        p->buf = nb;
        p->buf_cap = cap;
    }
    memcpy(p->buf + p->buf_len, bytes, n);
    p->buf_len += n;
    return 0;
}

static int hex4(parser *p, unsigned *out)
{
    if (p->len - p->pos < 4)
        return fail(p, "a \\u escape needs 4 hexadecimal digits");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p->s[p->pos + (size_t)i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return fail(p, "a \\u escape needs 4 hexadecimal digits");
    }
    p->pos += 4;
    *out = v;
    return 0;
}

static int put_code_point(parser *p, unsigned cp)
{
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return buf_put(p, u, n);
}

/* A string at p->pos (its '"'), decoded into the arena: *out (NUL-terminated, *out_len bytes,
 * which may hold NULs from \u0000). */
static int parse_string(parser *p, const char **out, size_t *out_len)
{
    p->pos++; /* '"' */
    p->buf_len = 0;
    for (;;) {
        size_t start = p->pos;
        while (p->pos < p->len && p->s[p->pos] != '"' && p->s[p->pos] != '\\' &&
               p->s[p->pos] >= 0x20)
            p->pos++;
        if (p->pos > start && buf_put(p, p->s + start, p->pos - start) < 0)
            return -1;
        if (p->pos >= p->len)
            return fail(p, "a string is not closed");
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return fail(p, "control character 0x%02x in a string (it must be escaped)", c);
        /* a backslash */
        if (++p->pos >= p->len)
            return fail(p, "a string ends in a backslash");
        c = p->s[p->pos++];
        char e;
        switch (c) {
        case '"': e = '"'; break;
        case '\\': e = '\\'; break;
        case '/': e = '/'; break;
        case 'b': e = '\b'; break;
        case 'f': e = '\f'; break;
        case 'n': e = '\n'; break;
        case 'r': e = '\r'; break;
        case 't': e = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp) < 0)
                return -1;
            if (cp >= 0xd800 && cp < 0xdc00 && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                size_t back = p->pos;
                unsigned lo;
                p->pos += 2;
                if (hex4(p, &lo) < 0)
                    return -1;
                if (lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else
                    p->pos = back; /* a lone high surrogate; the next escape stands alone */
            }
            if (cp >= 0xd800 && cp < 0xe000)
                cp = 0xfffd; /* a lone surrogate (Python writes one for such a str) */
            if (put_code_point(p, cp) < 0)
                return -1;
            continue;
        }
        default:
            p->pos--;
            return fail(p, "unknown escape '\\%c'", c >= 0x20 && c < 0x7f ? c : '?');
        }
        if (buf_put(p, &e, 1) < 0)
            return -1;
    }
    char *s = arena_alloc(p->doc, p->buf_len + 1);
    if (!s)
        return oom(p);
    memcpy(s, p->buf ? p->buf : "", p->buf_len);
    s[p->buf_len] = '\0';
    *out = s;
    *out_len = p->buf_len;
    return 0;
}

static int digits(parser *p)
{
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++;
    return p->pos > start;
}

/* A number (JSON's grammar) or NaN, Infinity, -Infinity: its text, as written. */
static int parse_number(parser *p, ckpt__jv *v)
{
    size_t start = p->pos;
    v->kind = CKPT__JV_NUMBER;
    v->is_int = 0;
    if (lit(p, "NaN") || lit(p, "Infinity") || lit(p, "-Infinity"))
        goto copy;
    if (p->pos < p->len && p->s[p->pos] == '-')
        p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '0')
        p->pos++;
    else if (!digits(p))
        return fail(p, "a number needs digits");
    int is_int = 1;
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        is_int = 0;
        if (!digits(p))
            return fail(p, "a number needs digits after '.'");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        is_int = 0;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        if (!digits(p))
            return fail(p, "a number needs digits in its exponent");
    }
    v->is_int = is_int;
copy:;
    char *t = arena_alloc(p->doc, p->pos - start + 1);
    if (!t)
        return oom(p);
    memcpy(t, p->s + start, p->pos - start);
    t[p->pos - start] = '\0';
    v->text = t;
    v->len = p->pos - start;
    return 0;
}

static int parse_value(parser *p, ckpt__jv *v, int depth);

/* The members or elements of an object or array at p->pos (its '{' or '['). */
static int parse_container(parser *p, ckpt__jv *v, int depth, int object)
{
    if (depth >= CKPT__JSON_READ_MAX_DEPTH)
        return fail(p, "nested deeper than %d levels", CKPT__JSON_READ_MAX_DEPTH);
    char close = object ? '}' : ']';
    p->pos++;
    v->kind = object ? CKPT__JV_OBJECT : CKPT__JV_ARRAY;
    v->n = 0;
    v->items = NULL;
    v->keys = NULL;
    v->key_lens = NULL;
    ckpt__jv *items = NULL;
    const char **keys = NULL;
    size_t *key_lens = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            ckpt__jv *ni = nc < SIZE_MAX / sizeof *ni ? realloc(items, nc * sizeof *ni) : NULL;
            if (!ni) {
                oom(p);
                goto out;
            }
            items = ni;
            if (object) {
                const char **nk = realloc(keys, nc * sizeof *nk);
                if (nk)
                    keys = nk;
                size_t *nl = nk ? realloc(key_lens, nc * sizeof *nl) : NULL;
                if (!nl) {
                    oom(p);
                    goto out;
                }
                key_lens = nl;
            }
            cap = nc;
        }
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') {
                fail(p, "expected a member name (a string)");
                goto out;
            }
            if (parse_string(p, &keys[n], &key_lens[n]) < 0)
                goto out;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                fail(p, "expected ':' after a member name");
                goto out;
            }
            p->pos++;
        }
        if (parse_value(p, &items[n], depth + 1) < 0)
            goto out;
        n++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            break;
        }
        fail(p, "expected ',' or '%c'", close);
        goto out;
    }
    v->items = arena_alloc(p->doc, n * sizeof *items);
    if (!v->items) {
        oom(p);
        goto out;
    }
    memcpy(v->items, items, n * sizeof *items);
    if (object) {
        v->keys = arena_alloc(p->doc, n * sizeof *keys);
        v->key_lens = arena_alloc(p->doc, n * sizeof *key_lens);
        if (!v->keys || !v->key_lens) {
            oom(p);
            goto out;
        }
        memcpy(v->keys, keys, n * sizeof *keys);
        memcpy(v->key_lens, key_lens, n * sizeof *key_lens);
    }
    v->n = n;
    rc = 0;
out:
    free(items);
    free(keys);
    free(key_lens);
    return rc;
}

static int parse_value(parser *p, ckpt__jv *v, int depth)
{
    memset(v, 0, sizeof *v);
    skip_ws(p);
    if (p->pos >= p->len)
        return fail(p, "expected a value, found the end");
    unsigned char c = p->s[p->pos];
    switch (c) {
    case '{': return parse_container(p, v, depth, 1);
    case '[': return parse_container(p, v, depth, 0);
    case '"':
        v->kind = CKPT__JV_STRING;
        return parse_string(p, &v->text, &v->len);
    case 't':
    case 'f':
    case 'n':
        if (lit(p, "true") || lit(p, "false")) {
            v->kind = CKPT__JV_BOOL;
            v->boolean = c == 't';
            return 0;
        }
        if (lit(p, "null")) {
            v->kind = CKPT__JV_NULL;
            return 0;
        }
        break;
    default:
        if (c == '-' || c == 'N' || c == 'I' || (c >= '0' && c <= '9'))
            return parse_number(p, v);
        break;
    }
    if (c >= 0x20 && c < 0x7f)
        return fail(p, "unexpected '%c'", c);
    return fail(p, "unexpected byte 0x%02x", c);
}

int ckpt__json_parse(ckpt__json_doc **out, const char *text, size_t len, char *err,
                     size_t errsize)
{
    *out = NULL;
    if (errsize)
        err[0] = '\0';
    char dummy[8];
    if (!err || errsize == 0) {
        err = dummy;
        errsize = sizeof dummy;
    }
    if (len && !ckpt__utf8_valid(text, len)) {
        /* the offset of the first bad byte, for the message */
        size_t at = 0;
        while (at < len) {
            unsigned char c = (unsigned char)text[at];
            size_t n = c < 0x80 ? 1 : ckpt__utf8_seq_len((const unsigned char *)text + at,
                                                         len - at);
            if (n == 0)
                break;
            at += n;
        }
        snprintf(err, errsize, "invalid JSON at byte %zu of %zu: not valid UTF-8", at, len);
        return CKPT_ECORRUPT;
    }
    ckpt__json_doc *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errsize, "out of memory reading %zu bytes of JSON", len);
        return CKPT_ENOMEM;
    }
    parser p = {d, (const unsigned char *)text, len, 0, err, errsize, 0, NULL, 0, 0};
    int rc = parse_value(&p, &d->root, 0);
    if (rc == 0) {
        skip_ws(&p);
        if (p.pos != p.len)
            rc = fail(&p, "trailing bytes after the value");
    }
    free(p.buf);
    if (rc != 0) {
        int nomem = strncmp(err, "out of memory", 13) == 0;
        ckpt__json_doc_free(d);
        return nomem ? CKPT_ENOMEM : CKPT_ECORRUPT;
    }
    *out = d;
    return CKPT_OK;
}

const ckpt__jv *ckpt__jv_get(const ckpt__jv *obj, const char *key)
{
    if (!obj || obj->kind != CKPT__JV_OBJECT)
        return NULL;
    size_t klen = strlen(key);
    /* the last of repeated names, as Python's json module keeps */
    for (size_t i = obj->n; i-- > 0;)
        if (obj->key_lens[i] == klen && memcmp(obj->keys[i], key, klen) == 0)
            return &obj->items[i];
    return NULL;
}

void ckpt__json_value(ckpt__json_writer *w, const ckpt__jv *v, int python)
{
    switch (v->kind) {
    case CKPT__JV_NULL: ckpt__json_null(w); break;
    case CKPT__JV_BOOL: ckpt__json_bool(w, v->boolean); break;
    case CKPT__JV_STRING: ckpt__json_string_n(w, v->text, v->len); break;
    case CKPT__JV_NUMBER:
        if (!python && (v->text[0] == 'N' || v->text[0] == 'I' || v->text[1] == 'I')) {
            /* NaN and the infinities as the strings of json.h when the output must be JSON */
            char s[16];
            snprintf(s, sizeof s, "%.*s", (int)v->len, v->text);
            ckpt__json_string(w, s);
        } else {
            ckpt__json_raw(w, v->text, v->len);
        }
        break;
    case CKPT__JV_ARRAY:
        ckpt__json_array_begin(w);
        for (size_t i = 0; i < v->n; i++)
            ckpt__json_value(w, &v->items[i], python);
        ckpt__json_array_end(w);
        break;
    case CKPT__JV_OBJECT:
        ckpt__json_object_begin(w);
        for (size_t i = 0; i < v->n; i++) {
            ckpt__json_key_n(w, v->keys[i], v->key_lens[i]);
            ckpt__json_value(w, &v->items[i], python);
        }
        ckpt__json_object_end(w);
        break;
    }
}
