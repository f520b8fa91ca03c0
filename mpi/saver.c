/*
 * The collective saver: creation (the settings rank 0 decides), registration, close and its
 * callbacks (ckpt_saver_on_close: how a borrower, the manager, learns the saver is gone). The save protocol itself is in save_protocol.c, the shared-layout
 * writer in save_shared.c, sync/async jobs in save_async.c, the restore in restore.c
 * (saver_internal.h maps them; docs/architecture.md maps every phase to its function).
 */
#include "saver_internal.h"

#include "env.h"
#include "fsutil.h"
#include "index.h"
#include "mpickpt/collective.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- create: settings decided by rank 0 ------------------------------------------------------- */

/* What the options and MPICKPT_* variables decide, in the order broadcast by decide_settings(). */
enum { SET_LAYOUT, SET_ASYNC, SET_COLLECTIVE, SET_PACK, SET_SHARD, SET_RESERVE, SET_RPN, SET_CHUNK,
       SET_HIER, SET_CHECK, SET_MISMATCH, SET_N };
/* The settings before this one come from the options too (a difference is CKPT_EMISMATCH); the
 * others only from the environment. */
#define SET_FROM_OPTIONS SET_RESERVE

/* This rank's settings from its options (they win) and its environment, every variable parsed
 * strictly; MPICKPT_LOG and MPICKPT_FAULT are checked here too, so that a typo fails the job at
 * its start. */
static int local_settings(const ckpt_saver_options *o, int64_t *set)
{
    static const char *const layouts[] = { "per-rank", "shared", "per-node" };
    static const int layout_values[] = { CKPT_LAYOUT_PER_RANK, CKPT_LAYOUT_SHARED,
                                         CKPT_LAYOUT_PER_NODE };
    static const char *const hier_words[] = { "auto", "0", "1", "off", "on" };
    static const int hier_values[] = { -1, 0, 1, 0, 1 };
    static const char *const check_words[] = { "first", "every", "off" };
    static const int check_values[] = { CKPT_CHECK_REPLICAS_FIRST, CKPT_CHECK_REPLICAS_EVERY,
                                        CKPT_CHECK_REPLICAS_OFF };
    static const char *const mismatch_words[] = { "error", "warn" };
    static const int mismatch_values[] = { CKPT_REPLICA_MISMATCH_ERROR,
                                           CKPT_REPLICA_MISMATCH_WARN };
    int layout, async, reserve, hier, level, target, check, mismatch;
    int64_t pack, rpn, chunk;
    char step[16];
    int mode;
    int rc;
    if ((rc = ckpt__env_choice(&layout, "MPICKPT_LAYOUT", layouts, layout_values, 3,
                               CKPT_LAYOUT_UNKNOWN)) || /* unset: default_layout() decides */
        (rc = ckpt__env_bool(&async, "MPICKPT_ASYNC", 0)) ||
        (rc = ckpt__env_bool(&reserve, "MPICKPT_RESERVE", 1)) ||
        (rc = ckpt__env_choice(&hier, "MPICKPT_HIER_MERGE", hier_words, hier_values, 5, -1)) ||
        (rc = ckpt__env_int64(&pack, "MPICKPT_PACK_BYTES", 0, (int64_t)1 << 40,
                              CKPT_PACK_MAX_BYTES_DEFAULT)) ||
        (rc = ckpt__env_int64(&rpn, "MPICKPT_RANKS_PER_NODE", 1, INT32_MAX, 0)) ||
        (rc = ckpt__env_int64(&chunk, "MPICKPT_MPI_CHUNK_BYTES", 1, (int64_t)CKPT__MPI_CHUNK_DEFAULT,
                              (int64_t)CKPT__MPI_CHUNK_DEFAULT)) ||
        (rc = ckpt__env_choice(&check, "MPICKPT_CHECK_REPLICAS", check_words, check_values, 3,
                               CKPT_CHECK_REPLICAS_FIRST)) ||
        (rc = ckpt__env_choice(&mismatch, "MPICKPT_REPLICA_MISMATCH", mismatch_words,
                               mismatch_values, 2, CKPT_REPLICA_MISMATCH_ERROR)) ||
        (rc = ckpt__env_log_level(&level)) ||
        (rc = ckpt__fault_spec(&target, step, sizeof step, &mode)))
        return rc;
    if (o->layout != CKPT_LAYOUT_UNKNOWN && o->layout != CKPT_LAYOUT_SHARED &&
        o->layout != CKPT_LAYOUT_PER_RANK && o->layout != CKPT_LAYOUT_PER_NODE)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_options: unknown layout %d", (int)o->layout);
    if (o->check_replicas < CKPT_CHECK_REPLICAS_DEFAULT ||
        o->check_replicas > CKPT_CHECK_REPLICAS_OFF)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_options: unknown check_replicas %d",
                           o->check_replicas);
    if (o->replica_mismatch < CKPT_REPLICA_MISMATCH_DEFAULT ||
        o->replica_mismatch > CKPT_REPLICA_MISMATCH_WARN)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_options: unknown replica_mismatch %d",
                           o->replica_mismatch);
    set[SET_LAYOUT] = o->layout != CKPT_LAYOUT_UNKNOWN ? (int64_t)o->layout : (int64_t)layout;
    set[SET_ASYNC] = o->async != 0 || async;
    set[SET_COLLECTIVE] = o->collective_io != 0;
    /* MPICKPT_PACK_BYTES=0: never pack */
    set[SET_PACK] = o->pack_max_bytes != 0 ? o->pack_max_bytes : pack > 0 ? pack : -1;
    set[SET_SHARD] = o->max_shard_bytes;
    set[SET_RESERVE] = reserve;
    set[SET_RPN] = rpn; /* 0 (unset): nodes by shared memory */
    set[SET_CHUNK] = chunk;
    set[SET_HIER] = hier;
    set[SET_CHECK] = o->check_replicas ? o->check_replicas : check;
    set[SET_MISMATCH] = o->replica_mismatch ? o->replica_mismatch : mismatch;
    return CKPT_OK;
}

