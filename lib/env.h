/* Internal: strict parsing of MPICKPT_* environment variables (lib/env.c). Each returns CKPT_OK
 * with *out = the value (or `dflt` when the variable is unset or empty), or CKPT_EINVAL naming the
 * variable and the value it refused. */
#ifndef MPICKPT_ENV_H
#define MPICKPT_ENV_H

#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* 1/true/yes/on or 0/false/no/off (case-insensitive). */
int ckpt__env_bool(int *out, const char *name, int dflt);

/* A decimal integer in [lo, hi], spelled exactly: an optional '-' and digits, nothing else (no
 * blanks before or after, no '+', no other base). 0, or -1 (*out untouched) when it is not one. */
int ckpt__parse_int64(int64_t *out, const char *s, int64_t lo, int64_t hi);

/* Variable `name` as ckpt__parse_int64 reads it (unset or empty: dflt); CKPT_EINVAL naming the
 * variable and its value otherwise. */
int ckpt__env_int64(int64_t *out, const char *name, int64_t lo, int64_t hi, int64_t dflt);

/* One of `words` (exactly), giving the matching entry of `values`. */
int ckpt__env_choice(int *out, const char *name, const char *const *words, const int *values,
                     size_t n, int dflt);

/* MPICKPT_LOG: error, warn (or warning), info, debug; default warn. */
int ckpt__env_log_level(int *out);
/* The same without recording an error (for the logger, which may run inside an error path):
 * returns -1, *out = warn, for a bad value. */
int ckpt__log_level_parse(int *out);

/* ---- the table of settings (`mpickpt config`, docs/configuration.md) ---- */

/* How a variable's value is checked (by the same parser its reader uses). */
typedef enum ckpt__setting_kind {
    CKPT__SETTING_BOOL,    /* ckpt__env_bool */
    CKPT__SETTING_INT,     /* ckpt__env_int64 in [lo, hi] */
    CKPT__SETTING_CHOICE,  /* one of words (NULL-terminated), exactly */
    CKPT__SETTING_TIME,    /* seconds since the epoch, a positive finite number */
    CKPT__SETTING_PATTERN, /* a cache directory pattern (ckpt__cache_dir, lib/levels.c) */
    CKPT__SETTING_FAULT,   /* ckpt__fault_spec */
    CKPT__SETTING_TEXT     /* any text */
} ckpt__setting_kind;

/* One MPICKPT_* variable. Add a variable by adding one entry to ckpt__settings[] (lib/env.c)
 * and its row to docs/configuration.md (test_cli_config checks that both list the same names and
 * that every MPICKPT_* name the sources read is in the table). */
typedef struct ckpt__setting {
    const char *name;
    ckpt__setting_kind kind;
    int64_t lo, hi;            /* CKPT__SETTING_INT */
    const char *const *words;  /* CKPT__SETTING_CHOICE */
    const char *dflt;          /* the default (when unset or empty), as shown */
    const char *scope;         /* "collective (rank 0 decides)", "local (every rank)", "script" */
    const char *read_by;       /* where it is read */
    const char *meaning;
    int library;               /* 1: read by the library or its programs; 0: by jobs/ scripts */
} ckpt__setting;

extern const ckpt__setting ckpt__settings[];
extern const size_t ckpt__num_settings;

/* s checked against the environment: CKPT_OK with *value its value (NULL when unset or empty:
 * the default applies), or CKPT_EINVAL naming the variable and the value it refuses (recorded for
 * ckpt_error_last()), *value then the raw value. */
int ckpt__setting_check(const ckpt__setting *s, const char **value);

/* MPICKPT_FAULT parsed strictly (CKPT_EINVAL naming the value when malformed); *target = -1 when
 * unset; *mode 0 = fail, 1 = kill, 2 = hold. ckpt__fault() (mpi/fault.c) returns that error too,
 * so a malformed value fails the save it was meant for instead of silently injecting nothing. */
int ckpt__fault_spec(int *target, char *step, size_t step_size, int *mode);

#endif
