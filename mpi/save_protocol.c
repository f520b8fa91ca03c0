/*
 * The save protocol (docs/design.md §4), collective over the saver's communicator; each step below
 * is one function, and every exit after the first collective goes through ckpt_mpi_agree(), so all
 * ranks return the same status and nobody is left waiting in a collective:
 *
 *   0. prefix   save_prepare: every rank adopts the chief's prefix, counter and the save's id
 *               (bcast_prefix), opens the directories (init_ctx), runs its registered savers;
 *               the chief makes its in-flight directory <base>.<id>_temp (ckpt__temp_fresh)
 *   1. plan     make_plan: allgather of every rank's registrations, merged and validated the same
 *               way on every rank; cached while no rank changes its registrations
 *   2. write    save_run: in-flight directories and space reservation agreed first
 *               (open_and_reserve), then a rank's own file (lib/shard.c) or the shared file
 *               (save_shared.c), each piece recorded with its checksums (lib/record.c)
 *   3. agree    one agreement on every rank's write
 *   4. merge    ckpt__gather_fragments (save_gather.c): the record of every rank as fragments at
 *               the chief, merged and validated into the index (merge_index), while every rank
 *               moves its data files into place (move_own); the target's extra copies
 *   5. commit   the pre-commit vote, then the chief's commit point (the target's commit ->
 *               lib/commit.c: the directory fsynced, the index last), agreed; the commit hook (the
 *               manager's state file and retention) and the metrics follow
 * Where the save writes is its storage target (target.h: the persistent directory or the node
 * cache), whose operations the steps call. save_async.c decides on which thread steps 2-5 run.
 */
#include "saver_internal.h"

#include "commit.h"
#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "metrics.h"
#include "mpickpt/collective.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 0. prefix, directories --------------------------------------------------------------------- */

/* Every rank adopts the chief's prefix: ranks whose own view of the path differs (a stale mount,
 * a relative path from another working directory) still write and read the same checkpoint. A
 * save also adopts the chief's counter (a manager's chief may have moved past a taken name) and
 * the save's id, which the chief draws here: every in-flight name of the save carries it
 * (lib/paths.h), so no other job's save shares one. save_id and counter may be NULL (a restore). */
static int bcast_prefix(ckpt_saver *s, int local, const char *prefix, char *out, size_t size,
                        uint64_t *save_id, int64_t *counter);

int ckpt__save_bcast_prefix(ckpt_saver *s, const char *prefix, char *out, size_t size,
                            uint64_t *save_id, int64_t *counter)
{
    return bcast_prefix(s, CKPT_OK, prefix, out, size, save_id, counter);
}

/* The same with the chief's status so far (`local`, on the chief): its failure is agreed here. */
static int bcast_prefix(ckpt_saver *s, int local, const char *prefix, char *out, size_t size,
                        uint64_t *save_id, int64_t *counter)
{
    /* {status, id, counter, path} in one broadcast; a failure costs the agreement that carries
     * its message */
    struct {
        int64_t status;
        uint64_t save_id;
        int64_t counter;
        char path[4096];
    } msg;
    memset(&msg, 0, sizeof msg);
    if (s->rank != 0)
        local = CKPT_OK; /* (a caller's failure there joins the first vote) */
    else if (local == CKPT_OK) {
        local = ckpt__path(msg.path, size < sizeof msg.path ? size : sizeof msg.path, "%s",
                           prefix ? prefix : "");
        msg.save_id = save_id ? ckpt__random_u64() : 0;
        msg.counter = counter ? *counter : 0;
    }
    msg.status = local;
    if (MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, s->comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the prefix failed");
    if (msg.status != CKPT_OK)
        return ckpt_mpi_agree(s->comm, local);
    msg.path[sizeof msg.path - 1] = '\0';
    if (save_id)
        *save_id = msg.save_id;
    if (counter)
        *counter = msg.counter;
    return ckpt__path(out, size, "%s", msg.path);
}

static int init_ctx(ckpt_saver *s, save_ctx *c, const char *prefix, uint64_t save_id)
{
    memset(c, 0, sizeof *c);
    c->dirfd = c->workfd = c->tempfd = -1;
    ckpt__record_init(&c->rec);
    int rc = ckpt__save_names_init(&c->n, prefix, s->rank, s->size,
                                   s->layout == CKPT_LAYOUT_SHARED, save_id);
    /* The directories exist from here on; a chief/ that is a link is refused. */
    if (rc != CKPT_OK || (rc = ckpt__ckptdir_open(&c->dirfd, &c->workfd, c->n.dir, 1)) != CKPT_OK)
        return rc;
    c->comm = s->comm;
    size_t n = s->regs.n ? s->regs.n : 1;
    c->src = calloc(n, sizeof *c->src);
    c->blob_data = calloc(n, sizeof *c->blob_data);
    c->blob_len = calloc(n, sizeof *c->blob_len);
    if (!c->src || !c->blob_data || !c->blob_len)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->regs.n; i++)
        c->src[i] = s->regs.v[i].data;
    return CKPT_OK;
}

