#include "json.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void ckpt__json_write_string(FILE *out, const char *s)
{
    ckpt__json_write_string_n(out, s, strlen(s));
}

void ckpt__json_write_string_n(FILE *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    fputc('"', out);
    const unsigned char *end = (const unsigned char *)s + len;
    for (const unsigned char *p = (const unsigned char *)s; p < end;) {
        if (*p == '"' || *p == '\\') {
            fputc('\\', out);
            fputc(*p++, out);
        } else if (*p < 0x20) {
            fputs("\\u00", out);
            fputc(hex[*p >> 4], out);
            fputc(hex[*p & 0xf], out);
            p++;
        } else if (*p < 0x80) {
            fputc(*p++, out);
        } else {
            size_t n = ckpt__utf8_seq_len(p, (size_t)(end - p));
            if (n == 0) {
                /* One replacement per byte: the next byte may start a good sequence. */
                fputs("\\ufffd", out);
                p++;
            } else {
                fwrite(p, 1, n, out);
                p += n;
            }
        }
    }
    fputc('"', out);
}

void ckpt__json_init(ckpt__json_writer *w, FILE *out)
{
    w->out = out;
    w->depth = 0;
    w->has_item[0] = 0;
    w->after_key = 0;
}

/* Emits the separator due before a value or key at the current level and marks the level as
 * non-empty. A value right after its key needs none. */
static void json_separate(ckpt__json_writer *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->has_item[w->depth])
        fputc(',', w->out);
    w->has_item[w->depth] = 1;
}

static void json_open(ckpt__json_writer *w, char c)
{
    json_separate(w);
    if (w->depth + 1 >= CKPT__JSON_MAX_DEPTH)
        abort(); /* deeper nesting is a bug in the caller (see json.h) */
    fputc(c, w->out);
    w->has_item[++w->depth] = 0;
}

static void json_close(ckpt__json_writer *w, char c)
{
    if (w->depth > 0)
        w->depth--;
    fputc(c, w->out);
}

void ckpt__json_object_begin(ckpt__json_writer *w) { json_open(w, '{'); }
void ckpt__json_object_end(ckpt__json_writer *w) { json_close(w, '}'); }
void ckpt__json_array_begin(ckpt__json_writer *w) { json_open(w, '['); }
void ckpt__json_array_end(ckpt__json_writer *w) { json_close(w, ']'); }

void ckpt__json_key(ckpt__json_writer *w, const char *key)
{
    json_separate(w);
    ckpt__json_write_string(w->out, key);
    fputc(':', w->out);
    w->after_key = 1;
}

void ckpt__json_string(ckpt__json_writer *w, const char *s)
{
    json_separate(w);
    ckpt__json_write_string(w->out, s);
}

void ckpt__json_string_n(ckpt__json_writer *w, const char *s, size_t len)
{
    json_separate(w);
    ckpt__json_write_string_n(w->out, s, len);
}

void ckpt__json_key_n(ckpt__json_writer *w, const char *key, size_t len)
{
    json_separate(w);
    ckpt__json_write_string_n(w->out, key, len);
    fputc(':', w->out);
    w->after_key = 1;
}

void ckpt__json_raw(ckpt__json_writer *w, const char *text, size_t len)
{
    json_separate(w);
    fwrite(text, 1, len, w->out);
}

void ckpt__json_int(ckpt__json_writer *w, int64_t v)
{
    json_separate(w);
    fprintf(w->out, "%" PRId64, v);
}

void ckpt__json_uint(ckpt__json_writer *w, uint64_t v)
{
    json_separate(w);
    fprintf(w->out, "%" PRIu64, v);
}

void ckpt__json_bool(ckpt__json_writer *w, int v)
{
    json_separate(w);
    fputs(v ? "true" : "false", w->out);
}

void ckpt__json_kstring(ckpt__json_writer *w, const char *key, const char *s)
{
    ckpt__json_key(w, key);
    ckpt__json_string(w, s);
}

void ckpt__json_kint(ckpt__json_writer *w, const char *key, int64_t v)
{
    ckpt__json_key(w, key);
    ckpt__json_int(w, v);
}

void ckpt__json_kuint(ckpt__json_writer *w, const char *key, uint64_t v)
{
    ckpt__json_key(w, key);
    ckpt__json_uint(w, v);
}

void ckpt__json_kbool(ckpt__json_writer *w, const char *key, int v)
{
    ckpt__json_key(w, key);
    ckpt__json_bool(w, v);
}

void ckpt__json_null(ckpt__json_writer *w)
{
    json_separate(w);
    fputs("null", w->out);
}

/* NaN and the infinities as strings (json.h); returns 1 when v was one of them (written). */
static int json_nonfinite(ckpt__json_writer *w, double v)
{
    if (isnan(v))
        fputs("\"NaN\"", w->out);
    else if (isinf(v))
        fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", w->out);
    else
        return 0;
    return 1;
}

void ckpt__json_double(ckpt__json_writer *w, double v, int digits)
{
    json_separate(w);
    if (json_nonfinite(w, v))
        return;
    if (v == 0 && signbit(v))
        fputs("-0.0", w->out); /* "%g" gives "-0", which Python's json reads as the integer 0 */
    else
        fprintf(w->out, "%.*g", digits, v);
}

void ckpt__json_real(ckpt__json_writer *w, double v)
{
    char buf[40];
    json_separate(w);
    if (json_nonfinite(w, v))
        return;
    snprintf(buf, sizeof buf, "%.17g", v);
    fputs(buf, w->out);
    if (!strpbrk(buf, ".e"))
        fputs(".0", w->out);
}

void ckpt__json_fixed(ckpt__json_writer *w, double v, int decimals)
{
    json_separate(w);
    if (!json_nonfinite(w, v))
        fprintf(w->out, "%.*f", decimals, v);
}