/*
 * The layout when neither the options nor MPICKPT_LAYOUT (rank 0's) chose one: per-node, except when
 * every rank is on one node (MPI_COMM_TYPE_SHARED) and MPICKPT_RANKS_PER_NODE simulates no nodes:
 * per-rank there. On one machine the per-node layout's single file saves only N-1 directory
 * entries, and costs time: one file's writeback instead of N in parallel (a replicated 200 MB
 * PyTorch state on 2 and 4 ranks saved 2-25% slower in 8 of 11 runs, its async background write
 * 1.3-1.9x slower in all:
 * docs/scaling.md, "The PyTorch benchmark"). The on-disk formats are unchanged: a checkpoint of
 * either layout restores with the other. Collective; the same on every rank.
 */
static int default_layout(ckpt_saver *s)
{
    if (s->layout != CKPT_LAYOUT_UNKNOWN)
        return CKPT_OK;
    int mine = 0, one = 0, local = CKPT_OK;
    if (s->ranks_per_node == 0) {
        MPI_Comm node = MPI_COMM_NULL;
        int n = 0;
        int mrc = MPI_Comm_split_type(s->comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL,
                                      &node);
        if (mrc != MPI_SUCCESS) {
            local = ckpt__mpi_error(mrc, "MPI_Comm_split_type (the default layout's nodes)");
        } else {
            MPI_Comm_size(node, &n);
            MPI_Comm_free(&node);
            mine = n == s->size;
        }
        int rc = ckpt_mpi_agree(s->comm, local);
        if (rc != CKPT_OK)
            return rc;
        if (MPI_Allreduce(&mine, &one, 1, MPI_INT, MPI_MIN, s->comm) != MPI_SUCCESS)
            local = ckpt__error(CKPT_EMPI, "MPI_Allreduce of the default layout's nodes failed");
        if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK)
            return rc;
    }
    s->layout = one ? CKPT_LAYOUT_PER_RANK : CKPT_LAYOUT_PER_NODE;
    s->one_node = one;
    return CKPT_OK;
}

/*
 * Settings that decide which collective path a save takes (layout, async, collective I/O, packing,
 * sharding, the space reservation) must be the same on every rank, or one rank ends up in the
 * shared writer's collective H5Fcreate while another writes its own file. Rank 0 decides and
 * broadcasts: options that differ from rank 0's are a programming error (CKPT_EMISMATCH on every
 * rank); a rank whose environment differs is told and follows rank 0. Collective.
 */
