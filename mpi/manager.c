/*
 * Checkpoint manager and worker training state. The chief owns the state file: it reads it,
 * updates it after each commit and applies retention; every other rank receives the chief's view
 * by broadcast, so all ranks always agree on what exists and what the latest checkpoint is.
 * Its modules share mpi/manager_internal.h: this file holds creation and release, the accessors,
 * the save with its commit hooks, and retention.
 */
#include "manager_internal.h"

#include "env.h"
#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"
#include "mpickpt/preempt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much of a caller's options struct its version has (0: a version this library lacks). */
size_t ckpt__mgr_opts_size(unsigned version)
{
    return version == 1   ? offsetof(ckpt_manager_options, cache_dir)
           : version == 2 ? offsetof(ckpt_manager_options, lock_wait_seconds)
           : version == 3 ? offsetof(ckpt_manager_options, strict_restore)
           : version == CKPT_MANAGER_OPTIONS_VERSION ? sizeof(ckpt_manager_options)
                                                     : 0;
}

/* Rank 0: one job per directory (docs/operations.md), taken before anything in it is read; the
 * wait is rank 0's (the option, else MPICKPT_LOCK_WAIT), as only rank 0 waits. */
int ckpt__mgr_take_dirlock(ckpt_manager *m, int dirfd)
{
    double wait = m->opts.lock_wait_seconds;
    int rc = wait == 0 ? ckpt__dirlock_env_wait(&wait) : CKPT_OK;
    return rc == CKPT_OK ? ckpt__dirlock_take(&m->dirlock, dirfd, m->dir, wait) : rc;
}

/* ckpt__mgr_create on the chief: the directory (made, locked), the retention mode, the state
 * file (or, when it is missing or damaged, the view rebuilt from the committed checkpoints) and
 * the checkpoints committed but not listed. Returns the chief's local status. */
static int chief_open(ckpt_manager *m, const char *dir)
{
    int dfd = -1;
    int local = ckpt__path(m->dir, sizeof m->dir, "%s", dir ? dir : "");
    if (local == CKPT_OK) /* makes it; a chief/ that is a link is refused */
        local = ckpt__ckptdir_open(&dfd, NULL, m->dir, 1);
    if (local == CKPT_OK)
        local = ckpt__mgr_take_dirlock(m, dfd);
    if (local == CKPT_OK) {
        static const char *const words[] = { "background", "inline" };
        static const int values[] = { 0, 1 };
        local = ckpt__env_choice(&m->retention_inline, "MPICKPT_RETENTION", words, values, 2, 0);
    }
    ckpt__close(dfd);
    if (local == CKPT_OK) {
        int r = ckpt_state_read(&m->state, m->dir);
        if (r != CKPT_OK) {
            /* No state file (a first run, or it was lost) or a damaged one: rebuild the view
             * from the committed checkpoints themselves. */
            if (r != CKPT_ENOTFOUND)
                ckpt__log(CKPT_LOG_WARN, "%s", ckpt_error_last()->message);
            ckpt_state_free(m->state);
            m->state = NULL;
            local = ckpt_state_scan(&m->state, m->dir);
            if (local == CKPT_OK && r != CKPT_ENOTFOUND)
                ckpt__log(CKPT_LOG_WARN, "rebuilt the checkpoint list of %s from %zu committed "
                                         "checkpoint(s)",
                          m->dir, m->state->num_entries);
            if (local == CKPT_OK && m->state->num_entries == 0)
                m->state->last_preserved_timestamp = ckpt__now_seconds();
        }
    }
    if (local == CKPT_OK)
        local = ckpt__mgr_adopt_unlisted(m, m->dir, m->dir, CKPT_LEVEL_PERSISTENT);
    return local;
}

/* ckpt__mgr_create: every rank gets the chief's directory name (with the chief's status). */
static int share_dir(ckpt_manager *m, int local)
{
    uint8_t *dbuf = (uint8_t *)m->dir;
    size_t dlen = sizeof m->dir;
    if (m->rank != 0)
        dbuf = NULL;
    int rc = ckpt__mgr_bcast_bytes(m, m->comm, &dbuf, &dlen, local);
    if (rc == CKPT_OK && m->rank != 0) {
        memcpy(m->dir, dbuf, sizeof m->dir);
        m->dir[sizeof m->dir - 1] = '\0';
    }
    if (m->rank != 0)
        free(dbuf);
    return rc;
}

