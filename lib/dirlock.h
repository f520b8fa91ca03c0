/*
 * The lock of a directory (docs/security.md "Concurrent jobs", docs/operations.md "One job per
 * directory"): one writer at a time in a checkpoint directory (the manager, the training state,
 * `mpickpt gc|pin|drop`, ckpt_gc) and in a node cache directory.
 *
 * The lock is flock(LOCK_EX) on the regular file CKPT__LOCK_FILE ("lock", lib/paths.h) in the
 * directory of the state file, reached by descriptor like everything else there (lib/fsutil.h):
 * opened with O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, made with O_EXCL (mode 0600) when missing,
 * checked with fstat; a link, FIFO, directory or device planted under that name is CKPT_ECORRUPT
 * naming it, never followed or blocked on, and so is a file with other hard links. The file is
 * never removed or replaced (that would let two jobs hold "the" lock at once), only ckpt_training
 * _delete_backup removes it with the rest of the directory while holding it. A flock lock belongs
 * to the open file description: it is released by ckpt__dirlock_release() or when the process
 * dies, and a second take in the same process conflicts like another job's. Children made by
 * fork() close their copy (pthread_atfork), so a forked helper (a data loader worker) that
 * outlives the job does not keep the directory locked.
 *
 * The holder's record, one line "host=H pid=P since=T [job=J] [user=U]", is written into the file
 * after the lock is taken (T: seconds since the epoch; J: SLURM_JOB_ID). It is informative only,
 * and untrusted when read: at most 512 bytes, its first line, values kept printable and short.
 *
 * File systems without flock (ENOLCK, ENOSYS, EOPNOTSUPP: NFS without a lock manager, Lustre
 * mounted without -o flock): a warning naming the directory and the mount options, and the caller
 * proceeds unlocked (the lock then guarantees nothing; docs/operations.md). Not installed. No MPI.
 */
#ifndef MPICKPT_DIRLOCK_H
#define MPICKPT_DIRLOCK_H

#include "internal.h"
#include "paths.h" /* CKPT__LOCK_FILE */

typedef struct ckpt__dirlock ckpt__dirlock;

/*
 * Takes the exclusive lock of the directory open as dirfd (`shown` names it in messages) and
 * writes this process's record into it. wait_seconds > 0: while another holds it, retries (sleeps
 * of 50 ms growing to 1 s, a warning when the wait starts) until that many seconds have passed;
 * <= 0 (or NaN): fails at once. In use: CKPT_EBUSY naming the directory, the holder (host, pid,
 * Slurm job, user, since when) and the ways out. *out is NULL on error; on a file system without
 * flock it is a handle that holds nothing (see above). Local; thread-safe.
 */
int ckpt__dirlock_take(ckpt__dirlock **out, int dirfd, const char *shown, double wait_seconds);

/* Releases the lock (its record is cleared first) and frees the handle. NULL: no-op. */
void ckpt__dirlock_release(ckpt__dirlock *l);

/* 1 when the handle holds a lock (0: the file system has no flock and the caller runs unlocked). */
int ckpt__dirlock_held(const ckpt__dirlock *l);

/* MPICKPT_LOCK_WAIT (seconds, 0..31536000; unset or empty: 0) into *seconds; CKPT_EINVAL naming
 * the value otherwise. */
int ckpt__dirlock_env_wait(double *seconds);

#endif
