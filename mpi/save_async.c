/*
 * Sync and async saves (docs/design.md §7): a save is prepared on the caller's thread
 * (save_protocol.c, with a snapshot of every registration in async mode), then steps 2-5 run inline
 * or on the writer thread, on its own communicator, one save in flight at a time. A background
 * failure is reported on every rank by the next save, sync or close.
 */
#include "saver_internal.h"

#include "fsutil.h"
#include "mpickpt/collective.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Snapshot buffers for async saves: one per registration (and per blob) that this rank writes,
 * allocated once and reused while the plan holds; a registration's buffer is what its save reads.
 * A registration of which this rank stores no piece (a replicated tensor another rank writes) is
 * neither copied nor given a buffer: its save reads nothing of it (every layout's writer reads
 * src[] only for this rank's own pieces), and with a replicated state of N ranks each copies 1/N
 * of it instead of all of it (the time save() blocks; issue 30). */
int ckpt__save_snapshot(ckpt_saver *s, save_job *j)
{
    if (s->snap_n != s->regs.n) {
        for (size_t i = 0; i < s->snap_n; i++)
            free(s->snap[i]);
        free(s->snap);
        free(s->snap_cap);
        s->snap = calloc(s->regs.n ? s->regs.n : 1, sizeof *s->snap);
        s->snap_cap = calloc(s->regs.n ? s->regs.n : 1, sizeof *s->snap_cap);
        s->snap_n = s->snap && s->snap_cap ? s->regs.n : 0;
        if (!s->snap || !s->snap_cap)
            return ckpt__error(CKPT_ENOMEM, "out of memory for snapshot buffers");
    }
    /* s->pieces (this rank's) says which registrations it writes */
    unsigned char *mine = calloc(s->regs.n ? s->regs.n : 1, 1);
    if (!mine)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t k = 0; k < s->pieces.n; k++)
        if (s->pieces.v[k].reg < s->regs.n)
            mine[s->pieces.v[k].reg] = 1;
    int rc = CKPT_OK;
    for (size_t i = 0; i < s->regs.n && rc == CKPT_OK; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        size_t need;
        if (g->kind == CKPT_KIND_BLOB) {
            need = j->c.blob_len[i];
        } else {
            if (!mine[i])
                continue; /* not written here: src[i] stays the registration's own memory */
            int64_t n;
            ckpt_slice_num_elements(&n, &g->slice);
            need = (size_t)n * ckpt_dtype_size(g->dtype);
        }
        if (need > s->snap_cap[i]) {
            /* Grow (first save, or a blob got bigger); touch the pages now, not mid-copy. */
            void *nb = realloc(s->snap[i], need);
            if (!nb) {
                rc = ckpt__error(CKPT_ENOMEM, "rank %d: cannot allocate %zu snapshot bytes",
                                 s->rank, need);
                break;
            }
            memset(nb, 0, need);
            s->snap[i] = nb;
            s->snap_cap[i] = need;
        }
        if (g->kind == CKPT_KIND_BLOB) {
            if (need)
                memcpy(s->snap[i], j->c.blob_data[i], need);
            j->c.blob_data[i] = s->snap[i];
        } else {
            if (need)
                memcpy(s->snap[i], g->data, need);
            j->c.src[i] = s->snap[i];
        }
    }
    free(mine);
    return rc;
}


static void *writer_main(void *arg)
{
    save_job *j = arg;
    j->result = ckpt__save_run(j);
    if (j->result != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        snprintf(j->message, sizeof j->message, "%s", e ? e->message : ckpt_strerror(j->result));
        int mine = e && e->code == j->result;
        j->sys_errno = mine ? e->sys_errno : 0;
        j->reason = mine ? e->reason : CKPT_REASON_NONE;
    }
    pthread_mutex_lock(&j->s->lock);
    j->s->job_done = 1;
    pthread_cond_broadcast(&j->s->cond);
    pthread_mutex_unlock(&j->s->lock);
    return NULL;
}

/*
 * Waits for the save in flight, up to `timeout` seconds (< 0: forever). Returns CKPT_OK when there
 * was none or it committed, its error (the same on every rank: the job's result was agreed) when it
 * failed, and CKPT_ETIMEDOUT when it is still running. Local, but every rank gets the same result.
 */