/* ckpt__mgr_create with a cache level: what a crash left (committed checkpoints the state does not
 * list, the caches' leftovers and in-flight parts) and a drain an earlier run did not finish.
 * Collective. */
static int cache_startup(ckpt_manager *m, ckpt_saver *saver)
{
    /* what committed before a crash kept the state from saying so: checkpoints committed to
     * the cache (kept by the sweep below), drains committed to the directory */
    int adopted = CKPT_OK;
    if (m->rank == 0 && (adopted = ckpt__mgr_adopt_unlisted(m, ckpt_saver_cache_held_path(saver),
                                                            ckpt_saver_cache_dir(saver),
                                                            CKPT_LEVEL_CACHE)) == CKPT_OK)
        adopted = ckpt__mgr_adopt_drained(m);
    int rc = ckpt__mgr_share_state(m, m->comm, adopted);
    if (rc == CKPT_OK) /* what crashed saves left in the caches */
        rc = ckpt__mgr_sweep_cache(m, m->comm);
    if (rc == CKPT_OK) /* and their in-flight parts (no save runs yet) */
        rc = ckpt_mpi_agree(m->comm, ckpt_saver_cache_gc(saver));
    if (rc == CKPT_OK) /* a drain an earlier run did not finish: at the next save */
        for (size_t i = m->state->num_entries; i-- > 0;) {
            const ckpt_state_entry *e = &m->state->entries[i];
            if (ckpt__mgr_levels_of(e) & CKPT_LEVEL_PERSISTENT)
                break; /* a newer persistent copy exists */
            if (e->save_counter % m->persist_every == 0) {
                snprintf(m->drain_pending, sizeof m->drain_pending, "%s", e->prefix);
                break;
            }
        }
    return rc;
}

int ckpt_manager_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                        const ckpt_manager_options *opts)
{
    return ckpt__mgr_create(out, saver, dir, opts, 1);
}

int ckpt__mgr_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                     const ckpt_manager_options *opts, int levels_from_env)
{
    *out = NULL;
    if (!saver)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    if (opts && !ckpt__mgr_opts_size(opts->version))
        return ckpt__error(CKPT_EINVAL, "ckpt_manager_options version %u, expected 1 to %d",
                           opts->version, CKPT_MANAGER_OPTIONS_VERSION);
    ckpt_manager *m = calloc(1, sizeof *m);
    MPI_Comm comm = ckpt_saver_comm(saver);
    int local = m ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    int rc = ckpt_mpi_agree(comm, local);
    if (rc != CKPT_OK) {
        free(m);
        return rc;
    }
    m->saver = saver;
    m->comm = comm;
    pthread_mutex_init(&m->lock, NULL);
    MPI_Comm_rank(comm, &m->rank);
    ckpt_manager_options defaults = CKPT_MANAGER_OPTIONS_INIT;
    m->opts = defaults;
    if (opts) /* an older caller's struct ends before the fields its version lacks */
        memcpy(&m->opts, opts, ckpt__mgr_opts_size(opts->version));
    /* NULL options and versions 1-3: restores as before strict restores */
    m->legacy_restore = !opts || opts->version < 4;
    if (m->legacy_restore)
        m->opts.strict_restore = 0;
    local = ckpt__path(m->name, sizeof m->name, "%s", m->opts.name ? m->opts.name : "ckpt");
    if (local == CKPT_OK && (!ckpt__safe_filename(m->name) || strchr(m->name, '.')))
        local = ckpt__error(CKPT_EINVAL, "checkpoint name '%s' must be a plain name without '.'",
                            m->name);
    m->opts.name = NULL;
    if (m->rank == 0 && local == CKPT_OK)
        local = chief_open(m, dir);
    else if (local == CKPT_OK)
        local = ckpt_state_new(&m->state);
    /* the chief's directory, then its state */
    rc = share_dir(m, local);
    if (rc == CKPT_OK)
        rc = ckpt__mgr_share_state(m, m->comm, CKPT_OK);
    if (rc == CKPT_OK)
        rc = ckpt__mgr_share_control(m);
    if (rc == CKPT_OK)
        rc = ckpt__mgr_levels_setup(m, levels_from_env);
    m->opts.cache_dir = m->opts.failure_group = NULL; /* borrowed for the call only */
    if (rc == CKPT_OK && m->cache)
        rc = cache_startup(m, saver);
    if (rc == CKPT_OK) /* told when the saver is closed first (manager_life.c) */
        rc = ckpt_mpi_agree(m->comm, ckpt__mgr_watch_saver(m));
    if (rc != CKPT_OK) {
        ckpt_manager_free(m);
        return rc;
    }
    if (ckpt_preempt_watch_dir(m->dir) != CKPT_OK) /* `mpickpt halt DIR` (local) */
        ckpt__log(CKPT_LOG_WARN, "%s", ckpt_error_last()->message);
    *out = m;
    return CKPT_OK;
}

