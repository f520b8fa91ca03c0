/*
 * The manager's cache level (docs/levels.md; mpi/manager_internal.h): rank 0's settings, the
 * sweep of the nodes' caches, the cache's retention, what follows a save to the cache once its
 * state update rode the commit vote (manager.c's hook: the sweep), and the drain of every persist_every-th checkpoint to the persistent directory (tried again at the
 * next save when it fails).
 */
#include "manager_internal.h"

#include "env.h"
#include "identity.h"
#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rank 0's settings (options, else MPICKPT_* when `from_env`), then the saver's cache on every
 * rank. Collective. */
int ckpt__mgr_levels_setup(ckpt_manager *m, int from_env)
{
    struct {
        int64_t status, on, partner, every, keep;
        int64_t max_to_keep; /* retention's options: every rank applies the chief's */
        double keep_hours;
        char pattern[4096];
    } msg;
    memset(&msg, 0, sizeof msg);
    int local = CKPT_OK;
    if (m->rank == 0) {
        const char *pat = m->opts.cache_dir;
        if (!pat && from_env)
            pat = getenv("MPICKPT_CACHE_DIR");
        int red = m->opts.redundancy;
        int64_t every = m->opts.persist_every, keep = m->opts.cache_max_to_keep;
        static const char *const words[] = { "none", "partner" };
        static const int values[] = { CKPT_REDUNDANCY_NONE, CKPT_REDUNDANCY_PARTNER };
        if (red == CKPT_REDUNDANCY_DEFAULT)
            local = from_env ? ckpt__env_choice(&red, "MPICKPT_REDUNDANCY", words, values, 2,
                                                CKPT_REDUNDANCY_NONE)
                             : (red = CKPT_REDUNDANCY_NONE, CKPT_OK);
        if (local == CKPT_OK && every == 0)
            local = from_env ? ckpt__env_int64(&every, "MPICKPT_PERSIST_EVERY", 1, INT32_MAX, 10)
                             : (every = 10, CKPT_OK);
        if (local == CKPT_OK && keep == 0)
            local = from_env ? ckpt__env_int64(&keep, "MPICKPT_CACHE_KEEP", 1, INT32_MAX, 2)
                             : (keep = 2, CKPT_OK);
        if (local == CKPT_OK && red != CKPT_REDUNDANCY_NONE && red != CKPT_REDUNDANCY_PARTNER)
            local = ckpt__error(CKPT_EINVAL, "ckpt_manager_options.redundancy is %d", red);
        else if (local == CKPT_OK && (every < 0 || keep < 0))
            local = ckpt__error(CKPT_EINVAL, "ckpt_manager_options: persist_every %lld and "
                                             "cache_max_to_keep %lld must be positive (or 0)",
                                (long long)every, (long long)keep);
        if (local == CKPT_OK && pat && *pat)
            local = ckpt__path(msg.pattern, sizeof msg.pattern, "%s", pat);
        msg.on = local == CKPT_OK && pat && *pat;
        /* a saver's cache level belongs to the manager that set it up (until it is freed):
         * a second one would take it over, and its saves would go into the other's caches */
        if (msg.on && ckpt_saver_cache_dir(m->saver)[0])
            local = ckpt__error(CKPT_EINVAL,
                                "%s: the saver already has a cache level (of another manager, "
                                "in %s); give each manager with a cache level its own saver",
                                m->dir, ckpt_saver_cache_dir(m->saver));
        msg.on = msg.on && local == CKPT_OK;
        msg.partner = red == CKPT_REDUNDANCY_PARTNER;
        msg.max_to_keep = m->opts.max_to_keep;
        msg.keep_hours = m->opts.keep_every_n_hours;
        msg.every = every;
        msg.keep = keep;
    }
    msg.status = local;
    if (MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, m->comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the levels failed");
    if (msg.status != CKPT_OK || local != CKPT_OK)
        return ckpt_mpi_agree(m->comm, local != CKPT_OK ? local : (int)msg.status);
    int rc = ckpt_mpi_agree(m->comm, CKPT_OK);
    m->opts.max_to_keep = (int)msg.max_to_keep;
    m->opts.keep_every_n_hours = msg.keep_hours;
    if (rc != CKPT_OK || !msg.on)
        return rc;
    msg.pattern[sizeof msg.pattern - 1] = '\0';
    const char *group = m->opts.failure_group;
    if (!group && from_env)
        group = getenv("MPICKPT_FAILURE_GROUP");
    /* the saver's cache level (saver.h): the directory's identity and the node caches' lock
     * wait (for each node cache's lock: the directory lock's, ckpt__mgr_take_dirlock) are the
     * chief's, decided there */
    ckpt_cache_options co = CKPT_CACHE_OPTIONS_INIT;
    co.dir = msg.pattern;
    co.redundancy = msg.partner ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
    co.failure_group = group;
    co.persistent = m->dir;
    co.lock_wait_seconds = m->opts.lock_wait_seconds;
    rc = ckpt_saver_cache_open(m->saver, &co);
    if (rc == CKPT_OK) {
        m->cache = 1;
        m->persist_every = msg.every;
        m->cache_keep = msg.keep;
    }
    return rc;
}

/* The caches keep exactly the checkpoints the (shared) state lists in the cache. Collective. */
int ckpt__mgr_sweep_cache(ckpt_manager *m, MPI_Comm comm)
{
    const ckpt_state *st = m->state;
    int64_t *keep = malloc((st->num_entries ? st->num_entries : 1) * sizeof *keep);
    size_t n = 0;
    int local = keep ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; keep && i < st->num_entries; i++)
        if (ckpt__mgr_levels_of(&st->entries[i]) & CKPT_LEVEL_CACHE)
            keep[n++] = st->entries[i].save_counter;
    int rc = ckpt_mpi_agree(comm, local);
    if (rc == CKPT_OK)
        rc = ckpt_saver_cache_sweep(m->saver, comm, m->name, keep, n);
    free(keep);
    return rc;
}

