/**
 * @file mpickpt/state.h
 * @brief The checkpoint state file (`<dir>/checkpoint`), listing and garbage collection of a
 * checkpoint directory. No MPI: the CLI uses these, the manager builds on them.
 */
#ifndef MPICKPT_STATE_H
#define MPICKPT_STATE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One committed checkpoint the state file keeps. */
typedef struct ckpt_state_entry {
    char prefix[256];     /**< name relative to the directory, e.g. "ckpt-7" */
    int64_t save_counter;
    int64_t epoch;
    int64_t step;
    double timestamp;     /**< commit time, seconds since the Unix epoch */
    uint64_t bytes;       /**< index + data files */
    int end_of_epoch;     /**< 1: saved at the end of `epoch`; 0: in the middle (at `step`) */
    int preserved;        /**< 1: kept by keep_checkpoint_every_n_hours, outside max_to_keep */
    unsigned levels;      /**< CKPT_LEVEL_* bits: where it is (docs/levels.md); 0: persistent */
} ckpt_state_entry;

/** Storage levels of a checkpoint (ckpt_state_entry.levels). */
#define CKPT_LEVEL_PERSISTENT 1u /**< the manager's directory */
#define CKPT_LEVEL_CACHE 2u      /**< the nodes' cache directories */

/** The state file: the latest checkpoint and the kept ones, oldest first. */
typedef struct ckpt_state {
    char latest[256];                 /**< "" when empty */
    ckpt_state_entry *entries;        /**< oldest to newest */
    size_t num_entries;
    double last_preserved_timestamp;  /**< keep_checkpoint_every_n_hours bookkeeping */
    int64_t save_counter;             /**< highest counter ever committed */
} ckpt_state;

/**
 * Reads `<dir>/checkpoint`. CKPT_ENOTFOUND when there is none (*out is then an empty state, to be
 * freed too); CKPT_ECORRUPT when it is damaged (same container checks as the index).
 */
CKPT_EXTERN int ckpt_state_read(ckpt_state **out, const char *dir);

/** Deprecated (removed after 0.3): the manager owns the state file and writes it itself (its
 *  chief, on each commit). Writes `<dir>/checkpoint` atomically (temp name, fsync, rename, fsync
 *  dir); CKPT_EINVAL, nothing written, for a state a reader would refuse. */
CKPT_EXTERN int ckpt_state_write(const ckpt_state *state, const char *dir)
    CKPT_DEPRECATED("the manager writes the state file: no replacement");

/** Appends an entry (copied) and makes it the latest. */
CKPT_EXTERN int ckpt_state_append(ckpt_state *state, const ckpt_state_entry *entry);

/** Removes entry @p i (keeps the order). */
CKPT_EXTERN void ckpt_state_remove(ckpt_state *state, size_t i);

/** An empty state. */
CKPT_EXTERN int ckpt_state_new(ckpt_state **out);

/** Frees a state. NULL is a no-op. */
CKPT_EXTERN void ckpt_state_free(ckpt_state *state);

/**
 * Scans @p dir for committed checkpoints (`*.index` files whose index loads), oldest first by save
 * counter then name, and fills entries from their headers (bytes = index + data files). Damaged
 * ones, entries that are not regular files, names that are not checkpoint names, and indexes whose
 * header no state file may hold (a save counter outside 0..10^15, a time that is not a number)
 * are skipped, each with a warning through the log. For recovery when the state file is missing
 * or damaged, and for `mpickpt list`.
 * *out is allocated even on failure and must be freed.
 */
CKPT_EXTERN int ckpt_state_scan(ckpt_state **out, const char *dir);

/**
 * The checkpoint a manager's restore_or_initialize of @p dir would start from, read without MPI
 * or the directory's lock (beside the job that owns it): the state file (a scan when it is
 * missing or damaged) and the restart control (`mpickpt pin`/`drop`), then from the newest
 * checkpoint down the first in the directory (not only in the nodes' caches) that neither a pin
 * set aside nor a drop retired and whose index and data files open, never one behind the pin:
 * the manager's own rule (docs/operations.md "Choosing the restart point"). @p out receives
 * "<dir>/<prefix>". CKPT_ENOTFOUND when there is none (naming the first unreadable one), or
 * naming the pin when the pinned checkpoint cannot be reached. Its checksums are checked when it
 * is read.
 */
CKPT_EXTERN int ckpt_newest_restorable(char *out, size_t out_size, const char *dir);

/** Size in bytes of checkpoint @p prefix (index + its data files as listed in the index). */
CKPT_EXTERN int ckpt_checkpoint_bytes(uint64_t *out, const char *prefix);

/**
 * Deletes checkpoint @p prefix: the index first (so it is never seen half-deleted), a directory
 * fsync, then its data files.
 */
CKPT_EXTERN int ckpt_checkpoint_delete(const char *prefix);

/** Called by ckpt_gc() for each path it removes (or would remove, with dry_run). */
typedef void (*ckpt_gc_cb)(const char *path, const char *why, void *payload);

/**
 * Removes the garbage a crashed or failed save leaves in @p dir: `*_temp` directories,
 * `<name>.data-%05d-of-%05d` files whose `<name>.index` does not exist, temp files of index and
 * state writes (`<x>.index.tmp-<pid>`, `checkpoint.tmp-<pid>`), and the `workertemp_*`
 * directories next to @p dir (when @p dir is named "chief") or inside it. Nothing else is
 * touched; committed checkpoints never. Unless @p dry_run, it holds the lock of the directory
 * (`lock` next to the state file: @p dir's, or its chief/'s) while it removes anything, so it
 * never runs while a job's manager or training state uses the directory: that is CKPT_EBUSY
 * naming the job (its host and pid), after waiting MPICKPT_LOCK_WAIT seconds when set.
 * @p cb is called for each path once it is removed; @p removed (may be NULL) receives their count.
 */
CKPT_EXTERN int ckpt_gc(const char *dir, int dry_run, ckpt_gc_cb cb, void *payload,
                        size_t *removed);

#ifdef __cplusplus
}
#endif
#endif