static void free_ctx(save_ctx *c)
{
    ckpt__close(c->tempfd);
    ckpt__close(c->workfd);
    ckpt__close(c->dirfd);
    c->tempfd = c->workfd = c->dirfd = -1;
    ckpt__record_free(&c->rec);
    free(c->src);
    free(c->blob_data);
    free(c->blob_len);
    c->src = NULL;
    c->blob_data = NULL;
    c->blob_len = NULL;
}

void ckpt__save_job_free(save_job *j)
{
    if (!j)
        return;
    free_ctx(&j->c);
    free(j);
}

static void cleanup_temp(ckpt_saver *s, save_ctx *c)
{
    ckpt__temp_cleanup(&c->n, s->rank, c->dirfd, c->workfd, c->tempfd);
}

void ckpt__save_shard_input(const ckpt_saver *s, const save_ctx *c, ckpt__shard_input *in)
{
    in->regs = &s->regs;
    in->pieces = &s->pieces;
    in->src = c->src;
    in->blob_data = c->blob_data;
    in->blob_len = c->blob_len;
    in->pack_max = s->layout == CKPT_LAYOUT_SHARED ? 0 : s->opts.pack_max_bytes;
    in->rank = s->rank;
}

/* ---- 1. plan ------------------------------------------------------------------------------------ */

void ckpt__save_free_plan(ckpt_saver *s)
{
    ckpt__index_merged_free(&s->plan);
    free(s->plan_frags);
    ckpt__arena_free(s->plan_arena);
    s->plan_frags = NULL;
    s->plan_arena = NULL;
    s->plan_nfrags = 0;
    s->have_plan = 0;
    ckpt__pieces_free(&s->pieces);
}

/*
 * Makes the plan, once some rank changed its registrations (the first vote of a save tells).
 * Collective. The merged plan is validated (at the chief, or on every rank in the shared layout)
 * and voted on, so duplicates, overlaps, gaps and disagreements are the same error everywhere,
 * before anything is written; a rank keeps only its own pieces.
 */
