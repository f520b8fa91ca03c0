/*
 * Collective save and restore (DESIGN §4).
 *
 * Save: plan (allgather of what every rank registered, merged and validated identically on every
 * rank; cached while no rank changes its registrations) -> write (per-rank files, or one shared
 * file through MPI-IO) -> agree (one allreduce) -> merge (gather of index fragments at the chief)
 * -> commit (the chief renames data into place and writes the index last) -> the result is agreed
 * by every rank. Every exit path after the first collective goes through ckpt_mpi_agree(), so all
 * ranks return the same status and nobody is left waiting in a collective.
 */
#include "mpickpt/saver.h"

#include "arena.h"
#include "env.h"
#include "fsutil.h"
#include "h5io.h"
#include "index.h"
#include "jsonstr.h"
#include "mpi_internal.h"
#include "mpickpt/collective.h"
#include "mpickpt/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef struct reg {
    char *name;   /* as registered */
    char *stored; /* name in the checkpoint (components and blobs get a per-rank suffix) */
    ckpt_dtype dtype;
    ckpt_shape shape;
    ckpt_slice slice; /* what this rank holds (whole shape except for partitioned) */
    ckpt_kind kind;
    void *data;
    ckpt_blob_callbacks cb;
    void *payload;
} reg;

/* One piece this rank stores at a save: a box of one registration. */
typedef struct piece {
    size_t reg;
    ckpt_slice slice;
} piece;

typedef struct save_job save_job;
struct ckpt_saver;
static int take_pending(struct ckpt_saver *s);

struct ckpt_saver {
    MPI_Comm comm;
    /* async mode: a writer thread with its own communicator runs one save at a time */
    int async;
    MPI_Comm async_comm;
    save_job *job; /* the save in flight, or NULL */
    int job_done;  /* guarded by lock */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_int abandon; /* set by a close that timed out: the save in flight must not commit */
    int pending_rc;     /* a background failure seen by restore, reported by the next call */
    char pending_msg[2048];
    void **snap; /* snapshot buffers, one per registration, reused */
    size_t *snap_cap;
    size_t snap_n;
    double last_save_start;
    ckpt_save_metrics last_metrics; /* guarded by lock */
    int have_metrics;
    int rank, size;
    ckpt_saver_options opts;
    ckpt_layout layout;
    reg *regs;
    size_t nregs, cap;
    int dirty; /* registrations changed since the plan was made */
    /* The plan: every rank's registrations (without blobs), merged and validated. */
    int have_plan;
    Mpickpt__Fragment **plan_frags; /* unpacked into plan_arena, freed with it */
    ckpt__arena *plan_arena;
    size_t plan_nfrags;
    Mpickpt__Index plan;
    /* Pieces this rank stores, derived from its registrations and the sharding policy. */
    piece *pieces;
    size_t npieces;
    void *scratch;
    size_t scratch_size;
    uint8_t *pack_buf; /* staging buffer of packed pieces (PACK_STAGE bytes), kept */
    int64_t counter;
    /* Borrowers (managers) told when the saver is freed; hook_running is set (under lock) while
     * a commit hook runs on the writer thread. */
    struct borrower {
        void (*gone)(void *payload);
        void *payload;
    } *borrowers;
    size_t nborrowers;
    int hook_running;
    int reserve; /* the up-front space reservation (MPICKPT_RESERVE), decided by rank 0 */
};

/* ---- small helpers ------------------------------------------------------------------------- */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* Deterministic choice of the rank that stores a replicated primary: spreads the writes. */
static int primary_rank(const char *name, int size)
{
    uint32_t h = ckpt_crc32c(name, strlen(name));
    return (int)(h % (uint32_t)size);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Durations are measured on the monotonic clock: a clock step (NTP) cannot make one negative. */
static double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- create / free / registration ------------------------------------------------------------ */

/* What the options and MPICKPT_* variables decide, in the order broadcast by decide_settings(). */
enum { SET_LAYOUT, SET_ASYNC, SET_COLLECTIVE, SET_PACK, SET_SHARD, SET_RESERVE, SET_N };

/* This rank's settings from its options (they win) and its environment, every variable parsed
 * strictly; MPICKPT_LOG and MPICKPT_FAULT are checked here too, so that a typo fails the job at
 * its start. */
static int local_settings(const ckpt_saver_options *o, int64_t *set)
{
    static const char *const layouts[] = { "per-rank", "shared" };
    static const int layout_values[] = { CKPT_LAYOUT_PER_RANK, CKPT_LAYOUT_SHARED };
    int layout, async, reserve, level, target;
    int64_t pack;
    char step[16];
    int mode;
    int rc;
    if ((rc = ckpt__env_choice(&layout, "MPICKPT_LAYOUT", layouts, layout_values, 2,
                               CKPT_LAYOUT_PER_RANK)) ||
        (rc = ckpt__env_bool(&async, "MPICKPT_ASYNC", 0)) ||
        (rc = ckpt__env_bool(&reserve, "MPICKPT_RESERVE", 1)) ||
        (rc = ckpt__env_int64(&pack, "MPICKPT_PACK_BYTES", 0, (int64_t)1 << 40,
                              CKPT_PACK_MAX_BYTES_DEFAULT)) ||
        (rc = ckpt__env_log_level(&level)) ||
        (rc = ckpt__fault_spec(&target, step, sizeof step, &mode)))
        return rc;
    if (o->layout != CKPT_LAYOUT_UNKNOWN && o->layout != CKPT_LAYOUT_SHARED &&
        o->layout != CKPT_LAYOUT_PER_RANK)
        return ckpt__error(CKPT_EINVAL, "ckpt_saver_options: unknown layout %d", (int)o->layout);
    set[SET_LAYOUT] = o->layout != CKPT_LAYOUT_UNKNOWN ? (int64_t)o->layout : (int64_t)layout;
    set[SET_ASYNC] = o->async != 0 || async;
    set[SET_COLLECTIVE] = o->collective_io != 0;
    /* MPICKPT_PACK_BYTES=0: never pack */
    set[SET_PACK] = o->pack_max_bytes != 0 ? o->pack_max_bytes : pack > 0 ? pack : -1;
    set[SET_SHARD] = o->max_shard_bytes;
    set[SET_RESERVE] = reserve;
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
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK)
        return rc;
    const ckpt_saver_options *o = &s->opts;
    int64_t raw[SET_N] = { o->layout, o->async != 0, o->collective_io != 0, o->pack_max_bytes,
                           o->max_shard_bytes, 0 };
    memcpy(buf, raw, sizeof raw);
    memcpy(buf + SET_N, mine, sizeof mine);
    if (MPI_Bcast(buf, 2 * SET_N, MPI_INT64_T, 0, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the saver's settings failed");
    static const char *const what[SET_N] = { "layout", "async", "collective_io",
                                             "pack_max_bytes", "max_shard_bytes", "reserve" };
    for (int i = 0; i < SET_N - 1 && local == CKPT_OK; i++)
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
    return CKPT_OK;
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
    if (opts) /* a version-1 caller's struct ends before pack_max_bytes */
        memcpy(&s->opts, opts,
               opts->version >= 2 ? sizeof *opts : offsetof(ckpt_saver_options, pack_max_bytes));
    s->async_comm = MPI_COMM_NULL;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    atomic_init(&s->abandon, 0);
    if ((rc = decide_settings(s)) != CKPT_OK) {
        MPI_Comm_free(&s->comm);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
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
            free(s);
            return rc;
        }
    }
    s->dirty = 1;
    mpickpt__index__init(&s->plan);
    *out = s;
    return CKPT_OK;
}

static void free_plan(ckpt_saver *s)
{
    ckpt__index_merged_free(&s->plan);
    free(s->plan_frags);
    ckpt__arena_free(s->plan_arena);
    s->plan_frags = NULL;
    s->plan_arena = NULL;
    s->plan_nfrags = 0;
    s->have_plan = 0;
    free(s->pieces);
    s->pieces = NULL;
    s->npieces = 0;
}

void ckpt_saver_clear(ckpt_saver *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nregs; i++) {
        free(s->regs[i].name);
        free(s->regs[i].stored);
    }
    s->nregs = 0;
    s->dirty = 1;
}

static void free_plan(ckpt_saver *s);

int64_t ckpt_saver_counter(const ckpt_saver *s)
{
    return s->counter;
}

int ckpt_saver_last_metrics(const ckpt_saver *s, ckpt_save_metrics *out)
{
    ckpt_saver *ms = (ckpt_saver *)s; /* the lock only */
    pthread_mutex_lock(&ms->lock);
    int have = s->have_metrics;
    if (have)
        *out = s->last_metrics;
    pthread_mutex_unlock(&ms->lock);
    return have ? CKPT_OK : ckpt__error(CKPT_ENOTFOUND, "no save has committed yet");
}

MPI_Comm ckpt__saver_comm(const ckpt_saver *s)
{
    return s->comm;
}

int ckpt__saver_rank(const ckpt_saver *s)
{
    return s->rank;
}

void ckpt__saver_set_counter(ckpt_saver *s, int64_t counter)
{
    s->counter = counter;
}

/* Appends a registration after checking what can be checked locally. */
static int add_reg(ckpt_saver *s, const char *name, const char *stored, ckpt_dtype dtype,
                   const ckpt_shape *shape, const ckpt_slice *slice, ckpt_kind kind, void *data)
{
    if (!s || !name || !*name || strlen(stored) > 4096)
        return ckpt__error(CKPT_EINVAL, "tensor name is empty or longer than 4096 bytes");
    if (!ckpt__utf8_valid(name, strlen(name))) {
        /* names end up in the index, HDF5 attributes and JSON: text every reader can decode */
        char esc[256];
        return ckpt__error(CKPT_EINVAL, "tensor name '%s' is not valid UTF-8",
                           ckpt__escape_bytes(esc, sizeof esc, name, strlen(name)));
    }
    if (!ckpt_dtype_valid(dtype))
        return ckpt__error(CKPT_EINVAL, "tensor '%s': invalid dtype %d", name, (int)dtype);
    int64_t n;
    int rc;
    if ((rc = ckpt_shape_num_elements(&n, shape)) != CKPT_OK ||
        (rc = ckpt_slice_validate(slice, shape)) != CKPT_OK)
        return ckpt__error_wrap(rc, "tensor '%s'", name);
    ckpt_slice_num_elements(&n, slice);
    if (n > 0 && !data && kind != CKPT_KIND_BLOB)
        return ckpt__error(CKPT_EINVAL, "tensor '%s': data is NULL", name);
    if (kind != CKPT_KIND_PARTITIONED)
        for (size_t i = 0; i < s->nregs; i++)
            if (strcmp(s->regs[i].stored, stored) == 0)
                return ckpt__error(CKPT_EINVAL, "tensor '%s' is already registered on rank %d",
                                   name, s->rank);
    if (s->nregs == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        reg *nr = realloc(s->regs, ncap * sizeof *nr);
        if (!nr)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        s->regs = nr;
        s->cap = ncap;
    }
    reg *r = &s->regs[s->nregs];
    memset(r, 0, sizeof *r);
    r->name = xstrdup(name);
    r->stored = xstrdup(stored);
    if (!r->name || !r->stored) {
        free(r->name);
        free(r->stored);
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    }
    r->dtype = dtype;
    r->shape = *shape;
    r->slice = *slice;
    r->kind = kind;
    r->data = data;
    s->nregs++;
    s->dirty = 1;
    return CKPT_OK;
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
    s->regs[s->nregs - 1].cb = *cb;
    s->regs[s->nregs - 1].payload = payload;
    return CKPT_OK;
}

