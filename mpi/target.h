/*
 * Storage targets: where a save writes and a restore reads (docs/architecture.md "Storage
 * targets"). The save protocol (save_protocol.c) and the restore (restore.c) call these operations
 * and never ask which target they use; a target is chosen once when the save is prepared
 * (ckpt__target_of) or by the restore's entry point, and kept in the save's context or the
 * restore's run.
 *   ckpt__target_persistent  the persistent directory (target_dir.c)
 *   ckpt__target_cache       the node cache: each rank's directory is its node's cache directory,
 *                            partner copies and index copies (save_levels.c, docs/levels.md); its
 *                            restore side in restore_cache.c (fetch) and cache_rebuild.c
 *                            (rebuild), its upkeep in cache_dir.c (gc, sweep) and cache_drain.c
 * The save's operations do not agree: each returns this rank's status (or none), and the
 * protocol's votes carry a failure to every rank. An operation that moves bytes between ranks
 * (copies, fetch) takes part in every transfer whatever `local` says, so the messages always
 * match. The restore's `open_restore` and `fetch` agree where they are collective (the node
 * cache), and are no collective at all where they have nothing to do (the persistent directory).
 * An operation a target does not have is NULL (said at each).
 */
#ifndef MPICKPT_TARGET_H
#define MPICKPT_TARGET_H

#include "mpickpt.pb-c.h"

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

struct ckpt_saver;
struct ckpt_reader;
struct save_ctx;
struct save_job;
struct ckpt__drain_shape;

/* What a target's extra copies placed on this rank, for their undo. */
typedef struct ckpt__target_copies {
    char **placed; /* names of files placed in this rank's directory */
    size_t nplaced;
    int wrote_index; /* this rank wrote a copy of the index */
} ckpt__target_copies;

typedef struct ckpt__target_ops {
    /* in messages that name the save: " to the cache" or "" */
    const char *what;
    /* each rank's directory is its node's: a save is named by its checkpoint's name, not a path */
    int node_local;
    /* names: `prefix` (size bytes, the chief's, adopted by every rank) becomes this rank's prefix
     * of the save. Local: this rank's status. */
    int (*place)(struct ckpt_saver *s, char *prefix, size_t size);
    /* reserve: whether the save's bytes are reserved up front (besides MPICKPT_RESERVE). Local. */
    int (*reserves)(const struct ckpt_saver *s);
    /* extra copies, once every rank moved its data files into place and the chief merged `idx`
     * (NULL but on the chief when it merged), before the pre-commit vote: this rank's status
     * (`local` in), what it placed in *x (free with ckpt__target_copies_free). Collective over
     * c->comm for a target that copies, never agreed. */
    int (*copies)(struct ckpt_saver *s, struct save_ctx *c, int local, Mpickpt__Index *idx,
                  ckpt__target_copies *x);
    /* a save that is not committed: the extra copies this rank placed are removed. Local. */
    void (*undo)(struct save_ctx *c, const ckpt__target_copies *x);
    /* the chief's commit point, every data file in place: the directory fsynced, the index last
     * (its header's timestamp set here unless `copies` set it). The chief. */
    int (*commit)(struct save_ctx *c, Mpickpt__Index *idx);
    /* the chief's metrics line: *fd open for appending (close it), or -1 when the target keeps
     * none; an error is the open's. */
    int (*metrics_open)(const struct save_job *j, int *fd);

    /* ---- the restore (restore.c) ---- */
    /* open_restore, the restore's names: `prefix` (size bytes, the chief's, adopted by every
     * rank) becomes this rank's prefix of the checkpoint, and `name` (nsize bytes) what messages
     * call it; then what a lost or wiped node lacks is copied back from the nodes that hold it
     * (the node cache's rebuild). Agreed; no collective when there is nothing to do (the
     * persistent directory). */
    int (*open_restore)(struct ckpt_saver *s, char *prefix, size_t size, char *name,
                        size_t nsize);
    /* fetch, once every rank has its share of the index (*r, opened on `prefix`; the chief's may
     * be replaced by its own share): the pieces it reads that its directory lacks, fetched from
     * the ranks that hold them; *held for fetch_done (-1: nothing held). Returns an agreed
     * failure (the restore ends there, the copy could not be made whole), else CKPT_OK with this
     * rank's status left in *local. The persistent directory: nothing to fetch (no collective). */
    int (*fetch)(struct ckpt_saver *s, struct ckpt_reader **r, const char *prefix,
                 const char *name, int *local, int *held);
    /* fetch_done: what fetch held, released (its scratch files removed). Local. */
    void (*fetch_done)(const struct ckpt_saver *s, int held);

    /* ---- upkeep (called by the manager through mpi_internal.h) ---- */
    /* gc: what crashed or failed saves left in this target's directories removed (lib/gc.c
     * ckpt__gc), by the ranks that own them. Local; where no save is in flight on any rank.
     * NULL for the persistent directory: the saver holds none (each save names its own); the
     * manager runs ckpt__gc on its directory (manager.c). */
    int (*gc)(struct ckpt_saver *s);
    /* sweep: every checkpoint named <stem>-<N> that `keep` (n counters) does not list removed,
     * index first. Collective over `comm`, agreed. NULL for the persistent directory: which
     * checkpoints it keeps is the manager's retention (manager.c), which deletes them through
     * lib/state.c (ckpt__checkpoint_delete_held). */
    int (*sweep)(struct ckpt_saver *s, MPI_Comm comm, const char *stem, const int64_t *keep,
                 size_t n);
    /* drain: checkpoint `name` copied from this target into the persistent directory `dir` and
     * committed there with the same index (*shape: a checkpoint of another shape, not drained).
     * Collective over `comm`, agreed. NULL for the persistent directory, the drain's
     * destination. */
    int (*drain)(struct ckpt_saver *s, MPI_Comm comm, const char *name, const char *dir,
                 struct ckpt__drain_shape *shape);
} ckpt__target_ops;

extern const ckpt__target_ops ckpt__target_persistent; /* target_dir.c */
extern const ckpt__target_ops ckpt__target_cache;      /* save_levels.c */

/* The target of a save or a restore: the node cache when `cache`, else the persistent
 * directory. */
const ckpt__target_ops *ckpt__target_of(int cache);

/* target_dir.c: the directory commit both targets make (lib/commit.c: the directory fsynced, the
 * index written last, never over an existing one), the index as it is. The chief. */
int ckpt__target_commit_index(struct save_ctx *c, Mpickpt__Index *idx);
/* target_dir.c: extra copies that were none (the persistent directory's), and their undo. */
int ckpt__target_no_copies(struct ckpt_saver *s, struct save_ctx *c, int local,
                           Mpickpt__Index *idx, ckpt__target_copies *x);
void ckpt__target_no_undo(struct save_ctx *c, const ckpt__target_copies *x);
void ckpt__target_copies_free(ckpt__target_copies *x);

#endif
