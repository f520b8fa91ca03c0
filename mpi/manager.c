/*
 * Checkpoint manager and worker training state. The chief owns the state file: it reads it,
 * updates it after each commit and applies retention; every other rank receives the chief's view
 * by broadcast, so all ranks always agree on what exists and what the latest checkpoint is.
 */
#include "mpickpt/manager.h"

#include "dirlock.h"
#include "env.h"
#include "fsutil.h"
#include "identity.h"
#include "index.h"
#include "paths.h"
#include "reaper.h"
#include "restart.h"
#include "mpi_internal.h"
#include "mpickpt/collective.h"
#include "mpickpt/preempt.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ckpt_manager {
    ckpt_saver *saver;
    MPI_Comm comm;
    int rank;
    char dir[4096]; /* the chief's path, adopted by every rank */
    char name[200];
    ckpt_manager_options opts;
    ckpt_state *state; /* the chief's view, identical on every rank */
    /* The step of the last save this job made or restored from: min_step_interval counts from it
     * (after falling back past a damaged latest, from the checkpoint actually restored). */
    int have_last;
    int64_t last_step;
    /* In async mode the writer thread updates the state after each commit (the commit hook);
     * the lock keeps the application's reads of it consistent. */
    pthread_mutex_t lock;
    ckpt_manager_save_info pending; /* what the save in flight records */
    /* The cache level (docs/levels.md): rank 0's settings, the same on every rank. */
    int cache;
    int64_t persist_every, cache_keep;
    char drain_pending[256]; /* a failed drain, tried again at the next save */
    int pending_persist;     /* the save in flight also goes to `dir` (drained after its commit) */
    /* The restart control (`mpickpt pin`/`drop`, lib/restart.h): rank 0's reading of
     * <dir>/restart, the same on every rank; read at creation and before each save. */
    ckpt__restart ctl;
    ckpt__dirlock *dirlock; /* rank 0: the lock of `dir` (lib/dirlock.h), held until free */
    /* the last restore's comparison of names (strict restores), or NULL */
    ckpt_name_list *miss, *unexp;
    int legacy_restore; /* NULL options or version < 4: not strict means restore options v1 */
    /* rank 0: the blocks of retention's deleted files, freed in the background (lib/reaper.h)
     * unless MPICKPT_RETENTION=inline; waited for by the next batch, the next save's sweep, a
     * removal of the directory and the free */
    ckpt__reaper reaper;
    int retention_inline;
    /* the last restore's prefix, where ckpt_manager_restore_result.prefix points */
    char restored_prefix[4400];
};

/* What the restart control makes of entry `e` (CKPT__RS_*). */
static int rs_of(const ckpt_manager *m, const ckpt_state_entry *e)
{
    return ckpt__restart_status(&m->ctl, e->prefix, e->save_counter);
}

/* An entry's levels (0: written before levels existed, so persistent). */
static unsigned levels_of(const ckpt_state_entry *e)
{
    return e->levels ? e->levels : CKPT_LEVEL_PERSISTENT;
}

/* Why no restore may use an entry (candidate() < 0). */
enum { NOT_DROPPED = CKPT__CAND_DROPPED, NOT_ASIDE = CKPT__CAND_ASIDE, NOT_LEVEL = CKPT__CAND_LEVEL };
_Static_assert((int)CKPT__CAND_NORMAL == (int)CKPT_RESTART_NORMAL &&
                   (int)CKPT__CAND_PINNED == (int)CKPT_RESTART_PINNED &&
                   (int)CKPT__CAND_BEHIND_PIN == (int)CKPT_RESTART_BEHIND_PIN,
               "lib/restart.h's candidates are ckpt_restart_status values");

/*
 * The one rule of which checkpoint a restore may use (lib/restart.h ckpt__restart_candidate),
 * for restore_or_initialize, the chosen restore, the restorable list and latest: *levels are the
 * levels this manager restores `e` from (a manager without a cache level reads only the
 * persistent directory). Needs the state and the control stable: under the lock, or with no save
 * in flight.
 */
static int candidate(const ckpt_manager *m, const ckpt_state_entry *e, unsigned *levels)
{
    return ckpt__restart_candidate(&m->ctl, e,
                                   m->cache ? CKPT_LEVEL_CACHE | CKPT_LEVEL_PERSISTENT
                                            : CKPT_LEVEL_PERSISTENT,
                                   levels);
}

/* The index of the entry restore_or_initialize tries first (the newest it may start from: never
 * one behind the pin), st->num_entries when there is none. */
static size_t start_of(const ckpt_manager *m, const ckpt_state *st)
{
    unsigned lv;
    for (size_t i = st->num_entries; i-- > 0;) {
        int c = candidate(m, &st->entries[i], &lv);
        if (c == CKPT_RESTART_NORMAL || c == CKPT_RESTART_PINNED)
            return i;
    }
    return st->num_entries;
}