/* ---- sharding policy -------------------------------------------------------------------------- */

/*
 * Splits `box` into pieces of at most `max` bytes (max <= 0: no split) and appends them.
 * Splits along the outermost axis whose one-index-thick slab fits, iterating the axes outside it
 * one index at a time; when even one innermost row is larger than the limit it moves inwards, down
 * to single elements, so it always terminates (and never produces an empty piece).
 */
static int shard_box(ckpt_saver *s, size_t r, const ckpt_slice *box, size_t esize, int64_t max)
{
    int64_t n;
    ckpt_slice_num_elements(&n, box);
    int nd = box->ndims;
    if (max <= 0 || n == 0 || (uint64_t)n * esize <= (uint64_t)max || nd == 0) {
        piece *np = realloc(s->pieces, (s->npieces + 1) * sizeof *np);
        if (!np)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        s->pieces = np;
        s->pieces[s->npieces].reg = r;
        s->pieces[s->npieces].slice = *box;
        s->npieces++;
        return CKPT_OK;
    }
    /* slab[d] = bytes of a slab one index thick along d (all of the inner axes). */
    uint64_t slab = esize;
    int axis = nd - 1;
    uint64_t inner[CKPT_MAX_DIMS] = { 0 };
    for (int d = nd - 1; d >= 0; d--) {
        inner[d] = slab;
        slab *= (uint64_t)box->count[d];
    }
    for (int d = 0; d < nd; d++)
        if (inner[d] <= (uint64_t)max) {
            axis = d;
            break;
        }
    int64_t k = (int64_t)((uint64_t)max / inner[axis]);
    if (k < 1)
        k = 1; /* one element is larger than the limit: one element per piece */
    /* Iterate the outer axes index by index, the split axis in chunks of k. */
    int64_t idx[CKPT_MAX_DIMS] = { 0 };
    for (;;) {
        ckpt_slice p = *box;
        for (int d = 0; d < axis; d++) {
            p.start[d] = box->start[d] + idx[d];
            p.count[d] = 1;
        }
        for (int64_t off = 0; off < box->count[axis]; off += k) {
            p.start[axis] = box->start[axis] + off;
            p.count[axis] = box->count[axis] - off < k ? box->count[axis] - off : k;
            int rc = shard_box(s, r, &p, esize, 0);
            if (rc != CKPT_OK)
                return rc;
        }
        int d = axis - 1;
        while (d >= 0 && ++idx[d] == box->count[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    return CKPT_OK;
}

/* Pieces this rank stores for its (non-blob) registrations. */
static int build_pieces(ckpt_saver *s)
{
    free(s->pieces);
    s->pieces = NULL;
    s->npieces = 0;
    for (size_t i = 0; i < s->nregs; i++) {
        const reg *g = &s->regs[i];
        if (g->kind == CKPT_KIND_BLOB)
            continue;
        if (g->kind == CKPT_KIND_REPLICATED && primary_rank(g->stored, s->size) != s->rank)
            continue;
        int rc = shard_box(s, i, &g->slice, ckpt_dtype_size(g->dtype), s->opts.max_shard_bytes);
        if (rc != CKPT_OK)
            return rc;
    }
    return CKPT_OK;
}

/* ---- plan -------------------------------------------------------------------------------------- */

static int cmp_tensor_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(Mpickpt__Tensor *const *)elem)->name);
}

/* This rank's registrations as a fragment (pieces without data), for the plan. */
static int plan_fragment(ckpt_saver *s, Mpickpt__Fragment *f, size_t *cap)
{
    char file[32];
    snprintf(file, sizeof file, "plan-%d", s->rank);
    int rc = ckpt__fragment_add_file(f, file, 0);
    for (size_t i = 0; i < s->nregs && rc == CKPT_OK; i++) {
        const reg *g = &s->regs[i];
        if (g->kind == CKPT_KIND_BLOB)
            continue;
        /* One entry per registration, with the pieces this rank stores for it (none for a
         * replicated tensor whose primary is another rank: the entry still proves registration). */
        size_t before = f->n_tensors;
        ckpt_slice zero = g->slice;
        rc = ckpt__fragment_add(f, cap, g->stored, g->dtype, &g->shape, g->kind, &g->slice, file,
                                "/tensors/plan", &zero, 0, 0);
        if (rc != CKPT_OK)
            break;
        Mpickpt__Tensor *t = f->tensors[before];
        /* Replace the single piece with this rank's stored pieces of the registration. */
        Mpickpt__Piece *proto = t->pieces[0];
        size_t n = 0;
        for (size_t j = 0; j < s->npieces; j++)
            n += s->pieces[j].reg == i;
        Mpickpt__Piece **pp = malloc((n ? n : 1) * sizeof *pp);
        if (!pp)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        size_t k = 0;
        for (size_t j = 0; j < s->npieces && rc == CKPT_OK; j++) {
            if (s->pieces[j].reg != i)
                continue;
            Mpickpt__Piece *p = malloc(sizeof *p);
            int64_t *a = malloc(sizeof(int64_t) * (size_t)(g->shape.ndims ? g->shape.ndims : 1));
            int64_t *b = malloc(sizeof(int64_t) * (size_t)(g->shape.ndims ? g->shape.ndims : 1));
            int64_t *c = calloc((size_t)(g->shape.ndims ? g->shape.ndims : 1), sizeof(int64_t));
            char *fn = xstrdup(file), *ds = xstrdup("/tensors/plan");
            if (!p || !a || !b || !c || !fn || !ds) {
                free(p), free(a), free(b), free(c), free(fn), free(ds);
                rc = ckpt__error(CKPT_ENOMEM, "out of memory");
                break;
            }
            *p = *proto;
            memcpy(a, s->pieces[j].slice.start, sizeof(int64_t) * (size_t)g->shape.ndims);
            memcpy(b, s->pieces[j].slice.count, sizeof(int64_t) * (size_t)g->shape.ndims);
            p->start = a;
            p->count = b;
            p->dataset_start = c;
            p->file = fn;
            p->dataset = ds;
            int64_t ne;
            ckpt_slice_num_elements(&ne, &s->pieces[j].slice);
            p->bytes = (uint64_t)ne * ckpt_dtype_size(g->dtype);
            pp[k++] = p;
        }
        /* free the prototype piece (built by ckpt__fragment_add) */
        free(proto->start), free(proto->count), free(proto->dataset_start);
        free(proto->file), free(proto->dataset), free(proto);
        free(t->pieces);
        t->pieces = pp;
        t->n_pieces = k;
    }
    return rc;
}

/* Frees fragments unpacked by allgather_fragments() or gather_fragments(): the array, and the
 * arena that holds the messages (protobuf-c's unpack otherwise makes ~10 mallocs per piece). */
static void free_frags(Mpickpt__Fragment **f, ckpt__arena *arena)
{
    free(f);
    ckpt__arena_free(arena);
}

/* Packs `f`, allgathers every rank's bytes, unpacks them into `*out` (n = size), allocated from
 * `*arena`: free with free_frags(*out, *arena). Collective.
 * `local` is this rank's status so far: a failed rank still joins with an empty contribution. */
static int allgather_fragments(ckpt_saver *s, MPI_Comm comm, const Mpickpt__Fragment *f, int local,
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
        free_frags(frags, a);
        frags = NULL;
        a = NULL;
    }
    *out = frags;
    *arena = a;
    rc = local2; /* identical inputs on every rank: the outcome is identical too */
done:
    free(buf);
    free(lens);
    free(displs);
    free(all);
    return rc;
}

/* Validates that every rank registered each replicated primary (same dtype/shape is checked by
 * the merge). Same inputs on every rank, so the same verdict everywhere. */
static int check_replicated(ckpt_saver *s)
{
    size_t n = s->plan.n_tensors;
    int *count = calloc(n ? n : 1, sizeof *count);
    if (!count)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t f = 0; f < s->plan_nfrags; f++)
        for (size_t i = 0; i < s->plan_frags[f]->n_tensors; i++) {
            const Mpickpt__Tensor *t = s->plan_frags[f]->tensors[i];
            if (t->kind != MPICKPT__KIND__KIND_REPLICATED)
                continue;
            Mpickpt__Tensor **hit = bsearch(t->name, s->plan.tensors, n, sizeof *s->plan.tensors,
                                            cmp_tensor_name);
            if (hit)
                count[hit - s->plan.tensors]++;
        }
    int rc = CKPT_OK;
    for (size_t i = 0; i < n; i++)
        if (s->plan.tensors[i]->kind == MPICKPT__KIND__KIND_REPLICATED && count[i] != s->size) {
            rc = ckpt__error(CKPT_EMISMATCH,
                             "replicated tensor '%s' is registered on %d of %d ranks (every rank "
                             "must register a replicated tensor)",
                             s->plan.tensors[i]->name, count[i], s->size);
            break;
        }
    free(count);
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
    free_plan(s);
    Mpickpt__Fragment mine = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    mine.rank = s->rank;
    if (local == CKPT_OK)
        local = build_pieces(s);
    if (local == CKPT_OK)
        local = plan_fragment(s, &mine, &cap);
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *arena = NULL;
    int rc = allgather_fragments(s, s->comm, &mine, local, &frags, &arena);
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
        rc = check_replicated(s);
    s->plan.header = NULL;
    if (rc != CKPT_OK)
        ckpt__error_wrap(rc, "plan");
    /* Every rank validated the same plan, but agree anyway: the tiling check is randomized (a
     * wrong plan could in principle pass on one rank only) and no rank may go on alone. */
    if ((rc = ckpt_mpi_agree(s->comm, rc)) != CKPT_OK) {
        free_plan(s);
        return rc;
    }
    s->have_plan = 1;
    s->dirty = 0;
    return CKPT_OK;
}

/* ---- write ------------------------------------------------------------------------------------- */

/*
 * Where a save goes. Every file is reached by descriptor (lib/fsutil.h): dirfd is the checkpoint's
 * directory, workfd the directory holding workertemp_<r> (the parent of a directory named chief),
 * tempfd this rank's in-flight directory: <base>_temp in dirfd for the chief (and, in the shared
 * layout, for every rank: the shared file is made there), workertemp_<rank> in workfd for the
 * others. Paths are kept for messages only.
 */
typedef struct save_ctx {
    char prefix[4096];
    char dir[4096];
    char work[4096];
    char base[256];
    char chief_temp[4200];  /* <prefix>_temp, for messages */
    char temp_name[256];    /* <base>_temp */
    char my_temp[4400];     /* this rank's in-flight directory, for messages */
    char my_temp_name[256]; /* its name in workfd (non-chief, per-rank layout) */
    char my_file[4700];     /* this rank's data file (per-rank) or the shared file, in temp */
    char data_name[320];    /* final name of this rank's data file (per-rank) or the shared file */
    char reserve_name[64];  /* the space reservation in tempfd */
    char pad_name[64];      /* room for HDF5's metadata flush in tempfd (ckpt__pad_create) */
    int dirfd, workfd, tempfd;
    Mpickpt__Fragment frag; /* this rank's index fragment */
    size_t cap;
    MPI_Comm comm;          /* the saver's (sync) or its writer thread's (async) communicator */
    const void **src;       /* per registration: where its bytes are read from */
    /* blobs produced by the registered savers for this save */
    const void **blob_data;
    size_t *blob_len;
} save_ctx;

