#include "json.h"

#include "jsonstr.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(json_writer *w, FILE *out)
{
    w->out = out;
    w->depth = 0;
    w->has_item[0] = 0;
    w->after_key = 0;
}

/* Emits the separator due before a value or key at the current level and marks the level as
 * non-empty. A value right after its key needs none. */
static void json_separate(json_writer *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    if (w->has_item[w->depth])
        fputc(',', w->out);
    w->has_item[w->depth] = 1;
}

static void json_open(json_writer *w, char c)
{
    json_separate(w);
    if (w->depth + 1 >= JSON_MAX_DEPTH)
        abort(); /* the tool's documents are shallow; deeper nesting is a bug */
    fputc(c, w->out);
    w->has_item[++w->depth] = 0;
}

static void json_close(json_writer *w, char c)
{
    if (w->depth > 0)
        w->depth--;
    fputc(c, w->out);
}

void json_object_begin(json_writer *w) { json_open(w, '{'); }
void json_object_end(json_writer *w) { json_close(w, '}'); }
void json_array_begin(json_writer *w) { json_open(w, '['); }
void json_array_end(json_writer *w) { json_close(w, ']'); }

void json_write_escaped(FILE *out, const char *s)
{
    ckpt__json_write_string(out, s);
}

void json_key(json_writer *w, const char *key)
{
    json_separate(w);
    json_write_escaped(w->out, key);
    fputc(':', w->out);
    w->after_key = 1;
}

void json_string(json_writer *w, const char *s)
{
    json_separate(w);
    json_write_escaped(w->out, s);
}

void json_int(json_writer *w, int64_t v)
{
    json_separate(w);
    fprintf(w->out, "%" PRId64, v);
}

void json_uint(json_writer *w, uint64_t v)
{
    json_separate(w);
    fprintf(w->out, "%" PRIu64, v);
}

void json_bool(json_writer *w, int v)
{
    json_separate(w);
    fputs(v ? "true" : "false", w->out);
}

void json_null(json_writer *w)
{
    json_separate(w);
    fputs("null", w->out);
}

void json_double(json_writer *w, double v, int digits)
{
    json_separate(w);
    if (isnan(v))
        fputs("\"NaN\"", w->out);
    else if (isinf(v))
        fputs(v > 0 ? "\"Infinity\"" : "\"-Infinity\"", w->out);
    else if (v == 0 && signbit(v))
        fputs("-0.0", w->out); /* "%g" gives "-0", which Python's json reads as the integer 0 */
    else
        fprintf(w->out, "%.*g", digits, v);
}

void json_real(json_writer *w, double v)
{
    char buf[40];
    if (!isfinite(v)) {
        json_double(w, v, 17);
        return;
    }
    json_separate(w);
    snprintf(buf, sizeof buf, "%.17g", v);
    fputs(buf, w->out);
    if (!strpbrk(buf, ".e"))
        fputs(".0", w->out);
}