/* The cache keeps its newest cache_keep checkpoints; an older one leaves the cache (and the
 * state, unless the persistent directory has it too). The state only: every rank makes the same
 * update to its copy (manager.c's commit hook), the chief's retention deletes. */
void ckpt__mgr_cache_retention(ckpt_manager *m)
{
    ckpt_state *st = m->state;
    size_t in_cache = 0;
    /* set aside by a pin: neither counted nor removed; dropped: ckpt__mgr_apply_retention removes
     * them */
    for (size_t i = 0; i < st->num_entries; i++)
        in_cache += (ckpt__mgr_levels_of(&st->entries[i]) & CKPT_LEVEL_CACHE) != 0 &&
                    ckpt__mgr_rs_of(m, &st->entries[i]) != CKPT__RS_ASIDE &&
                    ckpt__mgr_rs_of(m, &st->entries[i]) != CKPT__RS_DROPPED;
    for (size_t i = 0; i + 1 < st->num_entries && in_cache > (size_t)m->cache_keep;) {
        ckpt_state_entry *e = &st->entries[i];
        if (!(ckpt__mgr_levels_of(e) & CKPT_LEVEL_CACHE) ||
            ckpt__mgr_rs_of(m, e) == CKPT__RS_ASIDE || ckpt__mgr_rs_of(m, e) == CKPT__RS_DROPPED) {
            i++;
            continue;
        }
        in_cache--;
        if (ckpt__mgr_levels_of(e) & CKPT_LEVEL_PERSISTENT) {
            e->levels = CKPT_LEVEL_PERSISTENT;
            i++;
        } else {
            ckpt_state_remove(st, i);
        }
    }
}

/* The chief: the bytes of the cache's checkpoint at `prefix`, from its index (its files are on
 * several nodes). */
int ckpt__mgr_cache_bytes(uint64_t *bytes, const char *prefix)
{
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open_index(&r, prefix);
    if (rc == CKPT_OK) {
        const Mpickpt__Index *idx = ckpt__reader_index(r);
        for (size_t f = 0; f < idx->n_files; f++)
            *bytes += idx->files[f]->bytes;
    }
    ckpt_reader_free(r);
    return rc;
}

/* After a commit to the cache, once every rank's state lists it (the commit vote carried the
 * chief's entry: manager.c's commit hook, collective over `comm`): the node leaders sweep their
 * caches, and every persist_every-th is drained. */
int ckpt__mgr_cache_committed(ckpt_manager *m, MPI_Comm comm, const char *prefix,
                              int64_t counter)
{
    m->pending_persist = counter % m->persist_every == 0; /* the chief's counter, on every rank */
    int rc = ckpt__mgr_sweep_cache(m, comm);
    /* every persist_every-th: the drain, on this thread (the writer thread of an async saver:
     * training does not wait for it) */
    const char *slash = strrchr(prefix, '/');
    if (rc == CKPT_OK && m->pending_persist)
        rc = ckpt__mgr_drain(m, comm, slash ? slash + 1 : prefix);
    else if (m->pending_persist) /* committed, but not drained: at the next save */
        snprintf(m->drain_pending, sizeof m->drain_pending, "%s", slash ? slash + 1 : prefix);
    return rc;
}