void ckpt_manager_free(ckpt_manager *m)
{
    /* no save calls the manager any more, unless one runs its hook now (then the hook's thread
     * releases it when it returns: manager_life.c) */
    if (m && !ckpt__mgr_unwatch_saver(m))
        ckpt__mgr_release(m);
}

void ckpt__mgr_release(ckpt_manager *m)
{
    ckpt__reaper_wait(&m->reaper);
    ckpt_state_free(m->state);
    ckpt__restart_clear(&m->ctl);
    if (m->saver_state == CKPT__SAVER_OPEN && m->cache) /* the held directories and locks */
        ckpt_saver_cache_close(m->saver);
    ckpt__dirlock_release(m->dirlock); /* after the save in flight: it still wrote to `dir` */
    pthread_mutex_destroy(&m->lock);
    ckpt_name_list_free(m->miss);
    ckpt_name_list_free(m->unexp);
    ckpt__mgr_guard_free(m->guard);
    free(m);
}

int ckpt_manager_latest(const ckpt_manager *m, char *out, size_t out_size)
{
    ckpt_manager *mm = (ckpt_manager *)m; /* the lock only */
    pthread_mutex_lock(&mm->lock);
    const ckpt_state *st = m->state;
    size_t i = ckpt__mgr_start_of(m, st);
    const ckpt_state_entry *e = i < st->num_entries ? &st->entries[i] : NULL;
    int cached = e && ckpt__mgr_levels_of(e) == CKPT_LEVEL_CACHE; /* named by the saver */
    int rc = cached ? ckpt__mgr_saver_open(m, "ckpt_manager_latest") : CKPT_OK;
    if (rc == CKPT_OK)
        rc = !e       ? ckpt__path(out, out_size, "%s", "")
             : cached ? ckpt__path(out, out_size, "%s/%s", ckpt_saver_cache_dir(m->saver),
                                   e->prefix)
                      : ckpt__path(out, out_size, "%s/%s", m->dir, e->prefix);
    pthread_mutex_unlock(&mm->lock);
    return rc;
}

/* Deprecated (docs/api.md "Deprecated"): ckpt_manager_state_copy() or ckpt_manager_restorable() */
const ckpt_state *ckpt_manager_state(const ckpt_manager *m)
{
    return m->state;
}