static int make_plan(ckpt_saver *s)
{
    int local = CKPT_OK;
    ckpt__save_free_plan(s);
    Mpickpt__Fragment mine = MPICKPT__FRAGMENT__INIT;
    if (local == CKPT_OK)
        local = ckpt__plan_pieces(&s->pieces, &s->regs, s->rank, s->size,
                                  s->opts.max_shard_bytes);
    if (local == CKPT_OK)
        local = ckpt__plan_fragment(&mine, &s->regs, &s->pieces, s->rank);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *arena = NULL;
    /* The shared layout's writer needs the plan on every rank (all of them create every dataset);
     * the others only need it checked: the chief alone merges it, and a vote tells everyone. */
    int shared = s->layout == CKPT_LAYOUT_SHARED, chief = CKPT_OK;
    int rc = shared ? ckpt__allgather_fragments(s, s->comm, &mine, local, &frags, &arena)
                    : ckpt__gather_packed(s, s->comm, &mine, local, &chief, &frags, &arena);
    ckpt__fragment_free_built(&mine);
    if (rc != CKPT_OK)
        return rc;
    if (shared || s->rank == 0) {
        s->plan_frags = frags;
        s->plan_arena = arena;
        s->plan_nfrags = (size_t)s->size;
        rc = chief;
    }
    if (rc == CKPT_OK && s->plan_frags) {
        Mpickpt__Header h = MPICKPT__HEADER__INIT;
        h.format_version = CKPT_FORMAT_VERSION;
        h.world_size = s->size;
        h.layout = (Mpickpt__Layout)s->layout;
        s->plan.header = &h;
        rc = ckpt__index_merge(&s->plan, s->plan_frags, s->plan_nfrags);
        if (rc == CKPT_OK)
            rc = ckpt__plan_check_replicated(&s->plan, s->plan_frags, s->plan_nfrags, s->size);
        s->plan.header = NULL;
        if (rc != CKPT_OK)
            ckpt__error_wrap(rc, "plan");
    }
    if (!shared) { /* checked: the chief's copy is not needed again */
        ckpt__index_merged_free(&s->plan);
        mpickpt__index__init(&s->plan);
        ckpt__free_frags(s->plan_frags, s->plan_arena);
        s->plan_frags = NULL;
        s->plan_arena = NULL;
        s->plan_nfrags = 0;
    }
    /* The shared layout's ranks validated the same plan, but agree anyway: the tiling check is
     * randomized (a wrong plan could in principle pass on one rank only) and no rank may go on
     * alone. */
    if ((rc = ckpt__mpi_vote(s->comm, rc, NULL, 0)) != CKPT_OK) {
        ckpt__save_free_plan(s);
        return rc;
    }
    s->have_plan = 1;
    s->dirty = 0;
    return CKPT_OK;
}

/* The in-flight directories and the space reservation (held until every rank has its own, so a
 * full disk is the same clean error everywhere before any HDF5 call): this rank's status, not
 * agreed. *rfd holds the reservation until ckpt__shard_release(). */
static int open_and_reserve(ckpt_saver *s, save_ctx *c, int *rfd)
{
    *rfd = -1;
    int local = ckpt__temp_open(&c->n, s->rank, c->dirfd, c->workfd, &c->tempfd);
    if (local == CKPT_OK && s->reserve && c->target->reserves(s)) {
        ckpt__shard_input in;
        ckpt__save_shard_input(s, c, &in);
        local = ckpt__shard_reserve(rfd, &in, &c->n, c->tempfd);
    }
    return local;
}

/*
 * The foreground part of a save, collective over the saver's communicator: the chief's prefix, a
 * vote (every rank ready, any registration changed), the plan when one did, the registered
 * savers, the chief's temp dir, the snapshot (async mode) and, in a sync save of the per-rank
 * layout, every rank's own in-flight directory and reservation (the shared layout's ranks open the
 * chief's temp dir once it exists; an async save reserves on its writer thread), agreed in a
 * second vote. With a cached plan: a broadcast and two votes.
 * On success *out is a job ready to run.
 */
