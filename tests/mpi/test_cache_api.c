/* The cache level's public API on a saver, without a manager (include/mpickpt/saver.h "The cache
 * level", docs/levels.md), nodes simulated with MPICKPT_RANKS_PER_NODE=K (ctest sets it), each
 * with its own directory OUTDIR/cache/<node>. Public headers only.
 *
 *   test_cache_api OUTDIR LAYOUT      LAYOUT: per-rank or per-node
 *
 * Cases, each the same status and message on every rank:
 *   refusals   ckpt_cache_options of an unknown version on one rank, then on every rank; no
 *              persistent directory; a drain before the cache is open: CKPT_EINVAL, nothing open
 *   open       partner redundancy on 2 nodes or more (none on one): the directory by its name
 *              (OUTDIR/cache/<node>/mpickpt-<id>) and by the held path (/proc/self/fd/<n>); a
 *              second open: CKPT_EINVAL, the first stays
 *   save       ckpt_saver_write_ex() with level CKPT_LEVEL_CACHE: ck-1..3 (counters 1..3) in
 *              every node's directory (its index on every node), nothing in the persistent one
 *   restore    ckpt_saver_restore() with level CKPT_LEVEL_CACHE: the exact values of each, the
 *              counter and step; *unavailable 0; a name the cache lacks: an error and
 *              *unavailable 1 on every rank; an unknown level: CKPT_EINVAL; a level
 *              that is not the chief's on the last rank: CKPT_EINVAL on every rank
 *   drain      ck-2 to the persistent directory (out struct: not of another shape), restored
 *              from there exactly; an out struct of an unknown version on one rank: CKPT_EINVAL
 *   sweep      stem "ck" keeping {1}: ck-2 and ck-3 gone from every node, ck-1 still restores
 *   gc         a data file no index names, planted in node 0's directory: removed by the gc
 *   versions   a save level that is none on one rank: CKPT_EINVAL on every rank, nothing
 *              cached; save options version 1 and restore options version 2 ignore what stands
 *              past their end (a cache level): the persistent directory, exact values
 *   close      the directory "" afterwards; a cache save then fails on every rank; opened
 *              again (its lock was released), ck-1 restores once more
 */
#define _XOPEN_SOURCE 700
#include "mpi_check.h"
#include "cache_util.h"
#include "coll.h"
#include "mpickpt.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define begin_case(...) check_case(0, __VA_ARGS__)

static int g_rank, g_size, g_k, g_nnodes;
static const char *g_out;
static ckpt_layout g_layout;
static char g_ckpt[4096], g_cache[4096], g_pat[4200];

/* 1 on every rank when the file `name` in this rank's node's cache directory exists (`want`
 * 1) or does not (0), looked up through the held path. Collective. */
static int cached(ckpt_saver *s, const char *name, int want)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", ckpt_saver_cache_held_path(s), name);
    int there = access(p, F_OK) == 0;
    return all_true(there == want);
}

static int open_cache(ckpt_saver *s, int version, const char *persistent)
{
    ckpt_cache_options co = CKPT_CACHE_OPTIONS_INIT;
    co.version = (unsigned)version;
    co.dir = g_pat;
    co.redundancy = g_nnodes >= 2 ? CKPT_REDUNDANCY_PARTNER : CKPT_REDUNDANCY_NONE;
    co.persistent = persistent;
    return ckpt_saver_cache_open(s, &co);
}

static int save_cache(ckpt_saver *s, tm_model *m, const char *name, int64_t step,
                      int64_t counter)
{
    tm_fill(m, step);
    ckpt_save_info info = { .epoch = 0, .step = step };
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    so.counter = counter;
    so.level = CKPT_LEVEL_CACHE;
    int rc = ckpt_saver_write_ex(s, name, &info, &so);
    return rc == CKPT_OK ? ckpt_saver_sync(s) : rc; /* async: its commit */
}

/* A restore of `name` from the cache: `want`, the values of `step` when it is CKPT_OK, and
 * *unavailable == `unavail` on every rank. */