static int decide_settings(ckpt_saver *s)
{
    int64_t mine[SET_N], buf[2 * SET_N];
    int local = local_settings(&s->opts, mine);
    /* the root's scratch of every gather (mpi/transfer.c), made once */
    if (local == CKPT_OK && s->rank == 0 &&
        !(s->gather_scratch = malloc(2 * (size_t)s->size * sizeof *s->gather_scratch)))
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK)
        return rc;
    const ckpt_saver_options *o = &s->opts;
    int64_t raw[SET_N] = { o->layout, o->async != 0, o->collective_io != 0, o->pack_max_bytes,
                           o->max_shard_bytes, 0, 0, 0, 0, 0, 0 };
    memcpy(buf, raw, sizeof raw);
    memcpy(buf + SET_N, mine, sizeof mine);
    if (MPI_Bcast(buf, 2 * SET_N, MPI_INT64_T, 0, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the saver's settings failed");
    static const char *const what[SET_N] = { "layout",          "async",   "collective_io",
                                             "pack_max_bytes",  "max_shard_bytes", "reserve",
                                             "ranks_per_node",  "MPI chunk bytes",
                                             "hierarchical merge", "check_replicas",
                                             "replica_mismatch" };
    for (int i = 0; i < SET_FROM_OPTIONS && local == CKPT_OK; i++)
        if (raw[i] != buf[i])
            local = ckpt__error(CKPT_EMISMATCH,
                                "rank %d: ckpt_saver_options.%s is %lld, rank 0 passed %lld (the "
                                "options must be the same on every rank)",
                                s->rank, what[i], (long long)raw[i], (long long)buf[i]);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK)
        return rc;
    for (int i = 0; i < SET_N; i++)
        if (mine[i] != buf[SET_N + i])
            ckpt__log(CKPT_LOG_WARN, "rank %d: MPICKPT_* environment gives %s = %lld, rank 0's "
                                     "gives %lld: using rank 0's",
                      s->rank, what[i], (long long)mine[i], (long long)buf[SET_N + i]);
    s->layout = (ckpt_layout)buf[SET_N + SET_LAYOUT];
    s->async = (int)buf[SET_N + SET_ASYNC];
    s->opts.collective_io = (int)buf[SET_N + SET_COLLECTIVE];
    s->opts.pack_max_bytes = buf[SET_N + SET_PACK];
    s->opts.max_shard_bytes = buf[SET_N + SET_SHARD];
    s->reserve = (int)buf[SET_N + SET_RESERVE];
    s->ranks_per_node = buf[SET_N + SET_RPN];
    s->chunk = (uint64_t)buf[SET_N + SET_CHUNK];
    s->hier_wanted = (int)buf[SET_N + SET_HIER];
    s->opts.check_replicas = (int)buf[SET_N + SET_CHECK];
    s->opts.replica_mismatch = (int)buf[SET_N + SET_MISMATCH];
    return default_layout(s);
}

/* The last of a saver: its communicator, lock and condition, scratch, itself (at a failed create
 * and at close). */
static void free_shell(ckpt_saver *s)
{
    if (s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s->gather_scratch);
    free(s->metrics_prefix);
    free(s);
}

