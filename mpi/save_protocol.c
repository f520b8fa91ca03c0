/*
 * The save protocol (DESIGN §4), collective over the saver's communicator; each step below is one
 * function, and every exit after the first collective goes through ckpt_mpi_agree(), so all ranks
 * return the same status and nobody is left waiting in a collective:
 *
 *   0. prefix   save_prepare: every rank adopts the chief's prefix (bcast_prefix), opens the
 *               directories (init_ctx), runs its registered savers; the chief makes a fresh
 *               <base>_temp (ckpt__temp_fresh)
 *   1. plan     make_plan: allgather of every rank's registrations, merged and validated the same
 *               way on every rank; cached while no rank changes its registrations
 *   2. write    save_run: in-flight directories and space reservation agreed first
 *               (open_and_reserve), then a rank's own file (lib/shard.c) or the shared file
 *               (save_shared.c), each piece recorded with its checksums (lib/record.c)
 *   3. agree    one agreement on every rank's write
 *   4. merge    gather_fragments: the record of every rank as fragments at the chief, merged and
 *               validated into the index (merge_index)
 *   5. commit   the pre-commit vote, then the chief's commit (chief_commit -> lib/commit.c: data
 *               files into place, the index last), agreed; the commit hook (the manager's state
 *               file and retention) and the metrics follow
 * save_async.c decides on which thread steps 2-5 run.
 */
#include "saver_internal.h"

#include "commit.h"
#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "metrics.h"
#include "mpickpt/collective.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 0. prefix, directories --------------------------------------------------------------------- */

/* Every rank adopts the chief's prefix: ranks whose own view of the path differs (a stale mount,
 * a relative path from another working directory) still write and read the same checkpoint. */
