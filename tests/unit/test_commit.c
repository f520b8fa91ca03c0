/* lib/commit.h without mpirun, on real directories. A save of two simulated ranks is made with the
 * library's own MPI-free phases, as the saver's chief and workers make it (lib/paths.h names and
 * in-flight directories, lib/plan.h pieces, lib/shard.h data files, lib/record.h fragments, the
 * merge), in the training-state layout (<case>/run/chief, workertemp_1 in <case>/run); then
 * ckpt__commit:
 *   success           data files moved, index written, the values read back by ckpt_reader;
 *   hook fails        the error returned, no data file and no index of that checkpoint left, an
 *                     older checkpoint of the directory untouched;
 *   crash points      a child process dies (_exit) after the renames, between two renames, or
 *                     before any: nothing committed, ckpt_gc removes what was left, the older
 *                     checkpoint stays;
 *   replace           the old index gone before any data file moves, the new values read back;
 *                     without replace an existing index is ckpt__temp_fresh's CKPT_EEXISTS;
 *   rename fails      a data file missing in its temp dir: nothing left renamed;
 *   planted entries   a link under a data file's name, a directory under the index's name: the
 *                     commit fails with CKPT_EEXISTS naming it, never replaces or follows it;
 *   names taken       (issue 29) another save of the same prefix commits first, between this
 *                     one's ckpt__temp_fresh and its commit: CKPT_EEXISTS, the other checkpoint
 *                     reads back with its own values, nothing of this one is left; an index
 *                     name taken at commit time (a file, FIFO, link, directory) likewise: this
 *                     save's data files removed, the planted entry exactly as it was. Each case
 *                     also with the link-then-unlink fallback of file systems without
 *                     RENAME_NOREPLACE (ckpt__noreplace_force_link);
 *   fsync fails       the directory fsync before the index (data files removed), and after the
 *                     index's rename, the commit point (see the marked assertion).
 * fsync() is interposed by this program to inject the failures; it is the real fsync otherwise. */
#include "phases.h"

#include "commit.h"
#include "fsutil.h"
#include "index.h"
#include "paths.h"
#include "plan.h"
#include "record.h"
#include "shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* ---- fsync fault injection ------------------------------------------------------------------- */

/* The n-th fsync of a directory from now fails with EIO (0: none). Files are never failed. */
static int g_fail_dir_fsync;
static int g_dir_fsyncs;

int fsync(int fd)
{
    struct stat st;
    if (g_fail_dir_fsync > 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        g_dir_fsyncs++;
        if (--g_fail_dir_fsync == 0) {
            errno = EIO;
            return -1;
        }
    }
    return (int)syscall(SYS_fsync, fd);
}

/* ---- a save of two simulated ranks ----------------------------------------------------------- */

enum { SIZE = 2 };

typedef struct sim {
    char dir[4200], prefix[4400], work[4200];
    int dirfd, workfd;
    ckpt__save_names n[SIZE];
    int tempfd[SIZE];
    ckpt__regs regs[SIZE];
    ckpt__pieces pieces[SIZE];
    ckpt__record rec[SIZE];
    ckpt__shard_bufs bufs[SIZE];
    Mpickpt__Fragment frag[SIZE];
    Mpickpt__Header h;
    char producer[64];
    Mpickpt__Index idx;
    int merged;
    ckpt__commit_file files[SIZE];
    /* the registered values */
    float w[SIZE][12];
    int64_t b[5];
    double c[6];
    float lr[SIZE];
} sim;

/* The values of save `seed`: w is 6x4 float32 partitioned by rows (3 per rank), b 5 int64 on rank
 * 0, c 2x3 float64 on rank 1, lr a replicated float32 scalar. */
static float w_val(int seed, int l) { return (float)(seed * 1000 + l); }
static int64_t b_val(int seed, int i) { return (int64_t)seed * 1000000007LL + i; }
static double c_val(int seed, int i) { return seed + i * 0.25; }
static float lr_val(int seed) { return (float)seed + 0.5f; }

/* Everything up to the commit: names, in-flight directories (the chief's by ckpt__temp_fresh
 * with `replace`), each rank's data file written into its temp dir, the fragments merged. */