int ckpt__save_prepare(ckpt_saver *s, const char *prefix_arg, const ckpt_save_info *info,
                       int64_t counter, const ckpt__target_ops *t, int caller_local,
                       save_job **out)
{
    *out = NULL;
    char prefix[4096];
    uint64_t save_id = 0;
    int rc = bcast_prefix(s, caller_local, prefix_arg, prefix, sizeof prefix, &save_id, &counter);
    if (rc != CKPT_OK)
        return rc;
    save_job *j = calloc(1, sizeof *j);
    int local = caller_local; /* another rank's failure (the chief's was agreed above) */
    if (local == CKPT_OK && !j)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (j)
        j->c.dirfd = j->c.workfd = j->c.tempfd = -1; /* until init_ctx */
    if (local == CKPT_OK) /* the target's name of the save on this rank */
        local = t->place(s, prefix, sizeof prefix);
    if (local == CKPT_OK)
        local = init_ctx(s, &j->c, prefix, save_id);
    if (j)
        j->c.target = t;
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "plan");
    ckpt__replica_check chk; /* replica_check.c: folded into the second vote when due */
    if (local == CKPT_OK)
        local = ckpt__replica_check_init(s, &chk);
    else
        memset(&chk, 0, sizeof chk);
    double dirty = s->dirty || !s->have_plan;
    if ((rc = ckpt__mpi_vote(s->comm, local, &dirty, 1)) != CKPT_OK ||
        (dirty != 0.0 && (rc = make_plan(s)) != CKPT_OK)) {
        ckpt__replica_check_free(&chk);
        ckpt__save_job_free(j);
        return rc;
    }
    /* due at the first save of a plan, or at every save; the same decision on every rank (the
     * settings are rank 0's, `dirty` agreed, the replicated names checked by the plan) */
    if (chk.on && chk.n > 0 &&
        (dirty != 0.0 || s->opts.check_replicas == CKPT_CHECK_REPLICAS_EVERY))
        ckpt__replica_check_crcs(s, &chk);
    j->s = s;
    j->counter = s->prepared_counter = counter; /* the chief's (ckpt__save_bcast_prefix) */
    if (info)
        j->info = *info;
    /* Registered savers run first (TensorFlow's contract), then the chief makes its in-flight
     * directory, a name of this save only (leftovers of crashed saves are gc's). */
    for (size_t i = 0; i < s->regs.n && local == CKPT_OK; i++) {
        const ckpt__reg *g = &s->regs.v[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        int r = g->cb.save(&j->c.blob_data[i], &j->c.blob_len[i], g->payload);
        if (r != CKPT_OK)
            local = ckpt__error(r, "rank %d: registered saver '%s' failed (%d)", s->rank, g->name,
                                r);
        else if (!j->c.blob_data[i] && j->c.blob_len[i])
            local = ckpt__error(CKPT_EINVAL, "rank %d: registered saver '%s' returned NULL",
                                s->rank, g->name);
    }
    if (local == CKPT_OK && s->rank == 0)
        local = ckpt__temp_fresh(&j->c.n, j->c.dirfd, &j->c.tempfd, 0);
    if (local == CKPT_OK && s->async)
        local = ckpt__save_snapshot(s, j);
    int rfd = -1;
    /* async: the writer thread reserves (a large fallocate must not block the caller) */
    j->opened = !s->async && s->layout != CKPT_LAYOUT_SHARED;
    if (local == CKPT_OK && j->opened)
        local = open_and_reserve(s, &j->c, &rfd);
    rc = chk.due ? ckpt__replica_vote(s, &chk, local) : ckpt__mpi_vote(s->comm, local, NULL, 0);
    ckpt__replica_check_free(&chk);
    ckpt__shard_release(&j->c.n, j->c.tempfd, rfd);
    if (rc != CKPT_OK) {
        cleanup_temp(s, &j->c);
        ckpt__save_job_free(j);
        return rc;
    }
    *out = j;
    return CKPT_OK;
}

/* ---- 2. write ----------------------------------------------------------------------------------- */

/* This rank's write (per-rank file or its part of the shared file); its status, not agreed. */
static int write_data(ckpt_saver *s, save_ctx *c)
{
    if (s->layout == CKPT_LAYOUT_SHARED)
        return ckpt__save_write_shared(s, c);
    if (s->layout == CKPT_LAYOUT_PER_NODE)
        return ckpt__save_write_node(s, c);
    ckpt__shard_input in;
    ckpt__save_shard_input(s, c, &in);
    ckpt__h5_lock();
    int local = ckpt__shard_write(&c->rec, &in, &s->bufs, &c->n, c->tempfd, ckpt__fault);
    ckpt__h5_unlock();
    return local;
}

/* ---- 4. merge ----------------------------------------------------------------------------------- */

/* The chief's index of this save: every rank's fragment merged and validated, under a header
 * describing the save. Local to the chief. */
