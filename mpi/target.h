/*
 * Storage targets: where a save writes (docs/architecture.md "Storage targets"). The save protocol
 * (save_protocol.c) calls these operations and never asks which target it writes to; a target is
 * chosen once when the save is prepared (ckpt__target_of) and kept in the save's context.
 *   ckpt__target_persistent  the persistent directory (target_dir.c)
 *   ckpt__target_cache       the node cache: each rank's directory is its node's cache directory,
 *                            partner copies and index copies (save_levels.c, docs/levels.md)
 * No operation agrees: each returns this rank's status (or none), and the protocol's votes carry a
 * failure to every rank. An operation that moves bytes between ranks (copies) takes part in every
 * transfer whatever `local` says, so the messages always match.
 */
#ifndef MPICKPT_TARGET_H
#define MPICKPT_TARGET_H

#include "mpickpt.pb-c.h"

#include <stddef.h>

struct ckpt_saver;
struct save_ctx;
struct save_job;

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
} ckpt__target_ops;

extern const ckpt__target_ops ckpt__target_persistent; /* target_dir.c */
extern const ckpt__target_ops ckpt__target_cache;      /* save_levels.c */

/* The target of a save: the node cache when `cache`, else the persistent directory. */
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