/* The shape (a uint8 vector of its length) and whole slice of registered saver i's bytes. */
static void blob_box(const save_ctx *c, size_t i, ckpt_shape *sh, ckpt_slice *full)
{
    int64_t n = (int64_t)c->blob_len[i];
    ckpt_shape_init(sh, 1, &n);
    ckpt_slice_full(full, sh);
}

/* <work>: the parent of <dir> when <dir> is named "chief", else <dir> (ckpt__ckptdir_open). */
static int work_dir(char *out, size_t size, const char *dir)
{
    const char *slash = strrchr(dir, '/');
    const char *last = slash ? slash + 1 : dir;
    if (strcmp(last, "chief") == 0)
        return slash ? ckpt__path(out, size, "%.*s", (int)(slash - dir ? slash - dir : 1), dir)
                     : ckpt__path(out, size, ".");
    return ckpt__path(out, size, "%s", dir);
}

static int init_ctx(ckpt_saver *s, save_ctx *c, const char *prefix)
{
    memset(c, 0, sizeof *c);
    c->dirfd = c->workfd = c->tempfd = -1;
    mpickpt__fragment__init(&c->frag);
    c->frag.rank = s->rank;
    char base[4096];
    int rc;
    if ((rc = ckpt__path(c->prefix, sizeof c->prefix, "%s", prefix)) ||
        (rc = ckpt__split_path(c->dir, sizeof c->dir, base, sizeof base, prefix)))
        return rc;
    if (!ckpt__safe_filename(base) || strlen(base) > 200)
        return ckpt__error(CKPT_EINVAL, "checkpoint prefix '%s' needs a file name part of 1..200 "
                                        "bytes",
                           prefix);
    snprintf(c->base, sizeof c->base, "%s", base);
    snprintf(c->temp_name, sizeof c->temp_name, "%s_temp", base);
    snprintf(c->my_temp_name, sizeof c->my_temp_name, "workertemp_%d", s->rank);
    snprintf(c->reserve_name, sizeof c->reserve_name, ".reserve-%d", s->rank);
    snprintf(c->pad_name, sizeof c->pad_name, ".pad-%d", s->rank);
    if ((rc = ckpt__path(c->chief_temp, sizeof c->chief_temp, "%s_temp", prefix)) ||
        (rc = work_dir(c->work, sizeof c->work, c->dir)))
        return rc;
    if (s->rank == 0)
        rc = ckpt__path(c->my_temp, sizeof c->my_temp, "%s", c->chief_temp);
    else
        rc = ckpt__path(c->my_temp, sizeof c->my_temp, "%s/%s", c->work, c->my_temp_name);
    if (rc)
        return rc;
    if (s->layout == CKPT_LAYOUT_SHARED) {
        if ((rc = ckpt__path(c->data_name, sizeof c->data_name, "%s.data-00000-of-00001", base)) ||
            (rc = ckpt__path(c->my_file, sizeof c->my_file, "%s/%s", c->chief_temp, c->data_name)))
            return rc;
    } else {
        if ((rc = ckpt__path(c->data_name, sizeof c->data_name, "%s.data-%05d-of-%05d", base,
                             s->rank, s->size)) ||
            (rc = ckpt__path(c->my_file, sizeof c->my_file, "%s/%s", c->my_temp, c->data_name)))
            return rc;
    }
    /* The directories exist from here on; a chief/ that is a link is refused. */
    if ((rc = ckpt__ckptdir_open(&c->dirfd, &c->workfd, c->dir, 1)) != CKPT_OK)
        return rc;
    c->comm = s->comm;
    c->src = calloc(s->nregs ? s->nregs : 1, sizeof *c->src);
    c->blob_data = calloc(s->nregs ? s->nregs : 1, sizeof *c->blob_data);
    c->blob_len = calloc(s->nregs ? s->nregs : 1, sizeof *c->blob_len);
    if (!c->src || !c->blob_data || !c->blob_len)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->nregs; i++)
        c->src[i] = s->regs[i].data;
    return CKPT_OK;
}

static void free_ctx(save_ctx *c)
{
    ckpt__close(c->tempfd);
    ckpt__close(c->workfd);
    ckpt__close(c->dirfd);
    c->tempfd = c->workfd = c->dirfd = -1;
    ckpt__fragment_free_built(&c->frag);
    free(c->src);
    free(c->blob_data);
    free(c->blob_len);
    c->src = NULL;
    c->blob_data = NULL;
    c->blob_len = NULL;
}

/* Pointer to the bytes of `box` inside registration g's buffer when they are contiguous there,
 * else NULL (the caller copies them out). */
static const void *contiguous_in(const reg *g, const void *base, const ckpt_slice *box)
{
    int nd = g->slice.ndims, d = 0;
    while (d < nd && box->count[d] == 1 && g->slice.count[d] != 1)
        d++;
    /* axes after the first partial one must be whole */
    for (int e = d + 1; e < nd; e++)
        if (box->count[e] != g->slice.count[e])
            return NULL;
    size_t esize = ckpt_dtype_size(g->dtype);
    uint64_t off = 0;
    for (int e = 0; e < nd; e++)
        off = off * (uint64_t)g->slice.count[e] + (uint64_t)(box->start[e] - g->slice.start[e]);
    return (const uint8_t *)base + off * esize;
}

/* Bytes of piece p, contiguous: a pointer into the registration's buffer or into scratch. */
static int piece_bytes(ckpt_saver *s, const save_ctx *c, const piece *p, const void **out,
                       size_t *len)
{
    const reg *g = &s->regs[p->reg];
    const void *data = c->src[p->reg];
    int64_t n;
    ckpt_slice_num_elements(&n, &p->slice);
    size_t esize = ckpt_dtype_size(g->dtype);
    *len = (size_t)n * esize;
    if (n == 0) {
        *out = data ? data : (const void *)"";
        return CKPT_OK;
    }
    if (ckpt_slice_equal(&p->slice, &g->slice)) {
        *out = data;
        return CKPT_OK;
    }
    const void *direct = contiguous_in(g, data, &p->slice);
    if (direct) {
        *out = direct;
        return CKPT_OK;
    }
    if (*len > s->scratch_size) {
        void *ns = realloc(s->scratch, *len);
        if (!ns)
            return ckpt__error(CKPT_ENOMEM, "out of memory");
        s->scratch = ns;
        s->scratch_size = *len;
    }
    int rc = ckpt_slice_copy(s->scratch, &p->slice, data, &g->slice, &p->slice, esize);
    *out = s->scratch;
    return rc;
}

/* Bytes of this rank's piece j. */
static size_t piece_len(const ckpt_saver *s, size_t j)
{
    int64_t n;
    ckpt_slice_num_elements(&n, &s->pieces[j].slice);
    return (size_t)n * ckpt_dtype_size(s->regs[s->pieces[j].reg].dtype);
}

/* Packed pieces are copied into a staging buffer of this size and written one buffer at a time. */
#define PACK_STAGE ((size_t)4 << 20)

/* The packed pieces of one save: one uint8 dataset, filled through the staging buffer. */
typedef struct pack_writer {
    hid_t dset;
    char path[64];
    uint64_t total;   /* dataset size: every packed piece's bytes */
    uint64_t flushed; /* bytes of the dataset written so far */
    size_t fill;      /* bytes staged after `flushed` */
} pack_writer;

static int pack_piece(const ckpt_saver *s, size_t len)
{
    return s->opts.pack_max_bytes > 0 && (uint64_t)len <= (uint64_t)s->opts.pack_max_bytes;
}

static int pack_flush(ckpt_saver *s, pack_writer *pw)
{
    if (pw->fill == 0)
        return CKPT_OK;
    ckpt_slice sel = { 1, { (int64_t)pw->flushed }, { (int64_t)pw->fill } };
    errno = 0;
    int rc = ckpt__h5_write(pw->dset, CKPT_UINT8, &sel, s->pack_buf, H5P_DEFAULT);
    pw->flushed += pw->fill;
    pw->fill = 0;
    return rc;
}

/* Copies piece p (len bytes at `bytes`) into the pack and records it in the fragment. */
static int pack_add(ckpt_saver *s, save_ctx *c, pack_writer *pw, const piece *p,
                    const void *bytes, size_t len)
{
    const reg *g = &s->regs[p->reg];
    uint64_t off = pw->flushed + pw->fill;
    uint32_t crc = 0;
    int rc = CKPT_OK;
    if (len > PACK_STAGE - pw->fill && (rc = pack_flush(s, pw)) != CKPT_OK)
        return rc;
    if (len <= PACK_STAGE) {
        memcpy(s->pack_buf + pw->fill, bytes, len);
        crc = ckpt_crc32c(s->pack_buf + pw->fill, len); /* of the copy, while it is in cache */
        pw->fill += len;
    } else { /* a pack limit above the staging size: written straight from the source */
        ckpt_slice sel = { 1, { (int64_t)off }, { (int64_t)len } };
        if ((rc = ckpt__h5_write(pw->dset, CKPT_UINT8, &sel, bytes, H5P_DEFAULT)) != CKPT_OK)
            return rc;
        pw->flushed += len;
        crc = ckpt_crc32c(bytes, len);
    }
    ckpt_slice zero = p->slice;
    for (int d = 0; d < zero.ndims; d++)
        zero.start[d] = 0;
    rc = ckpt__fragment_add(&c->frag, &c->cap, g->stored, g->dtype, &g->shape, g->kind, &p->slice,
                            c->data_name, pw->path, &zero, (uint64_t)len, crc);
    if (rc == CKPT_OK) {
        Mpickpt__Piece *pc = c->frag.tensors[c->frag.n_tensors - 1]->pieces[0];
        pc->packed = 1;
        pc->pack_offset = off;
    }
    return rc;
}

/* Creates this save's pack dataset when some pieces are small enough to be packed. */
static int pack_open(ckpt_saver *s, pack_writer *pw, hid_t file)
{
    memset(pw, 0, sizeof *pw);
    pw->dset = H5I_INVALID_HID;
    snprintf(pw->path, sizeof pw->path, "/packs/rank-%d", s->rank);
    for (size_t j = 0; j < s->npieces; j++)
        if (pack_piece(s, piece_len(s, j)))
            pw->total += piece_len(s, j);
    if (pw->total == 0)
        return CKPT_OK;
    if (!s->pack_buf && !(s->pack_buf = malloc(PACK_STAGE)))
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    int64_t total = (int64_t)pw->total;
    ckpt_shape sh;
    ckpt_slice full;
    ckpt_shape_init(&sh, 1, &total);
    ckpt_slice_full(&full, &sh);
    return ckpt__h5_create_dataset(&pw->dset, file, pw->path, "(packed pieces)", CKPT_UINT8, &sh,
                                   &full);
}

static int fd_size(uint64_t *size, int fd, const char *shown)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ckpt__errno(errno, "stat", shown);
    *size = (uint64_t)st.st_size;
    return CKPT_OK;
}

/* 1 when the file system of dirfd has (almost) no room left: how a full disk is recognised behind
 * an MPI-IO error, which does not carry errno. */
