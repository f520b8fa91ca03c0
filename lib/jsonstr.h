/* JSON string literals that are valid JSON in valid UTF-8 whatever bytes they are given: one
 * escaper for every JSON the project writes (the CLI's writer, lib/cli/json.c, and the saver's
 * metrics.jsonl). Names, prefixes and paths are bytes from users and from disk; a single byte
 * that is not UTF-8 must not make a whole document unreadable. Not installed. */
#ifndef MPICKPT_JSONSTR_H
#define MPICKPT_JSONSTR_H

#include "internal.h"

#include <stddef.h>
#include <stdio.h>

#pragma GCC visibility push(default)

/*
 * Writes the NUL-terminated byte string s to out as a JSON string literal, quotes included.
 * '"' and '\\' are escaped, control characters below 0x20 become \u00XX, well-formed UTF-8
 * (DEL and the C1 controls included) passes through unchanged, and every byte that is not part
 * of a well-formed sequence becomes \ufffd (U+FFFD, the replacement character). The output is
 * therefore always a valid JSON string in valid UTF-8, and names that were valid UTF-8 round-trip
 * exactly.
 */
void ckpt__json_write_string(FILE *out, const char *s);

#pragma GCC visibility pop

#endif