static int sim_prepare(sim *s, const char *dir, const char *base, int seed, int replace)
{
    memset(s, 0, sizeof *s);
    s->dirfd = s->workfd = -1;
    for (int r = 0; r < SIZE; r++) {
        s->tempfd[r] = -1;
        mpickpt__fragment__init(&s->frag[r]);
    }
    mpickpt__header__init(&s->h);
    mpickpt__index__init(&s->idx);
    pathf(s->dir, sizeof s->dir, "%s", dir);
    pathf(s->prefix, sizeof s->prefix, "%s/%s", dir, base);
    int rc = ckpt__ckptdir_open(&s->dirfd, &s->workfd, dir, 1);
    uint64_t id = ckpt__random_u64(); /* the chief's, every rank's */
    for (int r = 0; r < SIZE && rc == CKPT_OK; r++)
        rc = ckpt__save_names_init(&s->n[r], s->prefix, r, SIZE, 0, id);
    if (rc == CKPT_OK)
        pathf(s->work, sizeof s->work, "%s", s->n[0].work);
    if (rc == CKPT_OK)
        rc = ckpt__temp_fresh(&s->n[0], s->dirfd, &s->tempfd[0], replace);
    if (rc == CKPT_OK)
        rc = ckpt__temp_open(&s->n[1], 1, s->dirfd, s->workfd, &s->tempfd[1]);
    if (rc != CKPT_OK)
        return rc;

    int64_t dw[2] = { 6, 4 }, d5 = 5, dc[2] = { 2, 3 };
    ckpt_shape sw, sb, sc, s0;
    ckpt_shape_init(&sw, 2, dw);
    ckpt_shape_init(&sb, 1, &d5);
    ckpt_shape_init(&sc, 2, dc);
    ckpt_shape_init(&s0, 0, NULL);
    ckpt_slice fb, fc, f0;
    ckpt_slice_full(&fb, &sb);
    ckpt_slice_full(&fc, &sc);
    ckpt_slice_full(&f0, &s0);
    for (int i = 0; i < 5; i++)
        s->b[i] = b_val(seed, i);
    for (int i = 0; i < 6; i++)
        s->c[i] = c_val(seed, i);
    for (int r = 0; r < SIZE && rc == CKPT_OK; r++) {
        int64_t st[2] = { 3 * r, 0 }, ct[2] = { 3, 4 };
        ckpt_slice rows;
        ckpt_slice_init(&rows, 2, st, ct);
        for (int i = 0; i < 12; i++)
            s->w[r][i] = w_val(seed, 12 * r + i);
        s->lr[r] = lr_val(seed);
        ckpt__regs *g = &s->regs[r];
        if ((rc = ckpt__regs_add(g, r, "w", "w", CKPT_FLOAT32, &sw, &rows,
                                 CKPT_KIND_PARTITIONED, s->w[r])) ||
            (rc = ckpt__regs_add(g, r, "lr", "lr", CKPT_FLOAT32, &s0, &f0, CKPT_KIND_REPLICATED,
                                 &s->lr[r])))
            break;
        if (r == 0)
            rc = ckpt__regs_add(g, r, "b", "b", CKPT_INT64, &sb, &fb, CKPT_KIND_FULL, s->b);
        else
            rc = ckpt__regs_add(g, r, "c", "c", CKPT_FLOAT64, &sc, &fc, CKPT_KIND_FULL, s->c);
        /* pieces of at most 16 bytes; those of at most 8 packed, the others a dataset each */
        if (rc == CKPT_OK)
            rc = ckpt__plan_pieces(&s->pieces[r], g, r, SIZE, 16);
        const void *src[8];
        for (size_t i = 0; i < g->n && i < 8; i++)
            src[i] = g->v[i].data;
        ckpt__shard_input in = { .regs = g, .pieces = &s->pieces[r], .src = src,
                                 .pack_max = 8, .rank = r };
        ckpt__record_init(&s->rec[r]);
        if (rc == CKPT_OK)
            rc = ckpt__shard_write(&s->rec[r], &in, &s->bufs[r], &s->n[r], s->tempfd[r], NULL);
        if (rc == CKPT_OK)
            rc = ckpt__record_fragment(&s->frag[r], &s->rec[r], r, s->n[r].data_name);
        s->files[r] = (ckpt__commit_file){ .from_fd = s->tempfd[r], .from_name = s->n[r].data_name,
                                           .name = s->n[r].data_name };
    }
    if (rc != CKPT_OK)
        return rc;
    /* the chief's merge, under the header the saver writes */
    snprintf(s->producer, sizeof s->producer, "mpickpt %s", ckpt_version());
    s->h.format_version = CKPT_FORMAT_VERSION;
    s->h.endianness = MPICKPT__ENDIANNESS__LITTLE;
    s->h.world_size = SIZE;
    s->h.layout = MPICKPT__LAYOUT__LAYOUT_PER_RANK;
    s->h.save_counter = seed;
    s->h.producer = s->producer;
    s->idx.header = &s->h;
    Mpickpt__Fragment *frags[SIZE] = { &s->frag[0], &s->frag[1] };
    if ((rc = ckpt__index_merge(&s->idx, frags, SIZE)) == CKPT_OK)
        s->h.format_version = ckpt__index_format_version(&s->idx);
    s->merged = 1;
    return rc;
}