static int merge_index(save_job *j, Mpickpt__Fragment **frags, size_t nfrags, Mpickpt__Index *idx,
                       Mpickpt__Header *hdr, char *producer, size_t psize)
{
    ckpt_saver *s = j->s;
    snprintf(producer, psize, "mpickpt %s", ckpt_version());
    hdr->format_version = CKPT_FORMAT_VERSION;
    hdr->endianness = MPICKPT__ENDIANNESS__LITTLE;
    hdr->world_size = s->size;
    hdr->layout = (Mpickpt__Layout)s->layout;
    hdr->save_counter = j->counter;
    hdr->epoch = j->info.epoch;
    hdr->step = j->info.step;
    hdr->end_of_epoch = j->info.end_of_epoch != 0;
    hdr->producer = producer;
    idx->header = hdr;
    int local = ckpt__fault(0, "merge");
    if (local == CKPT_OK)
        local = ckpt__index_merge(idx, frags, nfrags);
    if (local == CKPT_OK) /* 1 unless pieces are packed: format-1 readers still read it */
        hdr->format_version = ckpt__index_format_version(idx);
    return local;
}

/* ---- 5. commit ---------------------------------------------------------------------------------- */

/* This rank's data files (those its record lists: its own file, the shared file on the chief)
 * from its in-flight directory into place, in parallel with every other rank's (lib/commit.c):
 * the chief renames nobody's file but its own. *done counts those moved. */
static int move_own(save_ctx *c, ckpt__commit_file *files, size_t *done)
{
    *done = 0;
    for (size_t i = 0; i < c->rec.nfiles; i++) {
        memset(&files[i], 0, sizeof files[i]);
        files[i].from_fd = c->tempfd;
        files[i].from_shown = c->n.my_temp;
        files[i].from_name = files[i].name = c->rec.files[i].name;
    }
    return ckpt__commit_move(c->dirfd, c->n.dir, files, c->rec.nfiles, done, 0);
}

/* Appends one JSON line describing the save to the target's metrics.jsonl (chief only, best
 * effort): the persistent directory's, where `mpickpt stats` reads them (target.h). */
static void write_metrics(const save_job *j, const ckpt__metrics_record *m)
{
    int fd = -1;
    if (j->c.target->metrics_open(j, &fd) != CKPT_OK) {
        ckpt_error_clear(); /* kept: best effort after the commit, its own open's error */
        return;
    }
    if (fd < 0)
        return; /* a target that keeps none */
    FILE *f = fdopen(fd, "a");
    if (!f) {
        close(fd);
        return;
    }
    /* lib/metrics.c: the line's one writer (the prefix escaped and made valid UTF-8) */
    (void)ckpt__metrics_write_line(f, m); /* best effort */
    fclose(f);
}

/* The metrics of a committed save: mx holds the maximum over ranks of each phase (blocking,
 * write, agree, merge, commit) and the bytes, as the commit vote carried them, and `slowest` who
 * had each maximum; `hook_s` is the commit hook's time here, which a sync save also blocked its
 * caller for. The chief's metrics line and summary line, every rank's ckpt_saver_last_metrics(). */
static void record_metrics(save_job *j, double *mx, const int *slowest, double hook_s)
{
    ckpt_saver *s = j->s;
    save_ctx *c = &j->c;
    if (!s->async)
        mx[0] += hook_s;
    uint64_t total = (uint64_t)mx[5];
    ckpt__metrics_record m = { .prefix = j->c.n.base, .async = s->async, .bytes = total,
                               .ranks = (uint64_t)s->size, .blocking_s = mx[0],
                               .write_s = mx[1], .agree_s = mx[2], .merge_s = mx[3],
                               .commit_s = mx[4], .since_prev_s = j->since_prev,
                               .timestamp = ckpt__now_seconds(), .have_slowest = 1,
                               .have_write_median = j->have_median,
                               .write_median_s = j->write_median };
    memcpy(m.slowest_rank, slowest, sizeof m.slowest_rank);
    m.gbps = ckpt__metrics_gbps(&m);
    double busy = ckpt__metrics_background_s(&m);
    m.training_time_saved_s = s->async && busy > mx[0] ? busy - mx[0] : 0.0;
    if (s->rank == 0)
        write_metrics(j, &m);
    ckpt__save_log_summary(j, &m);
    pthread_mutex_lock(&s->lock);
    ckpt_save_metrics *lm = &s->last_metrics;
    snprintf(lm->prefix, sizeof lm->prefix, "%s", c->n.prefix);
    lm->async = s->async;
    lm->bytes = total;
    lm->ranks = s->size;
    lm->blocking_s = mx[0];
    lm->write_s = mx[1];
    lm->agree_s = mx[2];
    lm->merge_s = mx[3];
    lm->commit_s = mx[4];
    s->have_metrics = 1;
    pthread_mutex_unlock(&s->lock);
}