int ckpt__save_bcast_prefix(ckpt_saver *s, const char *prefix, char *out, size_t size)
{
    int local = CKPT_OK;
    if (s->rank == 0)
        local = ckpt__path(out, size, "%s", prefix ? prefix : "");
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK)
        return rc;
    if (MPI_Bcast(out, (int)size, MPI_CHAR, 0, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the prefix failed");
    out[size - 1] = '\0';
    return ckpt_mpi_agree(s->comm, local);
}

static int init_ctx(ckpt_saver *s, save_ctx *c, const char *prefix)
{
    memset(c, 0, sizeof *c);
    c->dirfd = c->workfd = c->tempfd = -1;
    ckpt__record_init(&c->rec);
    int rc = ckpt__save_names_init(&c->n, prefix, s->rank, s->size,
                                   s->layout == CKPT_LAYOUT_SHARED);
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

/* Frees fragments unpacked by ckpt__allgather_fragments() or gather_fragments(): the array, and the
 * arena that holds the messages (protobuf-c's unpack otherwise makes ~10 mallocs per piece). */
void ckpt__free_frags(Mpickpt__Fragment **f, ckpt__arena *arena)
{
    free(f);
    ckpt__arena_free(arena);
}

/* Packs `f`, allgathers every rank's bytes, unpacks them into `*out` (n = size), allocated from
 * `*arena`: free with ckpt__free_frags(*out, *arena). Collective.
 * `local` is this rank's status so far: a failed rank still joins with an empty contribution. */
int ckpt__allgather_fragments(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
                               Mpickpt__Fragment ***out, ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    size_t len = local == CKPT_OK ? mpickpt__fragment__get_packed_size(f) : 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (local == CKPT_OK)
        mpickpt__fragment__pack(f, buf);
    else
        len = 0;
    if (len > INT32_MAX && local == CKPT_OK)
        local = ckpt__error(CKPT_EINVAL, "rank %d: plan of %zu bytes is too large", s->rank, len);
    int mylen = (int)len;
    int *lens = calloc((size_t)s->size, sizeof *lens), *displs = calloc((size_t)s->size, sizeof *displs);
    uint8_t *all = NULL;
    if ((!lens || !displs) && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "out of memory");
    int local2 = CKPT_OK;
    int rc = ckpt_mpi_agree(comm, local);
    if (rc != CKPT_OK)
        goto done;
    /* Both collectives run on every rank: the agreement above made the branch uniform. */
    if (MPI_Allgather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, comm) != MPI_SUCCESS)
        local2 = ckpt__error(CKPT_EMPI, "MPI_Allgather of plan sizes failed");
    int64_t total = 0;
    for (int i = 0; lens && i < s->size; i++) {
        displs[i] = (int)total;
        total += lens[i];
    }
    if (total > INT32_MAX)
        local2 = ckpt__error(CKPT_EINVAL, "the plan (%lld bytes) is too large", (long long)total);
    all = malloc((size_t)(total ? total : 1));
    if (!all)
        local2 = ckpt__error(CKPT_ENOMEM, "out of memory");
    if ((rc = ckpt_mpi_agree(comm, local2)) != CKPT_OK)
        goto done;
    if (MPI_Allgatherv(buf, mylen, MPI_BYTE, all, lens, displs, MPI_BYTE, comm) != MPI_SUCCESS)
        local2 = ckpt__error(CKPT_EMPI, "MPI_Allgatherv of plans failed");
    Mpickpt__Fragment **frags = calloc((size_t)s->size, sizeof *frags);
    ckpt__arena *a = ckpt__arena_new();
    if ((!frags || !a) && local2 == CKPT_OK)
        local2 = ckpt__error(CKPT_ENOMEM, "out of memory");
    for (int i = 0; local2 == CKPT_OK && i < s->size; i++) {
        frags[i] = mpickpt__fragment__unpack(ckpt__arena_allocator(a), (size_t)lens[i],
                                             all + displs[i]);
        if (!frags[i])
            local2 = ckpt__error(CKPT_ECORRUPT, "rank %d's plan does not parse", i);
        else
            frags[i]->rank = i; /* trust the position, not the bytes */
    }
    if (local2 != CKPT_OK) {
        ckpt__free_frags(frags, a);
        frags = NULL;
        a = NULL;
    }
    /* The same bytes on every rank, but a failure to allocate or unpack them is one rank's own:
     * agreed, so that no rank goes on alone into the next collective. */
    rc = ckpt_mpi_agree(comm, local2);
    if (rc != CKPT_OK && frags) {
        ckpt__free_frags(frags, a);
        frags = NULL;
        a = NULL;
    }
    *out = frags;
    *arena = a;
done:
    free(buf);
    free(lens);
    free(displs);
    free(all);
    return rc;
}

/*
 * Makes the plan when any rank changed its registrations (one allreduce tells). Collective.
 * Every rank validates the same merged plan, so duplicates, overlaps, gaps and disagreements are
 * the same error everywhere, before anything is written.
 */
static int make_plan(ckpt_saver *s)
{
    int dirty = s->dirty || !s->have_plan, any = 0;
    if (MPI_Allreduce(&dirty, &any, 1, MPI_INT, MPI_MAX, s->comm) != MPI_SUCCESS)
        return ckpt__error(CKPT_EMPI, "MPI_Allreduce of the plan flag failed");
    int local = ckpt__fault(s->rank, "plan");
    if (!any)
        return ckpt_mpi_agree(s->comm, local);
    ckpt__save_free_plan(s);
    Mpickpt__Fragment mine = MPICKPT__FRAGMENT__INIT;
    if (local == CKPT_OK)
        local = ckpt__plan_pieces(&s->pieces, &s->regs, s->rank, s->size,
                                  s->opts.max_shard_bytes);
    if (local == CKPT_OK)
        local = ckpt__plan_fragment(&mine, &s->regs, &s->pieces, s->rank);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *arena = NULL;
    int rc = ckpt__allgather_fragments(s, s->comm, &mine, local, &frags, &arena);
    ckpt__fragment_free_built(&mine);
    if (rc != CKPT_OK)
        return rc;
    s->plan_frags = frags;
    s->plan_arena = arena;
    s->plan_nfrags = (size_t)s->size;
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
    /* Every rank validated the same plan, but agree anyway: the tiling check is randomized (a
     * wrong plan could in principle pass on one rank only) and no rank may go on alone. */
    if ((rc = ckpt_mpi_agree(s->comm, rc)) != CKPT_OK) {
        ckpt__save_free_plan(s);
        return rc;
    }
    s->have_plan = 1;
    s->dirty = 0;
    return CKPT_OK;
}

/*
 * The foreground part of a save, collective over the saver's communicator: the chief's prefix,
 * the plan, the registered savers, the chief's temp dir; then, in async mode, the snapshot.
 * On success *out is a job ready to run.
 */
int ckpt__save_prepare(ckpt_saver *s, const char *prefix_arg, const ckpt_save_info *info,
                       int64_t counter, save_job **out)
{
    *out = NULL;
    char prefix[4096];
    int rc = ckpt__save_bcast_prefix(s, prefix_arg, prefix, sizeof prefix);
    if (rc != CKPT_OK)
        return rc;
    save_job *j = calloc(1, sizeof *j);
    int local = j ? init_ctx(s, &j->c, prefix) : ckpt__error(CKPT_ENOMEM, "out of memory");
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK || (rc = make_plan(s)) != CKPT_OK) {
        ckpt__save_job_free(j);
        return rc;
    }
    j->s = s;
    j->counter = counter;
    if (info)
        j->info = *info;
    /* Registered savers run first (TensorFlow's contract), then the chief prepares its temp dir:
     * leftovers of a crashed save with the same prefix are garbage. */
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
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        cleanup_temp(s, &j->c);
        ckpt__save_job_free(j);
        return rc;
    }
    *out = j;
    return CKPT_OK;
}