static ckpt__commit_req sim_req(sim *s, int replace, int (*hook)(void *), void *arg)
{
    return (ckpt__commit_req){ .dirfd = s->dirfd, .dir = s->dir,
                               .index_name = s->n[0].index_name, .index_shown = s->prefix,
                               .idx = &s->idx, .files = s->files, .nfiles = SIZE,
                               .replace = replace, .before_index = hook, .arg = arg };
}

/* Frees the simulation; with `cleanup`, each rank's ckpt__temp_cleanup first (a process that
 * crashed never runs it). */
static void sim_free(sim *s, int cleanup)
{
    for (int r = 0; r < SIZE; r++) {
        if (cleanup)
            ckpt__temp_cleanup(&s->n[r], r, s->dirfd, s->workfd, s->tempfd[r]);
        ckpt__close(s->tempfd[r]);
    }
    if (s->merged)
        ckpt__index_merged_free(&s->idx);
    for (int r = 0; r < SIZE; r++) {
        ckpt__fragment_free_built(&s->frag[r]);
        ckpt__record_free(&s->rec[r]);
        ckpt__pieces_free(&s->pieces[r]);
        ckpt__regs_free(&s->regs[r]);
        ckpt__shard_bufs_free(&s->bufs[r]);
    }
    ckpt__close(s->dirfd);
    ckpt__close(s->workfd);
}

/* A committed checkpoint (sim, commit, cleanup). */
static void commit_one(const char *dir, const char *base, int seed)
{
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, base, seed, 0));
    ckpt__commit_req q = sim_req(s, 0, NULL, NULL);
    CHECK_OK(ckpt__commit(&q));
    sim_free(s, 1);
    free(s);
}

/* 1 when checkpoint dir/base opens, passes verify and holds the values of save `seed`. */
static int reads_back(const char *dir, const char *base, int seed)
{
    char prefix[4400];
    pathf(prefix, sizeof prefix, "%s/%s", dir, base);
    ckpt_reader *r = NULL;
    int rc = ckpt_reader_open(&r, prefix);
    CHECK_MSG(rc == CKPT_OK, "open %s: %s", prefix, last_msg());
    if (rc != CKPT_OK)
        return 0;
    float w[24], lr = 0;
    int64_t b[5];
    double c[6];
    int ok = ckpt_reader_verify(r, NULL, NULL) == CKPT_OK &&
             ckpt_reader_read(r, "w", CKPT_FLOAT32, NULL, w, sizeof w) == CKPT_OK &&
             ckpt_reader_read(r, "b", CKPT_INT64, NULL, b, sizeof b) == CKPT_OK &&
             ckpt_reader_read(r, "c", CKPT_FLOAT64, NULL, c, sizeof c) == CKPT_OK &&
             ckpt_reader_read(r, "lr", CKPT_FLOAT32, NULL, &lr, sizeof lr) == CKPT_OK;
    CHECK_MSG(ok, "read %s: %s", prefix, last_msg());
    for (int i = 0; ok && i < 24; i++)
        ok &= w[i] == w_val(seed, i);
    for (int i = 0; ok && i < 5; i++)
        ok &= b[i] == b_val(seed, i);
    for (int i = 0; ok && i < 6; i++)
        ok &= c[i] == c_val(seed, i);
    ok &= lr == lr_val(seed);
    const ckpt_header *h = ckpt_reader_header(r);
    ok &= h->world_size == SIZE && h->layout == CKPT_LAYOUT_PER_RANK && h->save_counter == seed;
    ok &= ckpt_reader_num_tensors(r) == 4;
    ckpt_reader_free(r);
    return ok;
}

/* Entries of dir named <base>.data-*, and whether <base>.index (or a temp file of it) exists. */
static int data_files(const char *dir, const char *base)
{
    char p[300];
    return count_prefixed(dir, pathf(p, sizeof p, "%s.data-", base));
}

static int index_entries(const char *dir, const char *base)
{
    char p[300];
    return count_prefixed(dir, pathf(p, sizeof p, "%s.index", base));
}

/* A case's directories: <root>/<name>/run/chief, the work dir <root>/<name>/run. */
static void case_dirs(char *chief, size_t size, const char *name)
{
    char d[4200];
    case_dir(d, sizeof d, name);
    pathf(chief, size, "%s/run/chief", d);
    CHECK_OK(ckpt__mkdir_p(chief, 0755));
}

/* What the hook sees: the data files already in place, the index not yet written. */
typedef struct hook_ctx {
    const char *dir, *base;
    int calls, data_at_hook, index_at_hook;
    int fail;          /* return an error */
    int crash;         /* _exit(9): the process dies here */
    int fail_fsync_in; /* arm the fsync fault: the n-th directory fsync after the hook fails */
} hook_ctx;

