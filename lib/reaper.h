/*
 * Retention's deletions, their slow part off the save's path (docs/configuration.md,
 * MPICKPT_RETENTION). Unlinking a large file frees its blocks inside the unlink (ext4: ~85 ms for
 * 200 MB here, as long as the save's own fsync); an unlink of a file that is still open only
 * removes the name, and the blocks go at the last close. So the manager's chief deletes retired
 * checkpoints as before (ckpt__checkpoint_delete_held: index first, then every data file, the
 * directory exactly as after an inline deletion when the save returns) but holds each large data
 * file open across its unlink, and hands the descriptors to a background thread that closes them
 * while the job trains. One batch at a time: the next batch, a removal of the directory and
 * closing the manager wait for the previous one. A process forked meanwhile (a data loader
 * worker) closes its copies at once (pthread_atfork), so it never keeps the blocks allocated.
 * No MPI. Not installed.
 */
#ifndef MPICKPT_REAPER_H
#define MPICKPT_REAPER_H

#include "internal.h"

#include <pthread.h>
#include <stddef.h>

typedef struct ckpt__reaper {
    pthread_t thread;
    int running; /* a batch's thread was started and not joined */
    int *fds;    /* the batch */
    size_t count;
} ckpt__reaper;

/* Closes fds[0..n) in the background (here when no thread can be started), after waiting for
 * the previous batch. Takes the array (malloc'ed) and its descriptors in every case. */
void ckpt__reaper_close(ckpt__reaper *r, int *fds, size_t n);

/* Waits until the batch in flight (if any) is closed. Safe on a zeroed reaper. */
void ckpt__reaper_wait(ckpt__reaper *r);

/* ckpt_checkpoint_delete(prefix), holding every data file of at least `hold_min` bytes open
 * across its unlink: their descriptors are appended to *held (*nheld of them; the caller closes
 * them, e.g. through ckpt__reaper_close). A file that cannot be opened safely (lib/fsutil.h
 * ckpt__file_open: regular files only, no link followed, no blocking) is unlinked unheld. */
int ckpt__checkpoint_delete_held(const char *prefix, uint64_t hold_min, int **held,
                                 size_t *nheld);

#endif