int ckpt__save_wait(ckpt_saver *s, double timeout)
{
    if (!s->job)
        return CKPT_OK;
    pthread_mutex_lock(&s->lock);
    if (timeout < 0) {
        while (!s->job_done)
            pthread_cond_wait(&s->cond, &s->lock);
    } else {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)timeout;
        until.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!s->job_done)
            if (pthread_cond_timedwait(&s->cond, &s->lock, &until) != 0)
                break;
    }
    int done = s->job_done;
    pthread_mutex_unlock(&s->lock);
    if (!done)
        return ckpt__error(CKPT_ETIMEDOUT, "the background save of %s%s is still running",
                           s->job->c.target->node_local ? s->job->c.n.base : s->job->c.n.prefix,
                           s->job->c.target->what);
    pthread_join(s->thread, NULL);
    save_job *j = s->job;
    s->job = NULL;
    int rc = j->result;
    if ((rc == CKPT_OK || rc == CKPT_EEXISTS) && j->counter > s->counter)
        s->counter = j->counter; /* taken: not tried again (ckpt__save_start) */
    if (rc != CKPT_OK) {
        /* a cache save's prefix is each node's own: its name says the same on every rank */
        ckpt__error(rc, "background save of %s%s failed: %s",
                    j->c.target->node_local ? j->c.n.base : j->c.n.prefix, j->c.target->what,
                    j->message);
        /* the same errno and reason as a sync save's error (the agreement carried them) */
        ckpt__error_set_errno(rc, j->sys_errno);
        ckpt__error_set_reason(rc, j->reason);
    }
    ckpt__save_job_free(j);
    return rc;
}

/* Runs a prepared job inline (sync) or hands it to the writer thread (async). */
int ckpt__save_start(ckpt_saver *s, save_job *j)
{
    j->t_block = ckpt__mono_seconds() - j->t_start;
    j->since_prev = s->last_save_start > 0 ? j->t_start - s->last_save_start : 0.0;
    if (!s->async) {
        int rc = ckpt__save_run(j);
        /* A counter whose names were taken at the commit (another job's files, something
         * planted, on any node) is not tried again: the next numbered save moves past it. */
        if ((rc == CKPT_OK || rc == CKPT_EEXISTS) && j->counter > s->counter)
            s->counter = j->counter;
        j->t_block = ckpt__mono_seconds() - j->t_start;
        s->last_save_start = j->t_start;
        ckpt__save_job_free(j);
        return rc;
    }
    j->c.comm = s->async_comm;
    s->job = j;
    s->job_done = 0;
    s->last_save_start = j->t_start;
    if (pthread_create(&s->thread, NULL, writer_main, j) != 0) {
        /* Cannot happen on a healthy system; run it here rather than lose the save. */
        s->job_done = 1;
        j->result = ckpt__save_run(j);
        return ckpt__save_wait(s, -1);
    }
    return CKPT_OK;
}

/* A whole save at `prefix` to storage target `t` (target.h) recording `counter`, with the
 * commit hook's halves (either may be NULL). `local`: the caller's status on this rank, joined to
 * the save's first collectives. Collective. */
static int save_level(ckpt_saver *s, const char *prefix, const ckpt__target_ops *t,
                      const ckpt_save_info *info, int64_t counter, int local,
                      const ckpt_commit_hooks *h)
{
    double t_start = ckpt__mono_seconds();
    /* At most one save in flight: wait for the previous one; its failure is this call's error. */
    int rc = ckpt__save_wait(s, -1);
    if (rc == CKPT_OK)
        rc = ckpt__save_take_pending(s);
    if (rc != CKPT_OK)
        return rc;
    save_job *j;
    if ((rc = ckpt__save_prepare(s, prefix, info, counter, t, local, &j)) != CKPT_OK)
        return rc;
    j->t_start = t_start;
    if (h) {
        j->prep = h->prepare;
        j->hook = h->committed;
        j->hook_payload = h->payload;
    }
    return ckpt__save_start(s, j);
}

/* ckpt_saver_write_ex and the cache level's save (`cache`: whatever the options' level): the
 * options checked into this rank's status (a bad one on any rank is agreed by the save's first
 * collectives). Version 1 has no level: the persistent directory. */
