/*
 * The persistent directory as a storage target (target.h, docs/architecture.md "Storage
 * targets"): the prefix as the chief gave it, the save's bytes reserved up front
 * (MPICKPT_RESERVE), no extra copies, the directory commit (lib/commit.c: the index stamped and
 * written last), the metrics line in the directory itself; a restore reads the directory as it is
 * (its name is the prefix, nothing to rebuild or fetch). No gc, sweep or drain: the saver holds no
 * persistent directory (each save and restore names its own), the manager's retention decides
 * what it keeps (manager.c) and the drain's destination is this directory. Also the directory
 * commit the node cache makes too, and the choice of a save's or a restore's target.
 */
#include "saver_internal.h"

#include "commit.h"
#include "fsutil.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int commit_fault(void *arg)
{
    (void)arg;
    return ckpt__fault(0, "commit");
}

int ckpt__target_commit_index(save_ctx *c, Mpickpt__Index *idx)
{
    ckpt__commit_req q = { .dirfd = c->dirfd, .dir = c->n.dir, .index_name = c->n.index_name,
                           .index_shown = c->n.prefix, .idx = idx, .before_index = commit_fault };
    return ckpt__commit_index(&q);
}

int ckpt__target_no_copies(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Index *idx,
                           ckpt__target_copies *x)
{
    (void)s;
    (void)c;
    (void)idx;
    memset(x, 0, sizeof *x);
    return local;
}

void ckpt__target_no_undo(save_ctx *c, const ckpt__target_copies *x)
{
    (void)c;
    (void)x;
}

void ckpt__target_copies_free(ckpt__target_copies *x)
{
    for (size_t i = 0; i < x->nplaced; i++)
        free(x->placed[i]);
    free(x->placed);
    memset(x, 0, sizeof *x);
}

static int dir_place(ckpt_saver *s, char *prefix, size_t size)
{
    (void)s;
    (void)prefix;
    (void)size;
    return CKPT_OK;
}

static int dir_reserves(const ckpt_saver *s)
{
    (void)s;
    return 1;
}

/* the commit point's time, as late as it can be: the index's header */
static int dir_commit(save_ctx *c, Mpickpt__Index *idx)
{
    idx->header->timestamp = ckpt__now_seconds();
    return ckpt__target_commit_index(c, idx);
}

static int dir_metrics_open(const save_job *j, int *fd)
{
    return ckpt__file_open_append(fd, j->c.dirfd, "metrics.jsonl", j->c.n.dir);
}

/* the restore's names: the prefix as it is, and messages call it so (no collective) */
static int dir_open_restore(ckpt_saver *s, char *prefix, size_t size, char *name, size_t nsize)
{
    (void)s;
    (void)size;
    snprintf(name, nsize, "%s", prefix);
    return CKPT_OK;
}

/* every data file is in the directory: nothing to fetch, no collective, *local as it is */
static int dir_fetch(ckpt_saver *s, ckpt_reader **r, const char *prefix, const char *name,
                     int *local, int *held)
{
    (void)s;
    (void)r;
    (void)prefix;
    (void)name;
    (void)local;
    *held = -1;
    return CKPT_OK;
}

static void dir_fetch_done(const ckpt_saver *s, int held)
{
    (void)s;
    (void)held;
}

const ckpt__target_ops ckpt__target_persistent = {
    .what = "",
    .node_local = 0,
    .place = dir_place,
    .reserves = dir_reserves,
    .copies = ckpt__target_no_copies,
    .undo = ckpt__target_no_undo,
    .commit = dir_commit,
    .metrics_open = dir_metrics_open,
    .open_restore = dir_open_restore,
    .fetch = dir_fetch,
    .fetch_done = dir_fetch_done,
    .gc = NULL,    /* the manager's ckpt__gc of its directory (manager.c) */
    .sweep = NULL, /* the manager's retention (manager.c) */
    .drain = NULL, /* the drain's destination */
};

const ckpt__target_ops *ckpt__target_of(int cache)
{
    return cache ? &ckpt__target_cache : &ckpt__target_persistent;
}