static void restore_cache(ckpt_saver *s, tm_model *m, const char *name, int64_t step,
                          int64_t counter, int want, int unavail, const char *what)
{
    begin_case("%s", what);
    tm_zero(m);
    int unavailable = -1;
    ckpt_restore_options ro = CKPT_RESTORE_OPTIONS_INIT;
    ro.level = CKPT_LEVEL_CACHE;
    ro.unavailable = &unavailable;
    ckpt_restore_info ri;
    memset(&ri, 0, sizeof ri);
    int rc = ckpt_saver_restore(s, name, &ro, &ri);
    if (coll(rc, want, what) && rc == CKPT_OK) {
        check_values(m, step, TM_RESTORED, what);
        CHECK_MSG(ri.save_counter == counter && ri.step == step && ri.world_size == g_size,
                  "%s: info counter %lld step %lld ranks %d", what, (long long)ri.save_counter,
                  (long long)ri.step, ri.world_size);
    }
    CHECK_MSG(all_true(unavailable == unavail), "%s: unavailable %d, want %d", what, unavailable,
              unavail);
}

static void refusals(ckpt_saver *s)
{
    const char *what = "options version 99 on the last rank";
    begin_case("%s", what);
    int rc = open_cache(s, g_rank == g_size - 1 ? 99 : CKPT_CACHE_OPTIONS_VERSION, g_ckpt);
    if (coll(rc, CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "version 99") != NULL, "%s: message: %s", what, g_msg);
    CHECK_MSG(all_true(ckpt_saver_cache_dir(s)[0] == '\0'), "%s: a cache is open", what);
    what = "options version 0 on every rank";
    begin_case("%s", what);
    coll(open_cache(s, 0, g_ckpt), CKPT_EINVAL, what);
    CHECK_MSG(all_true(ckpt_saver_cache_dir(s)[0] == '\0'), "%s: a cache is open", what);
    what = "no persistent directory";
    begin_case("%s", what);
    if (coll(open_cache(s, CKPT_CACHE_OPTIONS_VERSION, NULL), CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "persistent") != NULL, "%s: message: %s", what, g_msg);
    what = "a drain without a cache level";
    begin_case("%s", what);
    coll(ckpt_saver_cache_drain(NULL, s, MPI_COMM_NULL, "ck-1", NULL), CKPT_EINVAL, what);
}

/* ck-2 drained to the persistent directory, restored from there; an unknown out version. */
static void drain(ckpt_saver *s, tm_model *m)
{
    const char *what = "drain ck-2, out version 7 on rank 0";
    begin_case("%s", what);
    ckpt_cache_drain_info di = CKPT_CACHE_DRAIN_INFO_INIT;
    if (g_rank == 0)
        di.version = 7;
    coll(ckpt_saver_cache_drain(&di, s, MPI_COMM_NULL, "ck-2", NULL), CKPT_EINVAL, what);
    what = "drain ck-2 to the persistent directory";
    begin_case("%s", what);
    ckpt_cache_drain_info d2 = CKPT_CACHE_DRAIN_INFO_INIT;
    d2.other_shape = -1;
    if (coll(ckpt_saver_cache_drain(&d2, s, MPI_COMM_NULL, "ck-2", NULL), CKPT_OK, what)) {
        CHECK_MSG(d2.other_shape == 0, "%s: other_shape %d", what, d2.other_shape);
        char p[4400];
        snprintf(p, sizeof p, "%s/ck-2", g_ckpt);
        what = "restore the drained ck-2 from the persistent directory";
        begin_case("%s", what);
        tm_zero(m);
        ckpt_restore_info ri;
        if (coll(ckpt_saver_restore(s, p, NULL, &ri), CKPT_OK, what)) {
            check_values(m, 12, TM_RESTORED, what);
            CHECK_MSG(ri.save_counter == 2, "%s: counter %lld", what, (long long)ri.save_counter);
        }
    }
}