int ckpt_manager_state_copy(ckpt_state **out, const ckpt_manager *m)
{
    *out = NULL;
    ckpt_state *c = NULL;
    int rc = ckpt_state_new(&c);
    if (rc != CKPT_OK)
        return rc;
    ckpt_manager *mm = (ckpt_manager *)m; /* the lock only */
    pthread_mutex_lock(&mm->lock);
    const ckpt_state *st = m->state; /* not to be read once unlocked: a commit may free it */
    size_t n = st->num_entries;
    *c = *st;
    c->entries = n ? malloc(n * sizeof *c->entries) : NULL;
    if (c->entries)
        memcpy(c->entries, st->entries, n * sizeof *c->entries);
    else
        c->num_entries = 0;
    pthread_mutex_unlock(&mm->lock);
    if (n && !c->entries) {
        ckpt_state_free(c);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    *out = c;
    return CKPT_OK;
}

int ckpt_manager_restorable(ckpt_manager_restorable_list **out, const ckpt_manager *m)
{
    *out = NULL;
    ckpt_manager_restorable_list *l = calloc(1, sizeof *l);
    if (!l)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    ckpt_manager *mm = (ckpt_manager *)m; /* the lock only */
    pthread_mutex_lock(&mm->lock);
    const ckpt_state *st = m->state; /* not to be read once unlocked: a commit may free it */
    size_t start = ckpt__mgr_start_of(m, st);
    l->entries = malloc((st->num_entries ? st->num_entries : 1) * sizeof *l->entries);
    for (size_t i = 0; l->entries && i < st->num_entries; i++) {
        unsigned lv;
        int c = ckpt__mgr_candidate(m, &st->entries[i], &lv);
        if (c < 0)
            continue;
        if (i == start)
            l->start = l->num_entries;
        ckpt_manager_restorable_entry *r = &l->entries[l->num_entries++];
        r->entry = st->entries[i];
        r->entry.levels = lv;
        r->restart = c;
    }
    if (start == st->num_entries)
        l->start = l->num_entries;
    pthread_mutex_unlock(&mm->lock);
    if (!l->entries) {
        free(l);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    *out = l;
    return CKPT_OK;
}

void ckpt_manager_restorable_free(ckpt_manager_restorable_list *list)
{
    if (list)
        free(list->entries);
    free(list);
}

/*
 * Retention on the chief (TensorFlow's CheckpointManager semantics): the newest max_to_keep are
 * kept; an older one is kept anyway ("preserved") when keep_every_n_hours passed since the last
 * preserved one; the rest are deleted. The state is written first, then the checkpoints are
 * deleted index first, so a crash in between leaves valid but unlisted checkpoints, never a
 * listed checkpoint without data. The latest is never deleted.
 */
/* Data files from this size on have their blocks freed in the background (lib/reaper.h). */
#define RETENTION_HOLD_MIN ((uint64_t)1 << 20)

/* Retention's update of the state, the same on every rank (the same state, control and
 * options; no allocation): what leaves the persistent directory goes to `doomed` (room for every
 * entry) when not NULL (the chief). */
static void retire(ckpt_manager *m, char (*doomed)[256], size_t *ndoomed_out)
{
    ckpt_state *st = m->state;
    size_t ndoomed = 0;
#define DOOM(e)                                                                                    \
    do {                                                                                           \
        if (doomed)                                                                                \
            snprintf(doomed[ndoomed], 256, "%s", (e)->prefix);                                     \
        ndoomed++;                                                                                 \
    } while (0)
    /* Dropped (`mpickpt drop`): out of the state and off every level whatever max_to_keep (the
     * caches' copies go with the next sweep), but never the newest entry. */
    for (size_t i = 0; i + 1 < st->num_entries;) {
        ckpt_state_entry *e = &st->entries[i];
        if (ckpt__mgr_rs_of(m, e) != CKPT__RS_DROPPED) {
            i++;
            continue;
        }
        if (doomed)
            ckpt__log(CKPT_LOG_INFO, "retiring %s/%s: it was dropped", m->dir, e->prefix);
        if (ckpt__mgr_levels_of(e) & CKPT_LEVEL_PERSISTENT)
            DOOM(e);
        ckpt_state_remove(st, i);
    }
    /* Set aside by a pin: neither counted nor deleted. */
    size_t keep = (size_t)(m->opts.max_to_keep > 0 ? m->opts.max_to_keep : 0), unpreserved = 0;
    for (size_t i = 0; i < st->num_entries; i++) /* the persistent directory's */
        unpreserved += !st->entries[i].preserved &&
                       ckpt__mgr_rs_of(m, &st->entries[i]) != CKPT__RS_ASIDE &&
                       (ckpt__mgr_levels_of(&st->entries[i]) & CKPT_LEVEL_PERSISTENT);
    for (size_t i = 0; m->opts.max_to_keep > 0 && i + 1 < st->num_entries && unpreserved > keep;) {
        ckpt_state_entry *e = &st->entries[i];
        if (e->preserved || !(ckpt__mgr_levels_of(e) & CKPT_LEVEL_PERSISTENT) ||
            ckpt__mgr_rs_of(m, e) == CKPT__RS_ASIDE) {
            i++;
            continue;
        }
        unpreserved--;
        if (m->opts.keep_every_n_hours > 0 &&
            e->timestamp - st->last_preserved_timestamp >= m->opts.keep_every_n_hours * 3600.0) {
            e->preserved = 1;
            st->last_preserved_timestamp = e->timestamp;
            i++;
            continue;
        }
        DOOM(e);
        /* still in the cache: only its copy here goes */
        if (ckpt__mgr_levels_of(e) & CKPT_LEVEL_CACHE) {
            e->levels = CKPT_LEVEL_CACHE;
            i++;
        } else {
            ckpt_state_remove(st, i);
        }
    }
#undef DOOM
    *ndoomed_out = ndoomed;
}

/* The chief: retention (retire), then the state file, then the deletions. */
int ckpt__mgr_apply_retention(ckpt_manager *m)
{
    ckpt_state *st = m->state;
    char (*doomed)[256] = calloc(st->num_entries ? st->num_entries : 1, sizeof *doomed);
    size_t ndoomed = 0;
    if (!doomed)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    retire(m, doomed, &ndoomed);
    int rc = ckpt__state_write(st, m->dir);
    /* Large data files are held open across their unlink and closed by a background thread,
     * which frees their blocks while the job trains (lib/reaper.h); MPICKPT_RETENTION=inline:
     * freed here. */
    int *held = NULL;
    size_t nheld = 0;
    for (size_t i = 0; rc == CKPT_OK && i < ndoomed; i++) {
        char prefix[4400];
        /* Never a checkpoint the state still lists (under any entry) or the latest. */
        int listed = 0;
        for (size_t k = 0; !listed && k < st->num_entries; k++)
            listed = strcmp(doomed[i], st->entries[k].prefix) == 0 &&
                     (ckpt__mgr_levels_of(&st->entries[k]) & CKPT_LEVEL_PERSISTENT);
        listed |= strcmp(doomed[i], st->latest) == 0 && st->num_entries > 0 &&
                  (ckpt__mgr_levels_of(&st->entries[st->num_entries - 1]) & CKPT_LEVEL_PERSISTENT);
        if (listed) {
            ckpt__log(CKPT_LOG_WARN, "retention kept %s/%s: it is still listed", m->dir,
                      doomed[i]);
            continue;
        }
        if ((rc = ckpt__path(prefix, sizeof prefix, "%s/%s", m->dir, doomed[i])) == CKPT_OK) {
            rc = m->retention_inline
                     ? ckpt_checkpoint_delete(prefix)
                     : ckpt__checkpoint_delete_held(prefix, RETENTION_HOLD_MIN, &held, &nheld);
            if (rc == CKPT_OK)
                ckpt__log(CKPT_LOG_INFO, "retention deleted %s", prefix);
        }
    }
    ckpt__reaper_close(&m->reaper, held, nheld);
    free(doomed);
    return rc;
}

/* The state's entry of a checkpoint just committed at `prefix` on `levels`. */
void ckpt__mgr_new_entry(ckpt_state_entry *e, const char *prefix, int64_t counter,
                         const ckpt_manager_save_info *info, unsigned levels)
{
    memset(e, 0, sizeof *e);
    const char *slash = strrchr(prefix, '/');
    snprintf(e->prefix, sizeof e->prefix, "%s", slash ? slash + 1 : prefix);
    e->save_counter = counter;
    e->epoch = info->epoch;
    e->step = info->step;
    e->timestamp = ckpt__now_seconds();
    e->end_of_epoch = info->end_of_epoch != 0;
    e->levels = levels;
}

/*
 * State updates ride the commit vote (the saver's hook in two halves, on the thread that
 * committed: the writer thread in async mode). The first half, between the chief's commit point
 * and the commit vote: the chief records the checkpoint, applies retention and writes the state
 * file; the vote carries its status, the entry's time and its bytes to every rank; the other
 * ranks make room for the entry, so that adding it cannot fail. The second half, after the vote:
 * every other rank makes the same update to its copy (the same entry, the same retention: the
 * same state, restart control and options everywhere), with no collective call. A failure of
 * the first half anywhere is the save's error, agreed by the saver. A save to the cache level
 * rides the same vote (its entry at level cache, its bytes from its index, the cache's retention
 * before both levels'), then its second half sweeps the caches and drains every
 * persist_every-th checkpoint, collective over the hook's communicator
 * (manager_levels.c: ckpt__mgr_cache_committed).
 */
enum { HV_TIME, HV_BYTES, HV_EPOCH = HV_BYTES + 2, HV_STEP = HV_EPOCH + 2, HV_EOE = HV_STEP + 2 };

/* A 64-bit integer as two doubles, exactly (the vote carries doubles). */
static void put64(double *v, int64_t x)
{
    v[0] = (double)(x >> 32);
    v[1] = (double)(uint32_t)x;
}

static int64_t get64(const double *v)
{
    return (int64_t)(((uint64_t)(int64_t)v[0] << 32) | (uint64_t)(uint32_t)v[1]);
}

static int commit_prep(const char *prefix, int64_t counter, ckpt_commit_vote *v, void *payload)
{
    ckpt_manager *m = payload;
    int local = CKPT_OK;
    pthread_mutex_lock(&m->lock);
    if (m->rank == 0) {
        ckpt_state_entry e;
        /* 0: the directory, as before levels; else the cache */
        ckpt__mgr_new_entry(&e, prefix, counter, &m->pending, m->cache ? CKPT_LEVEL_CACHE : 0);
        local = m->cache ? ckpt__mgr_cache_bytes(&e.bytes, prefix)
                         : ckpt_checkpoint_bytes(&e.bytes, prefix);
        if (local == CKPT_OK)
            local = ckpt_state_append(m->state, &e);
        if (local == CKPT_OK && m->cache)
            ckpt__mgr_cache_retention(m);
        if (local == CKPT_OK)
            local = ckpt__mgr_apply_retention(m);
        /* the chief's entry, exactly: every rank records what the chief's state file lists */
        v->vals[HV_TIME] = e.timestamp;
        put64(&v->vals[HV_BYTES], (int64_t)e.bytes);
        put64(&v->vals[HV_EPOCH], e.epoch);
        put64(&v->vals[HV_STEP], e.step);
        v->vals[HV_EOE] = e.end_of_epoch;
    } /* the others made room for the entry before the save (reserve_entry): nothing to fail */
    pthread_mutex_unlock(&m->lock);
    return local;
}

/* Room for one more entry in this rank's state, made before a save: a rank other than the chief
 * then records the committed checkpoint in commit_hook with nothing that can fail after the
 * chief has written the state file (an out-of-memory there would leave this rank's state without
 * the entry the chief's lists). ckpt_state_append reallocates to the same size: in place. Local. */
static int reserve_entry(ckpt_manager *m)
{
    pthread_mutex_lock(&m->lock);
    ckpt_state *st = m->state;
    ckpt_state_entry *n = realloc(st->entries, (st->num_entries + 1) * sizeof *n);
    if (n)
        st->entries = n;
    pthread_mutex_unlock(&m->lock);
    return n ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", m->rank);
}

static int commit_hook(MPI_Comm comm, const char *prefix, int64_t counter,
                       const ckpt_commit_vote *v, void *payload)
{
    ckpt_manager *m = payload;
    const ckpt_manager_save_info *info = &m->pending;
    /* no values: the chief ran no first half (a manager that went away: manager_life.c) */
    if (m->rank != 0 && isfinite(v->vals[HV_TIME])) {
        ckpt_state_entry e;
        ckpt__mgr_new_entry(&e, prefix, counter, info, m->cache ? CKPT_LEVEL_CACHE : 0);
        e.timestamp = v->vals[HV_TIME];
        e.bytes = (uint64_t)get64(&v->vals[HV_BYTES]);
        e.epoch = get64(&v->vals[HV_EPOCH]);
        e.step = get64(&v->vals[HV_STEP]);
        e.end_of_epoch = v->vals[HV_EOE] != 0;
        size_t nd = 0;
        pthread_mutex_lock(&m->lock);
        ckpt_state *st = m->state; /* the room is there (commit_prep) */
        st->entries[st->num_entries++] = e;
        snprintf(st->latest, sizeof st->latest, "%s", e.prefix);
        if (e.save_counter > st->save_counter)
            st->save_counter = e.save_counter;
        if (m->cache) /* the chief's retention of both levels, as commit_prep made it */
            ckpt__mgr_cache_retention(m);
        retire(m, NULL, &nd);
        pthread_mutex_unlock(&m->lock);
    }
    m->have_last = 1;
    m->last_step = info->step;
    /* the cache level: the sweep of the nodes' caches and the drain, collective over `comm` */
    return m->cache ? ckpt__mgr_cache_committed(m, comm, prefix, counter) : CKPT_OK;
}

/* The chief: the first counter from *next whose names are free in the directory and, with a
 * cache level, in its node's cache directory (ckpt__counter_free: warnings name what it passes). */
static int free_counter(ckpt_manager *m, int64_t *next)
{
    int fds[2] = { -1, -1 };
    const char *shown[2] = { m->dir, ckpt_saver_cache_dir(m->saver) };
    int rc = ckpt__ckptdir_open(&fds[0], NULL, m->dir, 0);
    if (rc == CKPT_OK && m->cache) /* the held directory, by descriptor */
        rc = ckpt__dir_open(&fds[1], ckpt_saver_cache_held_path(m->saver));
    if (rc == CKPT_OK)
        rc = ckpt__counter_free(next, fds, shown, m->cache ? 2 : 1, m->name);
    if (rc == CKPT_OK && *next > CKPT__COUNTER_MAX)
        rc = ckpt__error(CKPT_EINVAL, "%s: the save counter reached %lld; start a new directory",
                         m->dir, (long long)*next);
    ckpt__close(fds[0]);
    ckpt__close(fds[1]);
    return rc;
}

int ckpt_manager_save(ckpt_manager *m, const ckpt_manager_save_info *info, char *out,
                      size_t out_size)
{
    return ckpt_manager_save_ex(out, out_size, m, info, NULL);
}

/* The caller's error on this rank (ckpt_manager_save_options.error) or its bad options, raised;
 * CKPT_OK when neither. The save's first collectives agree it as any failure here. */
static int caller_error(const ckpt_manager *m, const ckpt_manager_save_options *o)
{
    if (!o)
        return CKPT_OK;
    if (o->version != CKPT_MANAGER_SAVE_OPTIONS_VERSION)
        return ckpt__error(CKPT_EINVAL, "rank %d: ckpt_manager_save_options version %u, "
                                        "expected %d",
                           m->rank, o->version, CKPT_MANAGER_SAVE_OPTIONS_VERSION);
    return ckpt__mgr_caller_error(m, o->error, "ckpt_manager_save_options");
}

/* This rank's part of the caller's vote (ckpt__mgr_vote_control): whether caller_error() fails
 * here, and the check. */
static void caller_vote(ckpt__mgr_caller_vote *v, const ckpt_manager_save_options *o)
{
    int ok = !o || (o->version == CKPT_MANAGER_SAVE_OPTIONS_VERSION &&
                    (!o->error || o->error->code == CKPT_OK));
    v->failed = !ok;
    v->check = ok && o ? o->check : 0;
    v->not_check = ~v->check;
}

/* The save's first collective and what follows it before the saver's save: this rank's status.
 * The chief sweeps what crashed or failed saves left before writing anew, once every rank is
 * here: each has then finished its previous save's clean-up (its own workertemp_<r>), which the
 * sweep must not race with. The collective that tells the chief so (ckpt__mgr_vote_control) also
 * brings every rank the chief's restart control (drops and pins an operator made since: their
 * retention applies after this commit) and the caller's vote (`opts`: an error on some rank, the
 * checks alike). */
static int save_vote(ckpt_manager *m, const ckpt_manager_save_options *opts)
{
    ckpt__mgr_caller_vote vote;
    caller_vote(&vote, opts);
    int local = ckpt__mgr_vote_control(m, &vote);
    if (local == CKPT_OK)
        local = caller_error(m, opts);
    if (local == CKPT_OK && !vote.failed && (vote.check & vote.not_check))
        local = ckpt__error_set_reason(
            ckpt__error(CKPT_EMISMATCH, "rank %d: the ranks passed different "
                                        "ckpt_manager_save_options.check values (this rank's: "
                                        "%016llx); nothing was saved",
                        m->rank, (unsigned long long)(opts ? opts->check : 0)),
            CKPT_REASON_CHECK);
    if (m->rank == 0 && local == CKPT_OK) {
        size_t removed = 0;
        local = ckpt__gc(m->dir, 0, NULL, NULL, &removed, 0);
        if (local == CKPT_OK && removed)
            ckpt__log(CKPT_LOG_INFO, "removed %zu leftover(s) of unfinished saves in %s", removed,
                      m->dir);
    }
    if (local == CKPT_OK && m->cache) /* the node leaders, in their caches */
        local = ckpt_saver_cache_gc(m->saver);
    return local;
}

/* The next save's counter into *next: past every checkpoint ever committed here, whatever was
 * restored. Returns `local`, or this rank's failure when `local` is CKPT_OK. */
static int next_counter(ckpt_manager *m, const ckpt_state *st, int local, int64_t *next)
{
    int64_t n = st->save_counter;
    for (size_t i = 0; i < st->num_entries; i++)
        if (st->entries[i].save_counter > n)
            n = st->entries[i].save_counter;
    if (ckpt_saver_counter(m->saver) > n)
        n = ckpt_saver_counter(m->saver);
    /* every counter is checked on the way in (state file, indexes): this cannot overflow */
    if (n >= CKPT__COUNTER_MAX && local == CKPT_OK)
        local = ckpt__error(CKPT_EINVAL, "%s: the save counter reached %lld; start a new "
                                         "directory",
                            m->dir, (long long)n);
    *next = ++n;
    /* A counter whose names are taken (planted, another job's) is passed, with a warning, instead
     * of failing every save from now on; every rank adopts the chief's choice with the save's
     * prefix (ckpt__save_bcast_prefix), and learns it back from the saver. */
    if (m->rank == 0 && local == CKPT_OK)
        local = free_counter(m, next);
    return local;
}

int ckpt_manager_save_ex(char *out, size_t out_size, ckpt_manager *m,
                         const ckpt_manager_save_info *info, const ckpt_manager_save_options *opts)
{
    if (out && out_size)
        out[0] = '\0';
    ckpt_manager_save_info zero = { 0, 0, 0, 0 };
    if (!info)
        info = &zero;
    int rc = ckpt__mgr_saver_open(m, "ckpt_manager_save");
    if (rc != CKPT_OK)
        return rc;
    /* The previous save (async) must be complete: its state update is what this one builds on,
     * and its failure is this call's error. */
    rc = ckpt_saver_sync(m->saver);
    if (rc != CKPT_OK)
        return rc;
    /* Skipping is decided from the shared state, so every rank decides the same. */
    const ckpt_state *st = m->state;
    if (!m->have_last && st->num_entries > 0) {
        m->have_last = 1;
        m->last_step = st->entries[st->num_entries - 1].step;
    }
    if (!info->force && m->opts.min_step_interval > 0 && m->have_last &&
        info->step - m->last_step < m->opts.min_step_interval)
        return CKPT_OK;

    /* a drain that failed before, once more (it replaces the state: read it again below) */
    if ((rc = ckpt__mgr_drain_pending(m)) != CKPT_OK)
        return rc;
    st = m->state;

    int local = save_vote(m, opts);
    /* from here, a failure on any rank is agreed by the save's first collectives (its prefix's
     * broadcast for the chief's, its first vote for the others') */
    int64_t next = 0;
    local = next_counter(m, st, local, &next);

    char name[4400] = "";
    ckpt_save_info si = { info->epoch, info->step, info->end_of_epoch != 0 };
    /* the manager's state update rides the save's commit vote: its commit hook, the public
     * extension point any saver user has (saver.h, ckpt_commit_hooks) */
    ckpt_commit_hooks hooks = CKPT_COMMIT_HOOKS_INIT; /* through the guard (manager_life.c) */
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    int64_t counter = next;
    so.counter = next;
    so.hooks = &hooks;
    so.counter_out = &counter; /* the chief's (free_counter may have passed taken names) */
    m->pending = *info;
    if (local == CKPT_OK && m->rank != 0)
        local = reserve_entry(m);
    hooks.prepare = commit_prep;
    hooks.committed = commit_hook;
    if (m->cache) { /* to the nodes' caches; every persist_every-th also drained to `dir` */
        if (local == CKPT_OK)
            local = ckpt__path(name, sizeof name, "%s-%lld", m->name, (long long)next);
        so.status = local;
        so.level = CKPT_LEVEL_CACHE;
        ckpt__mgr_guard_hooks(m, &hooks);
        rc = ckpt_saver_write_ex(m->saver, name, &si, &so);
        if (rc == CKPT_OK && out && out_size)
            snprintf(out, out_size, "%s/%s-%lld", ckpt_saver_cache_dir(m->saver), m->name,
                     (long long)counter);
        return rc;
    }
    if (local == CKPT_OK)
        local = ckpt__path(name, sizeof name, "%s/%s-%lld", m->dir, m->name, (long long)next);
    so.status = local;
    ckpt__mgr_guard_hooks(m, &hooks);
    rc = ckpt_saver_write_ex(m->saver, name, &si, &so);
    if (rc == CKPT_OK && out && out_size)
        snprintf(out, out_size, "%s/%s-%lld", m->dir, m->name, (long long)counter);
    return rc;
}