/* The commit hook's first half (the manager's chief: the new entry, retention, the state file),
 * before the commit vote, which carries *v to every rank. */
static void run_prep(save_job *j, ckpt_commit_vote *v)
{
    if (!j->prep)
        return;
    int rc = j->prep(j->c.n.prefix, j->counter, v, j->hook_payload);
    if (v->status == CKPT_OK) /* returned or put in the vote: either fails the save */
        v->status = rc;
}

/* The commit hook (the manager's state file and retention). `v`: what the commit vote carried
 * of its first half. */
static int run_hook(save_job *j, const ckpt_commit_vote *v)
{
    return j->hook ? j->hook(j->c.comm, j->c.n.prefix, j->counter, v, j->hook_payload) : CKPT_OK;
}

/* ---- steps 2-5 ---------------------------------------------------------------------------------- */

/*
 * Write, gather, merge, commit, then the commit hook and the metrics, on j->c.comm. Collective over
 * that communicator. Runs on the caller's thread (sync) or the writer thread (async). With the
 * directories opened at prepare, a save makes five collective calls here: the gather of the
 * fragments (a gather of statuses, the verdict's broadcast, a gatherv), the pre-commit vote and
 * the commit vote, which also carries the metrics and what the commit hook's first half (run
 * between the chief's commit point and that vote) tells every rank.
 */