static int hook(void *arg)
{
    hook_ctx *h = arg;
    h->calls++;
    h->data_at_hook = data_files(h->dir, h->base);
    h->index_at_hook = index_entries(h->dir, h->base);
    if (h->crash)
        _exit(9);
    if (h->fail_fsync_in) {
        g_fail_dir_fsync = h->fail_fsync_in;
        g_dir_fsyncs = 0;
    }
    if (h->fail)
        return ckpt__error(CKPT_EIO, "injected failure before the index of %s", h->base);
    return CKPT_OK;
}

/* ---- (a) success ----------------------------------------------------------------------------- */

static void test_success(void)
{
    char dir[4400], p[4600];
    case_dirs(dir, sizeof dir, "success");
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ckpt-1", 1, 0));
    /* before the commit the data files are in flight: rank 0's in ckpt-1.<id>_temp, rank 1's in
     * <work>/workertemp_1.<id> */
    CHECK_EQ_INT(kind_at(s->n[0].my_file), S_IFREG);
    CHECK_EQ_INT(kind_at(s->n[1].my_file), S_IFREG);
    CHECK_EQ_INT(data_files(dir, "ckpt-1"), 0);
    hook_ctx hc = { dir, "ckpt-1", 0, 0, 0, 0, 0, 0 };
    ckpt__commit_req q = sim_req(s, 0, hook, &hc);
    CHECK_OK(ckpt__commit(&q));
    /* the hook ran once, after both data files were in place and before the index */
    CHECK_EQ_INT(hc.calls, 1);
    CHECK_EQ_INT(hc.data_at_hook, 2);
    CHECK_EQ_INT(hc.index_at_hook, 0);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-1.data-00000-of-00002", dir)), S_IFREG);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-1.data-00001-of-00002", dir)), S_IFREG);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-1.index", dir)), S_IFREG);
    CHECK_EQ_INT(index_entries(dir, "ckpt-1"), 1); /* no temp file of the index left */
    CHECK_EQ_INT(kind_at(s->n[0].my_file), 0);
    CHECK_EQ_INT(kind_at(s->n[1].my_file), 0);
    /* the in-flight directories are the caller's: cleanup removes them (they are empty now) */
    sim_free(s, 1);
    CHECK_EQ_INT(kind_at(s->n[0].chief_temp), 0);
    CHECK_EQ_INT(kind_at(s->n[1].my_temp), 0);
    CHECK_EQ_INT(count_prefixed(s->work, "workertemp_"), 0);
    CHECK_EQ_INT(count_entries(dir), 3);
    CHECK(reads_back(dir, "ckpt-1", 1));
    free(s);
}

/* ---- (b) the hook fails ---------------------------------------------------------------------- */

static void test_hook_fails(void)
{
    char dir[4400];
    case_dirs(dir, sizeof dir, "hook_fails");
    commit_one(dir, "ckpt-1", 1);
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    hook_ctx hc = { dir, "ckpt-2", 0, 0, 0, 1, 0, 0 };
    ckpt__commit_req q = sim_req(s, 0, hook, &hc);
    ckpt_error_clear();
    CHECK_RC(ckpt__commit(&q), CKPT_EIO);
    CHECK_MSG(strstr(last_msg(), "injected failure"), "message: %s", last_msg());
    CHECK_EQ_INT(hc.calls, 1);
    CHECK_EQ_INT(hc.data_at_hook, 2); /* they were in place ... */
    CHECK_EQ_INT(data_files(dir, "ckpt-2"), 0); /* ... and are gone again */
    CHECK_EQ_INT(index_entries(dir, "ckpt-2"), 0);
    sim_free(s, 1);
    free(s);
    char prefix[4600];
    ckpt_reader *r = NULL;
    CHECK_RC(ckpt_reader_open(&r, pathf(prefix, sizeof prefix, "%s/ckpt-2", dir)),
             CKPT_ENOTFOUND);
    /* the older checkpoint: its files and values as they were; nothing else in the directory */
    CHECK_EQ_INT(data_files(dir, "ckpt-1"), 2);
    CHECK(reads_back(dir, "ckpt-1", 1));
    CHECK_EQ_INT(count_entries(dir), 3);
}

/* ---- (c) crash points ------------------------------------------------------------------------ */

typedef struct gc_log {
    int n, touched_old;
} gc_log;

static void gc_cb(const char *path, const char *why, void *payload)
{
    gc_log *g = payload;
    (void)why;
    g->n++;
    g->touched_old |= strstr(path, "ckpt-1.") != NULL;
}