/* ---- 2. write ----------------------------------------------------------------------------------- */

/* The in-flight directories and the space reservation, agreed by every rank before any HDF5
 * call: a full disk is then the same clean error everywhere. The reservation is held until every
 * rank has its own, then released. */
static int open_and_reserve(ckpt_saver *s, save_ctx *c)
{
    int rfd = -1;
    int local = ckpt__temp_open(&c->n, s->rank, c->dirfd, c->workfd, &c->tempfd);
    if (local == CKPT_OK && s->reserve) {
        ckpt__shard_input in;
        ckpt__save_shard_input(s, c, &in);
        local = ckpt__shard_reserve(&rfd, &in, &c->n, c->tempfd);
    }
    int rc = ckpt_mpi_agree(c->comm, local);
    ckpt__shard_release(&c->n, c->tempfd, rfd);
    return rc;
}

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

/* Gathers every rank's packed fragment at the chief. On the chief, *out receives them unpacked,
 * in *arena (free with free_frags).
 * Collective; a rank with local != OK sends nothing. Returns the gather's own status. */
static int gather_fragments(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Fragment ***out,
                            ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    /* the record becomes protobuf here, for the wire */
    Mpickpt__Fragment frag = MPICKPT__FRAGMENT__INIT;
    if (local == CKPT_OK)
        local = ckpt__record_fragment(&frag, &c->rec, s->rank, c->n.data_name);
    size_t len = local == CKPT_OK ? mpickpt__fragment__get_packed_size(&frag) : 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        len = 0, local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (len > INT32_MAX)
        len = 0, local = ckpt__error(CKPT_EINVAL, "rank %d: index fragment too large", s->rank);
    if (len)
        mpickpt__fragment__pack(&frag, buf);
    ckpt__fragment_free_built(&frag);
    int mylen = (int)len;
    int *lens = NULL, *displs = NULL;
    uint8_t *all = NULL;
    int grc = CKPT_OK;
    if (s->rank == 0) {
        lens = calloc((size_t)s->size, sizeof *lens);
        displs = calloc((size_t)s->size, sizeof *displs);
    }
    /* The chief needs the sizes before it can receive; an allocation failure on the chief is
     * caught right after, with everybody still in step. */
    if (MPI_Gather(&mylen, 1, MPI_INT, lens, 1, MPI_INT, 0, c->comm) != MPI_SUCCESS)
        grc = ckpt__error(CKPT_EMPI, "MPI_Gather of fragment sizes failed");
    int64_t total = 0;
    if (s->rank == 0 && lens && displs) {
        for (int i = 0; i < s->size; i++) {
            displs[i] = (int)total;
            total += lens[i];
        }
        if (total > INT32_MAX)
            grc = ckpt__error(CKPT_EINVAL, "the merged index (%lld bytes) is too large",
                              (long long)total);
        else if (!(all = malloc((size_t)(total ? total : 1))))
            grc = ckpt__error(CKPT_ENOMEM, "out of memory");
    } else if (s->rank == 0) {
        grc = ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    int ok = grc == CKPT_OK;
    MPI_Bcast(&ok, 1, MPI_INT, 0, c->comm);
    if (ok) {
        if (MPI_Gatherv(buf, mylen, MPI_BYTE, all, lens, displs, MPI_BYTE, 0, c->comm) !=
            MPI_SUCCESS)
            grc = ckpt__error(CKPT_EMPI, "MPI_Gatherv of index fragments failed");
    }
    if (s->rank == 0 && ok && grc == CKPT_OK) {
        Mpickpt__Fragment **frags = calloc((size_t)s->size, sizeof *frags);
        ckpt__arena *a = ckpt__arena_new();
        if (!frags || !a)
            grc = ckpt__error(CKPT_ENOMEM, "out of memory");
        for (int i = 0; i < s->size && grc == CKPT_OK; i++) {
            frags[i] = mpickpt__fragment__unpack(ckpt__arena_allocator(a), (size_t)lens[i],
                                                 all + displs[i]);
            if (!frags[i])
                grc = ckpt__error(CKPT_ECORRUPT, "rank %d's index fragment does not parse", i);
            else
                frags[i]->rank = i;
        }
        if (grc != CKPT_OK) {
            ckpt__free_frags(frags, a);
            frags = NULL;
            a = NULL;
        }
        *out = frags;
        *arena = a;
    }
    free(buf);
    free(lens);
    free(displs);
    free(all);
    return local != CKPT_OK ? local : grc;
}


/* The chief's index of this save: every rank's fragment merged and validated, under a header
 * describing the save. Local to the chief. */
static int merge_index(save_job *j, Mpickpt__Fragment **frags, Mpickpt__Index *idx,
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
        local = ckpt__index_merge(idx, frags, (size_t)s->size);
    if (local == CKPT_OK) /* 1 unless pieces are packed: format-1 readers still read it */
        hdr->format_version = ckpt__index_format_version(idx);
    return local;
}

/* ---- 5. commit ---------------------------------------------------------------------------------- */

static int commit_fault(void *arg)
{
    (void)arg;
    return ckpt__fault(0, "commit");
}

/* The chief's commit (lib/commit.c): every data file from its rank's in-flight directory into
 * place, then the index. */
static int chief_commit(ckpt_saver *s, save_ctx *c, const Mpickpt__Index *idx)
{
    int rc = CKPT_OK;
    ckpt__commit_file *files = calloc(idx->n_files ? idx->n_files : 1, sizeof *files);
    if (!files)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; rc == CKPT_OK && i < idx->n_files; i++) {
        const char *name = idx->files[i]->name;
        ckpt__commit_file *f = &files[i];
        f->from_fd = c->tempfd;
        f->from_name = f->name = name;
        if (s->layout != CKPT_LAYOUT_PER_RANK && s->layout != CKPT_LAYOUT_PER_NODE)
            continue;
        /* the file of rank r is <base>.data-<r>-of-<n>, in rank r's temp dir; node k's is
         * <base>.data-<k>-of-<nnodes>, in its leader's */
        int node = s->layout == CKPT_LAYOUT_PER_NODE;
        int r = ckpt__data_name_rank(name, c->n.base, node ? s->nnodes : s->size);
        if (r >= 0 && node)
            r = s->node_leaders[r];
        if (r < 0) {
            rc = ckpt__error(CKPT_ECORRUPT, "unexpected data file name '%s'", name);
        } else if (r != 0) {
            f->from_fd = c->workfd;
            f->from_shown = c->n.work;
            ckpt__worker_temp_name(f->from_subdir, sizeof f->from_subdir, r);
        }
    }
    if (rc == CKPT_OK) {
        ckpt__commit_req q = { .dirfd = c->dirfd, .dir = c->n.dir, .index_name = c->n.index_name,
                               .index_shown = c->n.prefix, .idx = idx, .files = files,
                               .nfiles = idx->n_files, .before_index = commit_fault };
        rc = ckpt__commit(&q);
    }
    free(files);
    return rc;
}

