/* A tiny streaming JSON writer for the mpickpt command-line tool. Not installed.
 *
 * Output is compact (no whitespace). The writer inserts the commas between members and elements
 * itself, so callers only say what comes next: object/array begin and end, keys and values.
 * Every document is valid JSON in valid UTF-8, whatever bytes the strings hold: '"', '\\' and
 * control characters below 0x20 are escaped, well-formed UTF-8 (DEL and the C1 controls included)
 * passes through unchanged, so names that are UTF-8 round-trip exactly, and each byte that is not
 * part of a well-formed UTF-8 sequence (a stray 0xff, a truncated or overlong sequence, an encoded
 * surrogate, a code point above U+10FFFF) becomes \ufffd, U+FFFD. Keys are written the same way.
 * (lib/jsonstr.c does the escaping; the saver's metrics.jsonl uses it too.) */
#ifndef MPICKPT_CLI_JSON_H
#define MPICKPT_CLI_JSON_H

#include <stdint.h>
#include <stdio.h>

/* Deepest nesting the writer tracks; deeper begin calls are a programming error (abort). */
#define JSON_MAX_DEPTH 32

typedef struct json_writer {
    FILE *out;
    int depth;                             /* open objects/arrays */
    unsigned char has_item[JSON_MAX_DEPTH]; /* per level: a comma is due before the next item */
    int after_key;                          /* a key was written; its value comes next */
} json_writer;

void json_init(json_writer *w, FILE *out);

void json_object_begin(json_writer *w);
void json_object_end(json_writer *w);
void json_array_begin(json_writer *w);
void json_array_end(json_writer *w);

/* Writes a member name inside an object; the next call writes its value. */
void json_key(json_writer *w, const char *key);

void json_string(json_writer *w, const char *s);
void json_int(json_writer *w, int64_t v);
void json_uint(json_writer *w, uint64_t v);
void json_bool(json_writer *w, int v);
void json_null(json_writer *w);

/* A floating-point value with `digits` significant digits ("%.*g"). JSON has no NaN or infinity,
 * so those become the strings "NaN", "Infinity" and "-Infinity" (what Python's json module and
 * JavaScript's Number() understand). Negative zero is written "-0.0" so that it survives parsers
 * that read "-0" as an integer. */
void json_double(json_writer *w, double v, int digits);

/* A floating-point value that always reads back as one: "%.17g" (exact for a double), plus ".0"
 * when that looks like an integer, so typed consumers see a float whatever the value. NaN and
 * infinities as in json_double(). */
void json_real(json_writer *w, double v);

/* Writes `s` as a JSON string literal (with quotes) to `out`, escaped and made valid UTF-8 as
 * described above. Exposed for callers that print JSON fragments without a writer. */
void json_write_escaped(FILE *out, const char *s);

#endif