static int save_opts(ckpt_saver *s, const char *prefix, int cache, const ckpt_save_info *info,
                     const ckpt_save_options *o)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    int local = CKPT_OK;
    int64_t counter = 0;
    const ckpt_commit_hooks *h = NULL;
    unsigned level = o && o->version >= 2 && o->version <= CKPT_SAVE_OPTIONS_VERSION ? o->level : 0;
    if (o && (o->version < 1 || o->version > CKPT_SAVE_OPTIONS_VERSION))
        local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_save_options version %u, expected 1 to %d",
                            s->rank, o->version, CKPT_SAVE_OPTIONS_VERSION);
    else if (level != 0 && level != CKPT_LEVEL_PERSISTENT && level != CKPT_LEVEL_CACHE)
        local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_save_options.level %u is not a level",
                            s->rank, level);
    else if (o) {
        counter = o->counter;
        h = o->hooks;
        local = o->status;
        if (local > 0) /* not a ckpt_status */
            local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_save_options.status %d is positive",
                                s->rank, local);
        if (local == CKPT_OK && counter < 0)
            local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_save_options.counter %lld is negative",
                                s->rank, (long long)counter);
        if (local == CKPT_OK && h && h->version != CKPT_COMMIT_HOOKS_VERSION)
            local = ckpt__error(CKPT_EINVAL, "rank %d: ckpt_commit_hooks version %u, expected %d",
                                s->rank, h->version, CKPT_COMMIT_HOOKS_VERSION);
    }
    if (local != CKPT_OK) {
        h = NULL;
        counter = 0;
    }
    cache |= level == CKPT_LEVEL_CACHE;
    int rc = save_level(s, prefix ? prefix : "", ckpt__target_of(cache), info, counter, local, h);
    if (rc == CKPT_OK && local == CKPT_OK && o && o->counter_out)
        *o->counter_out = s->prepared_counter; /* the chief's (ckpt__save_bcast_prefix) */
    return rc;
}

int ckpt_saver_write_ex(ckpt_saver *s, const char *prefix, const ckpt_save_info *info,
                        const ckpt_save_options *opts)
{
    return save_opts(s, prefix, 0, info, opts);
}

int ckpt__saver_save_cache(ckpt_saver *s, const char *name, const ckpt_save_info *info,
                           const ckpt_save_options *opts)
{
    return save_opts(s, name, 1, info, opts);
}

int ckpt_saver_write(ckpt_saver *s, const char *prefix, const ckpt_save_info *info)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    return save_level(s, prefix ? prefix : "", ckpt__target_of(0), info, 0, CKPT_OK, NULL);
}

int ckpt_saver_save(ckpt_saver *s, const char *prefix, const ckpt_save_info *info, char *out,
                    size_t out_size)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* The number depends on the previous save's outcome: wait for it first. */
    int rc = ckpt__save_wait(s, -1);
    if (rc == CKPT_OK)
        rc = ckpt__save_take_pending(s);
    if (rc != CKPT_OK)
        return rc;
    char name[4096];
    int64_t n = s->counter + 1;
    int local = ckpt__path(name, sizeof name, "%s-%lld", prefix ? prefix : "", (long long)n);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK)
        return rc;
    if ((rc = save_level(s, name, ckpt__target_of(0), info, n, CKPT_OK, NULL)) == CKPT_OK && out &&
        out_size)
        snprintf(out, out_size, "%s", name);
    return rc;
}

void ckpt_saver_wait(ckpt_saver *s)
{
    if (!s)
        return;
    int rc = ckpt__save_wait(s, -1);
    if (rc != CKPT_OK && s->pending_rc == CKPT_OK) {
        s->pending_rc = rc;
        snprintf(s->pending_msg, sizeof s->pending_msg, "%s", ckpt_error_last()->message);
    }
}

int ckpt_saver_sync(ckpt_saver *s)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    int rc = ckpt__save_wait(s, -1);
    return rc != CKPT_OK ? rc : ckpt__save_take_pending(s);
}

/* A background failure that restore waited for is reported by the next save, sync or close. */
int ckpt__save_take_pending(ckpt_saver *s)
{
    int rc = s->pending_rc;
    if (rc != CKPT_OK) {
        s->pending_rc = CKPT_OK;
        ckpt__error(rc, "%s", s->pending_msg);
    }
    return rc;
}