/* Broadcasts a byte buffer from the chief (size first). Collective; *buf is malloc'd on others. */
static int bcast_bytes(ckpt_manager *m, MPI_Comm comm, uint8_t **buf, size_t *len, int local)
{
    int rc = ckpt_mpi_agree(comm, local);
    if (rc != CKPT_OK)
        return rc;
    uint64_t n = *len;
    if (MPI_Bcast(&n, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast failed");
    if (n > INT32_MAX)
        local = ckpt__error(CKPT_EINVAL, "state of %llu bytes is too large", (unsigned long long)n);
    if (m->rank != 0 && local == CKPT_OK) {
        *buf = malloc(n ? n : 1);
        if (!*buf)
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        *len = (size_t)n;
    }
    if ((rc = ckpt_mpi_agree(comm, local)) != CKPT_OK)
        return rc;
    if (MPI_Bcast(*buf, (int)n, MPI_BYTE, 0, comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast failed");
    return ckpt_mpi_agree(comm, local);
}

/* Every rank adopts the chief's state (`local` is the chief's status in producing it). */
static int share_state(ckpt_manager *m, MPI_Comm comm, int local)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (m->rank == 0 && local == CKPT_OK)
        local = ckpt__state_pack(&buf, &len, m->state, 0);
    int rc = bcast_bytes(m, comm, &buf, &len, local);
    if (rc == CKPT_OK && m->rank != 0) {
        ckpt_state *st = NULL;
        local = ckpt__state_unpack(&st, buf, len, "broadcast state");
        if (local == CKPT_OK) {
            pthread_mutex_lock(&m->lock);
            ckpt_state_free(m->state);
            m->state = st;
            pthread_mutex_unlock(&m->lock);
        }
        rc = ckpt_mpi_agree(comm, local);
    } else if (rc == CKPT_OK) {
        rc = ckpt_mpi_agree(comm, CKPT_OK);
    }
    free(buf);
    return rc;
}

/*
 * At creation every rank adopts rank 0's reading of the restart control; a control file that
 * cannot be read is an error on every rank: restoring past what an operator pinned or dropped
 * would be worse than not starting. (Before a save it is a warning and the control read before
 * stays, a running job does not fail because of it: vote_control.) Collective.
 */
static int share_control(ckpt_manager *m)
{
    ckpt__restart c;
    memset(&c, 0, sizeof c);
    int local = CKPT_OK;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (m->rank == 0) {
        local = ckpt__restart_read(&c, m->dir);
        if (local == CKPT_OK)
            local = ckpt__restart_format((char **)&buf, &len, &c);
    }
    int rc = bcast_bytes(m, m->comm, &buf, &len, local);
    if (rc == CKPT_OK) {
        local = ckpt__restart_parse(&c, (const char *)buf, len, "the broadcast restart control");
        rc = ckpt_mpi_agree(m->comm, local);
    }
    free(buf);
    if (rc != CKPT_OK) {
        ckpt__restart_clear(&c);
        return rc;
    }
    if (m->rank == 0 && (c.pinned || c.num_drops))
        ckpt__log(CKPT_LOG_WARN, "%s/%s: %s%s%s%zu checkpoint(s) dropped", m->dir,
                  CKPT__RESTART_FILE, c.pinned ? "pinned " : "", c.pinned ? c.pin : "",
                  c.pinned ? " (newer ones listed when it was pinned are set aside), " : "",
                  c.num_drops);
    pthread_mutex_lock(&m->lock);
    ckpt__restart_clear(&m->ctl);
    m->ctl = c;
    pthread_mutex_unlock(&m->lock);
    return CKPT_OK;
}

/*
 * Before a save: every rank joins one MPI_Allreduce (a bitwise OR of bytes the others leave zero)
 * that brings it the chief's reading of the restart control, the rest after it when it is long.
 * A control that cannot be read there is a warning: the one read before stays. Returns this rank's status, not agreed (the caller's save agrees it); on failure the
 * control read before stays on that rank. Needs no save in flight (its hook reads the control).
 */
static int vote_control(ckpt_manager *m)
{
    struct {
        int64_t status;
        uint64_t len;
        char text[2048];
    } msg;
    memset(&msg, 0, sizeof msg);
    char *buf = NULL;
    size_t len = 0;
    int local = CKPT_OK;
    if (m->rank == 0) {
        ckpt__restart c;
        memset(&c, 0, sizeof c);
        local = ckpt__restart_read(&c, m->dir);
        if (local != CKPT_OK) {
            ckpt__log(CKPT_LOG_WARN, "%s; the restart control read before stays in effect",
                      ckpt_error_last()->message);
            ckpt_error_clear();
            local = ckpt__restart_format(&buf, &len, &m->ctl);
        } else {
            local = ckpt__restart_format(&buf, &len, &c);
        }
        ckpt__restart_clear(&c);
        msg.status = local;
        msg.len = local == CKPT_OK ? len : 0;
        if (local == CKPT_OK && len <= sizeof msg.text)
            memcpy(msg.text, buf, len);
    }
    if (MPI_Allreduce(MPI_IN_PLACE, &msg, (int)sizeof msg, MPI_BYTE, MPI_BOR, m->comm) !=
        MPI_SUCCESS) {
        free(buf);
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce of the restart control failed");
    }
    if (msg.status != CKPT_OK) { /* the chief's failure: it reports it (its save's broadcast) */
        free(buf);
        return m->rank == 0 ? local : CKPT_OK;
    }
    if (msg.len > sizeof msg.text) { /* the long control, from the chief, in pieces */
        if (m->rank != 0 && !(buf = malloc(msg.len)))
            local = ckpt__error(CKPT_ENOMEM, "out of memory");
        for (uint64_t off = 0; off < msg.len; off += sizeof msg.text) {
            uint64_t n = msg.len - off < sizeof msg.text ? msg.len - off : sizeof msg.text;
            /* a rank without room still joins, into the scratch */
            if (MPI_Bcast(buf ? buf + off : msg.text, (int)n, MPI_BYTE, 0, m->comm) !=
                    MPI_SUCCESS &&
                local == CKPT_OK)
                local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the restart control failed");
        }
        if (local != CKPT_OK) {
            free(buf);
            return local;
        }
    }
    ckpt__restart c;
    memset(&c, 0, sizeof c);
    local = ckpt__restart_parse(&c, msg.len > sizeof msg.text ? buf : msg.text, (size_t)msg.len,
                                "the broadcast restart control");
    free(buf);
    if (local != CKPT_OK)
        return local;
    pthread_mutex_lock(&m->lock);
    ckpt__restart_clear(&m->ctl);
    m->ctl = c;
    pthread_mutex_unlock(&m->lock);
    return CKPT_OK;
}

/*
 * The chief's state file may lag the directory: a chief that died after writing an index but
 * before updating the state file leaves a committed checkpoint that is not listed. Such
 * checkpoints, newer than everything listed, are adopted (appended in counter order), so the
 * resume point is the newest committed checkpoint and its number is never reused. `dir` is the
 * persistent directory, or the chief's node's cache directory (`level` CKPT_LEVEL_CACHE: the
 * chief's index there is the cache level's commit point), which the sweep would otherwise empty.
 */
static int adopt_unlisted(ckpt_manager *m, const char *dir, const char *shown, unsigned level)
{
    ckpt_state *scan = NULL;
    int64_t listed = m->state->save_counter;
    for (size_t i = 0; i < m->state->num_entries; i++)
        if (m->state->entries[i].save_counter > listed)
            listed = m->state->entries[i].save_counter;
    /* Only "<name>-<N>.index" with N past the listed ones is read: a valid state file makes the
     * start cost independent of whatever else lies in the directory. */
    int rc = ckpt__state_scan_newer(&scan, dir, m->name, listed);
    for (size_t i = 0; rc == CKPT_OK && i < scan->num_entries; i++) {
        ckpt_state_entry *e = &scan->entries[i];
        if (e->save_counter <= listed)
            continue;
        e->levels = level;
        rc = ckpt_state_append(m->state, e);
        if (rc == CKPT_OK)
            ckpt__log(CKPT_LOG_WARN, "adopted committed checkpoint %s/%s, which the state file did "
                                     "not list yet",
                      shown, e->prefix);
    }
    ckpt_state_free(scan);
    return rc;
}

/*
 * The chief: a checkpoint the state lists in the cache only whose drain committed (its index in
 * the persistent directory, the cache's bytes, its data files there in full) before the state
 * was written — a crash in between — is listed in the persistent directory too. Drained again,
 * its committed copy would be replaced file by file, and a failure then would tear it.
 */
static int adopt_drained(ckpt_manager *m)
{
    const char *cdir = ckpt__saver_cache_dir(m->saver);
    for (size_t i = 0; i < m->state->num_entries; i++) {
        ckpt_state_entry *e = &m->state->entries[i];
        if (levels_of(e) != CKPT_LEVEL_CACHE)
            continue;
        char a[4400], b[4400];
        uint8_t *x = NULL, *y = NULL;
        const uint8_t *px, *py;
        size_t lx = 0, ly = 0;
        ckpt_reader *r = NULL;
        int same = ckpt__path(a, sizeof a, "%s/%s.index", m->dir, e->prefix) == CKPT_OK &&
                   ckpt__path(b, sizeof b, "%s/%s.index", cdir, e->prefix) == CKPT_OK &&
                   ckpt__index_read(&x, &px, &lx, a) == CKPT_OK &&
                   ckpt__index_read(&y, &py, &ly, b) == CKPT_OK && lx == ly &&
                   memcmp(x, y, lx) == 0 &&
                   ckpt__path(a, sizeof a, "%s/%s", m->dir, e->prefix) == CKPT_OK &&
                   ckpt_reader_open(&r, a) == CKPT_OK;
        ckpt_reader_free(r);
        free(x);
        free(y);
        ckpt_error_clear(); /* not drained (or not whole): the drain is redone */
        if (same) {
            e->levels |= CKPT_LEVEL_PERSISTENT;
            ckpt__log(CKPT_LOG_WARN, "adopted %s/%s, drained before the state file listed it",
                      m->dir, e->prefix);
        }
    }
    return CKPT_OK;
}

/* The saver went away first (ckpt_saver_free): nothing of it may be touched afterwards. */
static void saver_gone(void *payload)
{
    ((ckpt_manager *)payload)->saver = NULL;
}

static int levels_setup(ckpt_manager *m, int from_env);
static int sweep_cache(ckpt_manager *m, MPI_Comm comm);
static int drain(ckpt_manager *m, MPI_Comm comm, const char *name);

static int manager_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                          const ckpt_manager_options *opts, int levels_from_env);

/* How much of a caller's options struct its version has (0: a version this library lacks). */
static size_t opts_size(unsigned version)
{
    return version == 1   ? offsetof(ckpt_manager_options, cache_dir)
           : version == 2 ? offsetof(ckpt_manager_options, lock_wait_seconds)
           : version == 3 ? offsetof(ckpt_manager_options, strict_restore)
           : version == CKPT_MANAGER_OPTIONS_VERSION ? sizeof(ckpt_manager_options)
                                                     : 0;
}

/* Rank 0: one job per directory (docs/operations.md), taken before anything in it is read; the
 * wait is rank 0's (the option, else MPICKPT_LOCK_WAIT), as only rank 0 waits. */
static int take_dirlock(ckpt_manager *m, int dirfd)
{
    double wait = m->opts.lock_wait_seconds;
    int rc = wait == 0 ? ckpt__dirlock_env_wait(&wait) : CKPT_OK;
    return rc == CKPT_OK ? ckpt__dirlock_take(&m->dirlock, dirfd, m->dir, wait) : rc;
}

int ckpt_manager_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                        const ckpt_manager_options *opts)
{
    return manager_create(out, saver, dir, opts, 1);
}

static int manager_create(ckpt_manager **out, ckpt_saver *saver, const char *dir,
                          const ckpt_manager_options *opts, int levels_from_env)
{
    *out = NULL;
    if (!saver)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    if (opts && !opts_size(opts->version))
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
        memcpy(&m->opts, opts, opts_size(opts->version));
    /* NULL options and versions 1-3: restores as before strict restores */
    m->legacy_restore = !opts || opts->version < 4;
    if (m->legacy_restore)
        m->opts.strict_restore = 0;
    local = ckpt__path(m->name, sizeof m->name, "%s", m->opts.name ? m->opts.name : "ckpt");
    if (local == CKPT_OK && (!ckpt__safe_filename(m->name) || strchr(m->name, '.')))
        local = ckpt__error(CKPT_EINVAL, "checkpoint name '%s' must be a plain name without '.'",
                            m->name);
    m->opts.name = NULL;
    if (m->rank == 0 && local == CKPT_OK) {
        int dfd = -1;
        local = ckpt__path(m->dir, sizeof m->dir, "%s", dir ? dir : "");
        if (local == CKPT_OK) /* makes it; a chief/ that is a link is refused */
            local = ckpt__ckptdir_open(&dfd, NULL, m->dir, 1);
        if (local == CKPT_OK)
            local = take_dirlock(m, dfd);
        if (local == CKPT_OK) {
            static const char *const words[] = { "background", "inline" };
            static const int values[] = { 0, 1 };
            local = ckpt__env_choice(&m->retention_inline, "MPICKPT_RETENTION", words, values, 2,
                                     0);
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
            local = adopt_unlisted(m, m->dir, m->dir, CKPT_LEVEL_PERSISTENT);
    } else if (local == CKPT_OK) {
        local = ckpt_state_new(&m->state);
    }
    /* the chief's directory, then its state */
    uint8_t *dbuf = (uint8_t *)m->dir;
    size_t dlen = sizeof m->dir;
    if (m->rank != 0)
        dbuf = NULL;
    rc = bcast_bytes(m, m->comm, &dbuf, &dlen, local);
    if (rc == CKPT_OK && m->rank != 0) {
        memcpy(m->dir, dbuf, sizeof m->dir);
        m->dir[sizeof m->dir - 1] = '\0';
    }
    if (m->rank != 0)
        free(dbuf);
    if (rc == CKPT_OK)
        rc = share_state(m, m->comm, CKPT_OK);
    if (rc == CKPT_OK)
        rc = share_control(m);
    if (rc == CKPT_OK)
        rc = levels_setup(m, levels_from_env);
    m->opts.cache_dir = m->opts.failure_group = NULL; /* borrowed for the call only */
    if (rc == CKPT_OK && m->cache) {
        /* what committed before a crash kept the state from saying so: checkpoints committed to
         * the cache (kept by the sweep below), drains committed to the directory */
        int adopted = CKPT_OK;
        if (m->rank == 0 &&
            (adopted = adopt_unlisted(m, ckpt__saver_cache_dir(saver),
                                      ckpt__saver_cache_shown(saver), CKPT_LEVEL_CACHE)) ==
                CKPT_OK)
            adopted = adopt_drained(m);
        rc = share_state(m, m->comm, adopted);
    }
    if (rc == CKPT_OK && m->cache) /* what crashed saves left in the caches */
        rc = sweep_cache(m, m->comm);
    if (rc == CKPT_OK && m->cache) /* and their in-flight parts (no save runs yet) */
        rc = ckpt_mpi_agree(m->comm, ckpt__cache_gc(saver));
    if (rc == CKPT_OK && m->cache) /* a drain an earlier run did not finish: at the next save */
        for (size_t i = m->state->num_entries; i-- > 0;) {
            const ckpt_state_entry *e = &m->state->entries[i];
            if (levels_of(e) & CKPT_LEVEL_PERSISTENT)
                break; /* a newer persistent copy exists */
            if (e->save_counter % m->persist_every == 0) {
                snprintf(m->drain_pending, sizeof m->drain_pending, "%s", e->prefix);
                break;
            }
        }
    if (rc == CKPT_OK)
        rc = ckpt_mpi_agree(m->comm, ckpt__saver_attach(saver, saver_gone, m));
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
    if (!m)
        return;
    /* A background save started by this manager calls it back after its commit (the state file,
     * retention): wait for it, so that the checkpoint is listed and nothing uses freed memory. */
    if (m->saver && ckpt__saver_detach(m->saver, m) != 0) {
        ckpt__log(CKPT_LOG_WARN, "a background save of %s is still running after its saver was "
                                 "closed: the manager is left to the process's exit",
                  m->dir);
        return;
    }
    ckpt__reaper_wait(&m->reaper);
    ckpt_state_free(m->state);
    ckpt__restart_clear(&m->ctl);
    if (m->saver && m->cache) /* its cache level: the held directories and their locks */
        ckpt__saver_cache_free(m->saver);
    ckpt__dirlock_release(m->dirlock); /* after the save in flight: it still wrote to `dir` */
    pthread_mutex_destroy(&m->lock);
    ckpt_name_list_free(m->miss);
    ckpt_name_list_free(m->unexp);
    free(m);
}

int ckpt_manager_latest(const ckpt_manager *m, char *out, size_t out_size)
{
    ckpt_manager *mm = (ckpt_manager *)m; /* the lock only */
    pthread_mutex_lock(&mm->lock);
    const ckpt_state *st = m->state;
    size_t i = start_of(m, st);
    const ckpt_state_entry *e = i < st->num_entries ? &st->entries[i] : NULL;
    int rc = !e ? ckpt__path(out, out_size, "%s", "")
             : levels_of(e) == CKPT_LEVEL_CACHE
                 ? ckpt__path(out, out_size, "%s/%s", ckpt__saver_cache_shown(m->saver), e->prefix)
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
    size_t start = start_of(m, st);
    l->entries = malloc((st->num_entries ? st->num_entries : 1) * sizeof *l->entries);
    for (size_t i = 0; l->entries && i < st->num_entries; i++) {
        unsigned lv;
        int c = candidate(m, &st->entries[i], &lv);
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
        if (rs_of(m, e) != CKPT__RS_DROPPED) {
            i++;
            continue;
        }
        if (doomed)
            ckpt__log(CKPT_LOG_INFO, "retiring %s/%s: it was dropped", m->dir, e->prefix);
        if (levels_of(e) & CKPT_LEVEL_PERSISTENT)
            DOOM(e);
        ckpt_state_remove(st, i);
    }
    /* Set aside by a pin: neither counted nor deleted. */
    size_t keep = (size_t)(m->opts.max_to_keep > 0 ? m->opts.max_to_keep : 0), unpreserved = 0;
    for (size_t i = 0; i < st->num_entries; i++) /* the persistent directory's */
        unpreserved += !st->entries[i].preserved && rs_of(m, &st->entries[i]) != CKPT__RS_ASIDE &&
                       (levels_of(&st->entries[i]) & CKPT_LEVEL_PERSISTENT);
    for (size_t i = 0; m->opts.max_to_keep > 0 && i + 1 < st->num_entries && unpreserved > keep;) {
        ckpt_state_entry *e = &st->entries[i];
        if (e->preserved || !(levels_of(e) & CKPT_LEVEL_PERSISTENT) ||
            rs_of(m, e) == CKPT__RS_ASIDE) {
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
        if (levels_of(e) & CKPT_LEVEL_CACHE) { /* still in the cache: only its copy here goes */
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
static int apply_retention(ckpt_manager *m)
{
    ckpt_state *st = m->state;
    char (*doomed)[256] = calloc(st->num_entries ? st->num_entries : 1, sizeof *doomed);
    size_t ndoomed = 0;
    if (!doomed)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    retire(m, doomed, &ndoomed);
    int rc = ckpt_state_write(st, m->dir);
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
                     (levels_of(&st->entries[k]) & CKPT_LEVEL_PERSISTENT);
        listed |= strcmp(doomed[i], st->latest) == 0 && st->num_entries > 0 &&
                  (levels_of(&st->entries[st->num_entries - 1]) & CKPT_LEVEL_PERSISTENT);
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
static void new_entry(ckpt_state_entry *e, const char *prefix, int64_t counter,
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
 * the first half anywhere is the save's error, agreed by the saver.
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
        new_entry(&e, prefix, counter, &m->pending, 0); /* 0: the directory, as before levels */
        local = ckpt_checkpoint_bytes(&e.bytes, prefix);
        if (local == CKPT_OK)
            local = ckpt_state_append(m->state, &e);
        if (local == CKPT_OK)
            local = apply_retention(m);
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
    (void)comm;
    ckpt_manager *m = payload;
    const ckpt_manager_save_info *info = &m->pending;
    /* no values: the chief ran no first half (a manager going away: ckpt__saver_detach) */
    if (m->rank != 0 && isfinite(v->vals[HV_TIME])) {
        ckpt_state_entry e;
        new_entry(&e, prefix, counter, info, 0);
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
        retire(m, NULL, &nd);
        pthread_mutex_unlock(&m->lock);
    }
    m->have_last = 1;
    m->last_step = info->step;
    return CKPT_OK;
}

/* ---- the cache level (docs/levels.md) ---------------------------------------------------- */

/* Rank 0's settings (options, else MPICKPT_* when `from_env`), then the saver's cache on every
 * rank. Collective. */
static int levels_setup(ckpt_manager *m, int from_env)
{
    struct {
        int64_t status, on, partner, every, keep;
        int64_t max_to_keep; /* retention's options: every rank applies the chief's */
        double keep_hours;
        double lock_wait; /* for each node cache's lock: the directory lock's (take_dirlock) */
        char pattern[4096];
        char identity[CKPT__IDENTITY_HEX + 8];
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
        if (msg.on && ckpt__saver_has_cache(m->saver))
            local = ckpt__error(CKPT_EINVAL,
                                "%s: the saver already has a cache level (of another manager, "
                                "in %s); give each manager with a cache level its own saver",
                                m->dir, ckpt__saver_cache_shown(m->saver));
        msg.on = msg.on && local == CKPT_OK;
        msg.lock_wait = m->opts.lock_wait_seconds;
        if (msg.on && msg.lock_wait == 0)
            local = ckpt__dirlock_env_wait(&msg.lock_wait);
        msg.on = msg.on && local == CKPT_OK;
        if (msg.on) { /* whose cache copies are this directory's (lib/identity.h) */
            int dfd = -1;
            local = ckpt__ckptdir_open(&dfd, NULL, m->dir, 0);
            if (local == CKPT_OK)
                local = ckpt__identity_get(msg.identity, dfd, m->dir, 1);
            ckpt__close(dfd);
            msg.on = local == CKPT_OK;
        }
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
    msg.identity[sizeof msg.identity - 1] = '\0';
    rc = ckpt__saver_cache_init(m->saver, msg.pattern,
                                msg.partner ? CKPT__REDUNDANCY_PARTNER : CKPT__REDUNDANCY_NONE,
                                group && *group ? group : NULL, msg.identity, m->dir);
    /* one job per node cache of this directory, as per directory (two directories can share an
     * identity only when it was copied by hand without its inode: a job waits or is refused) */
    if (rc == CKPT_OK && (rc = ckpt__cache_lock(m->saver, msg.lock_wait)) != CKPT_OK)
        ckpt__saver_cache_free(m->saver);
    if (rc == CKPT_OK) {
        m->cache = 1;
        m->persist_every = msg.every;
        m->cache_keep = msg.keep;
    }
    return rc;
}

/* The caches keep exactly the checkpoints the (shared) state lists in the cache. Collective. */
static int sweep_cache(ckpt_manager *m, MPI_Comm comm)
{
    const ckpt_state *st = m->state;
    int64_t *keep = malloc((st->num_entries ? st->num_entries : 1) * sizeof *keep);
    size_t n = 0;
    int local = keep ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; keep && i < st->num_entries; i++)
        if (levels_of(&st->entries[i]) & CKPT_LEVEL_CACHE)
            keep[n++] = st->entries[i].save_counter;
    int rc = ckpt_mpi_agree(comm, local);
    if (rc == CKPT_OK)
        rc = ckpt__cache_sweep(m->saver, comm, m->name, keep, n);
    free(keep);
    return rc;
}

/* The chief: the cache keeps its newest cache_keep checkpoints; an older one leaves the cache
 * (and the state, unless the persistent directory has it too). */
static void cache_retention(ckpt_manager *m)
{
    ckpt_state *st = m->state;
    size_t in_cache = 0;
    /* set aside by a pin: neither counted nor removed; dropped: apply_retention removes them */
    for (size_t i = 0; i < st->num_entries; i++)
        in_cache += (levels_of(&st->entries[i]) & CKPT_LEVEL_CACHE) != 0 &&
                    rs_of(m, &st->entries[i]) != CKPT__RS_ASIDE &&
                    rs_of(m, &st->entries[i]) != CKPT__RS_DROPPED;
    for (size_t i = 0; i + 1 < st->num_entries && in_cache > (size_t)m->cache_keep;) {
        ckpt_state_entry *e = &st->entries[i];
        if (!(levels_of(e) & CKPT_LEVEL_CACHE) || rs_of(m, e) == CKPT__RS_ASIDE ||
            rs_of(m, e) == CKPT__RS_DROPPED) {
            i++;
            continue;
        }
        in_cache--;
        if (levels_of(e) & CKPT_LEVEL_PERSISTENT) {
            e->levels = CKPT_LEVEL_PERSISTENT;
            i++;
        } else {
            ckpt_state_remove(st, i);
        }
    }
}

/* After a commit to the cache (the saver's hook, collective over `comm`): the chief lists it at
 * level cache (its size from the index: the files are on several nodes), applies both levels'
 * retention and writes the state; every rank adopts it; the node leaders sweep their caches. */
static int cache_commit_hook(MPI_Comm comm, const char *prefix, int64_t counter,
                             const ckpt_commit_vote *v, void *payload)
{
    (void)v; /* no first half: the state goes by broadcast (share_state) */
    ckpt_manager *m = payload;
    m->pending_persist = counter % m->persist_every == 0; /* the chief's counter, on every rank */
    const ckpt_manager_save_info *info = &m->pending;
    int local = CKPT_OK;
    if (m->rank == 0) {
        ckpt_state_entry e;
        new_entry(&e, prefix, counter, info, CKPT_LEVEL_CACHE);
        ckpt_reader *r = NULL;
        local = ckpt_reader_open_index(&r, prefix);
        if (local == CKPT_OK) {
            const Mpickpt__Index *idx = ckpt__reader_index(r);
            for (size_t f = 0; f < idx->n_files; f++)
                e.bytes += idx->files[f]->bytes;
        }
        ckpt_reader_free(r);
        pthread_mutex_lock(&m->lock);
        if (local == CKPT_OK)
            local = ckpt_state_append(m->state, &e);
        if (local == CKPT_OK) {
            cache_retention(m);
            local = apply_retention(m);
        }
        pthread_mutex_unlock(&m->lock);
    }
    int rc = share_state(m, comm, local);
    if (rc == CKPT_OK)
        rc = sweep_cache(m, comm);
    if (rc == CKPT_OK) {
        m->have_last = 1;
        m->last_step = info->step;
    }
    /* every persist_every-th: the drain, on this thread (the writer thread of an async saver:
     * training does not wait for it) */
    const char *slash = strrchr(prefix, '/');
    if (rc == CKPT_OK && m->pending_persist)
        rc = drain(m, comm, slash ? slash + 1 : prefix);
    else if (m->pending_persist) /* committed, but not drained: at the next save */
        snprintf(m->drain_pending, sizeof m->drain_pending, "%s", slash ? slash + 1 : prefix);
    return rc;
}

/* Drains checkpoint `name` (in the cache) to the persistent directory, then lists it there too.
 * A failed drain is reported (a warning) and tried again at the next save, while the cache
 * still holds it; the save that asked for it stands. Collective. */
static int drain(ckpt_manager *m, MPI_Comm comm, const char *name)
{
    int rc = ckpt__cache_drain(m->saver, comm, name, m->dir);
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
         * drained copy stays, unlisted: the next manager adopts it, adopt_drained) */
        uint8_t *before = NULL;
        size_t blen = 0;
        pthread_mutex_lock(&m->lock);
        local = ckpt__state_pack(&before, &blen, m->state, 0);
        for (size_t i = 0; local == CKPT_OK && i < m->state->num_entries; i++)
            if (strcmp(m->state->entries[i].prefix, name) == 0)
                m->state->entries[i].levels |= CKPT_LEVEL_PERSISTENT;
        if (local == CKPT_OK && (local = apply_retention(m)) != CKPT_OK) {
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
    rc = share_state(m, comm, local);
    if (rc == CKPT_OK && m->rank == 0)
        ckpt__log(CKPT_LOG_INFO, "drained %s to %s", name, m->dir);
    return rc;
}

/* A drain that failed, tried again (the caller synced the saver): only while the cache still
 * lists the checkpoint and the persistent directory does not. Collective. */
static int drain_pending(ckpt_manager *m)
{
    if (!m->cache || !m->drain_pending[0])
        return CKPT_OK;
    char name[256];
    snprintf(name, sizeof name, "%s", m->drain_pending);
    m->drain_pending[0] = '\0';
    int listed = 0;
    for (size_t i = 0; i < m->state->num_entries; i++)
        listed |= strcmp(m->state->entries[i].prefix, name) == 0 &&
                  (levels_of(&m->state->entries[i]) & CKPT_LEVEL_CACHE) &&
                  !(levels_of(&m->state->entries[i]) & CKPT_LEVEL_PERSISTENT);
    return listed ? drain(m, m->comm, name) : CKPT_OK;
}

/* The chief: the first counter from *next whose names are free in the directory and, with a
 * cache level, in its node's cache directory (ckpt__counter_free: warnings name what it passes). */
static int free_counter(ckpt_manager *m, int64_t *next)
{
    int fds[2] = { -1, -1 };
    const char *shown[2] = { m->dir, ckpt__saver_cache_shown(m->saver) };
    int rc = ckpt__ckptdir_open(&fds[0], NULL, m->dir, 0);
    if (rc == CKPT_OK && m->cache) /* the held directory, by descriptor */
        rc = ckpt__dir_open(&fds[1], ckpt__saver_cache_dir(m->saver));
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
    if (out && out_size)
        out[0] = '\0';
    ckpt_manager_save_info zero = { 0, 0, 0, 0 };
    if (!info)
        info = &zero;
    /* The previous save (async) must be complete: its state update is what this one builds on,
     * and its failure is this call's error. */
    int rc = ckpt_saver_sync(m->saver);
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
    if ((rc = drain_pending(m)) != CKPT_OK)
        return rc;
    st = m->state;

    /* The chief sweeps what crashed or failed saves left before writing anew, once every rank is
     * here: each has then finished its previous save's clean-up (its own workertemp_<r>), which
     * the sweep must not race with. The collective that tells the chief so also brings every
     * rank the chief's restart control (drops and pins an operator made since: their retention
     * applies after this commit). */
    int local = vote_control(m);
    if (m->rank == 0 && local == CKPT_OK) {
        size_t removed = 0;
        local = ckpt__gc(m->dir, 0, NULL, NULL, &removed, 0);
        if (local == CKPT_OK && removed)
            ckpt__log(CKPT_LOG_INFO, "removed %zu leftover(s) of unfinished saves in %s", removed,
                      m->dir);
    }
    if (local == CKPT_OK && m->cache) /* the node leaders, in their caches */
        local = ckpt__cache_gc(m->saver);
    /* from here, a failure on any rank is agreed by the save's first collectives (its prefix's
     * broadcast for the chief's, its first vote for the others') */

    /* Number past every checkpoint ever committed here, whatever was restored. */
    int64_t next = st->save_counter;
    for (size_t i = 0; i < st->num_entries; i++)
        if (st->entries[i].save_counter > next)
            next = st->entries[i].save_counter;
    if (ckpt_saver_counter(m->saver) > next)
        next = ckpt_saver_counter(m->saver);
    /* every counter is checked on the way in (state file, indexes): this cannot overflow */
    if (next >= CKPT__COUNTER_MAX && local == CKPT_OK)
        local = ckpt__error(CKPT_EINVAL, "%s: the save counter reached %lld; start a new "
                                         "directory",
                            m->dir, (long long)next);
    next++;
    /* A counter whose names are taken (planted, another job's) is passed, with a warning, instead
     * of failing every save from now on; every rank adopts the chief's choice with the save's
     * prefix (ckpt__save_bcast_prefix), and learns it back from the saver. */
    if (m->rank == 0 && local == CKPT_OK)
        local = free_counter(m, &next);

    char name[4400] = "";
    ckpt_save_info si = { info->epoch, info->step, info->end_of_epoch != 0 };
    /* the manager's state update rides the save's commit vote: its commit hook, the public
     * extension point any saver user has (saver.h, ckpt_commit_hooks) */
    ckpt_commit_hooks hooks = CKPT_COMMIT_HOOKS_INIT;
    hooks.payload = m;
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    int64_t counter = next;
    so.counter = next;
    so.hooks = &hooks;
    so.counter_out = &counter; /* the chief's (free_counter may have passed taken names) */
    m->pending = *info;
    if (m->cache) { /* to the nodes' caches; every persist_every-th also drained to `dir` */
        if (local == CKPT_OK)
            local = ckpt__path(name, sizeof name, "%s-%lld", m->name, (long long)next);
        /* no first half: the state goes by broadcast (share_state) */
        hooks.committed = cache_commit_hook;
        so.status = local;
        rc = ckpt__saver_save_cache(m->saver, name, &si, &so);
        if (rc == CKPT_OK && out && out_size)
            snprintf(out, out_size, "%s/%s-%lld", ckpt__saver_cache_shown(m->saver), m->name,
                     (long long)counter);
        return rc;
    }
    if (local == CKPT_OK)
        local = ckpt__path(name, sizeof name, "%s/%s-%lld", m->dir, m->name, (long long)next);
    if (local == CKPT_OK && m->rank != 0)
        local = reserve_entry(m);
    hooks.prepare = commit_prep;
    hooks.committed = commit_hook;
    so.status = local;
    rc = ckpt_saver_write_ex(m->saver, name, &si, &so);
    if (rc == CKPT_OK && out && out_size)
        snprintf(out, out_size, "%s/%s-%lld", m->dir, m->name, (long long)counter);
    return rc;
}

/* What restore_or_initialize tells after restoring `prefix` (out->prefix: the manager's copy). */
static int restored(ckpt_manager *m, ckpt_manager_restore_result *out, const char *prefix,
                    const ckpt_restore_info *info)
{
    out->restored = 1;
    snprintf(m->restored_prefix, sizeof m->restored_prefix, "%s", prefix);
    out->prefix = m->restored_prefix;
    out->save_counter = info->save_counter;
    out->epoch = info->epoch;
    out->step = info->step;
    out->end_of_epoch = info->end_of_epoch;
    out->world_size = info->world_size;
    m->have_last = 1;
    m->last_step = info->step;
    return CKPT_OK;
}

/* The restore reached past the pinned checkpoint: an error on every rank (the same state and
 * control everywhere), never a silent start from an older one or from scratch. */
static int pin_error(const ckpt_manager *m, int pin_listed)
{
    return ckpt__restart_pin_error(&m->ctl, m->dir, pin_listed);
}

/*
 * Restores entry `e` from `levels` (candidate()'s): the cache copy first (rebuilt from partners
 * when a node lost its files), then the persistent copy. A failure sets *damaged: 1 when the
 * checkpoint could not be made whole or read (damaged, incomplete, gone from the caches), which
 * restore_or_initialize falls back past (`fallback`: its warnings say so); 0 when what was
 * registered does not match a valid checkpoint, an error for every caller. Collective.
 */
static int restore_entry(ckpt_manager *m, const ckpt_state_entry *e, unsigned levels,
                         int fallback, ckpt_manager_restore_result *out, int *damaged)
{
    ckpt_restore_options ropts = CKPT_RESTORE_OPTIONS_INIT;
    ropts.skip_missing_per_rank = m->opts.skip_missing_per_rank;
    ropts.strict = m->opts.strict_restore != 0;
    if (m->legacy_restore && !m->opts.strict_restore)
        ropts.version = 1; /* as before strict restores */
    ckpt_name_list_free(m->miss);
    ckpt_name_list_free(m->unexp);
    m->miss = m->unexp = NULL;
    ropts.missing = &m->miss;
    ropts.unexpected = &m->unexp;
    ckpt_restore_info info;
    char prefix[4400];
    int rc;
    *damaged = 0;
    /* A cache copy that cannot be made whole, or not on this job's shape, is not an error: the
     * persistent copy is next (or, for restore_or_initialize, an older checkpoint). */
    if (levels & CKPT_LEVEL_CACHE) {
        int unavailable = 1;
        rc = ckpt__saver_restore_cache(m->saver, e->prefix, &ropts, &info, &unavailable);
        if (rc == CKPT_OK) {
            snprintf(prefix, sizeof prefix, "%s/%s", ckpt__saver_cache_shown(m->saver),
                     e->prefix);
            return restored(m, out, prefix, &info);
        }
        /* The copy was whole and read: what was registered does not match it (as with the
         * directory, only damage found while reading falls through) */
        if (!unavailable && rc != CKPT_ECORRUPT)
            return rc;
        *damaged = 1;
        if (m->rank == 0 && (fallback || (levels & CKPT_LEVEL_PERSISTENT)))
            ckpt__log(CKPT_LOG_WARN, "checkpoint %s cannot be restored from the cache: %s; %s",
                      e->prefix, ckpt_error_last()->message,
                      (levels & CKPT_LEVEL_PERSISTENT) ? "trying its copy in the persistent "
                                                         "directory"
                                                       : "trying an older one");
        if (!(levels & CKPT_LEVEL_PERSISTENT))
            return rc;
        /* the cache's attempt may have listed names already: the persistent one lists again */
        ckpt_name_list_free(m->miss);
        ckpt_name_list_free(m->unexp);
        m->miss = m->unexp = NULL;
    }
    /* (fits: dir < 4096 bytes, a prefix < 256; the saver's restore adopts the chief's) */
    (void)ckpt__path(prefix, sizeof prefix, "%s/%s", m->dir, e->prefix);
    /* The saver's chief opens the candidate (index, sizes of its data files) before anything is
     * read. A damaged checkpoint (corrupt, of a future version, its index gone) is told apart from
     * a registration that does not match by the agreed status and, for CKPT_ENOTFOUND, its
     * reason: no checkpoint there (damaged) or a registered tensor it lacks (the registration).
     * The chief opened it once more before the reason existed (issue 31). */
    rc = ckpt_saver_restore(m->saver, prefix, &ropts, &info);
    if (rc == CKPT_OK)
        return restored(m, out, prefix, &info);
    *damaged = rc == CKPT_ECORRUPT || rc == CKPT_EVERSION ||
               (rc == CKPT_ENOTFOUND &&
                ckpt__error_reason(rc) == CKPT_REASON_NO_CHECKPOINT);
    if (*damaged && fallback && m->rank == 0)
        ckpt__log(CKPT_LOG_WARN, "skipping checkpoint %s: %s; trying an older one", prefix,
                  ckpt_error_last() ? ckpt_error_last()->message : ckpt_strerror(rc));
    return rc;
}

void ckpt_manager_set_strict(ckpt_manager *m, int strict)
{
    if (m)
        m->opts.strict_restore = strict != 0;
}

void ckpt_manager_restore_names(const ckpt_manager *m, const ckpt_name_list **missing,
                                const ckpt_name_list **unexpected)
{
    if (missing)
        *missing = m ? m->miss : NULL;
    if (unexpected)
        *unexpected = m ? m->unexp : NULL;
}

/* A restore's result before it starts: CKPT_EINVAL (nothing written) for a version this library
 * does not know, else emptied (the version kept, the prefix ""). Local. */
static int result_start(ckpt_manager_restore_result *out, ckpt_manager *m, const char *fn)
{
    if (!out || !m)
        return ckpt__error(CKPT_EINVAL, "%s: NULL argument", fn);
    if (out->version < 1 || out->version > CKPT_MANAGER_RESTORE_RESULT_VERSION)
        return ckpt__error(CKPT_EINVAL,
                           "%s: unknown ckpt_manager_restore_result version %u (this library "
                           "knows 1..%d)",
                           fn, out->version, CKPT_MANAGER_RESTORE_RESULT_VERSION);
    unsigned int version = out->version;
    memset(out, 0, sizeof *out);
    out->version = version;
    m->restored_prefix[0] = '\0';
    out->prefix = m->restored_prefix;
    return CKPT_OK;
}

/* The deprecated result (ckpt_manager_restored) of a restore, as before: the prefix cut. */
static void result_legacy(ckpt_manager_restored *out, const ckpt_manager_restore_result *r)
{
    memset(out, 0, sizeof *out);
    out->restored = r->restored;
    snprintf(out->prefix, sizeof out->prefix, "%s", r->prefix ? r->prefix : "");
    out->save_counter = r->save_counter;
    out->epoch = r->epoch;
    out->step = r->step;
    out->end_of_epoch = r->end_of_epoch;
    out->world_size = r->world_size;
    out->skipped = r->skipped;
}

int ckpt_manager_restore_latest(ckpt_manager_restore_result *out, ckpt_manager *m)
{
    /* before any communication (no agreement to fold it into: the restore's collectives stay 8
     * at most); every rank passes the same version, a compile-time constant */
    int rc = result_start(out, m, "ckpt_manager_restore_latest");
    if (rc != CKPT_OK)
        return rc;
    /* A save in flight first: its commit may be the newest checkpoint (its failure, if any, is
     * reported by the next save, sync or close). */
    ckpt_saver_wait(m->saver);
    const ckpt_state *st = m->state;
    /* A pin (`mpickpt pin`): the pinned checkpoint is the restart point unless a newer one,
     * committed after the pin was set, can be restored; the restore never goes past it. */
    int pin_listed = 0;
    for (size_t k = 0; k < st->num_entries; k++)
        pin_listed |= rs_of(m, &st->entries[k]) == CKPT__RS_PINNED;
    for (size_t k = st->num_entries; k-- > 0;) {
        const ckpt_state_entry *e = &st->entries[k];
        unsigned lv;
        int c = candidate(m, e, &lv);
        if (c == NOT_DROPPED || c == NOT_ASIDE) {
            if (m->rank == 0)
                ckpt__log(CKPT_LOG_INFO, "not restoring %s/%s: %s", m->dir, e->prefix,
                          c == NOT_DROPPED ? "dropped" : "set aside by a pin");
            continue;
        }
        if (c == CKPT_RESTART_BEHIND_PIN)
            return pin_error(m, pin_listed);
        if (c == NOT_LEVEL)
            continue; /* only in a cache this manager does not use */
        int damaged = 0;
        rc = restore_entry(m, e, lv, 1, out, &damaged);
        if (rc == CKPT_OK || !damaged)
            return rc;
        out->skipped++;
    }
    if (m->ctl.pinned) { /* the pinned one was not even reached: nothing at or above it */
        return pin_error(m, pin_listed);
    }
    if (m->rank == 0 && out->skipped)
        ckpt__log(CKPT_LOG_WARN, "no valid checkpoint in %s (%d damaged); starting fresh", m->dir,
                  out->skipped);
    ckpt_error_clear(); /* kept: the damaged candidates' errors, its own (logged above); a public
                         * collective that returns CKPT_OK with nothing restored */
    return CKPT_OK;
}

/* Deprecated wrapper (docs/api.md "Deprecated"): ckpt_manager_restore_latest() */
int ckpt_manager_restore_or_initialize(ckpt_manager *m, ckpt_manager_restored *out)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_latest(&r, m);
    result_legacy(out, &r);
    return rc;
}

/* Why `e` (candidate() gave `why` < 0) cannot be restored, and what to do: CKPT_ENOTFOUND. The
 * same on every rank (the same state and control everywhere). */
static int refuse(const ckpt_manager *m, const ckpt_state_entry *e, int why)
{
    if (why == NOT_DROPPED)
        return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND,
                           "%s/%s (step %lld) is dropped (%s/%s): take the drop back with "
                           "`mpickpt drop --undo %s %s` or restore another checkpoint",
                           m->dir, e->prefix, (long long)e->step, m->dir, CKPT__RESTART_FILE,
                           m->dir, e->prefix), CKPT_REASON_PINNED);
    if (why == NOT_ASIDE)
        return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND,
                           "%s/%s (step %lld) is set aside by the pin of %s (%s/%s): clear the "
                           "pin (`mpickpt pin --clear %s`) or pin it (`mpickpt pin %s %s`)",
                           m->dir, e->prefix, (long long)e->step, m->ctl.pin, m->dir,
                           CKPT__RESTART_FILE, m->dir, m->dir, e->prefix), CKPT_REASON_PINNED);
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND,
                    "%s/%s (step %lld) is only in the nodes' cache directories and this "
                    "manager has no cache level: create it with the cache_dir "
                    "(MPICKPT_CACHE_DIR) that saved it",
                    m->dir, e->prefix, (long long)e->step),
        CKPT_REASON_NO_CHECKPOINT);
}

