/*
 * Retention's deletions off the save's path (docs/design.md "Retention"): the manager's chief
 * hands the checkpoints that retention dropped (already out of the state file, so no reader picks
 * them) to a background thread that deletes them (ckpt_checkpoint_delete: index first, then the
 * data files), while the training goes on. One batch at a time: a new batch, the next save's
 * sweep of leftovers, removing the directory and closing the manager wait for the previous one.
 * A deletion that fails is a warning naming the checkpoint (it stays unlisted; `mpickpt gc`
 * removes it), never a save's error. MPICKPT_RETENTION=inline (read by the manager) deletes in
 * the caller instead, as before: the save returns once the files are gone. No MPI. Not installed.
 */
#ifndef MPICKPT_REAPER_H
#define MPICKPT_REAPER_H

#include "internal.h"

#include <pthread.h>
#include <stddef.h>

typedef struct ckpt__reaper {
    pthread_t thread;
    int running;     /* a batch's thread was started and not joined */
    char **prefixes; /* the batch: full paths of the checkpoints to delete */
    size_t count;
} ckpt__reaper;

/* Deletes the checkpoints at prefixes[0..n) (full paths; copied) in the background (here when no
 * thread can be started). Waits for the previous batch first. CKPT_OK (a deletion that fails is
 * logged), or the first deletion's error when they ran here. */
int ckpt__reaper_delete(ckpt__reaper *r, const char *const *prefixes, size_t n);

/* The same deletions here, in order (MPICKPT_RETENTION=inline): the first error. */
int ckpt__reaper_delete_inline(const char *const *prefixes, size_t n);

/* Waits until the batch in flight (if any) is deleted. Safe on a zeroed reaper. */
void ckpt__reaper_wait(ckpt__reaper *r);

#endif