/* Appends one JSON line describing the save to <dir>/metrics.jsonl (chief only, best effort). */
static void write_metrics(const save_job *j, const double *mx, uint64_t bytes)
{
    int fd;
    if (ckpt__file_open_append(&fd, j->c.dirfd, "metrics.jsonl", j->c.n.dir) != CKPT_OK) {
        ckpt_error_clear(); /* best effort */
        return;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) {
        close(fd);
        return;
    }
    /* lib/metrics.c: the line's one writer (the prefix escaped and made valid UTF-8) */
    ckpt__metrics_record m = { .prefix = j->c.n.base, .async = j->s->async, .bytes = bytes,
                               .ranks = (uint64_t)j->s->size, .blocking_s = mx[0],
                               .write_s = mx[1], .agree_s = mx[2], .merge_s = mx[3],
                               .commit_s = mx[4], .since_prev_s = j->since_prev,
                               .timestamp = ckpt__now_seconds() };
    m.gbps = ckpt__metrics_gbps(&m);
    double busy = ckpt__metrics_background_s(&m);
    m.training_time_saved_s = j->s->async && busy > mx[0] ? busy - mx[0] : 0.0;
    (void)ckpt__metrics_write_line(f, &m); /* best effort */
    fclose(f);
}

/* The maximum over ranks of each phase and the sum of the bytes: the chief's metrics line and
 * every rank's ckpt_saver_last_metrics(). A sync save blocked its caller for all of it. */