/* No checkpoint with that step (save counter): CKPT_ENOTFOUND naming the restorable ones. */
static int not_found(const ckpt_manager *m, int by_counter, int64_t value)
{
    char list[600] = "";
    size_t n = 0, len = 0;
    const ckpt_state *st = m->state;
    for (size_t i = 0; i < st->num_entries; i++) {
        unsigned lv;
        const ckpt_state_entry *e = &st->entries[i];
        if (candidate(m, e, &lv) < 0)
            continue;
        if (len + 40 < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%lld", n ? ", " : "",
                                    (long long)(by_counter ? e->save_counter : e->step));
        else if (len + 5 < sizeof list && list[len - 1] != '.')
            len += (size_t)snprintf(list + len, sizeof list - len, ", ...");
        n++;
    }
    return ckpt__error_set_reason(
        ckpt__error(CKPT_ENOTFOUND, "%s lists no checkpoint of %s %lld (restorable: %s)", m->dir,
                    by_counter ? "save counter" : "step", (long long)value, n ? list : "none"),
        CKPT_REASON_NO_CHECKPOINT);
}

/* ckpt_manager_restore_step/_counter: the newest entry with that step (save counter) that a
 * restore may use, else an error naming why; never another checkpoint. Collective. */
static int restore_chosen(ckpt_manager_restore_result *out, ckpt_manager *m, int by_counter,
                          int64_t value)
{
    if (!m)
        return ckpt__error(CKPT_EINVAL, "ckpt_manager_restore_at_%s: NULL manager",
                           by_counter ? "counter" : "step");
    /* an unknown version, on any rank, is CKPT_EINVAL on every rank (folded into the check) */
    int checked = result_start(out, m, by_counter ? "ckpt_manager_restore_at_counter"
                                                  : "ckpt_manager_restore_at_step");
    ckpt_saver_wait(m->saver); /* a save in flight may commit the one asked for */
    /* every rank must choose the same checkpoint: rank 0's value, checked */
    int64_t first = value;
    int local = MPI_Bcast(&first, 1, MPI_INT64_T, 0, m->comm) == MPI_SUCCESS
                    ? checked
                    : ckpt__error(CKPT_EMPI, "MPI_Bcast failed");
    if (local == CKPT_OK && first != value)
        local = ckpt__error(CKPT_EINVAL, "rank %d asked to restore %s %lld, rank 0 %lld", m->rank,
                            by_counter ? "save counter" : "step", (long long)value,
                            (long long)first);
    int rc = ckpt_mpi_agree(m->comm, local);
    if (rc != CKPT_OK)
        return rc;
    /* decided from the shared state and control: the same on every rank */
    const ckpt_state *st = m->state;
    const ckpt_state_entry *e = NULL, *refused = NULL;
    unsigned lv = 0;
    int why = 0;
    for (size_t k = st->num_entries; !e && k-- > 0;) {
        const ckpt_state_entry *x = &st->entries[k];
        unsigned l;
        int c;
        if ((by_counter ? x->save_counter : x->step) != value)
            continue;
        if ((c = candidate(m, x, &l)) >= 0) {
            e = x;
            lv = l;
        } else if (!refused) {
            refused = x;
            why = c;
        }
    }
    if (!e)
        return refused ? refuse(m, refused, why) : not_found(m, by_counter, value);
    int damaged = 0;
    rc = restore_entry(m, e, lv, 0, out, &damaged);
    if (rc != CKPT_OK && damaged)
        ckpt__error_wrap(rc, "checkpoint %s (step %lld) cannot be restored (no other is restored "
                             "in its place)",
                         e->prefix, (long long)e->step);
    return rc;
}

