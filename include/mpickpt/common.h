/**
 * @file mpickpt/common.h
 * @brief Status codes, error reporting and version of the mpickpt library.
 */
#ifndef MPICKPT_COMMON_H
#define MPICKPT_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 2
#define CKPT_VERSION_PATCH 0
/** Version string of the headers, e.g. "0.1.0". */
#define CKPT_VERSION_STRING "0.2.0"

#if defined(__GNUC__)
#define CKPT_EXTERN __attribute__((visibility("default")))
#define CKPT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CKPT_EXTERN
#define CKPT_PRINTF(f, a)
#endif

/**
 * Marks a public entry point kept for one more release (docs/api.md "Deprecated"): a call compiles
 * with a warning naming the replacement (GCC, Clang); elsewhere nothing. Define
 * CKPT_NO_DEPRECATION_WARNINGS before including the headers to silence them all.
 */
#if defined(__GNUC__) && !defined(CKPT_NO_DEPRECATION_WARNINGS)
#define CKPT_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define CKPT_DEPRECATED(msg)
#endif

/**
 * Status codes. Every function that can fail returns one of these (CKPT_OK is 0, errors are
 * negative); the detail is in ckpt_error_last().
 */
typedef enum ckpt_status {
    CKPT_OK = 0,
    CKPT_ERROR = -1,     /**< generic failure (see the message) */
    CKPT_EINVAL = -2,    /**< invalid argument or usage */
    CKPT_ENOTFOUND = -3, /**< checkpoint, file or tensor does not exist */
    CKPT_ECORRUPT = -4,  /**< data on disk is malformed, truncated or fails its checksum */
    CKPT_ENOSPC = -5,    /**< no space left on the device */
    CKPT_EMISMATCH = -6, /**< dtype, shape, slice or registration disagrees */
    CKPT_EIO = -7,       /**< an I/O call failed */
    CKPT_EPEER = -8,     /**< another rank failed; the message names it */
    CKPT_ENOMEM = -9,    /**< out of memory */
    CKPT_EVERSION = -10, /**< written by an unknown (future) format version */
    CKPT_EMPI = -11,     /**< an MPI call failed or MPI is not usable as required */
    CKPT_EEXISTS = -12,  /**< the target already exists */
    CKPT_ETIMEDOUT = -13, /**< gave up waiting (e.g. for a background save at close) */
    CKPT_EBUSY = -14      /**< the checkpoint directory is in use by another job (its lock is
                           *   held; the message names the holder) */
} ckpt_status;

/** Detail of the last error raised on the calling thread. */
typedef struct ckpt_error {
    int code;            /**< a ckpt_status value */
    const char *message; /**< human-readable; names the rank, path and cause where known */
    /** The errno of the failed system call behind the error (EROFS, EACCES, ENOSPC, EIO, ...)
     *  or 0 when none is known (CKPT_ENOSPC: ENOSPC at least). An error agreed across ranks (ckpt_mpi_agree()) carries the
     *  failing rank's errno to every rank. Added in 0.2 (issue 30): read it only from a
     *  library of that version or later. */
    int sys_errno;
    /** Which of CKPT_ENOTFOUND's meanings the error is (a ckpt_notfound_reason), so that a
     *  caller need not parse the message (and CKPT_REASON_CHECK for one CKPT_EMISMATCH: the
     *  ranks' check values differ); CKPT_REASON_NONE for every other code and for a
     *  CKPT_ENOTFOUND of another kind (a file the caller named, a halt request, ...). An error
     *  agreed across ranks (ckpt_mpi_agree()) carries the failing rank's reason to every rank.
     *  Added in 0.2 (issue 31): read it only from a library of that version or later. */
    int reason;
} ckpt_error;

/** ckpt_error.reason: why a call returned CKPT_ENOTFOUND (or, CKPT_REASON_CHECK,
 *  CKPT_EMISMATCH). The status stays the code. */
typedef enum ckpt_notfound_reason {
    CKPT_REASON_NONE = 0,          /**< not given (another code, or another kind of "not found") */
    CKPT_REASON_NO_CHECKPOINT = 1, /**< no checkpoint where one was looked for: no index at the
                                    *   prefix, no state file, no checkpoint of that step or
                                    *   counter, nothing restorable in the directory, no copy this
                                    *   manager can read (only in a cache it lacks, lost from
                                    *   every node's cache) */
    CKPT_REASON_NO_TENSOR = 2,     /**< the checkpoint exists but lacks a tensor that was asked
                                    *   for or registered (a registration that does not match) */
    CKPT_REASON_PINNED = 3,        /**< the restart control rules it out: the pinned checkpoint
                                    *   cannot be restored (nothing at or above the pin), or the one
                                    *   asked for is dropped or set aside by a pin (`mpickpt pin`,
                                    *   `mpickpt drop`) */
    CKPT_REASON_NO_METRICS = 4,    /**< no save has committed yet: no metrics to report */
    CKPT_REASON_CHECK = 5          /**< with CKPT_EMISMATCH: the ranks passed different
                                    *   ckpt_manager_save_options.check values (added in 0.2) */
} ckpt_notfound_reason;

/** Short constant name of a ckpt_notfound_reason ("no checkpoint", ...). Never NULL. */
CKPT_EXTERN const char *ckpt_reason_name(int reason);

/** Short constant description of a status code ("corrupt data", ...). Never NULL. */
CKPT_EXTERN const char *ckpt_strerror(int code);

/**
 * The last error raised on this thread, or NULL if none since ckpt_error_clear().
 * The pointer stays valid until the next mpickpt call on this thread.
 */
CKPT_EXTERN const ckpt_error *ckpt_error_last(void);

/** Forget the last error of this thread. */
CKPT_EXTERN void ckpt_error_clear(void);

/** Version of the library the program runs against ("0.1.0"). */
CKPT_EXTERN const char *ckpt_version(void);

#ifdef __cplusplus
}
#endif
#endif