static void record_metrics(save_job *j)
{
    ckpt_saver *s = j->s;
    save_ctx *c = &j->c;
    if (!s->async)
        j->t_block = ckpt__mono_seconds() - j->t_start;
    double mine[5] = { j->t_block, j->t_write, j->t_agree, j->t_merge, j->t_commit }, mx[5];
    uint64_t total = 0;
    if (MPI_Allreduce(mine, mx, 5, MPI_DOUBLE, MPI_MAX, c->comm) != MPI_SUCCESS ||
        MPI_Allreduce(&j->bytes, &total, 1, MPI_UINT64_T, MPI_SUM, c->comm) != MPI_SUCCESS)
        return;
    if (s->rank == 0)
        write_metrics(j, mx, total);
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

/* The commit hook (the manager's state file and retention), read under the lock: a borrower
 * that went away (ckpt__saver_detach) may have withdrawn it. */
static int run_hook(save_job *j)
{
    ckpt_saver *s = j->s;
    pthread_mutex_lock(&s->lock);
    ckpt__commit_hook hook = j->hook;
    s->hook_running = hook != NULL;
    pthread_mutex_unlock(&s->lock);
    if (!hook)
        return CKPT_OK;
    int rc = hook(j->c.comm, j->c.n.prefix, j->counter, j->hook_payload);
    pthread_mutex_lock(&s->lock);
    s->hook_running = 0;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- steps 2-5 ---------------------------------------------------------------------------------- */

/*
 * Write, agree, merge, commit, then the commit hook and the metrics, on j->c.comm. Collective over
 * that communicator. Runs on the caller's thread (sync) or the writer thread (async).
 */
int ckpt__save_run(save_job *j)
{
    ckpt_saver *s = j->s;
    save_ctx *c = &j->c;
    int rc, local;
    double t0 = ckpt__mono_seconds();

    ckpt__fault_hold(s->rank, "write", &s->abandon); /* tests: held until the saver gives up */
    if ((rc = open_and_reserve(s, c)) != CKPT_OK)
        goto out;

    /* 2. write */
    local = write_data(s, c);
    double t1 = ckpt__mono_seconds();

    /* 3. agree */
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "agree");
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK)
        goto out;
    double t2 = ckpt__mono_seconds();

    /* 4. merge */
    local = s->rank == 0 ? CKPT_OK : ckpt__fault(s->rank, "merge");
    j->bytes = ckpt__record_bytes(&c->rec);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *frag_arena = NULL;
    local = gather_fragments(s, c, local, &frags, &frag_arena);
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    char producer[64];
    if (s->rank == 0 && local == CKPT_OK)
        local = merge_index(j, frags, &idx, &hdr, producer, sizeof producer);

    /* 5. commit: the pre-commit vote (the chief's merge, everybody's readiness, no abandoned
     * close), then the chief's commit, agreed */
    if (s->rank != 0 && local == CKPT_OK)
        local = ckpt__fault(s->rank, "commit");
    /* A close that timed out on any rank abandons the save on every rank: ETIMEDOUT is the most
     * negative code, so the agreement gives every rank the same answer. */
    if (local == CKPT_OK && atomic_load(&s->abandon))
        local = ckpt__error(CKPT_ETIMEDOUT, "rank %d: the saver was closed before this save "
                                            "finished; it was not committed",
                            s->rank);
    double t3 = ckpt__mono_seconds();
    rc = ckpt_mpi_agree(c->comm, local);
    if (rc == CKPT_OK) {
        if (s->rank == 0) {
            hdr.timestamp = ckpt__now_seconds();
            local = chief_commit(s, c, &idx);
        }
        rc = ckpt_mpi_agree(c->comm, local);
    }
    ckpt__index_merged_free(&idx);
    ckpt__free_frags(frags, frag_arena);
    double t4 = ckpt__mono_seconds();
    j->t_write = t1 - t0;
    j->t_agree = t2 - t1;
    j->t_merge = t3 - t2;
    j->t_commit = t4 - t3;
    if (rc == CKPT_OK)
        rc = run_hook(j);
    if (rc == CKPT_OK)
        record_metrics(j);
out:
    cleanup_temp(s, c);
    return rc;
}
