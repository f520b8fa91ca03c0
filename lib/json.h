/* The one JSON writer of the project: the CLI's documents (lib/cli/) and the saver's
 * metrics.jsonl (lib/metrics.c) both go through it. Not installed.
 *
 * Output is compact (no whitespace). The writer inserts the commas between members and elements
 * itself, so callers only say what comes next: object/array begin and end, keys and values.
 * Every document is valid JSON in valid UTF-8, whatever bytes the strings hold: '"', '\\' and
 * control characters below 0x20 are escaped, well-formed UTF-8 (DEL and the C1 controls included)
 * passes through unchanged, so names that are UTF-8 round-trip exactly, and each byte that is not
 * part of a well-formed UTF-8 sequence (a stray 0xff, a truncated or overlong sequence, an encoded
 * surrogate, a code point above U+10FFFF) becomes \ufffd, U+FFFD. Keys are written the same way.
 * Names, prefixes and paths are bytes from users and from disk; a single byte that is not UTF-8
 * must not make a whole document unreadable.
 *
 * JSON has no NaN or infinity: every floating-point writer turns them into the strings "NaN",
 * "Infinity" and "-Infinity" (what Python's json module and JavaScript's Number() understand).
 *
 * The writer does not check the stream: callers check ferror()/fclose() of `out` as they would
 * for any other output. */
#ifndef MPICKPT_JSON_H
#define MPICKPT_JSON_H

#include "internal.h"

#include <stdint.h>
#include <stdio.h>

#pragma GCC visibility push(default)

/* Deepest nesting the writer tracks; a deeper begin call is a programming error (abort(), like
 * a failed assertion: the project's documents are shallow and fixed by code, not by data). */
#define CKPT__JSON_MAX_DEPTH 32

typedef struct ckpt__json_writer {
    FILE *out;
    int depth;                                    /* open objects/arrays */
    unsigned char has_item[CKPT__JSON_MAX_DEPTH]; /* per level: a comma is due before the next */
    int after_key;                                /* a key was written; its value comes next */
} ckpt__json_writer;

/* Starts a writer on `out` at the top level (nothing is written yet). */
void ckpt__json_init(ckpt__json_writer *w, FILE *out);

void ckpt__json_object_begin(ckpt__json_writer *w);
void ckpt__json_object_end(ckpt__json_writer *w);
void ckpt__json_array_begin(ckpt__json_writer *w);
void ckpt__json_array_end(ckpt__json_writer *w);

/* Writes a member name inside an object; the next call writes its value. */
void ckpt__json_key(ckpt__json_writer *w, const char *key);

void ckpt__json_string(ckpt__json_writer *w, const char *s);
void ckpt__json_int(ckpt__json_writer *w, int64_t v);
void ckpt__json_uint(ckpt__json_writer *w, uint64_t v);
void ckpt__json_bool(ckpt__json_writer *w, int v);
void ckpt__json_null(ckpt__json_writer *w);

/* A floating-point value with `digits` significant digits ("%.*g"). Negative zero is written
 * "-0.0" so that it survives parsers that read "-0" as an integer. */
void ckpt__json_double(ckpt__json_writer *w, double v, int digits);

/* A floating-point value that always reads back as one: "%.17g" (exact for a double), plus ".0"
 * when that looks like an integer, so typed consumers see a float whatever the value. */
void ckpt__json_real(ckpt__json_writer *w, double v);

/* A finite value in fixed notation with `decimals` digits after the point ("%.*f", exactly what
 * printf writes: 0.25 with 6 decimals is "0.250000"); the format of metrics.jsonl's times. */
void ckpt__json_fixed(ckpt__json_writer *w, double v, int decimals);

/*
 * Writes the NUL-terminated byte string s to out as a JSON string literal, quotes included,
 * escaped and made valid UTF-8 as described at the top of this file. For callers that print JSON
 * fragments without a writer; the writer's keys and strings use it.
 */
void ckpt__json_write_string(FILE *out, const char *s);

#pragma GCC visibility pop

#endif