/* Runs ckpt__commit of `nfiles` of s's files in a child process whose hook _exits; returns the
 * child's exit status (9 when it died in the hook). */
static int commit_in_child(sim *s, size_t nfiles)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        hook_ctx hc = { s->dir, "ckpt-2", 0, 0, 0, 0, 1, 0 };
        ckpt__commit_req q = sim_req(s, 0, hook, &hc);
        q.nfiles = nfiles;
        ckpt__commit(&q);
        _exit(1); /* the hook did not run */
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* After a crash of save ckpt-2: nothing committed; gc removes its leftovers (the in-flight
 * directories of this version's names, and nothing of ckpt-1); ckpt-1 still reads back. */
static void after_crash(const char *dir, const char *work, int renamed)
{
    CHECK_EQ_INT(count_prefixed(dir, "ckpt-2."), renamed + 1); /* + ckpt-2.<id>_temp */
    CHECK_EQ_INT(count_prefixed(work, "workertemp_1."), 1);
    char p[4600];
    ckpt_reader *r = NULL;
    CHECK_EQ_INT(index_entries(dir, "ckpt-2"), 0);
    CHECK_RC(ckpt_reader_open(&r, pathf(p, sizeof p, "%s/ckpt-2", dir)), CKPT_ENOTFOUND);
    CHECK_EQ_INT(data_files(dir, "ckpt-2"), renamed);
    gc_log g = { 0, 0 };
    size_t removed = 0;
    CHECK_OK(ckpt_gc(dir, 0, gc_cb, &g, &removed));
    CHECK_EQ_INT(removed, (size_t)g.n);
    CHECK_MSG(removed >= (size_t)renamed + 1, "gc removed %zu entries", removed);
    CHECK_EQ_INT(g.touched_old, 0);
    CHECK_EQ_INT(data_files(dir, "ckpt-2"), 0);
    CHECK_EQ_INT(count_prefixed(dir, "ckpt-2."), 0);
    CHECK_EQ_INT(count_prefixed(work, "workertemp_"), 0);
    CHECK_EQ_INT(count_entries(dir), 4); /* ckpt-1's index and two data files, gc's lock */
    CHECK(reads_back(dir, "ckpt-1", 1));
}

static void test_crash_points(void)
{
    char dir[4400], p[4600];
    /* after every rename, before the index (the commit's fault point) */
    case_dirs(dir, sizeof dir, "crash_after_renames");
    commit_one(dir, "ckpt-1", 1);
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    CHECK_EQ_INT(commit_in_child(s, SIZE), 9);
    char work[4200];
    pathf(work, sizeof work, "%s", s->work);
    sim_free(s, 0); /* the crashed process cleaned nothing up */
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-2.data-00001-of-00002", dir)), S_IFREG);
    after_crash(dir, work, 2);

    /* between the renames: rank 0's file in place, rank 1's still in workertemp_1 (the child
     * commits one file, then dies: the state of a crash before the second rename) */
    case_dirs(dir, sizeof dir, "crash_between_renames");
    commit_one(dir, "ckpt-1", 1);
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    CHECK_EQ_INT(commit_in_child(s, 1), 9);
    CHECK_EQ_INT(kind_at(s->n[1].my_file), S_IFREG);
    pathf(work, sizeof work, "%s", s->work);
    sim_free(s, 0);
    CHECK_EQ_INT(kind_at(pathf(p, sizeof p, "%s/ckpt-2.data-00000-of-00002", dir)), S_IFREG);
    after_crash(dir, work, 1);

    /* before any rename: every data file still in flight */
    case_dirs(dir, sizeof dir, "crash_before_commit");
    commit_one(dir, "ckpt-1", 1);
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    CHECK_EQ_INT(commit_in_child(s, 0), 9);
    CHECK_EQ_INT(kind_at(s->n[0].my_file), S_IFREG);
    CHECK_EQ_INT(kind_at(s->n[1].my_file), S_IFREG);
    pathf(work, sizeof work, "%s", s->work);
    sim_free(s, 0);
    after_crash(dir, work, 0);
    free(s);
}

/* ---- (d) replace ----------------------------------------------------------------------------- */

static void test_replace(void)
{
    char dir[4400];
    case_dirs(dir, sizeof dir, "replace");
    commit_one(dir, "ckpt-1", 1);
    commit_one(dir, "ckpt-5", 5);
    /* without replace, an existing index of that name stops the save before anything is written
     * (ckpt__temp_fresh), and the committed checkpoint stays as it was */
    sim *s = calloc(1, sizeof *s);
    CHECK_RC(sim_prepare(s, dir, "ckpt-1", 3, 0), CKPT_EEXISTS);
    CHECK_MSG(strstr(last_msg(), "ckpt-1.index"), "message: %s", last_msg());
    sim_free(s, 1);
    CHECK(reads_back(dir, "ckpt-1", 1));

    /* replace: at the hook the old index is already gone (no reader sees it with new data) */
    CHECK_OK(sim_prepare(s, dir, "ckpt-1", 3, 1));
    CHECK_EQ_INT(index_entries(dir, "ckpt-1"), 1);
    hook_ctx hc = { dir, "ckpt-1", 0, 0, 0, 0, 0, 0 };
    ckpt__commit_req q = sim_req(s, 1, hook, &hc);
    CHECK_OK(ckpt__commit(&q));
    CHECK_EQ_INT(hc.calls, 1);
    CHECK_EQ_INT(hc.index_at_hook, 0);
    CHECK_EQ_INT(hc.data_at_hook, 2);
    sim_free(s, 1);
    CHECK(reads_back(dir, "ckpt-1", 3));
    CHECK_EQ_INT(data_files(dir, "ckpt-1"), 2);

    /* replace, then a failure before the index: the old checkpoint is un-committed for good and
     * the new one not committed (no index, no data file of that name) */
    CHECK_OK(sim_prepare(s, dir, "ckpt-1", 4, 1));
    hook_ctx hf = { dir, "ckpt-1", 0, 0, 0, 1, 0, 0 };
    q = sim_req(s, 1, hook, &hf);
    CHECK_RC(ckpt__commit(&q), CKPT_EIO);
    CHECK_EQ_INT(index_entries(dir, "ckpt-1"), 0);
    CHECK_EQ_INT(data_files(dir, "ckpt-1"), 0);
    sim_free(s, 1);
    /* another checkpoint of the directory is never touched */
    CHECK(reads_back(dir, "ckpt-5", 5));
    CHECK_EQ_INT(count_entries(dir), 3);
    free(s);
}

/* ---- (e) a rename fails ---------------------------------------------------------------------- */

static void test_rename_fails(void)
{
    char dir[4400];
    case_dirs(dir, sizeof dir, "rename_fails");
    commit_one(dir, "ckpt-1", 1);
    for (int missing = 0; missing < SIZE; missing++) {
        sim *s = calloc(1, sizeof *s);
        CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
        int other = 1 - missing;
        CHECK(unlink(s->n[missing].my_file) == 0);
        hook_ctx hc = { dir, "ckpt-2", 0, 0, 0, 0, 0, 0 };
        ckpt__commit_req q = sim_req(s, 0, hook, &hc);
        ckpt_error_clear();
        CHECK_RC(ckpt__commit(&q), CKPT_ENOTFOUND);
        CHECK_MSG(strstr(last_msg(), s->n[missing].data_name), "message: %s", last_msg());
        CHECK_EQ_INT(hc.calls, 0);
        CHECK_EQ_INT(data_files(dir, "ckpt-2"), 0);
        CHECK_EQ_INT(index_entries(dir, "ckpt-2"), 0);
        /* a file after the failed one was never moved; one before it was removed */
        CHECK_EQ_INT(kind_at(s->n[other].my_file), other > missing ? S_IFREG : 0);
        sim_free(s, 1);
        free(s);
        CHECK(reads_back(dir, "ckpt-1", 1));
    }
    CHECK_EQ_INT(count_entries(dir), 3);
}

/* ---- planted entries ------------------------------------------------------------------------- */

static void test_planted(void)
{
    char dir[4400], p[4600], victim[4600];
    case_dirs(dir, sizeof dir, "planted");
    pathf(victim, sizeof victim, "%s/../../victim", dir);
    CHECK(put_text(victim, "victim") == 0);
    /* a link under rank 1's final data file name: the commit never replaces it (nor follows it):
     * CKPT_EEXISTS naming it, rank 0's file that moved in is removed again, no index */
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ckpt-1", 1, 0));
    pathf(p, sizeof p, "%s/%s", dir, s->n[1].data_name);
    CHECK(symlink(victim, p) == 0);
    ckpt__commit_req q = sim_req(s, 0, NULL, NULL);
    ckpt_error_clear();
    CHECK_RC(ckpt__commit(&q), CKPT_EEXISTS);
    CHECK_MSG(strstr(last_msg(), s->n[1].data_name) && strstr(last_msg(), "symbolic link"),
              "message: %s", last_msg());
    sim_free(s, 1);
    CHECK_EQ_INT(kind_at(p), S_IFLNK);
    CHECK(has_text(victim, "victim"));
    CHECK_EQ_INT(data_files(dir, "ckpt-1"), 1); /* the link */
    CHECK_EQ_INT(index_entries(dir, "ckpt-1"), 0);
    CHECK(unlink(p) == 0);
    commit_one(dir, "ckpt-1", 1);
    CHECK(reads_back(dir, "ckpt-1", 1));

    /* a directory under the index's name: the index cannot take it; the commit fails, its data
     * files go, the directory and what is in it stay */
    CHECK(mkdir(pathf(p, sizeof p, "%s/ckpt-2.index", dir), 0755) == 0);
    CHECK(put_text(pathf(p, sizeof p, "%s/ckpt-2.index/x", dir), "x") == 0);
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 1)); /* replace: ckpt__temp_fresh lets it pass */
    q = sim_req(s, 0, NULL, NULL);
    CHECK_RC(ckpt__commit(&q), CKPT_EEXISTS);
    CHECK_EQ_INT(data_files(dir, "ckpt-2"), 0);
    CHECK_EQ_INT(index_entries(dir, "ckpt-2"), 1); /* the directory, no temp file of the index */
    CHECK(has_text(pathf(p, sizeof p, "%s/ckpt-2.index/x", dir), "x"));
    sim_free(s, 1);
    free(s);
    CHECK(reads_back(dir, "ckpt-1", 1));
}