int ckpt_saver_create(ckpt_saver **out, MPI_Comm comm, const ckpt_saver_options *opts)
{
    *out = NULL;
    int init = 0;
    MPI_Initialized(&init);
    if (!init)
        return ckpt__error(CKPT_EMPI, "ckpt_saver_create: MPI is not initialized");
    if (opts && (opts->version < 1 || opts->version > CKPT_SAVER_OPTIONS_VERSION))
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_options version %u, expected 1..%d",
                           opts->version, CKPT_SAVER_OPTIONS_VERSION);
    ckpt_saver *s = calloc(1, sizeof *s);
    int local = s ? CKPT_OK : ckpt__error(CKPT_ENOMEM, "out of memory");
    MPI_Comm dup = MPI_COMM_NULL;
    /* MPI_Comm_dup is collective: every rank calls it even when its allocation failed. */
    int mrc = MPI_Comm_dup(comm, &dup);
    if (mrc != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__mpi_error(mrc, "MPI_Comm_dup");
    if (dup != MPI_COMM_NULL)
        MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    int rc = ckpt_mpi_agree(dup != MPI_COMM_NULL ? dup : comm, local);
    if (rc != CKPT_OK) {
        if (dup != MPI_COMM_NULL)
            MPI_Comm_free(&dup);
        free(s);
        return rc;
    }
    s->comm = dup;
    MPI_Comm_rank(dup, &s->rank);
    ckpt_log_set_rank(s->rank);
    MPI_Comm_size(dup, &s->size);
    ckpt_saver_options defaults = CKPT_SAVER_OPTIONS_INIT;
    s->opts = defaults;
    if (opts) /* an older caller's struct ends before the fields its version lacks */
        memcpy(&s->opts, opts,
               opts->version >= 3   ? sizeof *opts
               : opts->version == 2 ? offsetof(ckpt_saver_options, check_replicas)
                                    : offsetof(ckpt_saver_options, pack_max_bytes));
    s->async_comm = MPI_COMM_NULL;
    s->node_comm = s->node_async_comm = MPI_COMM_NULL;
    s->leader_comm = s->leader_async_comm = MPI_COMM_NULL;
    s->cache.partner = -1;
    s->cache.fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    atomic_init(&s->abandon, 0);
    if ((rc = decide_settings(s)) != CKPT_OK) {
        free_shell(s);
        return rc;
    }
    if (s->async) {
        /* The writer thread makes MPI calls while the application makes its own. */
        int level = MPI_THREAD_SINGLE;
        MPI_Query_thread(&level);
        local = level == MPI_THREAD_MULTIPLE
                    ? CKPT_OK
                    : ckpt__error(CKPT_EMPI,
                                  "async mode needs MPI_THREAD_MULTIPLE, but MPI granted thread "
                                  "level %d; initialize MPI with MPI_Init_thread(&argc, &argv, "
                                  "MPI_THREAD_MULTIPLE, &provided)",
                                  level);
        mrc = MPI_Comm_dup(dup, &s->async_comm);
        if (mrc != MPI_SUCCESS && local == CKPT_OK)
            local = ckpt__mpi_error(mrc, "MPI_Comm_dup for the writer thread");
        if (s->async_comm != MPI_COMM_NULL)
            MPI_Comm_set_errhandler(s->async_comm, MPI_ERRORS_RETURN);
        s->comm = dup;
        if ((rc = ckpt_mpi_agree(dup, local)) != CKPT_OK) {
            s->comm = MPI_COMM_NULL;
            if (s->async_comm != MPI_COMM_NULL)
                MPI_Comm_free(&s->async_comm);
            MPI_Comm_free(&dup);
            pthread_mutex_destroy(&s->lock);
            pthread_cond_destroy(&s->cond);
            free(s->gather_scratch);
            free(s);
            return rc;
        }
    }
    /* The per-node layout's nodes, once (and the writer thread's duplicate of its own); other
     * layouts: only every rank's node, for the cooperative restore's readers */
    rc = s->layout == CKPT_LAYOUT_PER_NODE ? ckpt__save_node_init(s) : ckpt__save_node_map(s);
    if (rc != CKPT_OK) {
        if (s->async_comm != MPI_COMM_NULL)
            MPI_Comm_free(&s->async_comm);
        MPI_Comm_free(&s->comm);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return rc;
    }
    s->dirty = 1;
    mpickpt__index__init(&s->plan);
    *out = s;
    return CKPT_OK;
}

void ckpt_saver_clear(ckpt_saver *s)
{
    if (!s)
        return;
    ckpt__regs_clear(&s->regs);
    s->dirty = 1;
}

int64_t ckpt_saver_counter(const ckpt_saver *s)
{
    return s->counter;
}

int ckpt_saver_metrics_get(ckpt_saver_metrics *out, const ckpt_saver *s)
{
    if (!out || !s)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_metrics_get: NULL argument");
    if (out->version < 1 || out->version > CKPT_SAVER_METRICS_VERSION)
        return ckpt__error(CKPT_EINVAL,
                           "ckpt_saver_metrics_get: unknown ckpt_saver_metrics version %u (this "
                           "library knows 1..%d)",
                           out->version, CKPT_SAVER_METRICS_VERSION);
    ckpt_saver *ms = (ckpt_saver *)s; /* the lock, and the caller's copy of the prefix */
    pthread_mutex_lock(&ms->lock);
    int have = s->have_metrics;
    ckpt_save_metrics m;
    if (have)
        m = s->last_metrics;
    pthread_mutex_unlock(&ms->lock);
    if (!have)
        return ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND, "no save has committed yet"),
                                      CKPT_REASON_NO_METRICS);
    char *p = strdup(m.prefix);
    if (!p)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    free(ms->metrics_prefix); /* the previous call's: valid until this one */
    ms->metrics_prefix = p;
    out->prefix = p;
    out->async = m.async;
    out->bytes = m.bytes;
    out->ranks = m.ranks;
    out->blocking_s = m.blocking_s;
    out->write_s = m.write_s;
    out->agree_s = m.agree_s;
    out->merge_s = m.merge_s;
    out->commit_s = m.commit_s;
    return CKPT_OK;
}