int ckpt_manager_restore_at_step(ckpt_manager_restore_result *out, ckpt_manager *m, int64_t step)
{
    return restore_chosen(out, m, 0, step);
}

int ckpt_manager_restore_at_counter(ckpt_manager_restore_result *out, ckpt_manager *m,
                                    int64_t save_counter)
{
    return restore_chosen(out, m, 1, save_counter);
}

/* Deprecated wrappers (docs/api.md "Deprecated"): ckpt_manager_restore_at_step(), _at_counter() */
int ckpt_manager_restore_step(ckpt_manager_restored *out, ckpt_manager *m, int64_t step)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_at_step(&r, m, step);
    result_legacy(out, &r);
    return rc;
}

int ckpt_manager_restore_counter(ckpt_manager_restored *out, ckpt_manager *m,
                                 int64_t save_counter)
{
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_at_counter(&r, m, save_counter);
    result_legacy(out, &r);
    return rc;
}

/* ---- training state -------------------------------------------------------------------------- */

struct ckpt_training {
    ckpt_manager *m;
    char dir[4096];
    ckpt_manager_restore_result restored; /* prefix: `prefix` below */
    char prefix[4400];
    ckpt_manager_restored legacy; /* the same for the deprecated ckpt_training_restored() */
};

int ckpt_training_create(ckpt_training **out, ckpt_saver *saver, const char *dir,
                         const ckpt_manager_options *opts)
{
    *out = NULL;
    ckpt_training *t = calloc(1, sizeof *t);
    char chief[4200];
    int local = t ? ckpt__path(t->dir, sizeof t->dir, "%s", dir ? dir : "")
                  : ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = ckpt__path(chief, sizeof chief, "%s/" CKPT__CHIEF_DIR, t->dir);
    int rc = ckpt_mpi_agree(ckpt_saver_comm(saver), local);
    if (rc != CKPT_OK) {
        free(t);
        return rc;
    }
    ckpt_manager_options o = CKPT_MANAGER_OPTIONS_INIT;
    if (opts && opts_size(opts->version))
        memcpy(&o, opts, opts_size(opts->version));
    else if (opts)
        o.version = opts->version; /* refused by the manager, with its message */
    else {
        o.max_to_keep = 1; /* the seed's BackupAndRestore keeps one */
        o.version = 3;     /* NULL options: restores as before strict restores */
    }
    /* the training state's levels come from its options only, never from MPICKPT_CACHE_DIR */
    rc = manager_create(&t->m, saver, chief, &o, 0);
    if (rc != CKPT_OK) {
        free(t);
        return rc;
    }
    /* The chief's directory is authoritative: <work> is the manager's, minus "/chief". */
    if (ckpt__work_dir(t->dir, sizeof t->dir, t->m->dir) != CKPT_OK)
        ckpt_error_clear(); /* no longer than the manager's own: cannot fail */
    if (ckpt_preempt_watch_dir(t->dir) != CKPT_OK) /* a halt request made before chief/ existed */
        ckpt__log(CKPT_LOG_WARN, "%s", ckpt_error_last()->message);
    *out = t;
    return CKPT_OK;
}