static void sweep_gc(ckpt_saver *s, tm_model *m)
{
    const char *what = "sweep ck keeping 1";
    begin_case("%s", what);
    int64_t keep[1] = { 1 };
    if (coll(ckpt_saver_cache_sweep(s, MPI_COMM_NULL, "ck", keep, 1), CKPT_OK, what)) {
        CHECK_MSG(cached(s, "ck-2.index", 0) && cached(s, "ck-3.index", 0),
                  "%s: ck-2 or ck-3 still in a cache", what);
        CHECK_MSG(cached(s, "ck-1.index", 1), "%s: ck-1 gone", what);
    }
    restore_cache(s, m, "ck-1", 11, 1, CKPT_OK, 0, "restore ck-1 after the sweep");
    what = "gc of a planted data file";
    begin_case("%s", what);
    char p[4400];
    snprintf(p, sizeof p, "%s/ck-9.data-00000-of-00001", ckpt_saver_cache_held_path(s));
    if (g_rank == 0) {
        int fd = open(p, O_CREAT | O_WRONLY | O_EXCL, 0600);
        CHECK_MSG(fd >= 0, "%s: cannot plant %s", what, p);
        if (fd >= 0)
            close(fd);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (coll(ckpt_mpi_agree(MPI_COMM_WORLD, ckpt_saver_cache_gc(s)), CKPT_OK, what))
        CHECK_MSG(all_true(g_rank != 0 || access(p, F_OK) != 0), "%s: %s is still there",
                  what, p);
    CHECK_MSG(cached(s, "ck-1.index", 1), "%s: ck-1 gone", what);
}

/* Save options version 1 and restore options version 2 have no level: the persistent directory,
 * whatever the field past their end holds; a save level that is none on one rank. */
static void old_versions(ckpt_saver *s, tm_model *m)
{
    const char *what = "save level 7 on the last rank";
    begin_case("%s", what);
    tm_fill(m, 15);
    ckpt_save_info info = { .epoch = 0, .step = 15 };
    ckpt_save_options so = CKPT_SAVE_OPTIONS_INIT;
    so.counter = 5;
    so.level = g_rank == g_size - 1 ? 7u : CKPT_LEVEL_CACHE;
    int rc = ckpt_saver_write_ex(s, "ck-5", &info, &so);
    if (coll(rc == CKPT_OK ? ckpt_saver_sync(s) : rc, CKPT_EINVAL, what))
        CHECK_MSG(strstr(g_msg, "level 7") != NULL, "%s: message: %s", what, g_msg);
    CHECK_MSG(cached(s, "ck-5.index", 0), "%s: ck-5 in a cache", what);
    what = "save options version 1 (level past its end: cache)";
    begin_case("%s", what);
    char p[4400];
    snprintf(p, sizeof p, "%s/v1-5", g_ckpt);
    so.version = 1;
    so.level = CKPT_LEVEL_CACHE;
    rc = ckpt_saver_write_ex(s, p, &info, &so);
    if (coll(rc == CKPT_OK ? ckpt_saver_sync(s) : rc, CKPT_OK, what)) {
        char idx[4500];
        snprintf(idx, sizeof idx, "%s.index", p);
        CHECK_MSG(all_true(access(idx, F_OK) == 0), "%s: no %s", what, idx);
        CHECK_MSG(cached(s, "v1-5.index", 0), "%s: v1-5 in a cache", what);
    }
    what = "restore options version 2 (level past its end: cache)";
    begin_case("%s", what);
    tm_zero(m);
    int unavailable = -1;
    ckpt_restore_options ro = CKPT_RESTORE_OPTIONS_INIT;
    ro.version = 2;
    ro.level = CKPT_LEVEL_CACHE;
    ro.unavailable = &unavailable;
    if (coll(ckpt_saver_restore(s, p, &ro, NULL), CKPT_OK, what))
        check_values(m, 15, TM_RESTORED, what);
    CHECK_MSG(unavailable == -1, "%s: unavailable set to %d", what, unavailable);
}

static void run(void)
{
    ckpt_saver *s = cache_new_saver(g_layout);
    tm_model m;
    CHECK_OK(tm_init(&m, g_size, g_rank, g_size, 0));
    register_or_die(&m, s);
    refusals(s);

    const char *what = "open";
    begin_case("%s", what);
    if (!coll(open_cache(s, CKPT_CACHE_OPTIONS_VERSION, g_ckpt), CKPT_OK, what))
        goto done;
    char base[4200];
    node_base_dir(base, sizeof base, g_cache, g_rank / g_k);
    CHECK_MSG(strncmp(ckpt_saver_cache_dir(s), base, strlen(base)) == 0 &&
                  strstr(ckpt_saver_cache_dir(s), "/mpickpt-") != NULL,
              "%s: cache directory %s, want %s/mpickpt-<id>", what, ckpt_saver_cache_dir(s), base);
    CHECK_MSG(strncmp(ckpt_saver_cache_held_path(s), "/proc/self/fd/", 14) == 0,
              "%s: held path %s", what, ckpt_saver_cache_held_path(s));
    what = "a second open";
    begin_case("%s", what);
    coll(open_cache(s, CKPT_CACHE_OPTIONS_VERSION, g_ckpt), CKPT_EINVAL, what);
    CHECK_MSG(all_true(ckpt_saver_cache_dir(s)[0] != '\0'), "%s: the first is closed", what);

    for (int i = 1; i <= 3; i++) {
        char name[32], w[64];
        snprintf(name, sizeof name, "ck-%d", i);
        snprintf(w, sizeof w, "save %s to the cache", name);
        begin_case("%s", w);
        if (coll(save_cache(s, &m, name, 10 + i, i), CKPT_OK, w)) {
            char idx[64], p[4400];
            snprintf(idx, sizeof idx, "%s.index", name);
            CHECK_MSG(cached(s, idx, 1), "%s: no index in a node's cache", w);
            snprintf(p, sizeof p, "%s/%s.index", g_ckpt, name);
            CHECK_MSG(access(p, F_OK) != 0, "%s: %s in the persistent directory", w, p);
        }
    }
    restore_cache(s, &m, "ck-1", 11, 1, CKPT_OK, 0, "restore ck-1 from the cache");
    restore_cache(s, &m, "ck-3", 13, 3, CKPT_OK, 0, "restore ck-3 from the cache");
    restore_cache(s, &m, "ck-8", 0, 0, CKPT_ERROR, 1, "restore ck-8, not in the cache");
    what = "restore level 5";
    begin_case("%s", what);
    ckpt_restore_options ro = CKPT_RESTORE_OPTIONS_INIT;
    ro.level = 5;
    coll(ckpt_saver_restore(s, "ck-1", &ro, NULL), CKPT_EINVAL, what);
    if (g_size > 1) { /* the chief's level decides; another rank's that differs is refused */
        what = "restore level persistent on the last rank";
        begin_case("%s", what);
        int unav = -1;
        ro.level = g_rank == g_size - 1 ? CKPT_LEVEL_PERSISTENT : CKPT_LEVEL_CACHE;
        ro.unavailable = &unav;
        if (coll(ckpt_saver_restore(s, "ck-1", &ro, NULL), CKPT_EINVAL, what))
            CHECK_MSG(strstr(g_msg, "not the chief's") != NULL, "%s: message: %s", what, g_msg);
        CHECK_MSG(all_true(unav == 1), "%s: unavailable %d", what, unav);
        ro.unavailable = NULL;
    }

    drain(s, &m);
    sweep_gc(s, &m);
    old_versions(s, &m);

    what = "close";
    begin_case("%s", what);
    ckpt_saver_cache_close(s);
    CHECK_MSG(all_true(ckpt_saver_cache_dir(s)[0] == '\0' &&
                       ckpt_saver_cache_held_path(s)[0] == '\0'),
              "%s: a cache directory after the close", what);
    what = "a cache save after the close";
    begin_case("%s", what);
    coll(save_cache(s, &m, "ck-4", 14, 4), CKPT_ERROR, what);
    what = "opened again";
    begin_case("%s", what);
    if (coll(open_cache(s, CKPT_CACHE_OPTIONS_VERSION, g_ckpt), CKPT_OK, what))
        restore_cache(s, &m, "ck-1", 11, 1, CKPT_OK, 0, "restore ck-1 after reopening");
done:
    ckpt_saver_free(s);
    tm_free(&m);
}

int main(int argc, char **argv)
{
    if (!cache_test_start(&argc, &argv, "test_cache_api", &g_rank, &g_size, &g_out, &g_layout,
                          &g_k, &g_nnodes))
        return 2;
    snprintf(g_ckpt, sizeof g_ckpt, "%s/ckpt", g_out);
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_out);
    snprintf(g_pat, sizeof g_pat, "%s/%%n", g_cache);
    make_dir(g_out);
    make_dir(g_ckpt);
    run();
    return check_mpi_done("test_cache_api");
}