/* ---- names taken at commit time (issue 29) --------------------------------------------------- */

/* Another save of ckpt-2 (values of seed 7) prepares and commits while this one (seed 2) is
 * prepared: this one's commit is CKPT_EEXISTS and removes nothing of the other's. */
static void race_once(const char *dir)
{
    sim *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    CHECK_OK(sim_prepare(a, dir, "ckpt-2", 2, 0));
    CHECK_OK(sim_prepare(b, dir, "ckpt-2", 7, 0)); /* its own in-flight names: both prepared */
    ckpt__commit_req qb = sim_req(b, 0, NULL, NULL);
    CHECK_OK(ckpt__commit(&qb));
    sim_free(b, 1);
    ckpt__commit_req qa = sim_req(a, 0, NULL, NULL);
    ckpt_error_clear();
    CHECK_RC(ckpt__commit(&qa), CKPT_EEXISTS);
    CHECK_MSG(strstr(last_msg(), "ckpt-2.data-00000-of-00002") &&
                  strstr(last_msg(), "already exists"),
              "message: %s", last_msg());
    /* this save's files are not in place; its in-flight ones go with its cleanup */
    CHECK_EQ_INT(kind_at(a->n[0].my_file), S_IFREG);
    CHECK_EQ_INT(kind_at(a->n[1].my_file), S_IFREG);
    sim_free(a, 1);
    CHECK_EQ_INT(kind_at(a->n[0].chief_temp), 0);
    CHECK_EQ_INT(kind_at(a->n[1].my_temp), 0);
    CHECK(reads_back(dir, "ckpt-2", 7));
    CHECK_EQ_INT(count_entries(dir), 6); /* ckpt-1's and ckpt-2's index and two data files */
    free(a);
    free(b);
}