void ckpt_training_free(ckpt_training *t)
{
    if (!t)
        return;
    ckpt_manager_free(t->m);
    free(t);
}

int ckpt_training_restore_result(ckpt_manager_restore_result *out, const ckpt_training *t)
{
    if (!out || !t)
        return ckpt__error(CKPT_EINVAL, "ckpt_training_restore_result: NULL argument");
    if (out->version < 1 || out->version > CKPT_MANAGER_RESTORE_RESULT_VERSION)
        return ckpt__error(CKPT_EINVAL,
                           "ckpt_training_restore_result: unknown ckpt_manager_restore_result "
                           "version %u (this library knows 1..%d)",
                           out->version, CKPT_MANAGER_RESTORE_RESULT_VERSION);
    unsigned int version = out->version;
    *out = t->restored;
    out->version = version;
    out->prefix = t->prefix;
    return CKPT_OK;
}

/* Deprecated wrapper (docs/api.md "Deprecated"): ckpt_training_restore_result() */
const ckpt_manager_restored *ckpt_training_restored(const ckpt_training *t)
{
    return &t->legacy;
}

ckpt_manager *ckpt_training_manager(ckpt_training *t)
{
    return t->m;
}

int ckpt_training_back_up(ckpt_training *t, int64_t epoch, int64_t step, int end_of_epoch)
{
    ckpt_manager_save_info info = { epoch, step, end_of_epoch, 1 };
    return ckpt_manager_save(t->m, &info, NULL, 0);
}

