/**
 * @file mpickpt/preempt.h
 * @brief Preemption: signal handlers that only set a flag, and a collective check at step
 * boundaries so that all ranks take the same final checkpoint.
 */
#ifndef MPICKPT_PREEMPT_H
#define MPICKPT_PREEMPT_H

#include "common.h"

#include "mpi_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Exit code a preempted job uses so that its batch script requeues it (EX_TEMPFAIL). */
#define CKPT_EXIT_PREEMPTED 75

/** Why a check said "stop". */
typedef enum ckpt_preempt_reason {
    CKPT_PREEMPT_NONE = 0,
    CKPT_PREEMPT_SIGNAL = 1,   /**< some rank received one of the watched signals */
    CKPT_PREEMPT_DEADLINE = 2, /**< the deadline minus the reserve was reached */
    CKPT_PREEMPT_HALT = 3      /**< a due halt request (`mpickpt halt DIR`) in a watched directory */
} ckpt_preempt_reason;

/**
 * Installs handlers for @p signals (n of them; NULL/0: SIGTERM and SIGUSR1, what Slurm's
 * --signal and scancel send). A handler only sets a flag (async-signal-safe). Local; call once per
 * process before training.
 */
CKPT_EXTERN int ckpt_preempt_install(const int *signals, int n);

/**
 * Sets a deadline (seconds since the Unix epoch, 0: none) and the time to reserve before it for
 * the final checkpoint: a check returns CKPT_PREEMPT_DEADLINE once now >= deadline - reserve.
 * With deadline < 0 it is read from the environment: MPICKPT_DEADLINE (epoch seconds) or, under
 * Slurm, the job's end time (SLURM_JOB_END_TIME when set). Local.
 */
CKPT_EXTERN int ckpt_preempt_set_deadline(double deadline, double reserve_s);

/** 1 when this rank received a watched signal since install (or ckpt_preempt_reset). Local. */
CKPT_EXTERN int ckpt_preempt_signalled(void);

/** The signal number received last, or 0. Local. */
CKPT_EXTERN int ckpt_preempt_last_signal(void);

/** Clears the flag. Local. */
CKPT_EXTERN void ckpt_preempt_reset(void);

/**
 * Watches checkpoint directory @p dir for halt requests (`mpickpt halt DIR [--after-seconds S]`,
 * docs/operations.md): once one is due, ckpt_preempt_check() says CKPT_PREEMPT_HALT.
 * ckpt_manager_create() and ckpt_training_create() watch their directory (the state file's: a
 * training state's chief/) themselves. The 16 directories watched last are watched (an older one
 * is forgotten: a process that makes many managers watches its newest); watching one twice is
 * one watch; NULL stops watching every directory. Local, not thread-safe against a concurrent
 * check.
 */
CKPT_EXTERN int ckpt_preempt_watch_dir(const char *dir);

/**
 * The step-boundary check: one allreduce of this rank's flags (signal, deadline, and on rank 0 of
 * @p comm a due halt request in a watched directory). Every rank gets the same answer in
 * @p reason (when several hold: signal, then halt, then deadline); when it is not
 * CKPT_PREEMPT_NONE, all ranks take the final checkpoint and exit with CKPT_EXIT_PREEMPTED.
 * Only rank 0 reads the halt request (a regular file, never followed or blocked on, at most
 * 4 KiB); a file it cannot use is a warning in the log, not a halt. Collective over @p comm.
 */
CKPT_EXTERN int ckpt_preempt_check(MPI_Comm comm, ckpt_preempt_reason *reason);

#ifdef __cplusplus
}
#endif
#endif