/* Deprecated (docs/api.md "Deprecated"): ckpt_saver_metrics_get(). Reads the saver's copy as
 * before, so that the prefix a ckpt_saver_metrics_get() handed out stays valid. */
int ckpt_saver_last_metrics(const ckpt_saver *s, ckpt_save_metrics *out)
{
    ckpt_saver *ms = (ckpt_saver *)s; /* the lock only */
    pthread_mutex_lock(&ms->lock);
    int have = s->have_metrics;
    if (have)
        *out = s->last_metrics;
    pthread_mutex_unlock(&ms->lock);
    return have ? CKPT_OK
                : ckpt__error_set_reason(ckpt__error(CKPT_ENOTFOUND, "no save has committed yet"),
                                         CKPT_REASON_NO_METRICS);
}

MPI_Comm ckpt_saver_comm(const ckpt_saver *s)
{
    return s ? s->comm : MPI_COMM_NULL;
}

/* ---- registration ------------------------------------------------------------------------------ */

/* Appends a registration after checking what can be checked locally (lib/plan.c). */
static int add_reg(ckpt_saver *s, const char *name, const char *stored, ckpt_dtype dtype,
                   const ckpt_shape *shape, const ckpt_slice *slice, ckpt_kind kind, void *data)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    int rc = ckpt__regs_add(&s->regs, s->rank, name, stored, dtype, shape, slice, kind, data);
    if (rc == CKPT_OK)
        s->dirty = 1;
    return rc;
}

int ckpt_saver_add_full(ckpt_saver *s, const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                        void *data)
{
    ckpt_slice full;
    ckpt_slice_full(&full, shape);
    return add_reg(s, name, name ? name : "", dtype, shape, &full, CKPT_KIND_FULL, data);
}

int ckpt_saver_add_slice(ckpt_saver *s, const char *name, ckpt_dtype dtype, const ckpt_shape *shape,
                         const ckpt_slice *slice, void *data)
{
    if (!slice)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': slice is NULL", name ? name : "");
    return add_reg(s, name, name ? name : "", dtype, shape, slice, CKPT_KIND_PARTITIONED, data);
}

int ckpt_saver_add_replicated(ckpt_saver *s, const char *name, ckpt_dtype dtype,
                              const ckpt_shape *shape, void *data, ckpt_replica_mode mode)
{
    ckpt_slice full;
    ckpt_slice_full(&full, shape);
    if (mode == CKPT_REPLICA_PRIMARY)
        return add_reg(s, name, name ? name : "", dtype, shape, &full, CKPT_KIND_REPLICATED, data);
    if (mode != CKPT_REPLICA_PER_COMPONENT)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': unknown replica mode %d", name ? name : "",
                           (int)mode);
    char stored[4200];
    int rc = s->rank == 0 ? ckpt__path(stored, sizeof stored, "%s", name ? name : "")
                          : ckpt__path(stored, sizeof stored, "%s/parallel_component_%d",
                                       name ? name : "", s->rank);
    if (rc != CKPT_OK)
        return rc;
    return add_reg(s, name, stored, dtype, shape, &full, CKPT_KIND_COMPONENT, data);
}

int ckpt_saver_primary_rank(const ckpt_saver *s, const char *name)
{
    if (!s || !name)
        return -1;
    size_t i = 0;
    while (i < s->regs.n &&
           (s->regs.v[i].kind != CKPT_KIND_REPLICATED || strcmp(s->regs.v[i].name, name) != 0))
        i++;
    if (i == s->regs.n)
        return -1;
    int *writer = NULL;
    if (ckpt__replica_writers(&s->regs, s->size, &writer) != CKPT_OK)
        return -1;
    int w = writer[i];
    free(writer);
    return w;
}