static int disk_full(int dirfd)
{
    struct statvfs v;
    if (fstatvfs(dirfd, &v) != 0)
        return 0;
    return (uint64_t)v.f_bavail * v.f_frsize < ((uint64_t)1 << 20);
}

/* Room for the metadata HDF5 writes when it flushes a file of this save (see ckpt__pad_create):
 * per dataset an object header, three attributes (two naming the tensor) and its link; `all`
 * counts every dataset of the plan (the shared file), else only this rank's. Generous: it is
 * held only while the file is written. */
static uint64_t metadata_room(const ckpt_saver *s, int all)
{
    uint64_t room = (uint64_t)256 << 10;
    if (all) {
        for (size_t i = 0; i < s->plan.n_tensors; i++)
            room += 4096 + 3 * (uint64_t)strlen(s->plan.tensors[i]->name);
        room += (uint64_t)s->size * 4096; /* a blob per rank, at most a few */
    } else {
        for (size_t j = 0; j < s->npieces; j++)
            if (!pack_piece(s, piece_len(s, j)))
                room += 4096 + 3 * (uint64_t)strlen(s->regs[s->pieces[j].reg].stored);
    }
    for (size_t i = 0; i < s->nregs; i++)
        if (s->regs[i].kind == CKPT_KIND_BLOB)
            room += 4096 + 3 * (uint64_t)strlen(s->regs[i].stored);
    return room;
}

/* Per-rank layout: this rank writes its own file with no collective HDF5 call. */
static int write_per_rank(ckpt_saver *s, save_ctx *c)
{
    int rc, fd;
    char h5path[4800];
    /* A file left by a crashed save goes first; the new one is ours alone (O_EXCL), and HDF5
     * reaches it through the descriptor. */
    if ((rc = ckpt__rmtree_at(c->tempfd, c->data_name, c->my_temp)) ||
        (rc = ckpt__file_create(&fd, c->tempfd, c->data_name, O_RDWR, c->my_temp)))
        return ckpt__error_wrap(rc, "rank %d", s->rank);
    int pad = -1;
    if ((rc = ckpt__fd_path(h5path, sizeof h5path, fd, c->my_file)) != CKPT_OK ||
        (rc = ckpt__pad_create(&pad, c->tempfd, c->pad_name, metadata_room(s, 0), c->my_temp))) {
        close(fd);
        return ckpt__error_wrap(rc, "rank %d", s->rank);
    }
    ckpt__h5_init();
    errno = 0;
    hid_t file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        rc = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: create %s",
                            s->rank, c->my_file);
        ckpt__pad_release(c->tempfd, c->pad_name, pad);
        close(fd);
        return rc;
    }
    char path[16384];
    pack_writer pw;
    rc = pack_open(s, &pw, file);
    for (size_t j = 0; j < s->npieces && rc == CKPT_OK; j++) {
        const piece *p = &s->pieces[j];
        const reg *g = &s->regs[p->reg];
        int whole = ckpt_slice_is_full(&p->slice, &g->shape);
        const void *bytes;
        size_t len;
        hid_t dset;
        ckpt_slice zero = p->slice;
        for (int d = 0; d < zero.ndims; d++)
            zero.start[d] = 0;
        if ((rc = piece_bytes(s, c, p, &bytes, &len)) != CKPT_OK)
            break;
        if (pw.dset >= 0 && pack_piece(s, len)) {
            rc = pack_add(s, c, &pw, p, bytes, len);
            continue;
        }
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, whole ? NULL : &p->slice)) ||
            (rc = ckpt__h5_create_dataset(&dset, file, path, g->stored, g->dtype, &g->shape,
                                          &p->slice)))
            break;
        errno = 0;
        rc = ckpt__h5_write(dset, g->dtype, &zero, bytes, H5P_DEFAULT);
        H5Dclose(dset);
        if (rc != CKPT_OK)
            break;
        rc = ckpt__fragment_add_data(&c->frag, &c->cap, g->stored, g->dtype, &g->shape, g->kind,
                                     &p->slice, c->data_name, path, &zero, bytes, len);
    }
    if (pw.dset >= 0) {
        if (rc == CKPT_OK)
            rc = pack_flush(s, &pw);
        H5Dclose(pw.dset);
    }
    /* registered savers' bytes */
    for (size_t i = 0; i < s->nregs && rc == CKPT_OK; i++) {
        const reg *g = &s->regs[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt_shape sh;
        ckpt_slice full;
        blob_box(c, i, &sh, &full);
        hid_t dset;
        if ((rc = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) ||
            (rc = ckpt__h5_create_dataset(&dset, file, path, g->stored, CKPT_UINT8, &sh, &full)))
            break;
        rc = ckpt__h5_write(dset, CKPT_UINT8, &full, c->blob_data[i], H5P_DEFAULT);
        H5Dclose(dset);
        if (rc == CKPT_OK)
            rc = ckpt__fragment_add(&c->frag, &c->cap, g->stored, CKPT_UINT8, &sh, CKPT_KIND_BLOB,
                                    &full, c->data_name, path, &full, c->blob_len[i],
                                    ckpt_crc32c(c->blob_data[i], c->blob_len[i]));
    }
    if (rc == CKPT_OK)
        rc = ckpt__fault(s->rank, "write");
    /* The flush at close gets the pad's room back; after a failure HDF5's descriptor is moved off
     * the disk first, so that the close can neither fail nor leave HDF5 unable to exit. */
    ckpt__pad_release(c->tempfd, c->pad_name, pad);
    if (rc != CKPT_OK)
        ckpt__h5_detach_file(file);
    errno = 0;
    if (H5Fclose(file) < 0 && rc == CKPT_OK)
        rc = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: close %s", s->rank,
                            c->my_file);
    uint64_t size = 0;
    if (rc == CKPT_OK && !(rc = ckpt__fsync_fd(fd, c->my_file)) &&
        !(rc = fd_size(&size, fd, c->my_file)))
        rc = ckpt__fragment_add_file(&c->frag, c->data_name, size);
    close(fd);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d: write %s", s->rank, c->my_file);
    return CKPT_OK;
}

/* A dataset of the shared file: name, dtype, global shape, and (for a blob) its owner. */
typedef struct shared_ds {
    const char *name;
    ckpt_dtype dtype;
    ckpt_shape shape;
    int blob_owner; /* -1 unless a blob */
    hid_t id;
} shared_ds;

static int cmp_shared_ds(const void *a, const void *b)
{
    return strcmp(((const shared_ds *)a)->name, ((const shared_ds *)b)->name);
}

/* Every rank's blob names and sizes for this save (the shared file's datasets must be created by
 * all ranks alike). Collective. Returns a fragment per rank with one tensor per blob, in *arena
 * (free with free_frags). */
