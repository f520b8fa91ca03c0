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

/* Deepest nesting the writer tracks; a deeper begin call is a programming error (abort(), like
 * a failed assertion: the project's documents are shallow and fixed by code, not by data). */
#define CKPT__JSON_MAX_DEPTH 128 /* room for a read value (64 levels) inside a document */

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
/* `len` bytes (NULs included, written \u0000) as a string, and as a member name. */
void ckpt__json_string_n(ckpt__json_writer *w, const char *s, size_t len);
void ckpt__json_key_n(ckpt__json_writer *w, const char *key, size_t len);
/* `len` bytes written as they are, as a value (a number token the reader kept as written). */
void ckpt__json_raw(ckpt__json_writer *w, const char *text, size_t len);
void ckpt__json_int(ckpt__json_writer *w, int64_t v);
void ckpt__json_uint(ckpt__json_writer *w, uint64_t v);
void ckpt__json_bool(ckpt__json_writer *w, int v);
void ckpt__json_null(ckpt__json_writer *w);
/* A member: ckpt__json_key() then the value (string, signed or unsigned integer, bool). */
void ckpt__json_kstring(ckpt__json_writer *w, const char *key, const char *s);
void ckpt__json_kint(ckpt__json_writer *w, const char *key, int64_t v);
void ckpt__json_kuint(ckpt__json_writer *w, const char *key, uint64_t v);
void ckpt__json_kbool(ckpt__json_writer *w, const char *key, int v);

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
void ckpt__json_write_string_n(FILE *out, const char *s, size_t len);

/* ---- Reading (lib/json_read.c) ----
 *
 * A reader for documents that come from disk (the Python package's record of plain values,
 * written by Python's json module): RFC 8259 JSON in strict UTF-8, plus the tokens NaN, Infinity
 * and -Infinity that Python writes for non-finite floats. Linear in the input; nesting deeper
 * than CKPT__JSON_READ_MAX_DEPTH, bytes that are not UTF-8, a control character in a string, an
 * unknown escape, a malformed number and anything after the value are refused with a message
 * naming the byte offset. Numbers keep their text as written (integers of any size, floats as
 * Python printed them). Strings are decoded (escapes, surrogate pairs; a lone surrogate, which
 * Python writes for a str holding one, becomes U+FFFD) and may hold NUL bytes (their length is
 * kept). Repeated member names are all kept; ckpt__jv_get() finds the last, as Python does. */
#define CKPT__JSON_READ_MAX_DEPTH 64

typedef enum ckpt__jv_kind {
    CKPT__JV_NULL,
    CKPT__JV_BOOL,
    CKPT__JV_NUMBER,
    CKPT__JV_STRING,
    CKPT__JV_ARRAY,
    CKPT__JV_OBJECT
} ckpt__jv_kind;

typedef struct ckpt__jv {
    ckpt__jv_kind kind;
    int boolean;           /* BOOL */
    int is_int;            /* NUMBER: an integer literal (no '.', no exponent, not NaN/Infinity) */
    const char *text;      /* NUMBER: as written; STRING: decoded UTF-8; NUL-terminated both */
    size_t len;            /* bytes of text */
    size_t n;              /* ARRAY: elements; OBJECT: members */
    struct ckpt__jv *items; /* ARRAY: the elements; OBJECT: the members' values */
    const char **keys;     /* OBJECT: the members' names (decoded, NUL-terminated) */
    size_t *key_lens;
} ckpt__jv;

typedef struct ckpt__json_doc ckpt__json_doc;

/* Parses `len` bytes of `text`. CKPT_OK and *out (free with ckpt__json_doc_free), or
 * CKPT_ECORRUPT / CKPT_ENOMEM with the reason in err (it does not call ckpt__error: the caller
 * names the document). */
int ckpt__json_parse(ckpt__json_doc **out, const char *text, size_t len, char *err,
                     size_t errsize);
void ckpt__json_doc_free(ckpt__json_doc *d);
const ckpt__jv *ckpt__json_doc_root(const ckpt__json_doc *d);
/* The value of member `key` of an object (the last one of that name), NULL when absent or when
 * obj is not an object. */
const ckpt__jv *ckpt__jv_get(const ckpt__jv *obj, const char *key);
/* Writes a read value back. python: NaN/Infinity/-Infinity as those tokens (Python's json reads
 * them, strict JSON does not); else as the strings "NaN", "Infinity", "-Infinity" (this file's
 * convention). */
void ckpt__json_value(ckpt__json_writer *w, const ckpt__jv *v, int python);

#endif