int ckpt_saver_add_blob(ckpt_saver *s, const char *name, const ckpt_blob_callbacks *cb,
                        void *payload)
{
    if (!cb || !cb->save || !cb->restore)
        return ckpt__error(CKPT_EINVAL, "blob '%s': both callbacks are required", name ? name : "");
    char stored[4200];
    int rc = ckpt__path(stored, sizeof stored, "%s/rank_%d", name ? name : "", s->rank);
    if (rc != CKPT_OK)
        return rc;
    ckpt_shape sh;
    int64_t zero = 0;
    ckpt_shape_init(&sh, 1, &zero);
    ckpt_slice full;
    ckpt_slice_full(&full, &sh);
    if ((rc = add_reg(s, name, stored, CKPT_UINT8, &sh, &full, CKPT_KIND_BLOB, NULL)) != CKPT_OK)
        return rc;
    s->regs.v[s->regs.n - 1].cb = *cb;
    s->regs.v[s->regs.n - 1].payload = payload;
    return CKPT_OK;
}

/* ---- close ------------------------------------------------------------------------------------ */

/* The close callbacks (ckpt_saver_on_close), newest first, each once. */
static void tell_closed(ckpt_saver *s, int save_running)
{
    while (s->n_on_close > 0) {
        struct ckpt__on_close c = s->on_close[--s->n_on_close];
        c.fn(save_running, c.payload);
    }
    free(s->on_close);
    s->on_close = NULL;
}

int ckpt_saver_close(ckpt_saver *s)
{
    if (!s)
        return CKPT_OK;
    double timeout = s->opts.close_timeout_s > 0 ? s->opts.close_timeout_s : 600.0;
    int rc = ckpt__save_wait(s, timeout);
    if (rc == CKPT_ETIMEDOUT && s->job) { /* our wait timed out (not a finished job's result) */
        /* Still writing: it must not commit now (the previous checkpoint stays the latest), and
         * the thread still uses the saver, so both are left to the process's exit. */
        atomic_store(&s->abandon, 1);
        ckpt__log(CKPT_LOG_WARN,
                  "closing with a background save still running after %g s: the last checkpoint "
                  "(%s) may be incomplete; unless it was already committing, it will not be",
                  timeout, s->job ? s->job->c.n.prefix : "?");
        pthread_detach(s->thread);
        tell_closed(s, 1);
        return ckpt__error(CKPT_ETIMEDOUT,
                           "background save still running at close after %g s; the last "
                           "checkpoint may be incomplete (the previous one stays the latest "
                           "unless this one was already committing)",
                           timeout);
    }
    if (rc == CKPT_OK)
        rc = ckpt__save_take_pending(s);
    tell_closed(s, 0);
    ckpt__regs_free(&s->regs);
    ckpt__save_free_plan(s);
    ckpt__shard_bufs_free(&s->bufs);
    for (size_t i = 0; i < s->snap_n; i++)
        free(s->snap[i]);
    free(s->snap);
    free(s->snap_cap);
    ckpt__saver_cache_free(s);
    ckpt__save_node_free(s);
    if (s->async_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->async_comm);
    free_shell(s);
    return rc;
}

int ckpt_saver_on_close(ckpt_saver *s, ckpt_saver_close_fn fn, void *payload)
{
    if (!s || !fn)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_on_close: %s is NULL", s ? "fn" : "saver");
    for (size_t i = 0; i < s->n_on_close; i++)
        if (s->on_close[i].fn == fn && s->on_close[i].payload == payload)
            return ckpt__error(CKPT_EINVAL, "ckpt_saver_on_close: already registered");
    struct ckpt__on_close *n = realloc(s->on_close, (s->n_on_close + 1) * sizeof *n);
    if (!n)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    s->on_close = n;
    s->on_close[s->n_on_close].fn = fn;
    s->on_close[s->n_on_close].payload = payload;
    s->n_on_close++;
    return CKPT_OK;
}

int ckpt_saver_on_close_remove(ckpt_saver *s, ckpt_saver_close_fn fn, void *payload)
{
    for (size_t i = 0; s && i < s->n_on_close; i++)
        if (s->on_close[i].fn == fn && s->on_close[i].payload == payload) {
            memmove(&s->on_close[i], &s->on_close[i + 1],
                    (s->n_on_close - i - 1) * sizeof s->on_close[0]);
            s->n_on_close--;
            return CKPT_OK;
        }
    return ckpt__error(CKPT_EINVAL, "ckpt_saver_on_close_remove: not registered");
}

void ckpt_saver_free(ckpt_saver *s)
{
    (void)ckpt_saver_close(s);
}