int ckpt__save_run(save_job *j)
{
    ckpt_saver *s = j->s;
    save_ctx *c = &j->c;
    int rc, local = CKPT_OK;
    double t0 = ckpt__mono_seconds();
    ckpt__commit_file *files = NULL;
    size_t moved = 0;

    ckpt__fault_hold(s->rank, "write", &s->abandon); /* tests: held until the saver gives up */
    if (!j->opened) { /* shared layout (the chief's temp dir exists now) or async */
        int rfd = -1;
        local = open_and_reserve(s, c, &rfd);
        rc = ckpt_mpi_agree(c->comm, local);
        ckpt__shard_release(&c->n, c->tempfd, rfd);
        if (rc != CKPT_OK)
            goto out;
    }

    /* 2. write */
    local = write_data(s, c);
    double t1 = ckpt__mono_seconds();

    /* 3. agree, with 4. the gather: every rank's write and fragment */
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "agree");
    if (local == CKPT_OK && s->rank != 0)
        local = ckpt__fault(s->rank, "merge");
    j->bytes = ckpt__record_bytes(&c->rec);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *frag_arena = NULL;
    size_t nfrags = 0;
    int skip = 0;
    if ((rc = ckpt__gather_fragments(s, c, t1 - t0, &local, &skip, &frags, &nfrags, &frag_arena)) !=
        CKPT_OK)
        goto out;
    double t2 = ckpt__mono_seconds();
    if (s->rank == 0 && local == CKPT_OK && !skip)
        ckpt__save_write_median(j, frags, nfrags);

    /* 4. merge at the chief while every rank moves its own data files into place */
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    char producer[64];
    files = calloc(c->rec.nfiles ? c->rec.nfiles : 1, sizeof *files);
    if (!files && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        local = move_own(c, files, &moved);
    if (s->rank == 0 && local == CKPT_OK && !skip) /* skip: a failure the vote reports */
        local = merge_index(j, frags, nfrags, &idx, &hdr, producer, sizeof producer);

    /* 4b. the target's extra copies (the node cache's partner copies and index copies) */
    ckpt__target_copies copies = { 0 };
    local = c->target->copies(s, c, local, s->rank == 0 && !skip ? &idx : NULL, &copies);

    /* 5. commit: the pre-commit vote (the chief's merge, everybody's files in place, no abandoned
     * close), then the chief's commit point, voted with the metrics */
    if (s->rank != 0 && local == CKPT_OK)
        local = ckpt__fault(s->rank, "commit");
    /* A close that timed out on any rank abandons the save on every rank: ETIMEDOUT is the most
     * negative code, so the vote gives every rank the same answer. */
    if (local == CKPT_OK && atomic_load(&s->abandon))
        local = ckpt__error(CKPT_ETIMEDOUT, "rank %d: the saver was closed before this save "
                                            "finished; it was not committed",
                            s->rank);
    double t3 = ckpt__mono_seconds();
    rc = ckpt__mpi_vote(c->comm, local, NULL, 0);
    /* mx: the metrics (5 phases, each with the rank that had it; the index's bytes), then the
     * hook's first half: its status (negated: the worst wins) and its values (each the maximum
     * over ranks: the manager's chief sets them, the others leave -inf) */
    double mx[6 + 1 + CKPT_COMMIT_VOTE_VALS] = { 0 };
    int slowest[CKPT__METRICS_PHASES] = { -1, -1, -1, -1, -1 };
    ckpt_commit_vote hv = { CKPT_OK, { 0 } };
    for (int k = 0; k < CKPT_COMMIT_VOTE_VALS; k++)
        hv.vals[k] = -HUGE_VAL; /* none (no first half ran, or it set nothing) */
    double th = 0;
    int prep_rc = CKPT_OK;
    if (rc == CKPT_OK) {
        if (s->rank == 0) {
            local = c->target->commit(c, &idx);
            mx[5] = (double)ckpt__index_bytes(&idx);
        }
        double t4 = ckpt__mono_seconds();
        j->t_write = t1 - t0;
        j->t_agree = t2 - t1;
        j->t_merge = t3 - t2;
        j->t_commit = t4 - t3;
        const double mine[CKPT__METRICS_PHASES] = { s->async ? j->t_block : t4 - j->t_start,
                                                    j->t_write, j->t_agree, j->t_merge,
                                                    j->t_commit };
        /* each maximum with the rank that had it (save_summary.c), in the same vote */
        ckpt__summary_encode(mx, mine, CKPT__METRICS_PHASES, s->rank);
        th = ckpt__mono_seconds();
        if (local == CKPT_OK) /* committed, if the chief's commit point held */
            run_prep(j, &hv);
        prep_rc = hv.status;
        mx[6] = -(double)prep_rc;
        for (int k = 0; k < CKPT_COMMIT_VOTE_VALS; k++)
            mx[7 + k] = hv.vals[k]; /* the maximum over ranks (saver.h: ckpt_commit_vote) */
        rc = ckpt__mpi_vote(c->comm, local, mx, 6 + 1 + CKPT_COMMIT_VOTE_VALS);
        if (rc == CKPT_OK) {
            ckpt__summary_decode(mx, slowest, mx, CKPT__METRICS_PHASES);
            for (int k = 0; k < CKPT_COMMIT_VOTE_VALS; k++)
                hv.vals[k] = mx[7 + k];
        }
    }
    ckpt__index_merged_free(&idx);
    ckpt__free_frags(frags, frag_arena);
    if (rc != CKPT_OK) { /* not committed: no data file of it stays in place */
        c->target->undo(c, &copies);
        ckpt__commit_unmove(c->dirfd, files, moved);
    }
    ckpt__target_copies_free(&copies);
    if (rc != CKPT_OK)
        goto out;
    /* committed; a first half that failed on some rank (the vote told every rank) is the save's
     * error, with that rank's message, and its hook does not run */
    rc = mx[6] > 0 ? ckpt_mpi_agree(c->comm, prep_rc) : run_hook(j, &hv);
    if (rc == CKPT_OK)
        record_metrics(j, mx, slowest, ckpt__mono_seconds() - th);
out:
    free(files);
    cleanup_temp(s, c);
    return rc;
}
