/* Internal helpers shared by lib/ and mpi/. Not installed. */
#ifndef MPICKPT_INTERNAL_H
#define MPICKPT_INTERNAL_H

#include "mpickpt/common.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Internal functions (the ckpt__ prefix) have hidden visibility like everything not marked
 * CKPT_EXTERN: no shared library exports them. libmpickpt.so holds the core's objects as well;
 * the programs and tests that call them link the static mpickpt_core_internal or mpickpt_internal
 * (lib/CMakeLists.txt, docs/building.md "What the libraries export"). */

/*
 * Records an error for ckpt_error_last() on the calling thread and returns `code`, so that error
 * paths read `return ckpt__error(CKPT_EIO, "open %s: %s", path, strerror(errno));`.
 */
int ckpt__error(int code, const char *fmt, ...) CKPT_PRINTF(2, 3);
int ckpt__verror(int code, const char *fmt, va_list ap) CKPT_PRINTF(2, 0);
/* ckpt_error.sys_errno: ckpt__error() sets it to the errno at its call when the message shows
 * that errno's strerror() after ": " (the common `"...: %s", strerror(errno)`), else 0 (ENOSPC
 * for CKPT_ENOSPC);
 * ckpt__error_set_errno() sets it explicitly (when errno was saved in a variable) if the current
 * error has `code`. Returns code. ckpt__error_wrap() keeps it. */
int ckpt__error_set_errno(int code, int err);

/* ckpt_error.reason (a ckpt_notfound_reason): ckpt__error() and ckpt_error_clear() reset it to
 * CKPT_REASON_NONE; ckpt__error_set_reason() sets it if the current error has `code` and returns
 * code, so that a raise reads `return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND, ...),
 * CKPT_REASON_NO_TENSOR)`. ckpt__error_wrap() and the agreement keep it. ckpt__error_reason():
 * the current error's reason when it has `code`, else CKPT_REASON_NONE. */
int ckpt__error_set_reason(int code, int reason);
int ckpt__error_reason(int code);

/* The calling thread's pending error (or its absence), kept across a step whose own failure the
 * caller handles: a helper that tries something and clears its attempt's error puts the caller's
 * pending error back with ckpt__error_restore() instead of wiping it (issue 31). */
#define CKPT__MSG_MAX 2048
typedef struct ckpt__saved_error {
    int set, agreed;
    ckpt_error error;
    char message[CKPT__MSG_MAX];
} ckpt__saved_error;
ckpt__saved_error ckpt__error_save(void);
void ckpt__error_restore(const ckpt__saved_error *s);

/* Prefixes the current error message with `fmt` (context such as a rank or path); returns code.
 * A message that ckpt_mpi_agree() made stays marked as one (ckpt__error_agreed). */
int ckpt__error_wrap(int code, const char *fmt, ...) CKPT_PRINTF(2, 3);

/* 1 when the calling thread's current message is an agreed one: ckpt_mpi_agree() made it (with its
 * "rank R (host H): " prefix), perhaps wrapped since. A new ckpt__error() or ckpt_error_clear()
 * ends that; ckpt__error_mark_agreed() starts it. Agreeing on such a message again keeps it as it
 * is, so that a status that passes through several agreements names its rank once, the right one. */
int ckpt__error_agreed(void);
void ckpt__error_mark_agreed(void);

/* Messages name a directory held open by its name, not by the path that reaches it through its
 * descriptor: every `at` ("/proc/self/fd/<n>", lib/fsutil.h ckpt__fd_path) in a message recorded
 * from now on reads `shown` instead (a node cache directory, mpi/cache_dir.c). `shown` NULL
 * forgets `at`. At most 64 at once (more are not translated). Thread-safe. */
void ckpt__error_alias(const char *at, const char *shown);

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int ckpt__mul_size(size_t *out, size_t a, size_t b)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int ckpt__add_size(size_t *out, size_t a, size_t b)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

#define CKPT__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Largest save counter a checkpoint may carry (10^15). The manager and the saver number
 * checkpoints `<name>-<counter>` and take the next number as the largest one seen plus 1, so a
 * counter read from disk beyond this bound is treated as corrupt (the index validator rejects it)
 * and `counter + 1` can never overflow. At one save per second this lasts 31 million years.
 */
#define CKPT__COUNTER_MAX ((int64_t)1000000000000000)

/*
 * 1 when the `len` bytes at `s` are well-formed UTF-8 (strict: no overlong forms, no surrogates,
 * nothing above U+10FFFF, no truncated sequence), else 0. `s` may be NULL when len is 0.
 */
int ckpt__utf8_valid(const char *s, size_t len);

/* Length (2-4) of the well-formed UTF-8 sequence of a code point >= U+0080 starting at p (at most
 * `avail` bytes; SIZE_MAX for a NUL-terminated string, which is never read past), or 0. */
size_t ckpt__utf8_seq_len(const unsigned char *p, size_t avail);

/* `len` bytes of `s` in buf (size >= 8) for a message: printable ASCII as is, every other byte and
 * the backslash as \xNN, cut with "..." when it does not fit. Returns buf. */
const char *ckpt__escape_bytes(char *buf, size_t size, const char *s, size_t len);

/* Wall-clock seconds since the epoch (timestamps), and monotonic seconds (durations: a clock step
 * cannot make one negative). lib/log.c */
double ckpt__now_seconds(void);
double ckpt__mono_seconds(void);

/* ckpt_reader_verify() that also calls progress(bytes verified so far, bytes in all, payload)
 * after every piece (`mpickpt verify` on a terminal). progress may be NULL. lib/reader.c */
#include "mpickpt/checkpoint.h"
typedef void (*ckpt__verify_progress_cb)(uint64_t done, uint64_t total, void *payload);
int ckpt__reader_verify_progress(ckpt_reader *r, ckpt_verify_cb cb, void *payload,
                                 ckpt__verify_progress_cb progress, void *progress_payload);

/* Logs through the sink set with ckpt_log_set() (mpickpt/log.h); level is a ckpt_log_level. */
#include "mpickpt/log.h"
void ckpt__log(ckpt_log_level level, const char *fmt, ...) CKPT_PRINTF(2, 3);
/* Whether a message of this level would reach the sink (to skip building a summary). */
int ckpt__log_enabled(ckpt_log_level level);

/* A time and a rank in one double whose maximum (MPI_MAX, as the save's votes reduce) is the
 * largest time and the rank that had it: MAXLOC in a reduction of doubles. The rank replaces the
 * low 24 bits of the time's mantissa (a relative error below 4e-9); for non-negative finite
 * doubles numeric order is the order of their bits, so the maximum holds the largest time, ties
 * going to the highest rank. A negative or non-finite time counts as 0; a rank outside
 * 0..CKPT__MAXLOC_RANKS-1 decodes as -1. lib/log.c */
#define CKPT__MAXLOC_RANKS (1 << 24)
double ckpt__maxloc_encode(double seconds, int rank);
void ckpt__maxloc_decode(double v, double *seconds, int *rank);

#endif
