/*
 * The cache level's public API (include/mpickpt/saver.h "The cache level", docs/levels.md): thin
 * wrappers over the internals (mpi/mpi_internal.h: cache_dir.c set-up, sweep and gc,
 * cache_drain.c), so that a caller of the saver, the manager included, opens, sweeps and drains
 * the cache without the library's internals. Saves and restores at the cache level are
 * ckpt_saver_write_ex and ckpt_saver_restore with the level in their options (save_async.c,
 * restore.c).
 *   ckpt_saver_cache_open   rank 0's settings (pattern, redundancy, persistent directory and its
 *                           identity, lock wait) to every rank in one broadcast, every rank's
 *                           checks in one agreement, then the set-up and the node leaders' locks
 *   ckpt_saver_cache_drain  the drain, its out struct's version agreed first
 */
#include "saver_internal.h"

#include "dirlock.h"
#include "fsutil.h"
#include "identity.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <string.h>

/* What rank 0 decides for every rank. */
typedef struct cache_msg {
    int64_t status, redundancy; /* rank 0's status; CKPT__REDUNDANCY_* */
    double lock_wait;
    char pattern[4096];
    char persistent[4096];
    char identity[CKPT__IDENTITY_HEX + 8];
} cache_msg;

/* Rank 0: its options checked and resolved into *msg (the redundancy's default, the lock wait's
 * from MPICKPT_LOCK_WAIT, the persistent directory's identity). Its status. */
static int chief_settings(cache_msg *msg, const ckpt_cache_options *o)
{
    int rc = CKPT_OK;
    if (!o->dir || !*o->dir)
        return ckpt__error(CKPT_EINVAL, "ckpt_cache_options.dir is not set");
    if (!o->persistent || !*o->persistent)
        return ckpt__error(CKPT_EINVAL, "ckpt_cache_options.persistent is not set (the "
                                        "checkpoint directory whose cache this is)");
    if (o->redundancy != CKPT_REDUNDANCY_DEFAULT && o->redundancy != CKPT_REDUNDANCY_NONE &&
        o->redundancy != CKPT_REDUNDANCY_PARTNER)
        return ckpt__error(CKPT_EINVAL, "ckpt_cache_options.redundancy is %d", o->redundancy);
    if (o->lock_wait_seconds < 0)
        return ckpt__error(CKPT_EINVAL, "ckpt_cache_options.lock_wait_seconds %g is negative",
                           o->lock_wait_seconds);
    msg->redundancy = o->redundancy == CKPT_REDUNDANCY_PARTNER ? CKPT__REDUNDANCY_PARTNER
                                                                : CKPT__REDUNDANCY_NONE;
    msg->lock_wait = o->lock_wait_seconds;
    if (msg->lock_wait == 0)
        rc = ckpt__dirlock_env_wait(&msg->lock_wait);
    if (rc == CKPT_OK)
        rc = ckpt__path(msg->pattern, sizeof msg->pattern, "%s", o->dir);
    if (rc == CKPT_OK)
        rc = ckpt__path(msg->persistent, sizeof msg->persistent, "%s", o->persistent);
    /* whose cache copies are this directory's (lib/identity.h) */
    int dfd = -1;
    if (rc == CKPT_OK)
        rc = ckpt__ckptdir_open(&dfd, NULL, o->persistent, 0);
    if (rc == CKPT_OK)
        rc = ckpt__identity_get(msg->identity, dfd, o->persistent, 1);
    ckpt__close(dfd);
    return rc;
}

int ckpt_saver_cache_open(ckpt_saver *s, const ckpt_cache_options *opts)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    ckpt_saver_wait(s); /* a save in flight (async) may use the saver's cache fields */
    cache_msg msg;
    memset(&msg, 0, sizeof msg);
    int local = CKPT_OK;
    if (!opts)
        local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_cache_options is NULL", s->rank);
    else if (opts->version != CKPT_CACHE_OPTIONS_VERSION)
        local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_cache_options version %u, expected %d",
                            s->rank, opts->version, CKPT_CACHE_OPTIONS_VERSION);
    else if (s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "rank %d: the saver's cache level is open already (in "
                                         "%s): close it first",
                            s->rank, s->cache.dir);
    if (s->rank == 0 && local == CKPT_OK)
        local = chief_settings(&msg, opts);
    msg.status = s->rank == 0 ? local : CKPT_OK;
    if (MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, s->comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the cache level's settings failed");
    /* the chief's failure came with its settings; another rank's is agreed here */
    int rc = ckpt_mpi_agree(s->comm, local != CKPT_OK ? local : (int)msg.status);
    if (rc != CKPT_OK)
        return rc;
    msg.pattern[sizeof msg.pattern - 1] = '\0';
    msg.persistent[sizeof msg.persistent - 1] = '\0';
    msg.identity[sizeof msg.identity - 1] = '\0';
    const char *group = opts->failure_group;
    rc = ckpt__saver_cache_init(s, msg.pattern, (int)msg.redundancy,
                                group && *group ? group : NULL, msg.identity, msg.persistent);
    /* one job per node cache of this directory, as per directory (two directories can share an
     * identity only when it was copied by hand without its inode: a job waits or is refused) */
    if (rc == CKPT_OK && (rc = ckpt__cache_lock(s, msg.lock_wait)) != CKPT_OK)
        ckpt__saver_cache_free(s);
    return rc;
}

void ckpt_saver_cache_close(ckpt_saver *s)
{
    if (!s || !ckpt__saver_has_cache(s))
        return;
    ckpt_saver_wait(s); /* a save in flight may be writing to it */
    ckpt__saver_cache_free(s);
}

const char *ckpt_saver_cache_dir(const ckpt_saver *s)
{
    return s ? ckpt__saver_cache_shown(s) : "";
}

const char *ckpt_saver_cache_held_path(const ckpt_saver *s)
{
    return s ? ckpt__saver_cache_dir(s) : "";
}

int ckpt_saver_cache_drain(ckpt_cache_drain_info *out, ckpt_saver *s, MPI_Comm comm,
                           const char *name, const char *dir)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    if (comm == MPI_COMM_NULL)
        comm = s->comm;
    int local = CKPT_OK;
    if (out && out->version != CKPT_CACHE_DRAIN_INFO_VERSION)
        local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_cache_drain_info version %u, expected %d",
                            s->rank, out->version, CKPT_CACHE_DRAIN_INFO_VERSION);
    else if (!s->cache.on)
        local = ckpt__error(CKPT_EINVAL, "rank %d: a drain without a cache level", s->rank);
    else if (!name || !*name)
        local = ckpt__error(CKPT_EINVAL, "rank %d: a drain without a checkpoint name", s->rank);
    int rc = ckpt_mpi_agree(comm, local);
    if (rc != CKPT_OK)
        return rc;
    ckpt__drain_shape shape;
    memset(&shape, 0, sizeof shape);
    rc = ckpt__cache_drain(s, comm, name, dir ? dir : s->cache.persistent, &shape);
    if (out) {
        out->other_shape = rc == CKPT_OK && shape.other;
        out->of = shape.of;
        out->per_node = shape.per_node;
        out->job_of = shape.job_of;
        out->job_per_node = shape.job_per_node;
    }
    return rc;
}

int ckpt_saver_cache_sweep(ckpt_saver *s, MPI_Comm comm, const char *stem, const int64_t *keep,
                           size_t n)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    return ckpt__cache_sweep(s, comm == MPI_COMM_NULL ? s->comm : comm, stem ? stem : "", keep,
                             keep ? n : 0);
}

int ckpt_saver_cache_gc(ckpt_saver *s)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    return ckpt__cache_gc(s);
}