/* "4 ranks", "1 node", or "2 nodes (per-node layout)" when the layouts differ. */
static void fmt_shape(char *out, size_t n, int of, int per_node, int layouts_differ)
{
    snprintf(out, n, "%d %s%s%s", of, per_node ? "node" : "rank", of == 1 ? "" : "s",
             !layouts_differ ? "" : per_node ? " (per-node layout)" : " (per-rank layout)");
}

/* Drains checkpoint `name` (in the cache) to the persistent directory, then lists it there too.
 * A failed drain is reported (a warning) and tried again at the next save, while the cache
 * still holds it; the save that asked for it stands. A checkpoint of another shape (an earlier
 * job's, restarted on other ranks or nodes over the same caches) cannot be drained by this job:
 * said once, not tried again; the cache keeps it until its retention drops it. Collective. */
int ckpt__mgr_drain(ckpt_manager *m, MPI_Comm comm, const char *name)
{
    ckpt_cache_drain_info shape = CKPT_CACHE_DRAIN_INFO_INIT;
    int rc = ckpt_saver_cache_drain(&shape, m->saver, comm, name, m->dir);
    if (rc == CKPT_OK && shape.other_shape) {
        if (m->rank == 0) {
            char was[64], is[64];
            int differ = shape.per_node != shape.job_per_node;
            fmt_shape(was, sizeof was, shape.of, shape.per_node, differ);
            fmt_shape(is, sizeof is, shape.job_of, shape.job_per_node, differ);
            ckpt__log(CKPT_LOG_WARN, "%s in the node cache was written by %s; this job has %s: "
                                     "not drained to %s, kept in the cache until its retention "
                                     "drops it",
                      name, was, is, m->dir);
        }
        m->drain_pending[0] = '\0';
        return CKPT_OK;
    }
    if (rc != CKPT_OK) {
        if (m->rank == 0)
            ckpt__log(CKPT_LOG_WARN, "the drain of %s to %s failed (tried again at the next "
                                     "save): %s",
                      name, m->dir, ckpt_error_last()->message);
        snprintf(m->drain_pending, sizeof m->drain_pending, "%s", name);
        ckpt_error_clear();
        return CKPT_OK;
    }
    m->drain_pending[0] = '\0';
    int local = CKPT_OK;
    if (m->rank == 0) {
        /* the state as every rank has it, put back when the new one cannot be written (the
         * drained copy stays, unlisted: the next manager adopts it, ckpt__mgr_adopt_drained) */
        uint8_t *before = NULL;
        size_t blen = 0;
        pthread_mutex_lock(&m->lock);
        local = ckpt__state_pack(&before, &blen, m->state, 0);
        for (size_t i = 0; local == CKPT_OK && i < m->state->num_entries; i++)
            if (strcmp(m->state->entries[i].prefix, name) == 0)
                m->state->entries[i].levels |= CKPT_LEVEL_PERSISTENT;
        if (local == CKPT_OK && (local = ckpt__mgr_apply_retention(m)) != CKPT_OK) {
            ckpt_state *back = NULL;
            if (ckpt__state_unpack(&back, before, blen, "the state before the drain") ==
                CKPT_OK) {
                ckpt_state_free(m->state);
                m->state = back;
            }
        }
        pthread_mutex_unlock(&m->lock);
        free(before);
    }
    rc = ckpt__mgr_share_state(m, comm, local);
    if (rc == CKPT_OK && m->rank == 0)
        ckpt__log(CKPT_LOG_INFO, "drained %s to %s", name, m->dir);
    return rc;
}

/* A drain that failed, tried again (the caller synced the saver): only while the cache still
 * lists the checkpoint and the persistent directory does not. Collective. */
int ckpt__mgr_drain_pending(ckpt_manager *m)
{
    if (!m->cache || !m->drain_pending[0])
        return CKPT_OK;
    char name[256];
    snprintf(name, sizeof name, "%s", m->drain_pending);
    m->drain_pending[0] = '\0';
    int listed = 0;
    for (size_t i = 0; i < m->state->num_entries; i++)
        listed |= strcmp(m->state->entries[i].prefix, name) == 0 &&
                  (ckpt__mgr_levels_of(&m->state->entries[i]) & CKPT_LEVEL_CACHE) &&
                  !(ckpt__mgr_levels_of(&m->state->entries[i]) & CKPT_LEVEL_PERSISTENT);
    return listed ? ckpt__mgr_drain(m, m->comm, name) : CKPT_OK;
}