static int gather_blobs(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Fragment ***out,
                        ckpt__arena **arena)
{
    Mpickpt__Fragment f = MPICKPT__FRAGMENT__INIT;
    size_t cap = 0;
    f.rank = s->rank;
    char file[32];
    snprintf(file, sizeof file, "blobs-%d", s->rank);
    for (size_t i = 0; i < s->nregs && local == CKPT_OK; i++) {
        const reg *g = &s->regs[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt_shape sh;
        ckpt_slice full;
        blob_box(c, i, &sh, &full);
        local = ckpt__fragment_add(&f, &cap, g->stored, CKPT_UINT8, &sh, CKPT_KIND_BLOB, &full,
                                   file, "/tensors/blob", &full, (uint64_t)c->blob_len[i], 0);
    }
    int rc = allgather_fragments(s, c->comm, &f, local, out, arena);
    ckpt__fragment_free_built(&f);
    return rc;
}

/*
 * Shared layout: all ranks create one file with the MPI-IO driver and every dataset collectively
 * (same order on every rank: the plan is sorted by name), then write their hyperslabs. A rank that
 * fails keeps joining the collective calls (skipping its own writes), so nobody hangs; its status
 * is agreed afterwards.
 */
static int write_shared(ckpt_saver *s, save_ctx *c, Mpickpt__Fragment **blobs)
{
    int rc = CKPT_OK;
    size_t nblobs = 0;
    for (int r = 0; r < s->size; r++)
        nblobs += blobs[r]->n_tensors;
    size_t nds = s->plan.n_tensors + nblobs;
    shared_ds *ds = calloc(nds ? nds : 1, sizeof *ds);
    if (!ds)
        rc = ckpt__error(CKPT_ENOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; ds && i < s->plan.n_tensors; i++, k++) {
        const Mpickpt__Tensor *t = s->plan.tensors[i];
        ds[k].name = t->name;
        ds[k].dtype = (ckpt_dtype)t->dtype;
        ckpt_shape_init(&ds[k].shape, (int)t->n_shape, t->shape);
        ds[k].blob_owner = -1;
        ds[k].id = H5I_INVALID_HID;
    }
    for (int r = 0; ds && r < s->size; r++)
        for (size_t i = 0; i < blobs[r]->n_tensors; i++, k++) {
            const Mpickpt__Tensor *t = blobs[r]->tensors[i];
            ds[k].name = t->name;
            ds[k].dtype = CKPT_UINT8;
            ckpt_shape_init(&ds[k].shape, (int)t->n_shape, t->shape);
            ds[k].blob_owner = r;
            ds[k].id = H5I_INVALID_HID;
        }
    if (ds)
        qsort(ds, nds, sizeof *ds, cmp_shared_ds);
    /* The identical sorted list on every rank; an allocation failure is agreed before HDF5. */
    if ((rc = ckpt_mpi_agree(c->comm, rc)) != CKPT_OK) {
        free(ds);
        return rc;
    }

    /* The chief creates the file (O_EXCL, in its own temp dir); then every rank opens that file by
     * descriptor and hands MPI-IO its /proc/self/fd name, so no rank can be sent elsewhere. */
    int fd = -1, pad = -1, local = CKPT_OK;
    char h5path[4800];
    if (s->rank == 0 && (local = ckpt__rmtree_at(c->tempfd, c->data_name, c->chief_temp)) == CKPT_OK)
        local = ckpt__file_create(&fd, c->tempfd, c->data_name, O_RDWR, c->chief_temp);
    if (s->rank == 0 && local == CKPT_OK) /* room for the metadata flush (ckpt__pad_create) */
        local = ckpt__pad_create(&pad, c->tempfd, c->pad_name, metadata_room(s, 1), c->chief_temp);
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        ckpt__pad_release(c->tempfd, c->pad_name, pad);
        ckpt__close(fd);
        free(ds);
        return rc;
    }
    if (s->rank != 0)
        local = ckpt__file_open(&fd, NULL, c->tempfd, c->data_name, O_RDWR, c->chief_temp);
    if (local == CKPT_OK)
        local = ckpt__fd_path(h5path, sizeof h5path, fd, c->my_file);
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        ckpt__pad_release(c->tempfd, c->pad_name, pad);
        ckpt__close(fd);
        free(ds);
        return rc;
    }
    ckpt__h5_init();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, c->comm, s->opts.info);
    H5Pset_all_coll_metadata_ops(fapl, 1);
    H5Pset_coll_metadata_write(fapl, 1);
    errno = 0;
    hid_t file = H5Fcreate(h5path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    local = file < 0 ? ckpt__h5_error(CKPT_EIO, "rank %d: create shared file %s", s->rank,
                                      c->my_file)
                     : CKPT_OK;
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK) {
        if (file >= 0)
            H5Fclose(file);
        ckpt__pad_release(c->tempfd, c->pad_name, pad);
        ckpt__close(fd);
        free(ds);
        return rc;
    }
    char path[16384];
    for (size_t i = 0; i < nds; i++) {
        ckpt_slice full;
        ckpt_slice_full(&full, &ds[i].shape);
        int r = ckpt__h5_dataset_path(path, sizeof path, ds[i].name, NULL);
        if (r == CKPT_OK)
            r = ckpt__h5_create_dataset(&ds[i].id, file, path, ds[i].name, ds[i].dtype,
                                        &ds[i].shape, &full);
        if (r != CKPT_OK && local == CKPT_OK)
            local = r;
    }
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(dxpl, s->opts.collective_io ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    if (s->opts.collective_io) {
        /* Every rank calls H5Dwrite the same number of times per dataset: the most pieces any
         * rank stores in it (from the plan), with empty selections for the calls it does not need. */
        for (size_t i = 0; i < nds; i++) {
            size_t calls = 0, mine = 0;
            if (ds[i].blob_owner >= 0) {
                calls = 1;
            } else {
                Mpickpt__Tensor **hit = bsearch(ds[i].name, s->plan.tensors, s->plan.n_tensors,
                                                sizeof *s->plan.tensors, cmp_tensor_name);
                size_t *per = calloc((size_t)s->size, sizeof *per);
                for (size_t j = 0; hit && per && j < (*hit)->n_pieces; j++)
                    per[(*hit)->pieces[j]->rank]++;
                for (int r = 0; per && r < s->size; r++)
                    calls = per[r] > calls ? per[r] : calls;
                free(per);
            }
            for (size_t call = 0; call < calls; call++) {
                const void *bytes = "";
                ckpt_slice sel;
                ckpt_slice_full(&sel, &ds[i].shape);
                for (int d = 0; d < sel.ndims; d++)
                    sel.count[d] = 0;
                int have = 0;
                if (ds[i].blob_owner == s->rank) {
                    for (size_t g = 0; g < s->nregs; g++)
                        if (s->regs[g].kind == CKPT_KIND_BLOB &&
                            strcmp(s->regs[g].stored, ds[i].name) == 0) {
                            ckpt_slice_full(&sel, &ds[i].shape);
                            bytes = c->blob_data[g];
                            have = 1;
                        }
                } else if (ds[i].blob_owner < 0) {
                    for (size_t j = 0; j < s->npieces; j++) {
                        const reg *g = &s->regs[s->pieces[j].reg];
                        if (strcmp(g->stored, ds[i].name) != 0 || mine++ != call)
                            continue;
                        size_t len;
                        if (local == CKPT_OK)
                            local = piece_bytes(s, c, &s->pieces[j], &bytes, &len);
                        sel = s->pieces[j].slice;
                        have = 1;
                        break;
                    }
                    mine = 0;
                }
                if (!have || local != CKPT_OK) {
                    for (int d = 0; d < sel.ndims; d++)
                        sel.count[d] = 0;
                    if (sel.ndims == 0) { /* a scalar: select none through a 1-d empty box */
                        hid_t fs = H5Dget_space(ds[i].id), ms;
                        hsize_t one = 1;
                        ms = H5Screate_simple(1, &one, NULL);
                        H5Sselect_none(fs);
                        H5Sselect_none(ms);
                        if (H5Dwrite(ds[i].id, ckpt__h5_mem_type(ds[i].dtype), ms, fs, dxpl, "") <
                                0 &&
                            local == CKPT_OK)
                            local = ckpt__h5_error(CKPT_EIO, "rank %d: empty write", s->rank);
                        H5Sclose(ms);
                        H5Sclose(fs);
                        continue;
                    }
                }
                int r = ckpt__h5_write(ds[i].id, ds[i].dtype, &sel, bytes, dxpl);
                if (r != CKPT_OK && local == CKPT_OK)
                    local = r;
            }
        }
    } else {
        for (size_t j = 0; j < s->npieces && local == CKPT_OK; j++) {
            const reg *g = &s->regs[s->pieces[j].reg];
            shared_ds key = { g->stored, CKPT_DTYPE_INVALID, { 0, { 0 } }, 0, 0 };
            shared_ds *hit = bsearch(&key, ds, nds, sizeof *ds, cmp_shared_ds);
            const void *bytes;
            size_t len;
            if (!hit)
                local = ckpt__error(CKPT_ERROR, "tensor '%s' missing from the plan", g->stored);
            else if ((local = piece_bytes(s, c, &s->pieces[j], &bytes, &len)) == CKPT_OK)
                local = ckpt__h5_write(hit->id, g->dtype, &s->pieces[j].slice, bytes, dxpl);
        }
        for (size_t i = 0; i < s->nregs && local == CKPT_OK; i++) {
            const reg *g = &s->regs[i];
            if (g->kind != CKPT_KIND_BLOB)
                continue;
            shared_ds key = { g->stored, CKPT_DTYPE_INVALID, { 0, { 0 } }, 0, 0 };
            shared_ds *hit = bsearch(&key, ds, nds, sizeof *ds, cmp_shared_ds);
            ckpt_slice full;
            ckpt_slice_full(&full, &hit->shape);
            local = ckpt__h5_write(hit->id, CKPT_UINT8, &full, c->blob_data[i], dxpl);
        }
    }
    H5Pclose(dxpl);

    /* This rank's fragment: its pieces sit in the one global dataset at their own coordinates. */
    for (size_t j = 0; j < s->npieces && local == CKPT_OK; j++) {
        const piece *p = &s->pieces[j];
        const reg *g = &s->regs[p->reg];
        const void *bytes;
        size_t len;
        if ((local = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) ||
            (local = piece_bytes(s, c, p, &bytes, &len)))
            break;
        local = ckpt__fragment_add_data(&c->frag, &c->cap, g->stored, g->dtype, &g->shape,
                                        g->kind, &p->slice, c->data_name, path, &p->slice, bytes,
                                        len);
    }
    for (size_t i = 0; i < s->nregs && local == CKPT_OK; i++) {
        const reg *g = &s->regs[i];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        ckpt_shape sh;
        ckpt_slice full;
        blob_box(c, i, &sh, &full);
        if ((local = ckpt__h5_dataset_path(path, sizeof path, g->stored, NULL)) == CKPT_OK)
            local = ckpt__fragment_add(&c->frag, &c->cap, g->stored, CKPT_UINT8, &sh,
                                       CKPT_KIND_BLOB, &full, c->data_name, path, &full,
                                       c->blob_len[i], ckpt_crc32c(c->blob_data[i], c->blob_len[i]));
    }
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "write");
    for (size_t i = 0; i < nds; i++)
        if (ds[i].id >= 0)
            H5Dclose(ds[i].id);
    free(ds);
    /* MPI-IO reports a full disk as a plain I/O error: say what it was when the disk is full. */
    if (local == CKPT_ENOSPC || (local == CKPT_EIO && disk_full(c->tempfd)))
        local = ckpt__error_wrap(CKPT_ENOSPC, "rank %d: no space left on device in %s", s->rank,
                                 c->chief_temp);
    /* The metadata flush below gets the pad's room back (ckpt__pad_create), but only once every
     * rank is done writing data: with independent I/O a rank still writing on a full disk takes
     * every block the pad frees, the chief's metadata write then fails, its H5Fflush returns
     * before the collective MPI_File_sync the other ranks wait in, and the job hangs. */
    if (MPI_Barrier(c->comm) != MPI_SUCCESS && local == CKPT_OK)
        local = ckpt__error(CKPT_EMPI, "rank %d: MPI_Barrier before the metadata flush failed",
                            s->rank);
    ckpt__pad_release(c->tempfd, c->pad_name, pad);
    /* H5Fflush on an MPI-IO file is MPI_File_sync on every rank: the data is durable after it. */
    errno = 0;
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0 && local == CKPT_OK)
        local = ckpt__h5_error(errno == ENOSPC ? CKPT_ENOSPC : CKPT_EIO, "rank %d: flush %s",
                               s->rank, c->my_file);
    if (H5Fclose(file) < 0 && local == CKPT_OK)
        local = ckpt__h5_error(CKPT_EIO, "rank %d: close %s", s->rank, c->my_file);
    if (s->rank == 0 && local == CKPT_OK) {
        /* H5Fclose writes the superblock again after the flush's MPI_File_sync: the file is
         * durable only after one more fsync, before it can be committed. */
        uint64_t size = 0;
        if (!(local = ckpt__fsync_fd(fd, c->my_file)) && !(local = fd_size(&size, fd, c->my_file)))
            local = ckpt__fragment_add_file(&c->frag, c->data_name, size);
    }
    ckpt__close(fd);
    return local;
}

/* ---- merge and commit --------------------------------------------------------------------------- */

/* Gathers every rank's packed fragment at the chief. On the chief, *out receives them unpacked,
 * in *arena (free with free_frags).
 * Collective; a rank with local != OK sends nothing. Returns the gather's own status. */
