/* Internal: strict parsing of MPICKPT_* environment variables (lib/env.c). Each returns CKPT_OK
 * with *out = the value (or `dflt` when the variable is unset or empty), or CKPT_EINVAL naming the
 * variable and the value it refused. */
#ifndef MPICKPT_ENV_H
#define MPICKPT_ENV_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(default)

/* 1/true/yes/on or 0/false/no/off (case-insensitive). */
int ckpt__env_bool(int *out, const char *name, int dflt);

/* A decimal integer in [lo, hi]. */
int ckpt__env_int64(int64_t *out, const char *name, int64_t lo, int64_t hi, int64_t dflt);

/* One of `words` (exactly), giving the matching entry of `values`. */
int ckpt__env_choice(int *out, const char *name, const char *const *words, const int *values,
                     size_t n, int dflt);

/* MPICKPT_LOG: error, warn (or warning), info, debug; default warn. */
int ckpt__env_log_level(int *out);
/* The same without recording an error (for the logger, which may run inside an error path):
 * returns -1, *out = warn, for a bad value. */
int ckpt__log_level_parse(int *out);

#pragma GCC visibility pop

#endif