int ckpt_training_restore(ckpt_training *t, int *restored)
{
    /* Epoch and step come from the index the chief read and broadcast, identical everywhere. */
    ckpt_manager_restore_result r = CKPT_MANAGER_RESTORE_RESULT_INIT;
    int rc = ckpt_manager_restore_latest(&r, t->m);
    snprintf(t->prefix, sizeof t->prefix, "%s", r.prefix ? r.prefix : "");
    t->restored = r;
    t->restored.prefix = t->prefix;
    result_legacy(&t->legacy, &r);
    if (restored)
        *restored = rc == CKPT_OK && t->restored.restored;
    return rc;
}

/* n + 1, saturated: epoch and step come from an index someone else may have written. */
static int64_t next_of(int64_t n)
{
    return n < INT64_MAX ? n + 1 : INT64_MAX;
}

int64_t ckpt_training_initial_epoch(const ckpt_training *t, int64_t initial)
{
    if (!t->restored.restored)
        return initial;
    return t->restored.end_of_epoch ? next_of(t->restored.epoch) : t->restored.epoch;
}

int64_t ckpt_training_initial_step(const ckpt_training *t, int64_t initial)
{
    return t->restored.restored ? next_of(t->restored.step) : initial;
}

int ckpt_training_delete_backup(ckpt_training *t)
{
    /* Everybody is done with the directory (including a save in flight) before the chief
     * removes it. */
    int rc = ckpt_saver_sync(t->m->saver);
    rc = ckpt_mpi_agree(t->m->comm, rc);
    if (rc != CKPT_OK)
        return rc;
    if (t->m->rank == 0)
        ckpt__reaper_wait(&t->m->reaper);
    int local = t->m->rank == 0 ? ckpt__remove_backup_dir(t->dir) : CKPT_OK;
    rc = ckpt_mpi_agree(t->m->comm, local);
    if (rc == CKPT_OK && t->m->cache) /* its checkpoints in the nodes' caches too */
        rc = ckpt__cache_sweep(t->m->saver, t->m->comm, t->m->name, NULL, 0);
    if (rc == CKPT_OK) {
        ckpt_state_free(t->m->state);
        t->m->state = NULL;
        rc = ckpt_state_new(&t->m->state);
        memset(&t->restored, 0, sizeof t->restored);
    }
    return rc;
}