static int gather_fragments(ckpt_saver *s, save_ctx *c, int local, Mpickpt__Fragment ***out,
                            ckpt__arena **arena)
{
    *out = NULL;
    *arena = NULL;
    size_t len = local == CKPT_OK ? mpickpt__fragment__get_packed_size(&c->frag) : 0;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        len = 0, local = ckpt__error(CKPT_ENOMEM, "out of memory");
    if (len > INT32_MAX)
        len = 0, local = ckpt__error(CKPT_EINVAL, "rank %d: index fragment too large", s->rank);
    if (len)
        mpickpt__fragment__pack(&c->frag, buf);
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
            free_frags(frags, a);
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

/*
 * The chief's commit: renames every data file into the checkpoint's directory, fsyncs it, then
 * writes the index (temp, fsync, rename, fsync dir) — the commit point. On failure it removes what
 * it renamed, so no data file without an index is left behind.
 */
static int chief_commit(ckpt_saver *s, save_ctx *c, Mpickpt__Index *idx)
{
    int rc = CKPT_OK;
    size_t done = 0;
    for (size_t i = 0; i < idx->n_files && rc == CKPT_OK; i++) {
        const char *name = idx->files[i]->name;
        char from[4600];
        int from_fd = c->tempfd, opened = -1;
        if (s->layout == CKPT_LAYOUT_PER_RANK) {
            /* the file of rank r is <base>.data-<r>-of-<n>, in rank r's temp dir */
            int r = 0;
            const char *p = name + strlen(c->base);
            if (sscanf(p, ".data-%d-of-", &r) != 1 || r < 0 || r >= s->size) {
                rc = ckpt__error(CKPT_ECORRUPT, "unexpected data file name '%s'", name);
                break;
            }
            if (r != 0) {
                char wt[64];
                snprintf(wt, sizeof wt, "workertemp_%d", r);
                if ((rc = ckpt__subdir_open(&opened, c->workfd, wt, 0, c->work)) != CKPT_OK)
                    break;
                from_fd = opened;
            }
        }
        /* renameat moves the entry itself: a link planted under the target name is replaced */
        if (renameat(from_fd, name, c->dirfd, name) != 0) {
            snprintf(from, sizeof from, "%s (from a temp dir)", name);
            rc = ckpt__errno(errno, "rename into place", from);
        } else {
            done++;
        }
        ckpt__close(opened);
    }
    if (rc == CKPT_OK)
        rc = ckpt__fsync_fd(c->dirfd, c->dir);
    if (rc == CKPT_OK)
        rc = ckpt__fault(s->rank, "commit");
    if (rc == CKPT_OK) {
        char iname[300];
        if (!(rc = ckpt__path(iname, sizeof iname, "%s.index", c->base)))
            rc = ckpt__index_store_merged_at(idx, c->dirfd, iname, c->dir); /* validated by the merge */
    }
    if (rc != CKPT_OK)
        for (size_t i = 0; i < done; i++)
            unlinkat(c->dirfd, idx->files[i]->name, 0);
    return rc;
}

/* Removes this rank's in-flight files of the save. */
static void cleanup_temp(ckpt_saver *s, save_ctx *c)
{
    if (s->rank == 0) {
        if (c->dirfd >= 0 && c->tempfd >= 0) /* only a temp dir this save made */
            ckpt__rmtree_at(c->dirfd, c->temp_name, c->dir);
    } else if (s->layout == CKPT_LAYOUT_PER_RANK && c->tempfd >= 0) {
        unlinkat(c->tempfd, c->data_name, 0);
        unlinkat(c->tempfd, c->reserve_name, 0);
        /* only if empty: never touch what is not ours */
        unlinkat(c->workfd, c->my_temp_name, AT_REMOVEDIR);
    } else if (c->tempfd >= 0) {
        unlinkat(c->tempfd, c->reserve_name, 0);
    }
}

/* Every rank adopts the chief's prefix: ranks whose own view of the path differs (a stale mount,
 * a relative path from another working directory) still write and read the same checkpoint. */
static int bcast_prefix(ckpt_saver *s, const char *prefix, char *out, size_t size)
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

/* The chief's checks before a save: the checkpoint must not exist, and its <base>_temp dir is made
 * anew (leftovers of a crashed save with the same prefix are garbage). A <base>_temp that is not a
 * directory (a planted link) is refused, not followed or silently replaced. */
static int chief_temp_fresh(save_ctx *c)
{
    char iname[300];
    int rc = ckpt__path(iname, sizeof iname, "%s.index", c->base);
    if (rc != CKPT_OK)
        return rc;
    if (ckpt__exists_at(c->dirfd, iname))
        return ckpt__error(CKPT_EEXISTS, "checkpoint %s.index already exists", c->prefix);
    struct stat st;
    if (fstatat(c->dirfd, c->temp_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
        return ckpt__error(CKPT_ECORRUPT,
                           "refusing to use %s: it is %s, not a directory (mpickpt never follows "
                           "links inside a checkpoint directory; remove it)",
                           c->chief_temp, ckpt__file_kind(st.st_mode));
    if ((rc = ckpt__rmtree_at(c->dirfd, c->temp_name, c->dir)) != CKPT_OK)
        return rc;
    return ckpt__subdir_open(&c->tempfd, c->dirfd, c->temp_name, 1, c->dir);
}

/* ---- save jobs: prepared on the caller's thread, written inline or by the writer thread ------ */

struct save_job {
    ckpt_saver *s;
    save_ctx c;
    ckpt_save_info info;
    int64_t counter;
    ckpt__commit_hook hook;
    void *hook_payload;
    double t_start, t_block;           /* caller's clock: start of save, time it blocked */
    double since_prev;                  /* from the previous save's start to this one's */
    double t_write, t_agree, t_merge, t_commit;
    uint64_t bytes;                     /* this rank's stored bytes */
    int result;
    char message[2048];                 /* the writer thread's error message */
};

static void free_job(save_job *j)
{
    if (!j)
        return;
    free_ctx(&j->c);
    free(j);
}

/* Snapshot buffers for async saves: one per registration (and per blob), allocated once and reused
 * while the plan holds; a registration's buffer is what its save reads. */
static int snapshot(ckpt_saver *s, save_job *j)
{
    if (s->snap_n != s->nregs) {
        for (size_t i = 0; i < s->snap_n; i++)
            free(s->snap[i]);
        free(s->snap);
        free(s->snap_cap);
        s->snap = calloc(s->nregs ? s->nregs : 1, sizeof *s->snap);
        s->snap_cap = calloc(s->nregs ? s->nregs : 1, sizeof *s->snap_cap);
        s->snap_n = s->snap && s->snap_cap ? s->nregs : 0;
        if (!s->snap || !s->snap_cap)
            return ckpt__error(CKPT_ENOMEM, "out of memory for snapshot buffers");
    }
    for (size_t i = 0; i < s->nregs; i++) {
        const reg *g = &s->regs[i];
        size_t need;
        if (g->kind == CKPT_KIND_BLOB) {
            need = j->c.blob_len[i];
        } else {
            int64_t n;
            ckpt_slice_num_elements(&n, &g->slice);
            need = (size_t)n * ckpt_dtype_size(g->dtype);
        }
        if (need > s->snap_cap[i]) {
            /* Grow (first save, or a blob got bigger); touch the pages now, not mid-copy. */
            void *nb = realloc(s->snap[i], need);
            if (!nb)
                return ckpt__error(CKPT_ENOMEM, "rank %d: cannot allocate %zu snapshot bytes",
                                   s->rank, need);
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
    return CKPT_OK;
}

/* Appends one JSON line describing the save to <dir>/metrics.jsonl (chief only, best effort). */
static void write_metrics(const save_job *j, const double *mx, uint64_t bytes)
{
    int fd;
    if (ckpt__file_open_append(&fd, j->c.dirfd, "metrics.jsonl", j->c.dir) != CKPT_OK) {
        ckpt_error_clear(); /* best effort */
        return;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) {
        close(fd);
        return;
    }
    double busy = mx[1] + mx[2] + mx[3] + mx[4];
    double since = j->since_prev;
    /* The prefix is the caller's bytes: escaped, and made valid UTF-8, or the line is no JSON. */
    fputs("{\"prefix\":", f);
    ckpt__json_write_string(f, j->c.base);
    fprintf(f,
            ",\"mode\":\"%s\",\"bytes\":%llu,\"ranks\":%d,\"blocking_s\":%.6f,"
            "\"write_s\":%.6f,\"agree_s\":%.6f,\"merge_s\":%.6f,\"commit_s\":%.6f,"
            "\"gbps\":%.4f,\"since_prev_s\":%.6f,\"training_time_saved_s\":%.6f,"
            "\"timestamp\":%.3f}\n",
            j->s->async ? "async" : "sync", (unsigned long long)bytes, j->s->size, mx[0],
            mx[1], mx[2], mx[3], mx[4], busy > 0 ? (double)bytes / busy / 1e9 : 0.0, since,
            j->s->async && busy > mx[0] ? busy - mx[0] : 0.0, now_seconds());
    fclose(f);
}

/*
 * Reserves this rank's bytes (plus a margin for HDF5's metadata) in the directory its data goes
 * to, with fallocate, before any HDF5 call: a full disk then fails cleanly and identically on
 * every rank, instead of inside HDF5, where a failed close leaves a half-closed file behind (it
 * crashes MPI_Finalize later) and, with MPI-IO, can leave ranks waiting in a collective.
 * The reservation is held until every rank has its own (the agreement), then released.
 * File systems without fallocate skip the check. MPICKPT_RESERVE=0 turns it off.
 */
static int reserve_space(ckpt_saver *s, save_ctx *c, int *fd)
{
    *fd = -1;
    if (!s->reserve)
        return CKPT_OK;
    uint64_t need = 0;
    for (size_t j = 0; j < s->npieces; j++)
        need += piece_len(s, j);
    for (size_t i = 0; i < s->nregs; i++)
        if (s->regs[i].kind == CKPT_KIND_BLOB)
            need += c->blob_len[i];
    need += (1u << 20) + need / 64;
    const char *dir = s->layout == CKPT_LAYOUT_SHARED ? c->chief_temp : c->my_temp;
    int rc = ckpt__rmtree_at(c->tempfd, c->reserve_name, dir);
    if (rc == CKPT_OK)
        rc = ckpt__file_create(fd, c->tempfd, c->reserve_name, O_WRONLY, dir);
    if (rc != CKPT_OK)
        return ckpt__error_wrap(rc, "rank %d: space reservation", s->rank);
    if (fallocate(*fd, 0, 0, (off_t)need) != 0) {
        int err = errno;
        if (err == EOPNOTSUPP || err == ENOSYS)
            return CKPT_OK; /* cannot tell in advance here */
        if (err == ENOSPC || err == EDQUOT)
            return ckpt__error(CKPT_ENOSPC,
                               "rank %d: no space left on device for this checkpoint: %llu bytes "
                               "needed in %s",
                               s->rank, (unsigned long long)need, dir);
        return ckpt__errno(err, "fallocate", dir);
    }
    return CKPT_OK;
}

static void release_space(save_ctx *c, int fd)
{
    if (fd >= 0) {
        close(fd);
        unlinkat(c->tempfd, c->reserve_name, 0);
    }
}

/* Opens this rank's in-flight directory (the chief made its own in prepare_job): workertemp_<r>,
 * created when missing, or the chief's <base>_temp in the shared layout. A link there is refused. */
static int open_temp(ckpt_saver *s, save_ctx *c)
{
    if (c->tempfd >= 0)
        return CKPT_OK;
    if (s->layout == CKPT_LAYOUT_SHARED)
        return ckpt__subdir_open(&c->tempfd, c->dirfd, c->temp_name, 0, c->dir);
    return ckpt__subdir_open(&c->tempfd, c->workfd, c->my_temp_name, 1, c->work);
}

/*
 * Steps 2-5 of the protocol (write, agree, merge, commit) and the commit hook, on j->c.comm.
 * Collective over that communicator. Runs on the caller's thread (sync) or the writer thread.
 */
static int run_job(save_job *j)
{
    ckpt_saver *s = j->s;
    save_ctx *c = &j->c;
    int rc, local;
    double t0 = mono_seconds();

    ckpt__fault_hold(s->rank, "write", &s->abandon); /* tests: held until the saver gives up */
    /* the temp dirs and space first, agreed by every rank before any HDF5 call */
    int rfd = -1;
    local = open_temp(s, c);
    if (local == CKPT_OK)
        local = reserve_space(s, c, &rfd);
    rc = ckpt_mpi_agree(c->comm, local);
    release_space(c, rfd);
    if (rc != CKPT_OK)
        goto out;

    /* write */
    if (s->layout == CKPT_LAYOUT_SHARED) {
        Mpickpt__Fragment **blobs = NULL;
        ckpt__arena *blob_arena = NULL;
        if ((rc = gather_blobs(s, c, CKPT_OK, &blobs, &blob_arena)) != CKPT_OK)
            goto out;
        ckpt__h5_lock();
        local = write_shared(s, c, blobs);
        ckpt__h5_unlock();
        free_frags(blobs, blob_arena);
    } else {
        ckpt__h5_lock();
        local = write_per_rank(s, c);
        ckpt__h5_unlock();
    }
    double t1 = mono_seconds();
    /* agree */
    if (local == CKPT_OK)
        local = ckpt__fault(s->rank, "agree");
    if ((rc = ckpt_mpi_agree(c->comm, local)) != CKPT_OK)
        goto out;
    double t2 = mono_seconds();

    /* merge */
    local = s->rank == 0 ? CKPT_OK : ckpt__fault(s->rank, "merge");
    for (size_t i = 0; i < c->frag.n_tensors; i++)
        for (size_t k = 0; k < c->frag.tensors[i]->n_pieces; k++)
            j->bytes += c->frag.tensors[i]->pieces[k]->bytes;
    Mpickpt__Fragment **frags = NULL;
    ckpt__arena *frag_arena = NULL;
    local = gather_fragments(s, c, local, &frags, &frag_arena);
    Mpickpt__Header hdr = MPICKPT__HEADER__INIT;
    Mpickpt__Index idx = MPICKPT__INDEX__INIT;
    char producer[64];
    if (s->rank == 0 && local == CKPT_OK) {
        snprintf(producer, sizeof producer, "mpickpt %s", ckpt_version());
        hdr.format_version = CKPT_FORMAT_VERSION;
        hdr.endianness = MPICKPT__ENDIANNESS__LITTLE;
        hdr.world_size = s->size;
        hdr.layout = (Mpickpt__Layout)s->layout;
        hdr.save_counter = j->counter;
        hdr.epoch = j->info.epoch;
        hdr.step = j->info.step;
        hdr.end_of_epoch = j->info.end_of_epoch != 0;
        hdr.producer = producer;
        idx.header = &hdr;
        local = ckpt__fault(0, "merge");
        if (local == CKPT_OK)
            local = ckpt__index_merge(&idx, frags, (size_t)s->size);
        if (local == CKPT_OK) /* 1 unless pieces are packed: format-1 readers still read it */
            hdr.format_version = ckpt__index_format_version(&idx);
    }
    /* the pre-commit vote: the chief's merge, everybody's readiness, and no abandoned close */
    if (s->rank != 0 && local == CKPT_OK)
        local = ckpt__fault(s->rank, "commit");
    /* A close that timed out on any rank abandons the save on every rank: ETIMEDOUT is the most
     * negative code, so the agreement gives every rank the same answer. */
    if (local == CKPT_OK && atomic_load(&s->abandon))
        local = ckpt__error(CKPT_ETIMEDOUT, "rank %d: the saver was closed before this save "
                                            "finished; it was not committed",
                            s->rank);
    double t3 = mono_seconds();
    rc = ckpt_mpi_agree(c->comm, local);
    if (rc == CKPT_OK) {
        if (s->rank == 0) {
            hdr.timestamp = now_seconds();
            local = chief_commit(s, c, &idx);
        }
        rc = ckpt_mpi_agree(c->comm, local);
    }
    ckpt__index_merged_free(&idx);
    free_frags(frags, frag_arena);
    double t4 = mono_seconds();
    j->t_write = t1 - t0;
    j->t_agree = t2 - t1;
    j->t_merge = t3 - t2;
    j->t_commit = t4 - t3;
    /* The hook is read under the lock: ckpt__saver_detach() may have withdrawn it. */
    pthread_mutex_lock(&s->lock);
    ckpt__commit_hook hook = rc == CKPT_OK ? j->hook : NULL;
    s->hook_running = hook != NULL;
    pthread_mutex_unlock(&s->lock);
    if (hook) {
        rc = hook(c->comm, c->prefix, j->counter, j->hook_payload);
        pthread_mutex_lock(&s->lock);
        s->hook_running = 0;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    }
    if (rc == CKPT_OK) {
        /* metrics: the maximum over ranks of each phase, the sum of the bytes; a sync save
         * blocked its caller for all of it */
        if (!s->async)
            j->t_block = mono_seconds() - j->t_start;
        double mine[5] = { j->t_block, j->t_write, j->t_agree, j->t_merge, j->t_commit }, mx[5];
        uint64_t total = 0;
        if (MPI_Allreduce(mine, mx, 5, MPI_DOUBLE, MPI_MAX, c->comm) == MPI_SUCCESS &&
            MPI_Allreduce(&j->bytes, &total, 1, MPI_UINT64_T, MPI_SUM, c->comm) == MPI_SUCCESS) {
            if (s->rank == 0)
                write_metrics(j, mx, total);
            pthread_mutex_lock(&s->lock);
            ckpt_save_metrics *lm = &s->last_metrics;
            snprintf(lm->prefix, sizeof lm->prefix, "%s", c->prefix);
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
    }
out:
    cleanup_temp(s, c);
    return rc;
}

/*
 * The foreground part of a save, collective over the saver's communicator: the chief's prefix,
 * the plan, the registered savers, the chief's temp dir; then, in async mode, the snapshot.
 * On success *out is a job ready to run.
 */
static int prepare_job(ckpt_saver *s, const char *prefix_arg, const ckpt_save_info *info,
                       int64_t counter, save_job **out)
{
    *out = NULL;
    char prefix[4096];
    int rc = bcast_prefix(s, prefix_arg, prefix, sizeof prefix);
    if (rc != CKPT_OK)
        return rc;
    save_job *j = calloc(1, sizeof *j);
    int local = j ? init_ctx(s, &j->c, prefix) : ckpt__error(CKPT_ENOMEM, "out of memory");
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK || (rc = make_plan(s)) != CKPT_OK) {
        free_job(j);
        return rc;
    }
    j->s = s;
    j->counter = counter;
    if (info)
        j->info = *info;
    /* Registered savers run first (TensorFlow's contract), then the chief prepares its temp dir:
     * leftovers of a crashed save with the same prefix are garbage. */
    for (size_t i = 0; i < s->nregs && local == CKPT_OK; i++)
        if (s->regs[i].kind == CKPT_KIND_BLOB) {
            int r = s->regs[i].cb.save(&j->c.blob_data[i], &j->c.blob_len[i], s->regs[i].payload);
            if (r != CKPT_OK)
                local = ckpt__error(r, "rank %d: registered saver '%s' failed (%d)", s->rank,
                                    s->regs[i].name, r);
            else if (!j->c.blob_data[i] && j->c.blob_len[i])
                local = ckpt__error(CKPT_EINVAL, "rank %d: registered saver '%s' returned NULL",
                                    s->rank, s->regs[i].name);
        }
    if (local == CKPT_OK && s->rank == 0)
        local = chief_temp_fresh(&j->c);
    if (local == CKPT_OK && s->async)
        local = snapshot(s, j);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        cleanup_temp(s, &j->c);
        free_job(j);
        return rc;
    }
    *out = j;
    return CKPT_OK;
}

static void *writer_main(void *arg)
{
    save_job *j = arg;
    j->result = run_job(j);
    if (j->result != CKPT_OK) {
        const ckpt_error *e = ckpt_error_last();
        snprintf(j->message, sizeof j->message, "%s", e ? e->message : ckpt_strerror(j->result));
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
static int wait_job(ckpt_saver *s, double timeout)
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
        return ckpt__error(CKPT_ETIMEDOUT, "the background save of %s is still running",
                           s->job->c.prefix);
    pthread_join(s->thread, NULL);
    save_job *j = s->job;
    s->job = NULL;
    int rc = j->result;
    if (rc == CKPT_OK) {
        s->counter = j->counter > s->counter ? j->counter : s->counter;
    } else {
        ckpt__error(rc, "background save of %s failed: %s", j->c.prefix, j->message);
    }
    free_job(j);
    return rc;
}

/* Runs a prepared job inline (sync) or hands it to the writer thread (async). */
static int start_job(ckpt_saver *s, save_job *j)
{
    j->t_block = mono_seconds() - j->t_start;
    j->since_prev = s->last_save_start > 0 ? j->t_start - s->last_save_start : 0.0;
    if (!s->async) {
        int rc = run_job(j);
        if (rc == CKPT_OK && j->counter > s->counter)
            s->counter = j->counter;
        j->t_block = mono_seconds() - j->t_start;
        s->last_save_start = j->t_start;
        free_job(j);
        return rc;
    }
    j->c.comm = s->async_comm;
    s->job = j;
    s->job_done = 0;
    s->last_save_start = j->t_start;
    if (pthread_create(&s->thread, NULL, writer_main, j) != 0) {
        /* Cannot happen on a healthy system; run it here rather than lose the save. */
        s->job_done = 1;
        j->result = run_job(j);
        return wait_job(s, -1);
    }
    return CKPT_OK;
}

/* A whole save at an exact prefix with an optional commit hook. Collective. */
int ckpt__saver_save_hook(ckpt_saver *s, const char *prefix, const ckpt_save_info *info,
                          int64_t counter, ckpt__commit_hook hook, void *payload)
{
    double t_start = mono_seconds();
    /* At most one save in flight: wait for the previous one; its failure is this call's error. */
    int rc = wait_job(s, -1);
    if (rc == CKPT_OK)
        rc = take_pending(s);
    if (rc != CKPT_OK)
        return rc;
    save_job *j;
    if ((rc = prepare_job(s, prefix, info, counter, &j)) != CKPT_OK)
        return rc;
    j->t_start = t_start;
    j->hook = hook;
    j->hook_payload = payload;
    return start_job(s, j);
}

int ckpt_saver_write(ckpt_saver *s, const char *prefix, const ckpt_save_info *info)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    return ckpt__saver_save_hook(s, prefix ? prefix : "", info, 0, NULL, NULL);
}

int ckpt_saver_save(ckpt_saver *s, const char *prefix, const ckpt_save_info *info, char *out,
                    size_t out_size)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* The number depends on the previous save's outcome: wait for it first. */
    int rc = wait_job(s, -1);
    if (rc == CKPT_OK)
        rc = take_pending(s);
    if (rc != CKPT_OK)
        return rc;
    char name[4096];
    int64_t n = s->counter + 1;
    int local = ckpt__path(name, sizeof name, "%s-%lld", prefix ? prefix : "", (long long)n);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK)
        return rc;
    if ((rc = ckpt__saver_save_hook(s, name, info, n, NULL, NULL)) == CKPT_OK && out && out_size)
        snprintf(out, out_size, "%s", name);
    return rc;
}

void ckpt__saver_wait_keep(ckpt_saver *s)
{
    int rc = wait_job(s, -1);
    if (rc != CKPT_OK && s->pending_rc == CKPT_OK) {
        s->pending_rc = rc;
        snprintf(s->pending_msg, sizeof s->pending_msg, "%s", ckpt_error_last()->message);
    }
}

int ckpt_saver_sync(ckpt_saver *s)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    int rc = wait_job(s, -1);
    return rc != CKPT_OK ? rc : take_pending(s);
}

/* A background failure that restore waited for is reported by the next save, sync or close. */
static int take_pending(ckpt_saver *s)
{
    int rc = s->pending_rc;
    if (rc != CKPT_OK) {
        s->pending_rc = CKPT_OK;
        ckpt__error(rc, "%s", s->pending_msg);
    }
    return rc;
}

int ckpt_saver_close(ckpt_saver *s)
{
    if (!s)
        return CKPT_OK;
    double timeout = s->opts.close_timeout_s > 0 ? s->opts.close_timeout_s : 600.0;
    int rc = wait_job(s, timeout);
    if (rc == CKPT_ETIMEDOUT && s->job) { /* our wait timed out (not a finished job's result) */
        /* Still writing: it must not commit now (the previous checkpoint stays the latest), and
         * the thread still uses the saver, so both are left to the process's exit. */
        atomic_store(&s->abandon, 1);
        ckpt__log(CKPT_LOG_WARN,
                  "closing with a background save still running after %g s: the last checkpoint "
                  "(%s) may be incomplete; unless it was already committing, it will not be",
                  timeout, s->job ? s->job->c.prefix : "?");
        pthread_detach(s->thread);
        return ckpt__error(CKPT_ETIMEDOUT,
                           "background save still running at close after %g s; the last "
                           "checkpoint may be incomplete (the previous one stays the latest "
                           "unless this one was already committing)",
                           timeout);
    }
    if (rc == CKPT_OK)
        rc = take_pending(s);
    for (size_t i = 0; i < s->nborrowers; i++)
        s->borrowers[i].gone(s->borrowers[i].payload);
    free(s->borrowers);
    ckpt_saver_clear(s);
    free(s->regs);
    free_plan(s);
    free(s->scratch);
    free(s->pack_buf);
    for (size_t i = 0; i < s->snap_n; i++)
        free(s->snap[i]);
    free(s->snap);
    free(s->snap_cap);
    if (s->async_comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->async_comm);
    if (s->comm != MPI_COMM_NULL)
        MPI_Comm_free(&s->comm);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
    return rc;
}

int ckpt__saver_attach(ckpt_saver *s, void (*gone)(void *payload), void *payload)
{
    struct borrower *nb = realloc(s->borrowers, (s->nborrowers + 1) * sizeof *nb);
    if (!nb)
        return ckpt__error(CKPT_ENOMEM, "out of memory");
    s->borrowers = nb;
    s->borrowers[s->nborrowers].gone = gone;
    s->borrowers[s->nborrowers].payload = payload;
    s->nborrowers++;
    return CKPT_OK;
}

int ckpt__saver_detach(ckpt_saver *s, void *payload)
{
    int busy = 0;
    if (s->job && s->job->hook_payload == payload) {
        if (!atomic_load(&s->abandon)) {
            ckpt__saver_wait_keep(s); /* its commit hook runs with the borrower still alive */
        } else {
            /* closed with the save still running: the saver is left to the process's exit, and
             * so must the borrower be if the hook may still run */
            pthread_mutex_lock(&s->lock);
            if (!s->job_done && !s->hook_running)
                s->job->hook = NULL;
            busy = s->hook_running || (s->job->hook != NULL && !s->job_done);
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (busy)
        return 1;
    for (size_t i = 0; i < s->nborrowers; i++)
        if (s->borrowers[i].payload == payload) {
            s->borrowers[i] = s->borrowers[--s->nborrowers];
            break;
        }
    return 0;
}

void ckpt_saver_free(ckpt_saver *s)
{
    (void)ckpt_saver_close(s);
}

/* ---- restore ------------------------------------------------------------------------------------ */

/*
 * The chief opens the checkpoint (index checks plus data-file sizes) and broadcasts the index;
 * every rank then reads the pieces overlapping what it owns. Collective.
 */
int ckpt_saver_restore(ckpt_saver *s, const char *prefix_arg, const ckpt_restore_options *opts,
                       ckpt_restore_info *info)
{
    if (!s)
        return ckpt__error(CKPT_EINVAL, "saver is NULL");
    /* Restore waits for a save in flight; a failure of that save is kept for the next save, sync
     * or close to report (restoring an older checkpoint is fine). */
    ckpt__saver_wait_keep(s);
    char prefix[4096];
    int rc0 = bcast_prefix(s, prefix_arg, prefix, sizeof prefix);
    if (rc0 != CKPT_OK)
        return rc0;
    ckpt_restore_options defaults = CKPT_RESTORE_OPTIONS_INIT;
    if (!opts)
        opts = &defaults;
    /* The chief reads the index file and checks its container; its payload is broadcast as is
     * and every rank unpacks it; the chief also validates it and checks the data files, and that
     * verdict is agreed before any rank reads data. */
    int local = CKPT_OK;
    uint8_t *file = NULL, *bytes = NULL;
    const uint8_t *payload = NULL;
    size_t plen = 0;
    uint64_t len = 0;
    if (s->rank == 0) {
        char ipath[4200];
        if ((local = ckpt__path(ipath, sizeof ipath, "%s.index", prefix)) == CKPT_OK &&
            (local = ckpt__index_read(&file, &payload, &plen, ipath)) == CKPT_ENOTFOUND)
            ckpt__error(local, "no checkpoint at %s (%s does not exist)", prefix, ipath);
        len = plen;
    }
    int rc = ckpt_mpi_agree(s->comm, local);
    if (rc != CKPT_OK) {
        free(file);
        return rc;
    }
    if (MPI_Bcast(&len, 1, MPI_UINT64_T, 0, s->comm) != MPI_SUCCESS)
        local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index size failed");
    if (s->rank == 0)
        bytes = (uint8_t *)payload;
    else if (local == CKPT_OK && !(bytes = malloc(len ? len : 1)))
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory for the index", s->rank);
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        if (s->rank != 0)
            free(bytes);
        free(file);
        return rc;
    }
    /* An index larger than INT_MAX bytes is broadcast in chunks. */
    for (uint64_t off = 0; off < len && local == CKPT_OK; off += (1u << 30)) {
        int n = (int)(len - off < (1u << 30) ? len - off : (1u << 30));
        if (MPI_Bcast(bytes + off, n, MPI_BYTE, 0, s->comm) != MPI_SUCCESS)
            local = ckpt__error(CKPT_EMPI, "MPI_Bcast of the index failed");
    }
    ckpt_reader *r = NULL;
    if (local == CKPT_OK)
        local = ckpt__reader_open_payload(&r, prefix, bytes, (size_t)len, s->rank == 0);
    if (s->rank != 0)
        free(bytes);
    free(file);
    /* the chief's validation: a bad index is the same error on every rank */
    if ((rc = ckpt_mpi_agree(s->comm, local)) != CKPT_OK) {
        ckpt_reader_free(r);
        return rc;
    }

    /*
     * Tensors every checkpoint holds (full, partitioned, replicated) are read straight into the
     * registered buffers: a restore that succeeds, from this checkpoint or from an older one that
     * the manager falls back to, overwrites every element of them. Per-rank values (replica
     * components, registered savers' blobs) are staged instead and applied only once every rank
     * has read and checked everything: an older checkpoint written by fewer ranks may lack this
     * rank's, and then nothing of a rejected checkpoint may be left in them. Registered restores
     * run last, after every tensor is in (TensorFlow runs registered restores after the default
     * ones).
     */
    size_t nst = 0;
    struct staged {
        size_t reg;
        uint8_t *bytes;
        size_t len;
    } *st = calloc(s->nregs ? s->nregs : 1, sizeof *st);
    if (!st && local == CKPT_OK)
        local = ckpt__error(CKPT_ENOMEM, "rank %d: out of memory", s->rank);
    for (size_t k = 0; k < s->nregs && local == CKPT_OK; k++) {
        const reg *g = &s->regs[k];
        int per_rank = g->kind == CKPT_KIND_COMPONENT || g->kind == CKPT_KIND_BLOB;
        size_t ti;
        int found = ckpt_reader_find(&ti, r, g->stored);
        if (found != CKPT_OK) {
            if (per_rank && opts->skip_missing_per_rank) {
                ckpt_error_clear();
                continue;
            }
            local = ckpt__error(CKPT_ENOTFOUND,
                                "rank %d: '%s' is not in checkpoint %s (written by %d ranks)%s",
                                s->rank, g->stored, prefix, ckpt_reader_header(r)->world_size,
                                per_rank ? "; per-rank data of a rank the writer did not have (set "
                                           "skip_missing_per_rank to leave it untouched)"
                                         : "");
            break;
        }
        ckpt_tensor_info t;
        ckpt_reader_tensor(&t, r, ti);
        ckpt_dtype dtype = g->kind == CKPT_KIND_BLOB ? CKPT_UINT8 : g->dtype;
        if (g->kind == CKPT_KIND_BLOB ? (t.dtype != CKPT_UINT8 || t.shape.ndims != 1)
                                      : (t.dtype != g->dtype || !ckpt_shape_equal(&t.shape, &g->shape))) {
            char a[64] = "", b[64] = "";
            for (int d = 0; d < t.shape.ndims; d++)
                snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                         (long long)t.shape.dims[d]);
            for (int d = 0; d < g->shape.ndims; d++)
                snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                         (long long)g->shape.dims[d]);
            if (g->kind == CKPT_KIND_BLOB)
                local = ckpt__error(CKPT_EMISMATCH, "rank %d: '%s' is not a blob", s->rank,
                                    g->stored);
            else
                local = ckpt__error(CKPT_EMISMATCH,
                                    "rank %d: tensor '%s' is %s [%s] in %s, registered as %s [%s]",
                                    s->rank, g->stored, ckpt_dtype_name(t.dtype), a, prefix,
                                    ckpt_dtype_name(g->dtype), b);
            break;
        }
        const ckpt_slice *want = g->kind == CKPT_KIND_BLOB ? NULL : &g->slice;
        int64_t n;
        if (want)
            ckpt_slice_num_elements(&n, want);
        else
            n = t.shape.dims[0];
        size_t nbytes = (size_t)n * ckpt_dtype_size(dtype);
        void *dst = g->data;
        if (per_rank) {
            if (!(st[nst].bytes = malloc(nbytes ? nbytes : 1))) {
                local = ckpt__error(CKPT_ENOMEM, "rank %d: cannot allocate %zu bytes for '%s'",
                                    s->rank, nbytes, g->stored);
                break;
            }
            st[nst].reg = k;
            st[nst].len = nbytes;
            dst = st[nst++].bytes;
        }
        local = ckpt_reader_read(r, g->stored, dtype, want, dst, nbytes);
        if (local != CKPT_OK)
            local = ckpt__error_wrap(local, "rank %d", s->rank);
    }
    /* every rank has read and checked everything it needs: only now are per-rank values applied */
    local = ckpt_mpi_agree(s->comm, local);
    for (size_t i = 0; i < nst && local == CKPT_OK; i++) /* replica components */
        if (s->regs[st[i].reg].kind == CKPT_KIND_COMPONENT && st[i].len)
            memcpy(s->regs[st[i].reg].data, st[i].bytes, st[i].len);
    for (size_t i = 0; i < nst && local == CKPT_OK; i++) { /* then registered savers */
        const reg *g = &s->regs[st[i].reg];
        if (g->kind != CKPT_KIND_BLOB)
            continue;
        int cb = g->cb.restore(st[i].bytes, st[i].len, g->payload);
        if (cb != CKPT_OK)
            local = ckpt__error(cb, "rank %d: registered saver '%s' failed to restore (%d)",
                                s->rank, g->name, cb);
    }
    for (size_t i = 0; i < nst; i++)
        free(st[i].bytes);
    free(st);
    rc = ckpt_mpi_agree(s->comm, local);
    if (rc == CKPT_OK) {
        const ckpt_header *h = ckpt_reader_header(r);
        s->counter = h->save_counter;
        if (info) {
            info->save_counter = h->save_counter;
            info->epoch = h->epoch;
            info->step = h->step;
            info->end_of_epoch = h->end_of_epoch;
            info->world_size = h->world_size;
            info->layout = h->layout;
        }
    }
    ckpt_reader_free(r);
    return rc;
}
