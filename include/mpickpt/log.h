/**
 * @file mpickpt/log.h
 * @brief Logging: the library reports warnings (e.g. a damaged checkpoint skipped at restore)
 * through a callback instead of printing.
 */
#ifndef MPICKPT_LOG_H
#define MPICKPT_LOG_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ckpt_log_level {
    CKPT_LOG_ERROR = 0,
    CKPT_LOG_WARN = 1,
    CKPT_LOG_INFO = 2,
    CKPT_LOG_DEBUG = 3
} ckpt_log_level;

/** Receives one message (no trailing newline). */
typedef void (*ckpt_log_cb)(ckpt_log_level level, const char *message, void *payload);

/**
 * Sets the log sink (NULL restores the default) and the most verbose level passed to it.
 * The default sink writes "[mpickpt rank R host H] level: message" to stderr; its level is
 * taken from MPICKPT_LOG=error|warn|info|debug, else the default level (warn unless
 * ckpt_log_set_default_level() changed it). Not thread-safe: call it at start.
 *
 * At info level the chief (rank 0) logs one summary line per committed save and per restore
 * (docs/operations.md, "Summary lines"); debug adds one line per rank and save.
 */
CKPT_EXTERN void ckpt_log_set(ckpt_log_cb cb, ckpt_log_level level, void *payload);

/**
 * Sets the default sink's level for when MPICKPT_LOG is unset or empty. The library's own default
 * is CKPT_LOG_WARN (it prints nothing but warnings and errors); a program that wants the summary
 * lines by default calls it with CKPT_LOG_INFO (mpickpt-demo and the Python package do).
 * MPICKPT_LOG still wins, so a batch script can always quiet or raise it. Not thread-safe: call
 * it at start.
 */
CKPT_EXTERN void ckpt_log_set_default_level(ckpt_log_level level);

/** Tells the default sink which rank this process is (the MPI layer sets it). */
CKPT_EXTERN void ckpt_log_set_rank(int rank);

#ifdef __cplusplus
}
#endif
#endif