/* Something planted under ckpt-3.index after this save's checks: the data files move in, the
 * index cannot take its name; CKPT_EEXISTS naming it, the data files removed, the entry as it
 * was. */
static void index_taken_once(const char *dir, const char *victim, int kind)
{
    static const char *const kinds[] = { "regular file", "FIFO", "symbolic link", "directory" };
    char p[4600];
    sim *s = calloc(1, sizeof *s);
    CHECK_OK(sim_prepare(s, dir, "ckpt-3", 3, 0));
    pathf(p, sizeof p, "%s/ckpt-3.index", dir);
    CHECK(kind == 0   ? put_text(p, "someone's index") == 0
          : kind == 1 ? mkfifo(p, 0644) == 0
          : kind == 2 ? symlink(victim, p) == 0
                      : mkdir(p, 0755) == 0);
    hook_ctx hc = { dir, "ckpt-3", 0, 0, 0, 0, 0, 0 };
    ckpt__commit_req q = sim_req(s, 0, hook, &hc);
    ckpt_error_clear();
    CHECK_RC(ckpt__commit(&q), CKPT_EEXISTS);
    CHECK_MSG(strstr(last_msg(), "ckpt-3.index") && strstr(last_msg(), kinds[kind]),
              "%s: message: %s", kinds[kind], last_msg());
    CHECK_EQ_INT(hc.calls, 1);
    CHECK_EQ_INT(hc.data_at_hook, 2); /* they were in place ... */
    CHECK_EQ_INT(data_files(dir, "ckpt-3"), 0); /* ... and are gone again */
    CHECK_EQ_INT(index_entries(dir, "ckpt-3"), 1); /* the planted entry, no temp file */
    static const unsigned want[] = { S_IFREG, S_IFIFO, S_IFLNK, S_IFDIR };
    CHECK_EQ_INT(kind_at(p), want[kind]);
    if (kind == 0)
        CHECK(has_text(p, "someone's index"));
    CHECK(has_text(victim, "victim"));
    sim_free(s, 1);
    free(s);
    if (kind == 3)
        CHECK(rmdir(p) == 0);
    else
        CHECK(unlink(p) == 0);
}

static void test_names_taken(void)
{
    char dir[4400], victim[4600];
    for (int fallback = 0; fallback < 2; fallback++) {
        ckpt__noreplace_force_link(fallback);
        case_dirs(dir, sizeof dir, fallback ? "taken_link" : "taken");
        pathf(victim, sizeof victim, "%s/../../victim", dir);
        CHECK(put_text(victim, "victim") == 0);
        commit_one(dir, "ckpt-1", 1);
        race_once(dir);
        for (int kind = 0; kind < 4; kind++)
            index_taken_once(dir, victim, kind);
        CHECK(reads_back(dir, "ckpt-1", 1));
        CHECK(reads_back(dir, "ckpt-2", 7));
        CHECK_EQ_INT(count_entries(dir), 6);
        /* ckpt-3 once the name is free: committed, in either mode */
        commit_one(dir, "ckpt-3", 3);
        CHECK(reads_back(dir, "ckpt-3", 3));
        CHECK_EQ_INT(index_entries(dir, "ckpt-3"), 1); /* no temp file of the index left */
    }
    ckpt__noreplace_force_link(0);
}

/* ---- an fsync of the directory fails --------------------------------------------------------- */

static void test_fsync_fails(void)
{
    char dir[4400], prefix[4600];
    case_dirs(dir, sizeof dir, "fsync_fails");
    commit_one(dir, "ckpt-1", 1);
    sim *s = calloc(1, sizeof *s);

    /* the fsync after the renames: an error, the data files removed, no index */
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    hook_ctx hc = { dir, "ckpt-2", 0, 0, 0, 0, 0, 0 };
    ckpt__commit_req q = sim_req(s, 0, hook, &hc);
    g_fail_dir_fsync = 1;
    g_dir_fsyncs = 0;
    CHECK_RC(ckpt__commit(&q), CKPT_EIO);
    CHECK_EQ_INT(g_dir_fsyncs, 1);
    g_fail_dir_fsync = 0;
    CHECK_EQ_INT(hc.calls, 0);
    CHECK_EQ_INT(data_files(dir, "ckpt-2"), 0);
    CHECK_EQ_INT(index_entries(dir, "ckpt-2"), 0);
    sim_free(s, 1);

    /*
     * The fsync of the directory after the index was renamed into place (the commit point) fails.
     * Regression (found by this test, fixed in lib/commit.c): ckpt__write_file_atomic_at returns
     * that fsync's error after its rename; ckpt__commit took it for a failed commit and unlinked
     * the data files while the index stayed, a committed index without its data (the manager's
     * scan would adopt it). Whatever is returned, the directory must hold either the whole
     * checkpoint or none of it.
     */
    CHECK_OK(sim_prepare(s, dir, "ckpt-2", 2, 0));
    /* the first directory fsync after the hook fails */
    hook_ctx ha = { dir, "ckpt-2", 0, 0, 0, 0, 0, 1 };
    q = sim_req(s, 0, hook, &ha);
    int rc = ckpt__commit(&q);
    g_fail_dir_fsync = 0;
    CHECK_EQ_INT(ha.calls, 1);
    CHECK_EQ_INT(g_dir_fsyncs, 1);
    int has_index = index_entries(dir, "ckpt-2") == 1, ndata = data_files(dir, "ckpt-2");
    int opens = 0;
    if (has_index) {
        ckpt_reader *r = NULL;
        opens = ckpt_reader_open(&r, pathf(prefix, sizeof prefix, "%s/ckpt-2", dir)) == CKPT_OK;
        ckpt_reader_free(r);
    }
    CHECK_MSG((has_index && ndata == 2 && opens) || (!has_index && ndata == 0),
              "lib/commit.c: commit returned %d and left ckpt-2.index %s with %d of its 2 "
              "data files (%s)",
              rc, has_index ? "in place" : "absent", ndata,
              has_index ? (opens ? "it opens" : last_msg()) : "");
    sim_free(s, 1);
    free(s);
    CHECK(reads_back(dir, "ckpt-1", 1));
}

int main(void)
{
    phases_init("test_commit");
    test_success();
    test_hook_fails();
    test_crash_points();
    test_replace();
    test_rename_fails();
    test_planted();
    test_names_taken();
    test_fsync_fails();
    return CHECK_DONE();
}
